"""A fused task's store arguments: the `Slot`s naming them and their order (`TaskLayout`),
fixed once per (group, task, pass) for the issuing side and the task bodies alike.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from flexflow.fusion.groups import FusedGroup
from flexflow.graph import OperatorGraph
from flexflow.ops.base import Region, full_region
from flexflow.strategy import Strategy


class SlotKind(enum.IntEnum):
    TENSOR = 0
    WEIGHT = 1
    GRAD = 2
    WEIGHT_GRAD = 3
    RUNNING = 4
    """Batch norm's running (mean, variance) of the tile's channels: its id is the op's."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One store argument of a fused task: a tile of a tensor, weight or their gradients."""

    kind: SlotKind
    id: int
    region: Region
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.id, self.region)))

    def __hash__(self) -> int:  # kept: task bodies look slots up every iteration
        return self._hash


@dataclass(frozen=True, slots=True)
class TaskLayout:
    """A fused task's store arguments in the order they are added (each slot once)."""

    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    reductions: tuple[Slot, ...]
    accumulators: tuple[Slot, ...] = ()
    """Read and written (added after the inputs and after the outputs): this device's partial
    weight gradients. Each device adds into its own copy, and the update sums the copies: a
    Legate reduction from tasks on two processors into one weight gradient serialized them
    (LeNet's data-parallel backward tasks ran one after the other)."""
    overwrites: tuple[Slot, ...] = ()
    """Partial weight gradients this task alone writes, whole, each iteration: written (after
    the accumulators' outputs), never read, so nothing zeroes them first."""
    states: tuple[Slot, ...] = ()
    """Of the inputs and outputs (a forward's), those read and written: the running
    statistics of the batch norms that compute their own (`shared_statistics`), updated by
    a training forward. A training step, which writes none of the layout's outputs, writes
    these after its loss row."""


def _unique(slots) -> tuple[Slot, ...]:
    return tuple(dict.fromkeys(slots))


def tiles_of(graph: OperatorGraph, op: int, region: Region):
    node = graph.ops[op]
    return (
        node.op.input_regions(node.sig, region),
        node.op.weight_regions(node.sig, region),
        node.op.output_regions(node.sig, region),
    )


OpTiles = tuple[tuple[Region, ...], tuple[Region, ...], tuple[Region, ...]]
"""An op's tiles in one task: of its inputs, its weights and its outputs."""


def forward_layout(
    graph: OperatorGraph, group: FusedGroup, op_tiles: Sequence[OpTiles]
) -> TaskLayout:
    """Forward: reads the inputs from outside the group and the weights, writes every output;
    reads and writes the running statistics of its batch norms (`TaskLayout.states`).
    `op_tiles[k]` are the tiles of `group.ops[k]` in this task."""
    inputs, outputs, states = [], [], []
    for op, (in_regions, w_regions, out_regions) in zip(group.ops, op_tiles, strict=True):
        node = graph.ops[op]
        for tid, r in zip(node.inputs, in_regions, strict=True):
            if tid not in group.internal:
                inputs.append(Slot(SlotKind.TENSOR, tid, r))
        inputs += [
            Slot(SlotKind.WEIGHT, p, r) for p, r in zip(node.weights, w_regions, strict=True)
        ]
        outputs += [
            Slot(SlotKind.TENSOR, t, r) for t, r in zip(node.outputs, out_regions, strict=True)
        ]
        running = running_slot(graph, group, op, out_regions[0])
        if running is not None:
            states.append(running)
    return TaskLayout(
        _unique(inputs) + tuple(states), _unique(outputs) + tuple(states), (), states=tuple(states)
    )


def running_slot(graph: OperatorGraph, group: FusedGroup, op: int, tile: Region) -> Slot | None:
    """The running statistics a batch norm computing its own statistics in the group reads
    and writes (its channels of the (2, C) store, `tile` being its output tile); None for
    other ops."""
    if group.shared_statistics or not graph.ops[op].op.statistics_dims:
        return None
    return Slot(SlotKind.RUNNING, op, ((0, 2), tile[1]))


