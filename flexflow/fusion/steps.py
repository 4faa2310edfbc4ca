"""What one device's fused task computes, op by op (`OpStep`, `FusedTask`), and which
groups can take their update and inputs inside the training step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from flexflow.fusion.groups import FusedGroup, tile_shares_statistics, window
from flexflow.fusion.layout import (
    OpTiles,
    Slot,
    SlotKind,
    TaskLayout,
    backward_layout,
    forward_layout,
    running_slot,
    tiles_of,
)
from flexflow.graph import OperatorGraph, OpNode
from flexflow.ops.base import Region
from flexflow.strategy import Strategy


@dataclass(frozen=True, slots=True)
class OpStep:
    """One op of a fused task with the slots its tile reads and writes, built once (a task
    body looks them up every iteration; Python in a task body holds the interpreter lock the
    other processors' tasks wait for). Slots of tensors inside the group stand for arrays
    the task keeps in memory."""

    node: OpNode
    region: Region
    """The op's output tile in this task."""
    inputs: tuple[tuple[int, Slot], ...]
    """(tensor id, slot) per input, in the op's order."""
    weights: tuple[Slot, ...]
    outputs: tuple[tuple[int, str, Slot], ...]
    """(tensor id, dtype name, slot) per output."""
    output_grads: tuple[tuple[int, Slot], ...]
    """(tensor id, gradient slot) per output."""
    input_grads: tuple[Slot, ...]
    weight_grads: tuple[Slot, ...]
    windows: tuple[tuple[tuple[slice, ...], Slot] | None, ...] = ()
    """Per input (empty: none), None, or where the op reads it in the tile made in the task
    (an internal tensor read in part, `window`) with the producer's output slot."""
    running: Slot | None = None
    """A batch norm computing its tile's own statistics: its running statistics
    (`TaskLayout.states`)."""
    exchange: bool = False
    """A batch norm whose tile holds part of what its statistics span: the task's partial
    sums are exchanged with the launch's other points (`FusedGroup.exchanges`)."""


@dataclass(frozen=True, slots=True)
class FusedTask:
    """One task of a fused group as its body sees it, the same on every variant; built once
    per (group, task) by `fused_task`, run each iteration."""

    graph: OperatorGraph
    group: FusedGroup
    index: int
    tiles: tuple[Region, ...]
    """The output tile of each op of the group in this task."""
    op_tiles: tuple[OpTiles, ...]
    """Per op, its tiles in this task."""
    forward: TaskLayout
    backward: TaskLayout
    steps: tuple[OpStep, ...]
    """The group's ops in forward order (`op_steps`)."""

    @property
    def output_slot(self) -> Slot:
        """The tile of the last op's first output: what a loss after the group reads."""
        return self.steps[-1].outputs[0][2]

    @property
    def output_grad_slot(self) -> Slot:
        return self.steps[-1].output_grads[0][1]

    @property
    def step_ready(self) -> bool:
        """Whether forward, loss and backward can run as one task (FUSED_STEP): the backward
        reads nothing but the forward's inputs and outputs and the loss's gradient (no other
        output of the group leaves it, e.g. an LSTM's unread cell state)."""
        known = {*self.forward.inputs, *self.forward.outputs, self.output_grad_slot}
        return all(slot in known for slot in self.backward.inputs)


def fused_task(
    graph: OperatorGraph,
    group: FusedGroup,
    index: int,
    tiles: Sequence[Region],
    sole: frozenset[int] = frozenset(),
) -> FusedTask:
    op_tiles = tuple(
        tiles_of(graph, op, region) for op, region in zip(group.ops, tiles, strict=True)
    )
    forward = forward_layout(graph, group, op_tiles)
    backward = backward_layout(graph, group, op_tiles, sole)
    steps = op_steps(graph, group, tiles, op_tiles, (forward, backward))
    return FusedTask(graph, group, index, tuple(tiles), op_tiles, forward, backward, steps)


def op_steps(
    graph: OperatorGraph,
    group: FusedGroup,
    tiles: Sequence[Region],
    op_tiles: Sequence[OpTiles],
    layouts: Sequence[TaskLayout],
) -> tuple[OpStep, ...]:
    """Each op's `OpStep`, naming the very slot objects of `layouts` where they hold them (a
    dictionary lookup of the same object skips comparing fields)."""
    known: dict[Slot, Slot] = {}
    for layout in layouts:
        for slots in (layout.inputs, layout.outputs, layout.reductions, layout.accumulators):
            known.update((slot, slot) for slot in slots)
        known.update((slot, slot) for slot in layout.overwrites)

    def slot(kind: SlotKind, item: int, region: Region) -> Slot:
        made = Slot(kind, item, region)
        return known.setdefault(made, made)

    steps = []
    made: dict[int, tuple[Region, Slot]] = {}  # tensor -> its tile in this task, and slot
    for op, region, (in_regions, w_regions, out_regions) in zip(
        group.ops, tiles, op_tiles, strict=True
    ):
        node = graph.ops[op]
        ins = tuple(zip(node.inputs, in_regions, strict=True))
        outs = tuple(zip(node.outputs, node.sig.outputs, out_regions, strict=True))
        params = tuple(zip(node.weights, w_regions, strict=True))
        windows = tuple(
            (view, made[t][1])
            if t in group.internal and (view := window(r, made[t][0])) is not None
            else None
            for t, r in ins
        )
        made.update((t, (r, slot(SlotKind.TENSOR, t, r))) for t, _, r in outs)
        steps.append(
            OpStep(
                node,
                region,
                tuple((t, slot(SlotKind.TENSOR, t, r)) for t, r in ins),
                tuple(slot(SlotKind.WEIGHT, p, r) for p, r in params),
                tuple((t, spec.dtype.value, slot(SlotKind.TENSOR, t, r)) for t, spec, r in outs),
                tuple((t, slot(SlotKind.GRAD, t, r)) for t, _, r in outs),
                tuple(slot(SlotKind.GRAD, t, r) for t, r in ins),
                tuple(slot(SlotKind.WEIGHT_GRAD, p, r) for p, r in params),
                windows if any(windows) else (),
                _known(known, running_slot(graph, group, op, out_regions[0])),
                group.exchanges and tile_shares_statistics(node, region),
            )
        )
    return tuple(steps)


def _known(known: dict[Slot, Slot], slot: Slot | None) -> Slot | None:
    return None if slot is None else known.setdefault(slot, slot)


def _one_step_group(groups: Sequence[FusedGroup], tasks: Sequence[Sequence[FusedTask]]) -> bool:
    """Whether the whole graph is one fused group that runs a training step in one task per
    device (`FusedTask.step_ready`)."""
    return len(groups) == 1 and all(task.step_ready for task in tasks[0])


def _on_cpus(tasks: Sequence[FusedTask], strategy: Strategy, kinds: Sequence[str]) -> bool:
    devices = strategy[tasks[0].group.ops[0]].devices
    return all(kinds[device] == "cpu" for device in devices)


def updates_in_step(
    graph: OperatorGraph,
    strategy: Strategy,
    groups: Sequence[FusedGroup],
    tasks: Sequence[Sequence[FusedTask]],
    sole: frozenset[int],
    kinds: Sequence[str],
) -> bool:
    """Whether each device can keep its own copy of every weight and apply the optimizer's
    update at the start of its next step task instead of in update tasks (data parallelism
    does so after its all-reduce): the whole model is one step task per device, on CPUs
    (`kinds[d]` is device d's kind; the GPU variant runs update tasks), and every task reads
    each weight it uses whole (`sole`), so every device updates all of it from every device's
    partial gradients, summed in the same order, and the copies stay bit-identical."""
    if not _one_step_group(groups, tasks) or not _on_cpus(tasks[0], strategy, kinds):
        return False
    return all(p.id in sole for p in graph.parameters)


def inputs_read_in_step(
    graph: OperatorGraph,
    strategy: Strategy,
    groups: Sequence[FusedGroup],
    tasks: Sequence[Sequence[FusedTask]],
    kinds: Sequence[str],
) -> dict[int, int]:
    """The model inputs a step task can read straight from the batch in its process instead of
    from a store a feed task filled, with how many task arguments read each: the whole model
    is one step task per device on CPUs (its backward reads the input in memory), and those
    tasks read the input."""
    if not _one_step_group(groups, tasks) or not _on_cpus(tasks[0], strategy, kinds):
        return {}
    readers = Counter(
        slot.id for task in tasks[0] for slot in task.forward.inputs if slot.kind is SlotKind.TENSOR
    )
    return {t.id: readers[t.id] for t in graph.input_tensors if readers[t.id]}
