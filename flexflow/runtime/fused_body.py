"""A fused group's task body on the CPU (`flexflow.fusion`): op by op through
`flexflow.fused_run` on numpy arrays with the CPU tiles, or as one C call where it can
(`flexflow.runtime.native_calls`); a point of a concurrent launch
(`flexflow.runtime.concurrent`) exchanging batch statistics with the others."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from flexflow.fused_run import run_fused_task
from flexflow.runtime.cpu_tiles import CPU_TILES, CpuTiles
from flexflow.runtime.native_calls import run_native_eval, run_native_step
from flexflow.runtime.native_step import SPARSE_CROSSENTROPY, evaluation_program
from flexflow.runtime.passes import FUSED_PASSES, FUSED_SCALARS, Pass
from flexflow.runtime.task_context import array_of, forward_inputs
from flexflow.runtime.unfused_body import apply_pending_update, loss_into

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def run_point(context, executor: Executor, which: Pass, group: int, extra) -> None:
    """Point `context.task_index` of a concurrent launch: the fused task of that index, its
    batch norms exchanging statistics with the other points (a failure stops the others'
    waiting); the loss's valid count, the batch's, made the point's share."""
    point = int(context.task_index[0])
    if which in (Pass.FUSED_FORWARD_LOSS, Pass.FUSED_STEP):
        start = executor.regions(len(executor.graph.ops) - 1)[point][0][0]
        extra = (*extra[:4], max(0, extra[4] - start), *extra[5:])
    try:
        run_fused(context, executor, which, group, point, extra, token=True)
    except BaseException:
        executor.exchanges[group].abort()
        raise


def run_fused(
    context, executor: Executor, which: Pass, group: int, index: int, extra, token: bool = False
) -> None:
    """A fused task on numpy arrays (flexflow.fused_run.run_fused_task); `token`: a point of a
    concurrent launch, whose last input and output are its launch token (ConcurrentLaunch)."""

    def loss_of(op, index, loss_args, prediction, stored, grad, sums) -> np.ndarray:
        return loss_into(executor, op, index, loss_args, prediction, stored, grad, sums)

    task = executor.fused_tasks[group][index]
    inputs, outputs = (list(map(array_of, a)) for a in (context.inputs, context.outputs))
    if token:
        del inputs[-1], outputs[-1]
    width = FUSED_SCALARS[which]
    update = extra[width - 1] if which == Pass.FUSED_STEP else 0  # a pending update's number
    if update:  # first the pending update, on this device's copy of the weights
        begin = time.perf_counter()
        apply_pending_update(executor, inputs, outputs, update)
        if executor.timeline_entries is not None:  # an update pass of no processor's own: op -1
            end = time.perf_counter()
            executor.timeline_entries.append(
                (-1, index, Pass.UPDATE, begin, end, threading.get_native_id())
            )
    keys: dict[int, int] = {}
    if (
        len(extra) > width
    ):  # model inputs read from the staged batch (flexflow.runtime.feeding.Feeds.staged_inputs)
        keys = dict(zip(executor.feeds.staged_inputs, extra[width:], strict=True))
        extra = extra[:width]
    # a backward names its weights one by one (flat parameters have no backward tasks)
    flat = executor.params.flat if which != Pass.FUSED_BACKWARD else None
    native = executor.native_steps.get((group, index)) if which == Pass.FUSED_STEP else None
    if native is not None and extra[2] == SPARSE_CROSSENTROPY:
        run_native_step(executor, native, inputs, outputs, extra[2:6], keys, extra[1])
        return
    if which == Pass.FUSED_FORWARD_LOSS:  # an evaluation batch may run as one C call
        native = evaluation_program(executor, group, index, extra[2], bool(extra[0]))
        if native is not None:
            run_native_eval(executor, native, inputs, outputs, extra[2:6], keys)
            return
    if keys or flat is not None:
        inputs = forward_inputs(executor, task.forward, inputs, keys, flat)
    if flat is not None and which == Pass.FUSED_STEP:  # the flat row of partial gradients,
        pids = [slot.id for slot in task.backward.overwrites]  # after the loss row and states
        at = 1 + len(task.forward.states)  # (1-D, or a concurrent launch's (1, size) row)
        outputs[at : at + 1] = flat.split(outputs[at].reshape(-1), pids)
    run_fused_task(
        task, _tiles(executor, group, index), FUSED_PASSES[which],
        (inputs, outputs, list(map(array_of, context.reductions))),
        extra, executor.timeline_entries,
        (Pass.FORWARD, Pass.LOSS, Pass.BACKWARD), lambda array: array, loss_of,
        executor.gradients.read_counts(group, index) if which == Pass.FUSED_BACKWARD else (),
    )  # fmt: skip


def _tiles(executor: Executor, group: int, index: int) -> CpuTiles:
    """The tile backend of task `index` of `group`: exchanging statistics as point `index`
    where the group's launches are concurrent."""
    exchange = executor.exchanges.get(group)
    if exchange is None:
        return CPU_TILES
    return CpuTiles(exchange, index)
