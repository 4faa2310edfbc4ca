"""What every task graph of one (operator graph, machine, cost model) shares: memoized geometry and task times.

A search builds thousands of task graphs of the same model on the same machine; the tiles of
an op under given degrees, the overlaps between producer and consumer tiles, the weight
regions and the task times depend only on degrees (not on devices), so they are computed once
per (op, degrees) here. Equal tiles have equal shapes, so one task time serves all tasks of an
op configuration on one kind of device (the paper's cache, §5.1).
"""

from __future__ import annotations

import itertools
import math

from flexflow.cost import CostModel, TaskTime
from flexflow.graph import OperatorGraph
from flexflow.machine import Device, Machine
from flexflow.ops.base import Region, region_volume
from flexflow.ops.shapes import tile_region

Overlap = tuple[int, int, int]  # (consumer task, producer task, overlap volume in elements)


class SimContext:
    def __init__(
        self, graph: OperatorGraph, machine: Machine, cost: CostModel | None = None
    ) -> None:
        self.graph, self.machine = graph, machine
        self.cost = cost or CostModel()
        self.num_devices = machine.num_devices
        self._regions: dict[tuple[int, tuple[int, ...]], tuple[Region, ...]] = {}
        self._times: dict[tuple[int, tuple[int, ...], str], TaskTime] = {}
        self._weights: dict[tuple[int, tuple[int, ...]], tuple[tuple[Region, ...], ...]] = {}
        self._overlaps: dict[tuple, tuple[Overlap, ...]] = {}
        self._routes: dict[tuple[int, int], tuple[tuple[int, ...], float, float]] = {}

    def regions(self, op: int, degrees: tuple[int, ...]) -> tuple[Region, ...]:
        """Output tile of each task (row-major over the degrees)."""
        found = self._regions.get((op, degrees))
        if found is None:
            shape = self.graph.ops[op].sig.output_shape
            coords = itertools.product(*(range(d) for d in degrees))
            found = tuple(tile_region(shape, degrees, c) for c in coords)
            self._regions[(op, degrees)] = found
        return found

    def task_time(self, op: int, degrees: tuple[int, ...], device: Device) -> TaskTime:
        found = self._times.get((op, degrees, device.model))
        if found is None:
            node = self.graph.ops[op]
            found = self.cost.task_time(node, self.regions(op, degrees)[0], device)
            self._times[(op, degrees, device.model)] = found
        return found

    def weight_regions(self, op: int, degrees: tuple[int, ...]) -> tuple[tuple[Region, ...], ...]:
        """For each task, the region of each of the op's weights it reads."""
        found = self._weights.get((op, degrees))
        if found is None:
            node = self.graph.ops[op]
            found = tuple(node.op.weight_regions(node.sig, r) for r in self.regions(op, degrees))
            self._weights[(op, degrees)] = found
        return found

    def overlaps(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> tuple[Overlap, ...]:
        """Every (consumer task, producer task, volume) whose tiles meet along input `j`."""
        key = (consumer, j, p_degrees, c_degrees)
        found = self._overlaps.get(key)
        if found is None:
            found = self._compute_overlaps(consumer, j, p_degrees, c_degrees)
            self._overlaps[key] = found
        return found

    def _compute_overlaps(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> tuple[Overlap, ...]:
        node = self.graph.ops[consumer]
        tensor = self.graph.tensor(node.inputs[j])
        producer = self.graph.ops[tensor.producer]
        shape = tensor.spec.shape
        # producer tiles of this output form a grid: degree 1 where the op cannot split
        grid = tuple(
            deg if dim.partitionable else 1
            for deg, dim in zip(p_degrees, producer.sig.dims, strict=True)
        )
        steps = [size // deg for size, deg in zip(shape, grid, strict=True)]
        strides = [math.prod(grid[d + 1 :]) for d in range(len(grid))]
        found = []
        for kc, region in enumerate(self.regions(consumer, c_degrees)):
            need = node.op.input_regions(node.sig, region)[j]
            for kp, volume in _grid_overlaps(need, steps, strides, grid):
                found.append((kc, kp, volume))
        return tuple(found)

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float]:
        """(resource ids of the route's links, total latency, bottleneck bandwidth)."""
        found = self._routes.get((src, dst))
        if found is None:
            links = self.machine.route(src, dst)
            found = (
                tuple(self.num_devices + link.id for link in links),
                sum(link.latency_s for link in links),
                min(link.bandwidth_bytes_per_s for link in links),
            )
            self._routes[(src, dst)] = found
        return found

    def transfer(self, src: int, dst: int, size_bytes: float) -> tuple[tuple[int, ...], float]:
        """Resources and time of a transfer: it holds every link of its route (cut-through)."""
        res, latency, bandwidth = self.route(src, dst)
        return res, latency + size_bytes / bandwidth


def _grid_overlaps(
    need: Region, steps: list[int], strides: list[int], grid: tuple[int, ...]
) -> list[tuple[int, int]]:
    """(producer task, overlap volume) for every grid tile meeting region `need`, by index arithmetic."""
    per_dim: list[list[tuple[int, int]]] = []
    for (lo, hi), step, deg in zip(need, steps, grid, strict=True):
        if hi <= lo:
            return []
        hits = []
        for c in range(lo // step, min((hi - 1) // step, deg - 1) + 1):
            a, b = max(lo, c * step), min(hi, (c + 1) * step)
            if b > a:
                hits.append((c, b - a))
        per_dim.append(hits)
    return [
        (
            sum(c * s for (c, _), s in zip(combo, strides, strict=True)),
            math.prod(n for _, n in combo),
        )
        for combo in itertools.product(*per_dim)
    ]


def volume(region: Region) -> int:
    return region_volume(region)
