"""Makes Legate importable on any host: the CUDA driver stand-in and Legate's default configuration.

Legate's wheels link `libcuda.so.1` and CUDA 12's `libcudart.so.12` even for CPU-only runs.
`prepare()` runs once when `flexflow` is imported, before anything imports `legate.core`:

1. If the real driver `libcuda.so.1` loads, it is used and nothing is shadowed.
2. Otherwise the stand-in built from `native/cuda_stub.c` (SONAME `libcuda.so.1`) is loaded with
   `RTLD_GLOBAL`, so the loader hands it to every later request for `libcuda.so.1`; its `cuInit`
   fails, so Realm runs CPU-only.
3. `libcudart.so.12` is loaded from the `nvidia-cuda-runtime-cu12` wheel when the loader cannot
   find it on its own path.
4. With the stand-in there can be no GPU, and Legate's automatic configuration fails without an
   explicit one; so unless the user set `LEGATE_AUTO_CONFIG`, `LEGATE_CONFIG` gets `--cpus N`
   (N = this host's cores) and `--gpus 0` where it names none (and `--utility 1` on hosts with
   too few cores for Legate's two), and Realm's GPU-discovery
   warnings are silenced unless the user chose `--logging`. Under the `legate` launcher its own
   flags (`legate --cpus 2 ...`) arrive in `LEGATE_CONFIG` and are kept.
5. On every host, Legion's window of outstanding operations is widened (`LEGION_WINDOW`) unless
   `LEGION_DEFAULT_ARGS` names one: when the window is full, a Legate store freed in Python
   blocks with the interpreter lock held while the Python tasks that would drain the window
   wait for that lock, a deadlock (see `legion_default_args`).

This is process-global by nature (the loader and the environment are); it is the only module
of flexflow that changes either, and it does so once. `python_handles_ctrl_c` is the other
process-global change, made once Legate has started.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from flexflow.errors import RuntimeSetupError

DRIVER_SONAME = "libcuda.so.1"
MPI_SONAME = "libmpi.so"
"""What Legate's network layer loads in a run of several ranks (scripts/setup.sh links MPICH's
under .venv/lib/legate-network)."""
CUDART_SONAME = "libcudart.so.12"
STUB_LOGGING = "gpu=none,threads=error"


@dataclass(frozen=True, slots=True)
class LegateSetup:
    """What `prepare()` did, for `flexflow info` and for tests."""

    driver: str  # "real" or "stand-in"
    driver_path: str
    legate_config: str | None


def _load_global(path: str) -> bool:
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    return True


def _stub_path() -> Path:
    here = Path(__file__).resolve().parent
    candidates = sorted(here.glob("_cuda_stub*.so"))
    if not candidates:
        raise RuntimeSetupError(
            f"flexflow: no CUDA driver ({DRIVER_SONAME}) on this host and the driver stand-in "
            f"flexflow/_cuda_stub*.so is not built in {here}; reinstall with `pip install -e .` "
            "(it compiles native/cuda_stub.c with cffi)."
        )
    return candidates[0]


def _load_cudart() -> None:
    if _load_global(CUDART_SONAME):
        return
    try:
        import nvidia.cuda_runtime as cuda_runtime  # the nvidia-cuda-runtime-cu12 wheel
    except ImportError:
        return  # Legate reports the missing library itself, with its name.
    for root in cuda_runtime.__path__:
        library = Path(root) / "lib" / CUDART_SONAME
        if library.exists():
            _load_global(str(library))
            return


def default_legate_config(config: str | None, cpus: int) -> str:
    """`config` completed with what a host without GPUs needs for Legate to start.

    `cpus` is the host's core count. Where the CPU processors leave fewer than two cores free,
    one utility processor instead of Legate's default two: on 2 cores with `--cpus 2`, the
    second utility thread competed with the task threads and the Python thread issuing tasks
    (LeNet's batch-64 data-parallel iteration: 55.9 ms with the default, 38-39 ms with one).
    """
    args = _split_flags("LEGATE_CONFIG", config)
    flags = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    if "--cpus" not in flags:
        args += ["--cpus", str(cpus)]
    if "--gpus" not in flags:
        args += ["--gpus", "0"]
    if "--utility" not in flags and cpus - _flag_value(args, "--cpus", cpus) < 2:
        args += ["--utility", "1"]
    if "--logging" not in flags:
        args += ["--logging", STUB_LOGGING]
    return shlex.join(args)


def _split_flags(variable: str, value: str | None) -> list[str]:
    """The flags of environment variable `variable`, split as a shell would."""
    try:
        return shlex.split(value or "")
    except ValueError as exc:
        raise RuntimeSetupError(
            f"flexflow: {variable} {value!r} cannot be split into flags ({exc}); fix its quoting."
        ) from None


def _flag_value(args: list[str], flag: str, default: int) -> int:
    """The integer after `flag` (`--flag N` or `--flag=N`), `default` if absent or not a number."""
    for i, arg in enumerate(args):
        value = arg.split("=", 1)[1] if arg.startswith(flag + "=") else None
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return default
    return default


RANK_COUNT_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")
"""The variables Legate 25.11 reads to know it runs as one of several ranks."""


def _announce_mpich_ranks(env) -> None:
    """MPICH's launcher says the rank count only in PMI_SIZE, which Legate 25.11 ignores (each
    rank would start alone); pass it on as MVAPICH's variable, which Legate reads."""
    if "PMI_SIZE" in env and not any(name in env for name in RANK_COUNT_VARIABLES):
        env["MV2_COMM_WORLD_SIZE"] = env["PMI_SIZE"]


