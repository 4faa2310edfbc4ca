"""Where the runtime updates each weight tile and feeds each input shard, from the strategy.

Both answers are tilings: pieces (a region and the device that owns it) that are disjoint and
together cover the whole tensor, so every element is updated (or copied in) exactly once.

- A weight is updated where its first op's tasks read it: one piece per distinct weight region
  of that op's configuration (a parameter split gives one tile per task). A region several
  tasks share (a replicated weight under data parallelism) is split by rows among its holders,
  so the update's work spreads over them the way the all-reduce's reduce-scatter would.
- A model input is copied in as the first op reading it partitions it, one shard per task on
  that task's device, when those regions tile the input (sample splits do); otherwise (halos
  overlap, or several consumers disagree) as one piece on its first consumer's device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flexflow.graph import OperatorGraph
from flexflow.ops.base import Region
from flexflow.strategy import ParallelConfig, Strategy

Piece = tuple[Region, int]
"""A region of a tensor and the device that owns it."""


def _volume(region: Region) -> int:
    return math.prod(stop - start for start, stop in region)


def _disjoint(a: Region, b: Region) -> bool:
    return any(a1 <= b0 or b1 <= a0 for (a0, a1), (b0, b1) in zip(a, b, strict=True))


def is_tiling(regions: Sequence[Region], shape: tuple[int, ...]) -> bool:
    """Whether `regions` are pairwise disjoint, inside `shape`, and cover it."""
    inside = all(
        0 <= start <= stop <= size
        for region in regions
        for (start, stop), size in zip(region, shape, strict=True)
    )
    if not inside or sum(_volume(r) for r in regions) != math.prod(shape):
        return False
    return all(_disjoint(a, b) for i, a in enumerate(regions) for b in regions[i + 1 :])


def _whole(shape: tuple[int, ...]) -> Region:
    return tuple((0, size) for size in shape)


def _distinct(pairs: Sequence[Piece]) -> dict[Region, list[int]]:
    """Each distinct region with its holders' devices, in task order, without repeats."""
    holders: dict[Region, list[int]] = {}
    for region, device in pairs:
        devices = holders.setdefault(region, [])
        if device not in devices:
            devices.append(device)
    return holders


def _split_rows(region: Region, devices: Sequence[int]) -> list[Piece]:
    """`region` cut along its first dimension into one near-equal block per device."""
    (start, stop), rest = region[0], region[1:]
    parts = min(len(devices), stop - start)
    bounds = [start + (stop - start) * i // parts for i in range(parts + 1)]
    return [(((bounds[i], bounds[i + 1]), *rest), devices[i]) for i in range(parts)]


def update_pieces(
    graph: OperatorGraph, strategy: Strategy, regions: Sequence[Sequence[Region]]
) -> dict[int, tuple[Piece, ...]]:
    """For every parameter id, the tiles its optimizer update runs on (see the module doc).

    `regions[op]` are the output regions of op `op`'s tasks (`ParallelConfig.task_regions`).
    """
    pieces: dict[int, tuple[Piece, ...]] = {}
    first = first_users(graph)
    for node, config in zip(graph.ops, strategy.configs, strict=True):
        pieces |= op_update_pieces(graph, node.id, config, regions[node.id], first)
    return pieces


def first_users(graph: OperatorGraph) -> tuple[int, ...]:
    """Per parameter id, the first op (graph order) reading it: the one whose configuration
    says where it is updated (a shared parameter, an LSTM's steps', is updated once)."""
    first: dict[int, int] = {}
    for node in graph.ops:
        for pid in node.weights:
            first.setdefault(pid, node.id)
    return tuple(first.get(pid, -1) for pid in range(len(graph.parameters)))


def op_update_pieces(
    graph: OperatorGraph,
    op: int,
    config: ParallelConfig,
    regions: Sequence[Region],
    first: Sequence[int],
) -> dict[int, tuple[Piece, ...]]:
    """`update_pieces` of the parameters whose first user (`first[pid]`) is `op`, under its
    configuration `config` with task tiles `regions`."""
    node, pieces = graph.ops[op], {}
    for slot, pid in enumerate(node.weights):
        if first[pid] != op or pid in pieces:
            continue
        shape = graph.parameters[pid].spec.shape
        read = [
            (node.op.weight_regions(node.sig, region)[slot], device)
            for region, device in zip(regions, config.devices, strict=True)
        ]
        holders = _distinct(read)
        if not is_tiling(list(holders), shape):
            holders = {_whole(shape): list(holders[read[0][0]])}
        pieces[pid] = tuple(
            piece for region, devices in holders.items() for piece in _split_rows(region, devices)
        )
    return pieces


def input_shards(
    graph: OperatorGraph, strategy: Strategy, regions: Sequence[Sequence[Region]]
) -> dict[int, tuple[Piece, ...]]:
    """For every model input's tensor id, the shards it is copied in as (see the module doc)."""
    shards: dict[int, tuple[Piece, ...]] = {}
    for tensor in graph.input_tensors:
        read: list[Piece] = []
        for node, config in zip(graph.ops, strategy.configs, strict=True):
            for slot, tid in enumerate(node.inputs):
                if tid != tensor.id:
                    continue
                for region, device in zip(regions[node.id], config.devices, strict=True):
                    read.append((node.op.input_regions(node.sig, region)[slot], device))
        holders = _distinct(read)
        if read and is_tiling(list(holders), tensor.spec.shape):
            shards[tensor.id] = tuple((region, devices[0]) for region, devices in holders.items())
        else:
            first = read[0][1] if read else 0
            shards[tensor.id] = ((_whole(tensor.spec.shape), first),)
    return shards