def backward_layout(
    graph: OperatorGraph,
    group: FusedGroup,
    op_tiles: Sequence[OpTiles],
    sole: frozenset[int] = frozenset(),
) -> TaskLayout:
    """Backward: reads inputs, weights, outputs and the gradients of outputs leaving the group;
    adds into the gradients of inputs from outside the group and of the weights, or writes
    those of the parameters in `sole` (see `TaskLayout.overwrites`)."""
    inputs, reductions, accumulators = [], [], []
    made: dict[int, Region] = {}
    for op, (in_regions, w_regions, out_regions) in zip(group.ops, op_tiles, strict=True):
        node = graph.ops[op]
        inputs += [  # (a part of a tile made in the task is cut from that tile: `OpStep.windows`)
            Slot(SlotKind.TENSOR, t, r)
            for t, r in zip(node.inputs, in_regions, strict=True)
            if t not in group.internal or made.get(t) == r
        ]
        made.update(zip(node.outputs, out_regions, strict=True))
        inputs += [
            Slot(SlotKind.WEIGHT, p, r) for p, r in zip(node.weights, w_regions, strict=True)
        ]
        inputs += [
            Slot(SlotKind.TENSOR, t, r) for t, r in zip(node.outputs, out_regions, strict=True)
        ]
        for tid, r in zip(node.outputs, out_regions, strict=True):
            if tid not in group.internal:
                inputs.append(Slot(SlotKind.GRAD, tid, r))
        for tid, spec, r in zip(node.inputs, node.sig.inputs, in_regions, strict=True):
            if _gradient_leaves(graph, group, tid, spec):
                reductions.append(Slot(SlotKind.GRAD, tid, r))
        accumulators += [
            Slot(SlotKind.WEIGHT_GRAD, p, r) for p, r in zip(node.weights, w_regions, strict=True)
        ]
    partials = _unique(accumulators)
    return TaskLayout(
        _unique(inputs),
        (),
        _unique(reductions),
        tuple(s for s in partials if s.id not in sole),
        tuple(s for s in partials if s.id in sole),
    )


def sole_gradients(
    graph: OperatorGraph,
    strategy: Strategy,
    regions: Sequence[tuple[Region, ...]],
    groups: Sequence[FusedGroup],
) -> frozenset[int]:
    """Parameters whose partial gradient on each device comes from one task that reads the
    whole weight (a replicated weight of one op, or of several ops in one fused task, such as
    an unrolled LSTM's steps: the task sums their contributions in memory and writes once):
    those tasks write their device's partial outright and nothing zeroes it each iteration.
    The weights of a batch norm run alone from its stores (`FusedGroup.shared_statistics`)
    always accumulate; one in a fused task is like any op (ResNet-101's 208 batch-norm
    weights cost a fill each per iteration, and a read of their partials in every step).
    `regions[op]` are the op's task tiles."""
    group_of = {op: g for g, group in enumerate(groups) for op in group.ops}
    writers: dict[tuple[int, int], set[tuple[int, int]]] = {}
    shared: set[int] = set()
    for node, config in zip(graph.ops, strategy.configs, strict=True):
        alone = groups[group_of[node.id]].shared_statistics
        for index, region in enumerate(regions[node.id]):
            for pid, r in zip(node.weights, node.op.weight_regions(node.sig, region), strict=True):
                full = full_region(graph.parameters[pid].spec.shape)
                if r != full or alone:
                    shared.add(pid)
                task = (group_of[node.id], index)
                writers.setdefault((pid, config.devices[index]), set()).add(task)
    shared |= {pid for (pid, _), tasks in writers.items() if len(tasks) > 1}
    return frozenset(p.id for p in graph.parameters) - shared


def _gradient_leaves(graph: OperatorGraph, group: FusedGroup, tid: int, spec) -> bool:
    """Whether the group adds into the gradient store of its input `tid`: not for integer
    inputs (token ids), internal tensors (kept in memory) or model inputs (nobody reads it)."""
    return (
        spec.dtype.is_float and tid not in group.internal and graph.tensor(tid).producer is not None
    )
