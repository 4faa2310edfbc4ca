"""Step tasks whose bodies are C++ (native/legate_tasks.cc): a step that runs as one C call
(flexflow.runtime.native_step), launched so that no Python runs in its task body.

Why: Legate runs Python task bodies in the one Python process, and a body holds the
interpreter lock while Legate hands it its arguments and while it names its arrays; the other
processors' tasks wait for that lock. A C++ body reads the same stores and calls the same C step.
The issuing thread does what the Python body did in Python: it takes the input tile and the
labels from the batch staged in this process and passes their addresses, so they must stay
alive until the task has run (the executor holds them with the batch's results).

A step task runs this way when it has a native step with flat parameters, the loss is sparse
categorical cross-entropy and its labels come from the process or an int64 store
(`flexflow.runtime.step_tasks.runs_in_cpp`; `Executor(cpp_steps=False)` keeps Python
bodies). A recorded timeline gets its calls from the C code's log (`ff_step_log`).
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexflow._kernels import ffi, lib
from flexflow.errors import RuntimeSetupError

LIBRARY = Path(__file__).resolve().parent.parent / "lib" / "libflexflow_legate_tasks.so"
"""The C++ tasks' library (native/build_legate_tasks.py builds it)."""


def built() -> bool:
    """Whether the install built the C++ tasks (`flexflow info` says so without Legate)."""
    return LIBRARY.is_file()


@functools.cache
def _types():
    """Legate's scalar types, imported when a task is first issued: this module is read
    without Legate too (`built`)."""
    from legate.core import types as ty

    return ty, ty.array_type(ty.float32, 7)  # the update's hyperparameters (`ff_update`)


def _shared_library() -> ctypes.CDLL:
    if not built():
        raise RuntimeSetupError(
            f"flexflow: the C++ Legate tasks ({LIBRARY}) are not built; reinstall flexflow "
            f"(bash scripts/setup.sh, or pip install --no-build-isolation -e . with a C++ "
            f"compiler and native/build-requirements.txt installed)."
        )
    try:
        return ctypes.CDLL(str(LIBRARY))
    except OSError as error:
        raise RuntimeSetupError(f"flexflow: loading {LIBRARY} failed: {error}") from None


def _register(library, library_name: str, entry: str, kernels: tuple[str, ...], what: str) -> int:
    """Register a C++ task through the library's `entry` point, handing it the addresses of
    the C functions `kernels` (native/step.c) its body calls; its task id."""
    task_id = library.get_new_task_id()
    register = getattr(_shared_library(), entry)
    register.argtypes = [ctypes.c_char_p, ctypes.c_int64] + [ctypes.c_void_p] * len(kernels)
    register.restype = ctypes.c_int
    addresses = [int(ffi.cast("uintptr_t", ffi.addressof(lib, name))) for name in kernels]
    if register(library_name.encode(), int(task_id), *addresses) != 0:
        raise RuntimeSetupError(f"flexflow: registering the C++ {what} failed.")
    return int(task_id)


def register_step_task(library, library_name: str) -> int:
    """Register the C++ step task in the Legate `library` (named `library_name`); its task id."""
    return _register(
        library, library_name, "flexflow_register_native_step", ("ff_native_step_f32",),
        "step task",
    )  # fmt: skip


def register_steps_task(library, library_name: str) -> int:
    """Register the C++ task of several steps per launch (flexflow.runtime.step_launches) in
    the Legate `library`; its task id."""
    return _register(
        library, library_name, "flexflow_register_native_steps",
        ("ff_native_step_f32", "ff_native_update_f32"), "task of several steps",
    )  # fmt: skip


def register_evals_task(library, library_name: str) -> int:
    """Register the C++ task of several evaluation batches per launch (flexflow.runtime.
    step_launches.issue_evaluations) in the Legate `library`; its task id."""
    return _register(
        library, library_name, "flexflow_register_native_evals", ("ff_native_eval_f32",),
        "task of evaluations",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class StepScalars:
    """One launch's scalars, in native/legate_tasks.cc's order. The caller keeps the arrays
    whose addresses travel here alive until the task has run."""

    plan: int
    xs: tuple[int, ...]
    """Each model input's tile's address (0: the task reads it from a store)."""
    labels: int
    valid: int
    total: float
    update: int
    copies: int
    hyper: tuple[float, ...]
    iteration: int
    """The step's number, which dropout's masks are drawn for."""

    def add_to(self, task) -> None:
        ty, hyperparameters = _types()
        task.add_scalar_arg(self.plan, ty.int64)
        task.add_scalar_arg(self.xs, ty.array_type(ty.int64, len(self.xs)))
        for value in (self.labels, self.valid):
            task.add_scalar_arg(value, ty.int64)
        task.add_scalar_arg(self.total, ty.float64)
        task.add_scalar_arg(self.update, ty.int64)
        task.add_scalar_arg(self.copies, ty.int64)
        task.add_scalar_arg(self.hyper + (0.0,) * (7 - len(self.hyper)), hyperparameters)
        task.add_scalar_arg(self.iteration, ty.int64)


def address(array: np.ndarray) -> int:
    return int(array.ctypes.data)
