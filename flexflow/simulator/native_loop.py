"""The calls into the simulator's C event loop (native/simulator.c): full and delta simulation
(paper §5, Algorithms 1 and 2), the times a delta overwrites, and the edge index it reads.

The C side reads a task graph's arrays in place (cffi buffers over the `array`s, typecodes as
`native_arrays` checks them), so a call costs a few microseconds of marshalling plus only what
changed, never a copy of the graph.
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING, Protocol

from flexflow._simulator import ffi, lib

if TYPE_CHECKING:
    from flexflow.simulator.resources import ResourceSets
    from flexflow.simulator.task_deltas import GraphChange


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

    def iteration_s(self, makespan_s: float) -> float: ...  # TaskGraph.iteration_s


class Times(Protocol):
    """Where the C loop writes: one entry per task id."""

    ready: array  # "d"
    start: array  # "d"
    end: array  # "d"
    iteration_s: float


_TIME_NAMES = ("ready", "start", "end")
_I8, _I32, _U64, _F64 = (ffi.typeof(f"{t}[]") for t in ("int8_t", "int32_t", "uint64_t", "double"))
_GRAPH = ffi.typeof("ff_graph *")


def _time_views(times: Times) -> dict:
    """C views of `times`' arrays by `ff_times` field (they must outlive the call)."""
    return {name: ffi.from_buffer("double[]", getattr(times, name)) for name in _TIME_NAMES}


class TimesLog:
    """Where a delta logs the times it overwrites (`ff_times`' log), for `restore`: arrays
    kept from change to change, grown to the room a change may need.

    It keeps the C view of itself and of the times it logs (`c_times`) from call to call (a
    scan of one op's configurations makes thousands of deltas, each a simulation and an
    undo); an array cannot grow while viewed, so `reserve` and the owner of the times drop
    the view (`release`) before they grow."""

    def __init__(self) -> None:
        self.task, self.ready, self.start, self.end = array("i"), array("d"), array("d"), array("d")
        self.size = 0  # entries the last simulation logged
        self._c_times: tuple | None = None  # (times, ff_times *, the views it points into)

    def reserve(self, entries: int) -> None:
        if len(self.task) >= entries:
            return
        self.release()
        for values in (self.task, self.ready, self.start, self.end):
            values.frombytes(bytes(values.itemsize * (entries - len(values))))

    def release(self) -> None:
        """Drop the C view (before this log or the times it views grow)."""
        self._c_times = None

    def c_times(self, times: Times):
        """`ff_times *` over `times` and this log, made again only for other times."""
        if self._c_times is None or self._c_times[0] is not times:
            views = _time_views(times)
            views.update(
                log_task=ffi.from_buffer("int32_t[]", self.task),
                log_ready=ffi.from_buffer("double[]", self.ready),
                log_start=ffi.from_buffer("double[]", self.start),
                log_end=ffi.from_buffer("double[]", self.end),
            )
            self._c_times = (times, ffi.new("ff_times *", views), views)
        return self._c_times[1]


def restore(times: Times, log: TimesLog) -> None:
    """Write back every time the last logged simulation overwrote (native ff_restore)."""
    c_times = log.c_times(times)
    c_times.log_size = log.size
    lib.ff_restore(c_times)
    log.size = 0


