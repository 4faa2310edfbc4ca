"""The calls into the simulator's C parts: the event loop (native/simulator.c) for full and delta
simulation (paper §5) and the tile overlaps of task-graph edges (native/overlaps.c).

The C side reads a task graph's arrays in place (cffi buffers over the `array`s), so a call
costs a few microseconds of marshalling plus only what changed, never a copy of the graph.
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING, Protocol

from flexflow._simulator import ffi, lib

if TYPE_CHECKING:  # context.py calls grid_overlaps: no import of the simulator at run time
    from flexflow.simulator.context import ResourceSets
    from flexflow.simulator.taskgraph import GraphChange


# The C side reads array typecodes b, i, q, Q, d as int8, int32, int64, uint64 and double.
if [array(code).itemsize for code in "biqQd"] != [1, 4, 8, 8, 8]:
    raise AssertionError("this platform's array typecodes do not have the sizes the C side reads")


class GraphArrays(Protocol):
    """What the C loop reads of a task graph (TaskGraph has it; tests build small ones)."""

    exe: array  # "d"
    order: array  # "Q"
    live: array  # "b"
    res_set: array  # "i", ids into resource_sets
    edge_src: array  # "i", -1 for removed edges
    edge_dst: array  # "i"
    resource_sets: ResourceSets
    num_resources: int


class Times(Protocol):
    """Where the C loop writes: one entry per task id."""

    ready: array  # "d"
    start: array  # "d"
    end: array  # "d"
    iteration_s: float


_ERRORS = {
    lib.FF_CYCLE: "some tasks never became ready: the task graph has a cycle",
    lib.FF_NOT_CLOSED: "a re-simulated task has a successor that is not re-simulated",
}


def simulate(tg: GraphArrays, times: Times, t0: float, change: GraphChange | None = None) -> int:
    """Simulate again every task starting at or after `t0` or affected by `change`.

    `t0` = -inf simulates everything (Algorithm 1); a delta passes +inf and the change, and the
    C side finds the first moment the change can affect (Algorithm 2). `times` must already
    have an entry for every task id. Returns how many tasks were simulated.
    """
    buf = ffi.from_buffer
    sets = tg.resource_sets
    # the views must outlive the call: the structs below only hold their addresses
    views = {
        "exe": buf("double[]", tg.exe),
        "order": buf("uint64_t[]", tg.order),
        "live": buf("int8_t[]", tg.live),
        "resource_set": buf("int32_t[]", tg.res_set),
        "set_offsets": buf("int32_t[]", sets.offsets),
        "set_members": buf("int32_t[]", sets.members),
        "edge_src": buf("int32_t[]", tg.edge_src),
        "edge_dst": buf("int32_t[]", tg.edge_dst),
    }
    graph = ffi.new(
        "ff_graph *",
        {
            "num_tasks": len(tg.exe),
            "num_resources": tg.num_resources,
            "num_edges": len(tg.edge_src),
            **views,
        },
    )
    delta = ffi.new("ff_change *", {"t0": t0})
    if change is not None:
        removed = buf("int32_t[]", change.removed)
        added = buf("int32_t[]", change.added)
        touched = buf("int32_t[]", change.touched)
        delta.removed, delta.num_removed = removed, len(change.removed)
        delta.added, delta.num_added = added, len(change.added)
        delta.touched, delta.num_touched = touched, len(change.touched)
    out = {"ready": times.ready, "start": times.start, "end": times.end}
    out_views = {name: buf("double[]", values) for name, values in out.items()}
    result_times = ffi.new("ff_times *", out_views)
    result = lib.ff_simulate(graph, delta, result_times)
    if result < 0:
        if result == lib.FF_NO_MEMORY:
            raise MemoryError("the simulator could not allocate its scratch memory")
        raise AssertionError(_ERRORS[result])
    times.iteration_s = result_times.iteration_s
    return result


def grid_overlaps(
    needs: array, num_needs: int, steps: list[int], grid: tuple[int, ...]
) -> tuple[tuple[int, int, int], ...]:
    """(consumer tile, producer tile, volume) for every consumer tile's region meeting a tile of
    the producer grid; `needs` holds each consumer tile's (lo, hi) per dimension ("q")."""
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
    return tuple(zip(consumer[:count], producer[:count], volume[:count], strict=True))
