"""Running a fused task's body (`flexflow.fusion`), the same on every task variant.

The CPU variant (flexflow.runtime.tasks) and the GPU variant (flexflow.gpu.variant) turn the
task's arguments into arrays by `TaskLayout` and supply a `TileBackend`: their op tile kernels
and how they write an output or add into a reduction. Nothing here imports Legate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

from flexflow.fusion import FusedTask, Slot, SlotKind, TaskLayout, gradient_leaves
from flexflow.ops.base import Region
from flexflow.task_modes import op_for_task


class TileBackend(Protocol):
    """What a task variant supplies to run a fused task: its arrays and its op tile kernels."""

    def forward(self, op, sig, region: Region, inputs: list, weights: list) -> Sequence[Any]: ...

    def backward(
        self,
        op,
        sig,
        region: Region,
        inputs: list,
        weights: list,
        outputs: list,
        grads: list,
        need_input_grads: bool,
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """The op tile's (input gradients, weight gradients); with `need_input_grads` False
        nothing reads the input gradients (an op may skip them: `Op.skips_input_grads`)."""

    def write(self, target: Any, value: Any) -> None:
        """target[...] = value, target being an output argument of the task."""

    def add(self, target: Any, value: Any) -> None:
        """target[...] += value, target being a reduction argument of the task."""

    def accumulate(self, total: Any, value: Any) -> Any:
        """total + value, for a gradient that stays in memory."""


def partial_gradients(
    layout: TaskLayout, currents: Sequence[Any], targets: Sequence[Any]
) -> dict[Slot, tuple[Any, Any]]:
    """Slot -> (current value or None when overwritten, output argument), from a backward's
    accumulator inputs and its accumulator-then-overwrite outputs."""
    targets = list(targets)
    count = len(layout.accumulators)
    pairs = dict(zip(layout.accumulators, zip(currents, targets[:count], strict=True), strict=True))
    pairs.update(
        (slot, (None, target))
        for slot, target in zip(layout.overwrites, targets[count:], strict=True)
    )
    return pairs


class TaskRun:
    """What one run of a fused task records: (op, task, pass, start, end, thread) per op."""

    def __init__(self, timeline: list | None, index: int, pass_id: int) -> None:
        self.timeline, self.index, self.pass_id = timeline, index, pass_id

    def record(self, op: int, begin: float) -> None:
        if self.timeline is not None:
            end = time.perf_counter()
            self.timeline.append((op, self.index, self.pass_id, begin, end, threading.get_ident()))


def run_forward(
    task: FusedTask,
    backend: TileBackend,
    values: dict,
    outputs: dict,
    extra: tuple[int, ...],
    run: TaskRun,
) -> None:
    """values: input slot -> array; outputs: output slot -> the task's output argument;
    extra: (training, iteration), what dropout needs (flexflow.task_modes)."""
    made: dict[int, Any] = {}
    internal = task.group.internal
    for op, region, (in_regions, w_regions, out_regions) in zip(
        task.group.ops, task.tiles, task.op_tiles, strict=True
    ):
        begin = time.perf_counter()
        node = task.graph.ops[op]
        inputs = [
            made[t] if t in internal else values[Slot(SlotKind.TENSOR, t, r)]
            for t, r in zip(node.inputs, in_regions, strict=True)
        ]
        weights = [
            values[Slot(SlotKind.WEIGHT, p, r)]
            for p, r in zip(node.weights, w_regions, strict=True)
        ]
        op_now = op_for_task(node.op, extra)
        if op_now is None:  # dropout outside training: the identity
            results: Sequence[Any] = (inputs[0],)
        else:
            results = backend.forward(op_now, node.sig, region, inputs, weights)
        for tid, r, value in zip(node.outputs, out_regions, results, strict=True):
            if tid in internal:
                made[tid] = value
            backend.write(outputs[Slot(SlotKind.TENSOR, tid, r)], value)
        run.record(op, begin)


def run_backward(
    task: FusedTask,
    backend: TileBackend,
    values: dict,
    reductions: dict,
    accumulators: dict,
    extra: tuple[int, ...],
    run: TaskRun,
) -> None:
    """values: input slot -> array; reductions: reduction slot -> the task's argument;
    accumulators: partial weight gradient slot -> (its current value, or None to overwrite it;
    its output argument), see `partial_gradients`."""
    grads: dict[int, Any] = {}  # gradients of internal tensors, kept in memory
    weight_grads: dict[Slot, Any] = {}  # summed over the group's ops, written once at the end
    internal = task.group.internal
    for op, region, (in_regions, w_regions, out_regions) in reversed(
        tuple(zip(task.group.ops, task.tiles, task.op_tiles, strict=True))
    ):
        begin = time.perf_counter()
        node = task.graph.ops[op]
        inputs = [
            values[Slot(SlotKind.TENSOR, t, r)]
            for t, r in zip(node.inputs, in_regions, strict=True)
        ]
        weights = [
            values[Slot(SlotKind.WEIGHT, p, r)]
            for p, r in zip(node.weights, w_regions, strict=True)
        ]
        outputs = [
            values[Slot(SlotKind.TENSOR, t, r)]
            for t, r in zip(node.outputs, out_regions, strict=True)
        ]
        grad_outputs = [
            grads.pop(t) if t in internal else values[Slot(SlotKind.GRAD, t, r)]
            for t, r in zip(node.outputs, out_regions, strict=True)
        ]
        # backward passes always train: dropout applies this iteration's mask
        op_now = op_for_task(node.op, extra) or node.op
        needed = any(
            t in internal or gradient_leaves(task.graph, task.group, t, spec)
            for t, spec in zip(node.inputs, node.sig.inputs, strict=True)
        )
        grad_inputs, grad_weights = backend.backward(
            op_now, node.sig, region, inputs, weights, outputs, grad_outputs, needed
        )
        for tid, spec, r, grad in zip(
            node.inputs, node.sig.inputs, in_regions, grad_inputs, strict=True
        ):
            if tid in internal:
                grads[tid] = backend.accumulate(grads[tid], grad) if tid in grads else grad
            elif gradient_leaves(task.graph, task.group, tid, spec):
                backend.add(reductions[Slot(SlotKind.GRAD, tid, r)], grad)
        for pid, r, grad in zip(node.weights, w_regions, grad_weights, strict=True):
            slot = Slot(SlotKind.WEIGHT_GRAD, pid, r)
            total = weight_grads.get(slot)
            weight_grads[slot] = grad if total is None else backend.accumulate(total, grad)
        run.record(op, begin)
    for slot, total in weight_grads.items():
        current, target = accumulators[slot]
        backend.write(target, total if current is None else backend.accumulate(current, total))
