"""The Legate task every SOAP task runs as: one op tile, forward or backward, on its device.

All op tiles share one registered task; its scalars say which executor, op, tile and pass.
Legate runs the task body in this process, so a registry maps the executor id to the executor
(whose graph and strategy say what the tile is). Inputs arrive as the store slices named by the
op's input and weight regions; gradients of tensors leave through ADD reductions into their
parts (`flexflow.runtime.gradients`: tasks on different devices whose regions overlap, halos or
whole inputs, add into different parts, which Legate runs at once), which the producer's
backward tasks sum.

The bodies: a fused group's (`flexflow.runtime.fused_body`, some as one C call:
`native_calls`), the other passes' (`flexflow.runtime.unfused_body`), on GPUs
`flexflow.gpu.variant`; what they read from Legate's context is `flexflow.runtime.task_context`,
the passes `flexflow.runtime.passes`.
"""

from __future__ import annotations

import threading
import time

from legate.core import ResourceConfig, VariantCode, get_legate_runtime
from legate.core._lib.task.task_info import TaskInfo

from flexflow.runtime.fused_body import run_fused, run_point
from flexflow.runtime.native_tasks import (
    register_evals_task,
    register_step_task,
    register_steps_task,
)
from flexflow.runtime.passes import FUSED_PASSES, Pass
from flexflow.runtime.task_context import array_of, task_arguments
from flexflow.runtime.unfused_body import run_unfused

LIBRARY_NAME = "flexflow"

_REGISTERED: dict[str, tuple] = {}


def library_and_tasks():
    """The flexflow Legate library, the id of the op-tile task and the ids of the C++ step task,
    of the C++ task of several steps and of the C++ task of several evaluation batches
    (flexflow.runtime.native_tasks), registered once per process."""
    if "tile" not in _REGISTERED:
        runtime = get_legate_runtime()
        library, _ = runtime.find_or_create_library(
            LIBRARY_NAME, config=ResourceConfig(max_tasks=8, max_dyn_tasks=8)
        )
        task_id = library.get_new_task_id()
        variants = [(VariantCode.CPU, _op_tile), (VariantCode.GPU, _op_tile_gpu)]
        info = TaskInfo.from_variants(task_id, "flexflow_op_tile", variants)
        library.register_task(info)
        step = register_step_task(library, LIBRARY_NAME)
        steps = register_steps_task(library, LIBRARY_NAME)
        evals = register_evals_task(library, LIBRARY_NAME)
        _REGISTERED["tile"] = (library, task_id, step, steps, evals)
    return _REGISTERED["tile"]


def offer_task():
    """The flexflow Legate library and the id of the task that gathers every rank's strategy
    offer (flexflow.runtime.agreement), registered once per process."""
    if "offer" not in _REGISTERED:
        library = library_and_tasks()[0]
        task_id = library.get_new_task_id()
        info = TaskInfo.from_variants(task_id, "flexflow_offer", [(VariantCode.CPU, _offer)])
        library.register_task(info)
        _REGISTERED["offer"] = (library, task_id)
    return _REGISTERED["offer"]


def _offer(context) -> None:
    from flexflow.runtime.agreement import write_offer

    write_offer(int(context.scalars[0].value()), array_of(context.reductions[0]))


def _op_tile(context) -> None:
    executor, which, op, index, extra = task_arguments(context)
    if index < 0 and which in FUSED_PASSES:  # a point of a concurrent launch
        # (flexflow.runtime.concurrent; an update task's index is -1 too)
        run_point(context, executor, which, op, extra)
        return
    if which in FUSED_PASSES:  # timed per op, inside
        run_fused(context, executor, which, op, index, extra)
        return
    begin = time.perf_counter()
    run_unfused(context, executor, which, op, index, extra)
    if executor.timeline_entries is not None:  # measured here, inside the running task
        end = time.perf_counter()
        timed = Pass.UPDATE if which == Pass.FLAT_UPDATE else which  # an update like any other
        executor.timeline_entries.append((op, index, timed, begin, end, threading.get_native_id()))


def _op_tile_gpu(context) -> None:
    """The GPU variant, which Legate picks for tasks placed on GPUs (flexflow.gpu.variant)."""
    from flexflow.gpu.variant import run_tile_gpu

    executor, which, op, index, extra = task_arguments(context)
    begin = time.perf_counter()
    run_tile_gpu(context, executor, which, op, index, extra)
    if executor.timeline_entries is not None:  # when the work was queued, not when it ended
        end = time.perf_counter()
        executor.timeline_entries.append((op, index, which, begin, end, threading.get_native_id()))