class EdgeIndex:
    """A task graph's edges indexed by source and by target in C (`ff_index`), kept as the
    graph changes, with the scratch memory of the simulations that read it: a delta then
    costs what it touches plus at most one pass over the task ids, not passes over every edge
    to build successor lists. Its owner appends (`extend`), removes (`remove_blocks`), writes
    back (`restore_blocks`) and truncates (`truncate`) edges through it."""

    def __init__(self) -> None:
        index = lib.ff_index_new()
        if index == ffi.NULL:
            raise MemoryError("the simulator could not allocate its edge index")
        self.pointer = ffi.gc(index, lib.ff_index_free)
        self._touched = array("i")  # `remove_blocks`' room for the removed edges' targets

    def extend(self, edge_src: array, edge_dst: array, num_tasks: int) -> None:
        """Index the edges appended since the last call; room for `num_tasks` task ids."""
        result = lib.ff_index_edges(
            self.pointer,
            ffi.from_buffer("int32_t[]", edge_src),
            ffi.from_buffer("int32_t[]", edge_dst),
            len(edge_src),
            num_tasks,
        )
        if result == lib.FF_NO_MEMORY:
            raise MemoryError("the simulator could not grow its edge index")

    def truncate(self, num_edges: int) -> None:
        """Forget the edges from `num_edges` on (0: every edge)."""
        lib.ff_index_truncate(self.pointer, num_edges)

    def remove_blocks(
        self, edge_src: array, edge_dst: array, block_ranges: array, blocks: array
    ) -> tuple[array, array]:
        """Remove the edges of `blocks` (block b's range at `block_ranges[2b]`, `[2b + 1]`):
        their sources in `edge_src` become -1 (the index keeps them for `restore_blocks`) and they
        leave the lists. Returns the blocks' ranges (lo, hi pairs, "i") and the removed
        edges' targets, in that order (the tasks that lost a predecessor)."""
        if len(self._touched) < len(edge_dst):
            self._touched = array("i", bytes(4 * len(edge_dst)))
        ranges = array("i", bytes(8 * len(blocks)))
        touched = self._touched
        count = lib.ff_index_remove_blocks(
            self.pointer,
            ffi.from_buffer(_I32, edge_src),
            ffi.from_buffer(_I32, edge_dst),
            ffi.from_buffer(_I32, block_ranges),
            ffi.from_buffer(_I32, blocks),
            len(blocks),
            ffi.from_buffer(_I32, ranges),
            ffi.from_buffer(_I32, touched),
        )
        return ranges, touched[:count]

    def restore_blocks(
        self, edge_src: array, ranges: array, blocks: array, block_ranges: array
    ) -> None:
        """Undo `remove_blocks` of `blocks`, which returned `ranges`: the edges' sources
        written back, the edges listed again, each block's range written back to
        `block_ranges`."""
        lib.ff_index_restore_blocks(
            self.pointer,
            ffi.from_buffer(_I32, edge_src),
            ffi.from_buffer(_I32, ranges),
            ffi.from_buffer(_I32, blocks),
            len(blocks),
            ffi.from_buffer(_I32, block_ranges),
        )

    def undone(self) -> None:
        """The last delta was taken back, times too: the next starts from the same schedule,
        so the index may reuse what it kept of it (`ff_index_undone`)."""
        lib.ff_index_undone(self.pointer)


_ERRORS = {
    lib.FF_CYCLE: "some tasks never became ready: the task graph has a cycle",
    lib.FF_NOT_CLOSED: "a re-simulated task has a successor that is not re-simulated",
    lib.FF_STALE_INDEX: "the edge index does not hold the task graph's edges",
}


def _graph(tg: GraphArrays) -> tuple:
    """The C view of `tg` (`ff_graph *`) and the buffers it points into, which must outlive
    every call that reads it (the struct only holds their addresses)."""
    buf, sets = ffi.from_buffer, tg.resource_sets
    views = (
        buf(_F64, tg.exe), buf(_U64, tg.order), buf(_I8, tg.live), buf(_I32, tg.res_set),
        buf(_I32, sets.offsets), buf(_I32, sets.members), buf(_I32, tg.edge_src),
        buf(_I32, tg.edge_dst),
    )  # fmt: skip
    exe, order, live, res_set, offsets, members, edge_src, edge_dst = views
    graph = ffi.new(
        _GRAPH,
        (len(tg.exe), exe, order, live, res_set, tg.num_resources, offsets, members,
         len(tg.edge_src), edge_src, edge_dst),
    )  # fmt: skip
    return graph, views


def resource_load(tg: GraphArrays) -> array:
    """Each device's and link's load: the summed exe_time of the live tasks holding it
    (native ff_resource_load). No iteration ends before any of them."""
    load = array("d", bytes(8 * tg.num_resources))
    graph, _buffers = _graph(tg)
    lib.ff_resource_load(graph, ffi.from_buffer("double[]", load))
    return load


