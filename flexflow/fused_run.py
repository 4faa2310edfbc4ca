"""Running a fused task's body (`flexflow.fusion`), the same on every task variant.

The CPU variant (flexflow.runtime.fused_body) and the GPU variant (flexflow.gpu.variant) turn the
task's arguments into arrays by `TaskLayout` and supply a `TileBackend`: their op tile kernels
and how they write an output or add into a reduction. Nothing here imports Legate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from flexflow.fusion import FusedTask, Slot, TaskLayout
from flexflow.ops.base import Region
from flexflow.task_modes import op_for_task


class TileBackend(Protocol):
    """What a task variant supplies to run a fused task: its arrays and its op tile kernels."""

    def forward(self, op, sig, region: Region, inputs: list, weights: list) -> Sequence[Any]: ...

    def forward_saving(
        self, op, sig, region: Region, inputs: list, weights: list
    ) -> tuple[Sequence[Any], Any]:
        """`forward`, and what the op's backward in the same task may reuse, or None
        (`Op.forward_tile_saving`)."""

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
        weight_grads_into: Sequence[Any],
        saved: Any = None,
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """The op tile's (input gradients, weight gradients); with `need_input_grads` False
        nothing reads the input gradients (an op may skip them: `Op.skips_input_grads`). A
        weight gradient may be written into its output argument in `weight_grads_into` (None
        where there is none) and returned as that very argument, which is then not written
        again (`Op.backward_tile_into`). `saved`: what `forward_saving` kept, or None."""

    def forward_with_statistics(
        self,
        op,
        sig,
        x: Any,
        weights: list,
        running: Any,
        into: Any,
        training: bool,
        exchange: bool,
    ) -> tuple[Sequence[Any], Any]:
        """A batch norm's tile in a fused task: its outputs and the statistics it normalized
        with (in training the tile's own, or with `exchange` the sum of every point's of a
        concurrent launch (flexflow.runtime.concurrent), folded into the running statistics
        it writes `into`; else from `running`), which `backward` takes as `saved` in the same
        task (`Op.backward_tile_into`)."""

    def backward_exchanging(
        self, op, sig, x: Any, weights: list, y: Any, dy: Any, stats: Any
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """The backward of a batch norm tile whose statistics the launch's points exchange:
        (input gradients, weight gradients), with the forward's `stats` (None: exchanged
        again)."""

    def write(self, target: Any, value: Any) -> None:
        """target[...] = value, target being an output argument of the task."""

    def add(self, target: Any, value: Any) -> None:
        """target[...] += value, target being a reduction argument of the task."""

    def accumulate(self, total: Any, value: Any) -> Any:
        """total + value, for a gradient that stays in memory."""

    def window(self, value: Any, where: tuple[slice, ...]) -> Any:
        """value[where]: the part of a tile an op reads (CPU tasks only: `flexflow.fusion`)."""

    def add_window(self, total: Any, where: tuple[slice, ...], value: Any) -> None:
        """total[where] += value, total being a gradient this task made."""

    def zeros_like(self, value: Any) -> Any:
        """An array of zeros shaped and typed like `value`: the gradient of an output that
        nothing reads."""

    def hold(self, value: Any, dtype: str) -> Any:
        """`value` as the `dtype` array a store of that type would give back, for a value that
        stays in memory instead (a training step's activations)."""


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
            self.timeline.append(
                (op, self.index, self.pass_id, begin, end, threading.get_native_id())
            )


def run_forward(
    task: FusedTask,
    backend: TileBackend,
    values: dict,
    outputs: dict | None,
    extra: tuple[int, ...],
    run: TaskRun,
    saved: dict[int, Any] | None = None,
    states: dict | None = None,
) -> None:
    """values: input slot -> array; outputs: output slot -> the task's output argument, or
    None to keep every output in `values` instead (a training step: nothing after the task
    reads them); extra: (training, iteration), what dropout needs (flexflow.task_modes);
    saved: where to keep, by the op's position, what its backward in this task may reuse;
    states: `TaskLayout.states` slot -> the output argument it is written through."""
    made: dict[int, Any] = {}
    internal = task.group.internal
    for position, step in enumerate(task.steps):
        begin = time.perf_counter()
        inputs = [
            backend.window(made[t], part[0])  # part of a tile made in the task
            if part is not None
            else made[t]
            if t in internal
            else values[slot]
            for (t, slot), part in zip(step.inputs, _parts(step), strict=True)
        ]
        weights = [values[slot] for slot in step.weights]
        op_now = op_for_task(step.node.op, extra)
        if step.running is not None:  # batch norm: this tile's own statistics
            results, stats = backend.forward_with_statistics(
                op_now, step.node.sig, inputs[0], weights, values[step.running],
                states[step.running], bool(extra[0]), step.exchange,
            )  # fmt: skip
            if saved is not None:
                saved[position] = stats
        elif op_now is None:  # dropout outside training: the identity
            results: Sequence[Any] = (inputs[0],)
        elif saved is not None:
            results, kept = backend.forward_saving(
                op_now, step.node.sig, step.region, inputs, weights
            )
            if kept is not None:
                saved[position] = kept
        else:
            results = backend.forward(op_now, step.node.sig, step.region, inputs, weights)
        for (tid, dtype, slot), value in zip(step.outputs, results, strict=True):
            if outputs is None:
                value = values[slot] = backend.hold(value, dtype)
            else:
                backend.write(outputs[slot], value)
            if tid in internal:
                made[tid] = value
        run.record(step.node.id, begin)


def run_backward(
    task: FusedTask,
    backend: TileBackend,
    values: dict,
    reductions: dict,
    accumulators: dict,
    extra: tuple[int, ...],
    run: TaskRun,
    saved: dict[int, Any] | None = None,
) -> None:
    """values: input slot -> array; reductions: reduction slot -> the task's argument;
    accumulators: partial weight gradient slot -> (its current value, or None to overwrite it;
    its output argument), see `partial_gradients`; saved: what `run_forward` kept by op
    position, in the same task."""
    grads: dict[int, Any] = {}  # gradients of internal tensors, kept in memory
    owned: set[int] = set()  # ... those in arrays made here, which windows add into
    weight_grads: dict[Slot, Any] = {}  # summed over the group's ops, written once at the end
    written: dict[Slot, Any] = {}  # the arrays an op may have written a weight gradient into
    internal = task.group.internal
    for position in reversed(range(len(task.steps))):
        step = task.steps[position]
        begin = time.perf_counter()
        parts = _parts(step)
        inputs = [
            backend.window(values[part[1]], part[0]) if part is not None else values[slot]
            for (_, slot), part in zip(step.inputs, parts, strict=True)
        ]  # (a windowed read is cut from its producer's output, which the task holds)
        weights = [values[slot] for slot in step.weights]
        outputs = [values[slot] for _, _, slot in step.outputs]
        grad_outputs = [
            (grads.pop(t) if t in grads else backend.zeros_like(value))  # zeros: nothing read t
            if t in internal
            else values[slot]
            for (t, slot), value in zip(step.output_grads, outputs, strict=True)
        ]
        # backward passes always train: dropout applies this iteration's mask
        op_now = op_for_task(step.node.op, extra) or step.node.op
        # an input's gradient stays in memory (internal) or leaves by its reduction slot
        needed = any(
            t in internal or slot in reductions
            for (t, _), slot in zip(step.inputs, step.input_grads, strict=True)
        )
        # a gradient this task overwrites may be computed straight into its output argument,
        # unless an earlier op of the task contributed to it already
        into = [
            _shaped_like(accumulators[s][1], weight)
            if s not in weight_grads and accumulators[s][0] is None
            else None
            for s, weight in zip(step.weight_grads, weights, strict=True)
        ]
        written.update(
            (s, target)
            for s, target in zip(step.weight_grads, into, strict=True)
            if target is not None
        )
        if step.exchange:  # batch norm: statistics shared with the launch's other points
            grad_inputs, grad_weights = backend.backward_exchanging(
                op_now, step.node.sig, inputs[0], weights, outputs[0], grad_outputs[0],
                saved.get(position) if saved else None,
            )  # fmt: skip
        else:
            grad_inputs, grad_weights = backend.backward(
                op_now, step.node.sig, step.region, inputs, weights, outputs, grad_outputs,
                needed, into, saved.get(position) if saved else None,
            )  # fmt: skip
        for (tid, _), slot, grad, part in zip(
            step.inputs, step.input_grads, grad_inputs, parts, strict=True
        ):
            if part is not None:  # into its part of the whole tile's gradient, made here
                if tid not in owned:
                    whole = backend.zeros_like(values[part[1]])
                    grads[tid] = backend.accumulate(whole, grads[tid]) if tid in grads else whole
                    owned.add(tid)
                backend.add_window(grads[tid], part[0], grad)
            elif tid in internal:
                grads[tid] = backend.accumulate(grads[tid], grad) if tid in grads else grad
            elif slot in reductions:
                backend.add(reductions[slot], grad)
        for slot, grad in zip(step.weight_grads, grad_weights, strict=True):
            total = weight_grads.get(slot)
            weight_grads[slot] = grad if total is None else backend.accumulate(total, grad)
        run.record(step.node.id, begin)
    for slot, total in weight_grads.items():
        current, target = accumulators[slot]
        if total is not written.get(slot):  # (else written in place by the op)
            backend.write(target, total if current is None else backend.accumulate(current, total))


def _shaped_like(target: Any, weight: Any) -> Any:
    """A partial-gradient output `target` viewed with its weight's shape where it is that
    shape under leading axes of 1 (a device's row of a store with a row per device: an op
    writes its gradient straight into it only when the shapes match); else `target`."""
    shape = getattr(target, "shape", None)
    if shape is None or shape == weight.shape:
        return target
    extra = len(shape) - len(weight.shape)
    if extra > 0 and shape[extra:] == weight.shape and all(n == 1 for n in shape[:extra]):
        return target.reshape(weight.shape)
    return target


def _parts(step) -> tuple:
    """Per input of the step, its window (`OpStep.windows`) or None."""
    return step.windows or (None,) * len(step.inputs)


FUSED_PARTS = ("forward", "forward+loss", "step", "backward")
"""What a fused task runs: its group's forward; then the loss on its output tile; then (a
training step) the group's backward in the same task; or the backward alone."""


def summed_parts(arrays: Sequence[Any], counts: Sequence[int], add: Callable) -> list:
    """`arrays` with each slot's `counts[k]` consecutive arrays (a gradient's parts,
    `flexflow.gradient_parts`) summed into one, in order; the arrays after them as they are."""
    merged, at = [], 0
    for count in counts:
        total = arrays[at]
        for part in arrays[at + 1 : at + count]:
            total = add(total, part)
        merged.append(total)
        at += count
    return merged + list(arrays[at:])


def run_fused_task(
    task: FusedTask,
    backend: TileBackend,
    parts: str,
    arguments: tuple[Sequence[Any], Sequence[Any], Sequence[Any]],
    extra: Sequence[int],
    timeline: list | None,
    pass_ids: tuple[Any, Any, Any],
    read_back: Callable[[Any], Any],
    loss_into: Callable[..., None],
    read_counts: Sequence[int] = (),
) -> None:
    """Run `parts` of a fused task from its (inputs, outputs, reductions) arguments, in the
    executor's order: the layout's inputs, the target unless staged, the read partial weight
    gradients; the layout's outputs, the loss gradient and loss row, the written partial
    gradients; the layout's reductions. A training step ("step") keeps its activations and
    its loss gradient in memory: its outputs are the loss row, the layout's `states` and the
    partial gradients only.
    Inputs are arrays; outputs and reductions are whatever the backend writes into,
    `read_back` reading an output as an array. `extra` is (training, iteration[, the loss's
    id, total, valid rows, key]); `pass_ids` name the forward, loss and backward in the
    timeline; `loss_into(op, index, loss_args, prediction, stored_target, grad, sums)`
    computes the loss of the output tile, writes its gradient into `grad` unless None, and
    returns that gradient. A backward's `read_counts` (`GradientStores.read_counts`) say how many
    arguments each of its input slots arrived as: the parts of a gradient, summed here."""
    inputs, outputs, reductions = (list(a) for a in arguments)
    if read_counts:
        inputs = summed_parts(inputs, read_counts, backend.accumulate)
    mode = tuple(extra[:2])
    forward_id, loss_id, backward_id = pass_ids
    if parts == "backward":
        layout = task.backward
        count = len(layout.inputs)
        values = dict(zip(layout.inputs, inputs[:count], strict=True))
        partials = partial_gradients(layout, inputs[count:], outputs)
        sums = dict(zip(layout.reductions, reductions, strict=True))
        run = TaskRun(timeline, task.index, backward_id)
        run_backward(task, backend, values, sums, partials, mode, run)
        return
    layout = task.forward
    step = parts == "step"
    n_in = len(layout.inputs)
    n_out = 0 if step else len(layout.outputs)  # a step keeps its activations in memory
    values = dict(zip(layout.inputs, inputs[:n_in], strict=True))
    written = None if step else dict(zip(layout.outputs, outputs[:n_out], strict=True))
    n_states = len(layout.states) if step else 0  # a step writes them after its loss row
    states = (
        dict(zip(layout.states, outputs[1 : 1 + n_states], strict=True))
        if step
        else {slot: written[slot] for slot in layout.states}
    )
    saved: dict[int, Any] | None = {} if step else None  # the backward runs in this task
    run = TaskRun(timeline, task.index, forward_id)
    run_forward(task, backend, values, written, mode, run, saved, states)
    if parts == "forward":
        return
    begin = time.perf_counter()
    loss_args = tuple(extra[2:6])
    n_target = int(loss_args[3] < 0)  # the loss's key: the target is staged unless negative
    op = task.group.ops[-1]
    prediction = values[task.output_slot] if step else read_back(written[task.output_slot])
    stored = inputs[n_in] if n_target else None
    # a step's outputs: the loss row, then the partial gradients; otherwise the layout's
    # outputs, the loss gradient, the loss row
    grad, sums_row = (None, outputs[0]) if step else (outputs[n_out], outputs[n_out + 1])
    gradient = loss_into(op, task.index, loss_args, prediction, stored, grad, sums_row)
    TaskRun(timeline, task.index, loss_id).record(op, begin)
    if step:
        values[task.output_grad_slot] = gradient
        partials = partial_gradients(
            task.backward, inputs[n_in + n_target :], outputs[1 + n_states :]
        )
        sums = dict(zip(task.backward.reductions, reductions, strict=True))
        run = TaskRun(timeline, task.index, backward_id)
        run_backward(task, backend, values, sums, partials, mode, run, saved)
