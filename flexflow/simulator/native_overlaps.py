"""The tile overlaps of task-graph edges, computed in C (native/overlaps.c; paper §5.1: a
transfer for every pair of overlapping producer and consumer tiles on different devices).
"""

from __future__ import annotations

import math
from array import array

from flexflow._simulator import ffi, lib

OverlapArrays = tuple[array, array, array]
"""Overlaps as columns: consumer tiles ("i"), producer tiles ("i"), volumes ("q")."""


def grid_overlaps(
    needs: array, num_needs: int, steps: list[int], grid: tuple[int, ...]
) -> tuple[tuple[int, int, int], ...]:
    """(consumer tile, producer tile, volume) for every consumer tile's region meeting a tile of
    the producer grid; `needs` holds each consumer tile's (lo, hi) per dimension ("q")."""
    return tuple(zip(*grid_overlap_arrays(needs, num_needs, steps, grid), strict=True))


def grid_overlap_arrays(
    needs: array, num_needs: int, steps: list[int], grid: tuple[int, ...]
) -> OverlapArrays:
    """`grid_overlaps` as columns, as the overlap pool keeps them: a set of thousands of
    overlaps (an unrolled layer's tiles on 64 GPUs) costs three copies, not a tuple each."""
    ndim = len(grid)
    capacity = num_needs * math.prod(grid)
    consumer, producer = array("i", bytes(4 * capacity)), array("i", bytes(4 * capacity))
    volume = array("q", bytes(8 * capacity))
    buf = ffi.from_buffer
    count = lib.ff_grid_overlaps(
        ndim,
        num_needs,
        buf("int64_t[]", needs),
        ffi.new("int64_t[]", steps),
        ffi.new("int64_t[]", grid),
        buf("int32_t[]", consumer),
        buf("int32_t[]", producer),
        buf("int64_t[]", volume),
    )
    if count < 0:
        raise AssertionError(f"tiles of {ndim} dimensions: more than the C overlaps handle")
    del consumer[count:], producer[count:], volume[count:]
    return consumer, producer, volume
