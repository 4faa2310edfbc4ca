"""The setuptools extension of the C++ Legate tasks (native/legate_tasks.cc): a shared library,
flexflow/lib/libflexflow_legate_tasks.so, that flexflow.runtime.native_tasks loads with ctypes
once Legate is loaded (whose libraries it links to, found by their loaded names), not a Python
module (it could not be imported before Legate: pkgutil and importers skip flexflow/lib/, which
is no package).

It compiles against the headers the installed wheels ship: Legate's (with the CUDA C++ core
library under include/rapids), and, because the wheels' Legate is built with CUDA, CUDA 12's
runtime headers (nvidia-cuda-runtime-cu12) and their crt/ headers (nvidia-cuda-nvcc-cu12).
Nothing here needs a GPU or runs CUDA code. The packages are found without being imported:
importing legate starts looking for a CUDA driver.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent

BUILD_PACKAGES = {
    "legate": "legate==25.11.0",
    "nvidia.cuda_runtime": "nvidia-cuda-runtime-cu12",
    "nvidia.cuda_nvcc": "nvidia-cuda-nvcc-cu12",
}
"""Module -> the pip requirement that installs it (pyproject.toml's build requirements)."""


def _package_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise SystemExit(
            f"flexflow build: native/legate_tasks.cc needs the headers of {module}, which is not "
            f"installed in the build environment; install it first: "
            f"pip install '{BUILD_PACKAGES[module]}'"
        )
    return Path(locations[0])


NAME = "flexflow.lib.libflexflow_legate_tasks"
FILENAME = "flexflow/lib/libflexflow_legate_tasks.so"


def legate_tasks_extension() -> Extension:
    """The extension, its header and library paths filled in by `BuildExt` (so that reading
    the package's metadata needs none of the build packages)."""
    return Extension(
        NAME,
        sources=[str(HERE / "legate_tasks.cc")],
        libraries=["legate"],
        extra_compile_args=["-std=c++17", "-O2", "-g0"],
        language="c++",
    )


class BuildExt(build_ext):
    """build_ext that finds the C++ tasks' headers and Legate's library when it builds them."""

    def build_extension(self, ext) -> None:
        if ext.name == NAME:
            _locate_build_packages(ext)
        super().build_extension(ext)

    def copy_extensions_to_source(self) -> None:
        """An in-place (editable) build copies the library into the checkout's flexflow/lib/,
        made here: it holds nothing else."""
        package = self.get_finalized_command("build_py").get_package_dir("flexflow")
        Path(package, "lib").mkdir(exist_ok=True)
        super().copy_extensions_to_source()

    def get_ext_filename(self, fullname: str) -> str:
        """A plain library name, no Python module suffix (asked for with the full dotted name
        or, for the build's own path, its last part)."""
        if fullname == NAME:
            return FILENAME
        if fullname == NAME.rsplit(".", 1)[1]:
            return FILENAME.rsplit("/", 1)[1]
        return super().get_ext_filename(fullname)


def _locate_build_packages(ext: Extension) -> None:
    legate = _package_dir("legate")
    includes = [
        HERE,
        legate / "include" / "legate",
        legate / "include" / "legate" / "deps",
        legate / "include" / "rapids",
        _package_dir("nvidia.cuda_runtime") / "include",
        _package_dir("nvidia.cuda_nvcc") / "include",
    ]
    ext.include_dirs = [str(path) for path in includes]
    ext.library_dirs = [str(legate / "lib64")]
