"""The simulator's C parts in plain Python, as their specification: the event loop of Algorithm 1
(paper §5, native/simulator.c) and the tile overlaps of task-graph edges (native/overlaps.c).

Nothing runs them at simulation time; tests/simulator/test_native.py checks that the C code
gives bit-identical ready, start and end times and equal overlaps, on random inputs and on
real task graphs.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence

from flexflow.ops.base import Region
from flexflow.simulator.taskgraph import TaskGraph

Entry = tuple[float, int, int]  # (ready_time, order: device-task flag and canonical key, task id)


def reference_run(
    exe: Sequence[float],
    res: Sequence[tuple[int, ...]],
    preds: Sequence[list[int]],
    succs: Sequence[list[int]],
    order: Sequence[int],
    tasks: list[int],
    free: list[float],
    times: tuple[list[float], list[float], list[float]],
) -> None:
    """Simulate `tasks`, whose other predecessors have already ended, into `times` (ready, start, end).

    `free` holds the time each device and link becomes free; each task runs on all its
    resources as soon as it is ready and they are free, in (ready_time, key) order.
    """
    ready, start, end = times
    member = set(tasks)
    remaining = {}
    heap: list[Entry] = []
    for t in tasks:
        r = 0.0
        waiting = 0
        for p in preds[t]:
            if p in member:
                waiting += 1
            elif end[p] > r:
                r = end[p]
        ready[t] = r
        if waiting:
            remaining[t] = waiting
        else:
            heap.append((r, order[t], t))
    heapq.heapify(heap)
    while heap:
        r, _, t = heapq.heappop(heap)
        s = r
        for x in res[t]:
            if free[x] > s:
                s = free[x]
        e = s + exe[t]
        for x in res[t]:
            free[x] = e
        start[t] = s
        end[t] = e
        for u in succs[t]:
            if e > ready[u]:
                ready[u] = e
            left = remaining[u] - 1
            if left:
                remaining[u] = left
            else:
                del remaining[u]
                heapq.heappush(heap, (ready[u], order[u], u))
    if remaining:
        raise AssertionError(
            f"{len(remaining)} tasks never became ready: the task graph has a cycle"
        )


def reference_simulate(tg: TaskGraph) -> tuple[list[float], list[float], list[float]]:
    """Algorithm 1 over every live task of `tg`: (ready, start, end) per task id."""
    n = tg.size
    times = ([0.0] * n, [0.0] * n, [0.0] * n)
    tasks = list(tg.live_tasks())
    free = [0.0] * tg.num_resources
    reference_run(tg.exe, tg.res, tg.predecessors(), tg.successors(), tg.order, tasks, free, times)
    return times


def reference_grid_overlaps(
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