def check_network_library(environ: Mapping[str, str] | None = None) -> None:
    """In one of several ranks, before Legate starts (`FFModel.compile` calls it): Legate's
    network layer loads libmpi.so when it starts, and without it every rank ends in a page of
    Legate's traces; say what to set instead. A process that only plans (the simulator, the
    search) needs no network and is not checked."""
    env = os.environ if environ is None else environ
    counts = [env.get(name, "") for name in RANK_COUNT_VARIABLES]
    ranks = max((int(c) for c in counts if c.strip().isdigit()), default=1)
    if ranks <= 1:
        return
    try:
        ctypes.CDLL(MPI_SONAME)
    except OSError:
        network = Path(sys.prefix) / "lib" / "legate-network"
        raise RuntimeSetupError(
            f"flexflow: this is one of {ranks} ranks, and Legate's network layer needs "
            f"{MPI_SONAME}, which the loader does not find; run with LD_LIBRARY_PATH={network} "
            "RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true (README, 'Several ranks, several nodes'), "
            "or with your cluster's MPI library on LD_LIBRARY_PATH."
        ) from None


LEGION_WINDOW = 65536
"""Operations Legion lets a program hold in flight (its default is 1,024)."""


def legion_default_args(args: str | None) -> str:
    """`LEGION_DEFAULT_ARGS` with `-lg:window LEGION_WINDOW` unless it sets a window. With
    Legion's default, 3,000 data-parallel MLP iterations issued without reading their results
    hung 4 runs of 4 on this project's host (none of 4 with this window); the executor also
    bounds what it leaves unread (flexflow.runtime.batches.TASKS_IN_FLIGHT), and this covers
    what it cannot: one iteration of a deep model issues more tasks than Legion's default
    window (ResNet-101: 1,490), and a user's own stores are freed wherever Python drops them."""
    words = _split_flags("LEGION_DEFAULT_ARGS", args)
    if "-lg:window" in words:
        return args or ""
    return shlex.join([*words, "-lg:window", str(LEGION_WINDOW)])


def python_handles_ctrl_c() -> None:
    """Give SIGINT back to Python once Legate has started (`FFModel.compile` calls it): Realm
    takes it at start-up and answers a Ctrl-C with every thread's C backtrace and exit code 254;
    Python's handler (the script's own, or the default) raises KeyboardInterrupt in the main
    thread, which a script can catch (`examples/train.py` says where training stopped).
    Realm keeps its handlers of crashes (SIGSEGV, SIGABRT), whose backtraces help."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers; Python runs them there
    handler = signal.getsignal(signal.SIGINT)  # what Python believes, not what Realm set
    signal.signal(signal.SIGINT, signal.default_int_handler if handler is None else handler)


def prepare(environ: os._Environ[str] | dict[str, str] | None = None) -> LegateSetup:
    """Load a CUDA driver (real or stand-in) and complete Legate's configuration; see the module doc."""
    env = os.environ if environ is None else environ
    _announce_mpich_ranks(env)
    env["LEGION_DEFAULT_ARGS"] = legion_default_args(env.get("LEGION_DEFAULT_ARGS"))
    if _load_global(DRIVER_SONAME):
        _load_cudart()
        return LegateSetup("real", DRIVER_SONAME, env.get("LEGATE_CONFIG"))
    stub = _stub_path()
    if not _load_global(str(stub)):
        raise RuntimeSetupError(
            f"flexflow: the CUDA driver stand-in {stub} exists but cannot be loaded; "
            "reinstall flexflow to rebuild it."
        )
    _load_cudart()
    if "LEGATE_AUTO_CONFIG" not in env:
        env["LEGATE_CONFIG"] = default_legate_config(env.get("LEGATE_CONFIG"), os.cpu_count() or 1)
    gpus = _flag_value(_split_flags("LEGATE_CONFIG", env.get("LEGATE_CONFIG")), "--gpus", 0)
    if gpus > 0:  # Legate would fail deep in its start-up, CUDA_ERROR_NO_DEVICE among 128 lines
        raise RuntimeSetupError(
            f"flexflow: this run asks for --gpus {gpus}, but this host has no CUDA driver "
            f"({DRIVER_SONAME} does not load, so there is no GPU to run on); run with --gpus 0 "
            "and --cpus N, or on a host with NVIDIA's driver."
        )
    return LegateSetup("stand-in", str(stub), env.get("LEGATE_CONFIG"))
