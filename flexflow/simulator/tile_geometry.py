"""A context's tile geometry (paper §5.1's task graph): each task's output, input and weight
regions under an op's degrees, and the overlaps of producer and consumer tiles each edge's
transfers move, memoized per op kind and degrees (never per op or placement).

The overlaps are computed in C (native/overlaps.c) and kept as sets of the context's overlap
pool, as the C edge builder reads them.
"""

from __future__ import annotations

import itertools
import math
from array import array

from flexflow.graph import OperatorGraph
from flexflow.ops.base import Region
from flexflow.simulator.native_blocks import OverlapPool
from flexflow.simulator.native_overlaps import OverlapArrays, grid_overlap_arrays

Overlap = tuple[int, int, int]  # (consumer task, producer task, overlap volume in elements)


class TileGeometry:
    """`SimContext`'s tiles and overlaps, keyed by op kind (`op_kinds`) and degrees."""

    # what SimContext sets (flexflow/simulator/context.py), with the caches _regions,
    # _weights, _inputs, _needs, _overlaps and _overlap_sets
    graph: OperatorGraph
    kinds: tuple[int, ...]
    overlap_pool: OverlapPool
    _edge_kinds: tuple[tuple[int, ...], ...]

    def regions(self, op: int, degrees: tuple[int, ...]) -> tuple[Region, ...]:
        """Output tile of each task (row-major over the degrees)."""
        key = (self.kinds[op], degrees)
        found = self._regions.get(key)
        if found is None:
            # tile_region for every coordinate, as the product of each dimension's ranges
            shape = self.graph.ops[op].sig.output_shape
            ranges = [
                [(c * (size // d), (c + 1) * (size // d)) for c in range(d)]
                for size, d in zip(shape, degrees, strict=True)
            ]
            found = tuple(itertools.product(*ranges))
            self._regions[key] = found
        return found

    def weight_regions(self, op: int, degrees: tuple[int, ...]) -> tuple[tuple[Region, ...], ...]:
        """For each task, the region of each of the op's weights it reads."""
        key = (self.kinds[op], degrees)
        found = self._weights.get(key)
        if found is None:
            node = self.graph.ops[op]
            found = tuple(node.op.weight_regions(node.sig, r) for r in self.regions(op, degrees))
            self._weights[key] = found
        return found

    def input_regions(self, op: int, degrees: tuple[int, ...]) -> tuple[tuple[Region, ...], ...]:
        """For each task, the region of each input it reads (shared by all producer degrees)."""
        key = (self.kinds[op], degrees)
        found = self._inputs.get(key)
        if found is None:
            node = self.graph.ops[op]
            found = tuple(node.op.input_regions(node.sig, r) for r in self.regions(op, degrees))
            self._inputs[key] = found
        return found

    def overlaps(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> tuple[Overlap, ...]:
        """Every (consumer task, producer task, volume) whose tiles meet along input `j`."""
        key = (self._edge_kinds[consumer][j], p_degrees, c_degrees)
        found = self._overlaps.get(key)
        if found is None:  # the pool's set as tuples: computed once for both readers
            number, count = self.overlap_set(consumer, j, p_degrees, c_degrees)
            pool, at = self.overlap_pool, self.overlap_pool.at[number]
            found = self._overlaps[key] = tuple(
                zip(pool.consumer[at : at + count], pool.producer[at : at + count],
                    pool.volume[at : at + count], strict=True)
            )  # fmt: skip
        return found

    def _compute_overlaps(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> OverlapArrays:
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
        needs_key = (self.kinds[consumer], j, c_degrees)
        needs = self._needs.get(needs_key)
        if needs is None:  # each consumer tile's (lo, hi) per dimension, flat
            regions = self.input_regions(consumer, c_degrees)
            needs = array("q", [x for tile in regions for bounds in tile[j] for x in bounds])
            self._needs[needs_key] = needs
        return grid_overlap_arrays(needs, math.prod(c_degrees), steps, grid)

    def overlap_set(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> tuple[int, int]:
        """`overlaps` as a set of the context's pool (`overlap_pool`), as the C edge builder
        reads them: (its number, how many overlaps)."""
        key = (self._edge_kinds[consumer][j], p_degrees, c_degrees)
        found = self._overlap_sets.get(key)
        if found is None:
            columns = self._compute_overlaps(consumer, j, p_degrees, c_degrees)
            found = self._overlap_sets[key] = (self.overlap_pool.add(columns), len(columns[0]))
        return found