def load_bound(
    tg: GraphArrays,
    load: array,
    removed: array,
    new_resource: array,
    new_exe: array,
    scratch: array,
) -> float:
    """The highest load once the tasks `removed` are gone and tasks of `new_exe` hold the
    single resources `new_resource` (native ff_load_bound): a lower bound of the iteration's
    end after a change that removes those and adds these, and maybe more tasks. `load` is
    `resource_load(tg)`; `scratch` has as many entries."""
    graph, _buffers = _graph(tg)
    buf = ffi.from_buffer
    return lib.ff_load_bound(
        graph, buf("double[]", load), buf("int32_t[]", removed), len(removed),
        buf("int32_t[]", new_resource), buf("double[]", new_exe), len(new_exe),
        buf("double[]", scratch),
    )  # fmt: skip


def simulate(
    tg: GraphArrays,
    times: Times,
    t0: float,
    change: GraphChange | None = None,
    cutoff: float = math.inf,
    log: TimesLog | None = None,
    index: EdgeIndex | None = None,
) -> int:
    """Simulate again every task starting at or after `t0` or affected by `change`.

    `t0` = -inf simulates everything (Algorithm 1); a delta passes +inf and the change, and the
    C side finds the first moment the change can affect (Algorithm 2). `times` must already
    have an entry for every task id. Returns how many tasks were simulated; or, once a lower
    bound of the iteration's end passes `cutoff` (a device's or link's end plus the work still
    queued for it), stops there and returns 0 with `times.iteration_s` = inf: a search that
    only needs to know a strategy is slower than `cutoff` does not simulate the rest. With a
    `log` (room for the change's removed and added tasks and every task id) the new times are
    journaled and written only when the replay ends, the old ones kept in the log for
    `restore`: a stopped replay leaves `times` as they were. Without one they are written as
    the loop goes, and a stopped replay leaves them half updated. The bounds are
    floating-point sums, so a cost within rounding of `cutoff` (a relative 1e-12 or so) may be
    cut too: callers leave a wider margin. `index` holds the graph's edges (None: one is built
    for this call).
    """
    buf = ffi.from_buffer
    graph, _buffers = _graph(tg)  # the views must outlive the call
    delta = ffi.new("ff_change *", {"t0": t0, "cutoff": cutoff})
    if change is not None:
        removed = buf("int32_t[]", change.removed)
        added = buf("int32_t[]", change.added)
        touched = buf("int32_t[]", change.touched)
        delta.removed, delta.num_removed = removed, len(change.removed)
        delta.added, delta.num_added = added, len(change.added)
        delta.touched, delta.num_touched = touched, len(change.touched)
        delta.first_new_edge = change.first_new_edge
    if log is not None:
        result_times = log.c_times(times)
    else:
        result_times = ffi.new("ff_times *", _time_views(times))
    result = lib.ff_simulate(
        graph, delta, result_times, ffi.NULL if index is None else index.pointer
    )
    if log is not None:
        log.size = result_times.log_size
    if result == lib.FF_ABOVE_CUTOFF:
        times.iteration_s = math.inf
        return 0
    if result < 0:
        if result == lib.FF_NO_MEMORY:
            raise MemoryError("the simulator could not allocate its scratch memory")
        raise AssertionError(_ERRORS[result])
    times.iteration_s = tg.iteration_s(result_times.iteration_s)
    return result


def compact_ranges(edge_src: array, edge_dst: array, ranges: array) -> tuple[array, array]:
    """The edges of each range (lo, hi pairs of `ranges`), in turn, as new edge arrays; each
    range rewritten to where its edges now are."""
    room = bytes(4 * len(edge_src))
    src, dst = array("i", room), array("i", room)
    count = lib.ff_compact_ranges(
        ffi.from_buffer(_I32, edge_src),
        ffi.from_buffer(_I32, edge_dst),
        ffi.from_buffer(_I32, ranges),
        len(ranges) // 2,
        ffi.from_buffer(_I32, src),
        ffi.from_buffer(_I32, dst),
    )
    del src[count:], dst[count:]
    return src, dst


def set_flags(flags: array, ids: array, value: int) -> None:
    """`flags[t] = value` for every id in `ids` ("b" and "i" arrays), in one C call: a delta
    of an unrolled layer removes and adds thousands of tasks."""
    if ids:
        lib.ff_set_flags(ffi.from_buffer("int8_t[]", flags), ffi.from_buffer("int32_t[]", ids),
                         len(ids), value)  # fmt: skip
