"""The calls into the simulator's C parts: the event loop (native/simulator.c) for full and delta
simulation (paper §5), the tile overlaps of task-graph edges (native/overlaps.c) and the
builders of a task graph's blocks (native/blocks.c).

The C side reads a task graph's arrays in place (cffi buffers over the `array`s), so a call
costs a few microseconds of marshalling plus only what changed, never a copy of the graph.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from flexflow._simulator import ffi, lib
from flexflow.simulator.keys import FIELD_LIMIT

if TYPE_CHECKING:  # context.py calls grid_overlaps: no import of the simulator at run time
    from flexflow.simulator.blocks import BlockTables
    from flexflow.simulator.context import ResourceSets
    from flexflow.simulator.taskgraph import GraphChange


# The C side reads array typecodes b, i, q, Q, d as int8, int32, int64, uint64 and double.
if [array(code).itemsize for code in "biqQd"] != [1, 4, 8, 8, 8]:
    raise AssertionError("this platform's array typecodes do not have the sizes the C side reads")


_C_ARRAY = {"b": "int8_t[]", "i": "int32_t[]", "q": "int64_t[]", "Q": "uint64_t[]", "d": "double[]"}


def _views(*arrays: array) -> list:
    """C views of `arrays` (by typecode): they must outlive the call that reads them."""
    return [ffi.from_buffer(_C_ARRAY[values.typecode], values) for values in arrays]


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
    to build successor lists. Its owner appends (`extend`), removes (`remove`), writes back
    (`restore`) and truncates (`truncate`) edges through it."""

    def __init__(self) -> None:
        index = lib.ff_index_new()
        if index == ffi.NULL:
            raise MemoryError("the simulator could not allocate its edge index")
        self.pointer = ffi.gc(index, lib.ff_index_free)

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

    def remove(self, edge_src: array, ranges: array) -> None:
        """Remove the edges of ranges (lo, hi pairs, "i"): their sources in `edge_src` become
        -1 (the index keeps them for `restore`) and they leave the lists."""
        lib.ff_index_remove(
            self.pointer,
            ffi.from_buffer("int32_t[]", edge_src),
            ffi.from_buffer("int32_t[]", ranges),
            len(ranges) // 2,
        )

    def restore(self, edge_src: array, ranges: array) -> None:
        """Undo `remove` of those ranges: their sources written back, the edges listed again."""
        lib.ff_index_restore(
            self.pointer,
            ffi.from_buffer("int32_t[]", edge_src),
            ffi.from_buffer("int32_t[]", ranges),
            len(ranges) // 2,
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
    buf = ffi.from_buffer
    sets = tg.resource_sets
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


def set_flags(flags: array, ids: array, value: int) -> None:
    """`flags[t] = value` for every id in `ids` ("b" and "i" arrays), in one C call: a delta
    of an unrolled layer removes and adds thousands of tasks."""
    if ids:
        lib.ff_set_flags(ffi.from_buffer("int8_t[]", flags), ffi.from_buffer("int32_t[]", ids),
                         len(ids), value)  # fmt: skip


class OpJobs:
    """The op jobs of `build_blocks`: per job (an op's block), its tasks interleaved, the
    forward task of task k at 2k and its backward at 2k + 1 (`SimContext.op_tasks`)."""

    __slots__ = ("op", "offsets", "device", "exe", "order")
    C_ARRAYS = __slots__

    def __init__(self) -> None:
        self.op, self.offsets = array("i"), array("i", [0])
        self.device, self.exe, self.order = array("i"), array("d"), array("Q")

    def add(self, op: int, device: array, exe: array, order: array) -> None:
        self.op.append(op)
        self.device += device
        self.exe += exe
        self.order += order
        self.offsets.append(len(self.device))

    def __len__(self) -> int:
        return len(self.op)


class _CTable:
    """A table the C block builders read through a struct (C_TYPE) of its size fields
    (`_sizes`) and views over its arrays (C_ARRAYS), made again after the table grows:
    an array cannot grow while a view of it exists."""

    C_TYPE = ""
    C_ARRAYS: tuple[str, ...] = ()
    _struct: tuple | None = None

    def _sizes(self) -> tuple[int, ...]:
        return ()

    def _grow(self) -> None:
        """Release the views before the arrays grow."""
        self._struct = None

    def struct(self):
        """The C view (`C_TYPE *`)."""
        if self._struct is None:
            views = _views(*(getattr(self, name) for name in self.C_ARRAYS))
            self._struct = (ffi.new(self.C_TYPE, (*self._sizes(), *views)), views)
        return self._struct[0]


class EdgeTable(_CTable):
    """A task graph's edges (one per op input) as the C edge builder reads them
    (`ff_edge_table`): what an edge block needs besides the two ops' configurations."""

    C_TYPE = "ff_edge_table *"
    C_ARRAYS = ("producer", "consumer", "itemsize", "grads", "transfer_key", "grad_key")

    def __init__(self) -> None:
        self.producer, self.consumer = array("i"), array("i")
        self.itemsize, self.grads = array("q"), array("b")
        self.transfer_key, self.grad_key = array("Q"), array("Q")

    def _sizes(self) -> tuple[int, ...]:
        return (len(self.producer),)

    def add(
        self, producer: int, consumer: int, itemsize: int, grads: bool, transfer_key: int,
        grad_key: int,
    ) -> int:  # fmt: skip
        """A new edge (producer -1: a model input); returns its number."""
        self._grow()
        self.producer.append(producer)
        self.consumer.append(consumer)
        self.itemsize.append(itemsize)
        self.grads.append(grads)
        self.transfer_key.append(transfer_key)
        self.grad_key.append(grad_key)
        return len(self.producer) - 1


class OverlapPool(_CTable):
    """Every overlap set a context computed (`ff_overlap_pool`), by number: an edge job names
    its set instead of copying it."""

    C_TYPE = "ff_overlap_pool *"
    C_ARRAYS = ("at", "count", "consumer", "producer", "volume")

    def __init__(self) -> None:
        self.at, self.count = array("i"), array("i")
        self.consumer, self.producer, self.volume = array("i"), array("i"), array("q")

    def _sizes(self) -> tuple[int, ...]:
        return (len(self.at),)

    def add(self, overlaps: OverlapArrays) -> int:
        """A new set of overlaps (three columns, `grid_overlap_arrays`); returns its number."""
        consumer, producer, volume = overlaps
        self._grow()
        self.at.append(len(self.consumer))
        self.count.append(len(consumer))
        self.consumer += consumer
        self.producer += producer
        self.volume += volume
        return len(self.at) - 1


class EdgeJobs:
    """The edge jobs of `build_blocks` (one job per edge block): its edge and overlap set."""

    __slots__ = ("edge", "overlaps", "count")
    C_ARRAYS = __slots__[:2]

    def __init__(self) -> None:
        self.edge, self.overlaps = array("i"), array("i")
        self.count = 0  # overlaps of every job

    def add(self, edge: int, overlaps: tuple[int, int]) -> None:
        """A job of `edge` with the overlap set (number, size) `overlaps`; number -1: none."""
        self.edge.append(edge)
        self.overlaps.append(overlaps[0])
        self.count += overlaps[1]

    def __len__(self) -> int:
        return len(self.edge)


@dataclass(frozen=True, slots=True)
class SyncTemplate:
    """A template of a `SyncTable`: its id, and the most tasks and edges its parts may add
    to a sync block."""

    id: int
    max_tasks: int
    max_edges: int


class SyncTable(_CTable):
    """Every template a context made (`ff_sync_table`): the parts of one op's tasks under one
    configuration that read one parameter. A task graph names each user's current template by
    its id (`BlockTables.user_template`), so a sync job is just its parameter."""

    C_TYPE = "ff_sync_table *"
    C_ARRAYS = ("template_first", "template_parts", "part_dims", "bounds_at", "bounds",
                "elements", "part_devices", "device_at", "device", "update_s", "part_tasks",
                "task_at", "task")  # fmt: skip

    def __init__(self) -> None:
        self.template_first, self.template_parts = array("i"), array("i")
        self.part_dims, self.bounds_at, self.bounds = array("i"), array("i"), array("q")
        self.elements, self.part_devices, self.device_at = array("q"), array("i"), array("i")
        self.device, self.update_s = array("i"), array("d")
        self.part_tasks, self.task_at, self.task = array("i"), array("i"), array("i")

    def add(
        self,
        parts: Sequence[tuple[tuple[int, ...], int, Sequence[int], Sequence[float], Sequence[int]]],
    ) -> SyncTemplate:
        """A new template of `parts`: (bounds, elements, devices, their update times, task
        indices) each."""
        self._grow()
        self.template_first.append(len(self.part_dims))
        self.template_parts.append(len(parts))
        # column by column: a template of a layer split over 64 GPUs has 64 parts
        bounds, elements, devices, update_s, tasks = zip(*parts, strict=True)
        self.part_dims.extend([len(b) // 2 for b in bounds])
        self._append_runs(self.bounds_at, self.bounds, bounds)
        self.elements.extend(elements)
        self.part_devices.extend(map(len, devices))
        self._append_runs(self.device_at, self.device, devices)
        for times in update_s:
            self.update_s.extend(times)
        self.part_tasks.extend(map(len, tasks))
        self._append_runs(self.task_at, self.task, tasks)
        num_devices, num_tasks = sum(map(len, devices)), sum(map(len, tasks))
        max_tasks = 2 * len(parts) + 2 * num_devices
        max_edges = num_tasks + 3 * num_devices
        return SyncTemplate(len(self.template_first) - 1, max_tasks, max_edges)

    @staticmethod
    def _append_runs(at: array, values: array, runs: Sequence[Sequence[int]]) -> None:
        """Append each of `runs` to `values`, and where it starts to `at`."""
        for run in runs:
            at.append(len(values))
            values.extend(run)


class SyncJobs:
    """The sync jobs of `build_blocks` (one job per parameter's sync block)."""

    __slots__ = ("param", "key", "tasks", "edges")
    C_ARRAYS = __slots__[:2]

    def __init__(self) -> None:
        self.param, self.key = array("i"), array("Q")
        self.tasks = self.edges = 0  # the most tasks and edges the jobs may create

    def add(self, param: int, key: int, max_tasks: int, max_edges: int) -> None:
        self.param.append(param)
        self.key.append(key)
        self.tasks += max_tasks
        self.edges += max_edges

    def __len__(self) -> int:
        return len(self.param)


class TaskArrays(Protocol):
    """The per-task arrays of a task graph the block builders write new tasks into."""

    exe: array  # "d"
    order: array  # "Q"
    live: array  # "b"
    res_set: array  # "i"
    size_bytes: array  # "q"
    res_src: array  # "i"
    res_dst: array  # "i"


class Routes:
    """The C view of a context's route tables (`SimContext.route_tables`), made once: the
    tables never change after they are built."""

    def __init__(self, tables: tuple[array, array, array, array], num_devices: int) -> None:
        self._tables = tables  # the views below point into them
        self._views = _views(*tables)
        self.struct = ffi.new("ff_routes *", (num_devices, *self._views))


Blocks = tuple[array, array, array]
"""What a block builder returns: the new task ids, each job's range of them (offsets), each
job's range of the edges it appended (offsets from where they start)."""


def build_blocks(
    tg: TaskArrays,
    free: array,
    ops: OpJobs,
    edges: EdgeJobs,
    syncs: SyncJobs,
    tables: BlockTables,
    edge_table: EdgeTable,
    pool: OverlapPool,
    templates: SyncTable,
    empty_set: int,
    routes: Routes,
    edge_src: array,
    edge_dst: array,
) -> Blocks:
    """Every op, edge and sync job's block in one C call (native/blocks.c): new tasks take ids
    from the end of `free` (removed from it), then new ids (the per-task arrays grow); edges
    are appended to `edge_src`/`edge_dst`; the op jobs' tasks are appended to `tables`' op
    table. Jobs are numbered ops, then edges, then syncs."""
    overlaps = edges.count
    task_capacity = len(ops.device) + 2 * overlaps + syncs.tasks
    edge_capacity = len(ops.device) // 2 + 4 * overlaps + syncs.edges
    num_jobs = len(ops) + len(edges) + len(syncs)
    size = len(tg.exe)
    grow = max(0, task_capacity - len(free))
    per_task = (tg.exe, tg.order, tg.live, tg.res_set, tg.size_bytes, tg.res_src, tg.res_dst)
    if grow:
        for values in per_task:
            values.frombytes(bytes(values.itemsize * grow))
    first_edge = len(edge_src)
    room = array("i", bytes(4 * edge_capacity))
    edge_src += room
    edge_dst += room
    table_size = tables.grow(len(ops.device))
    new_ids = array("i", bytes(4 * task_capacity))
    task_offsets = array("i", bytes(4 * (num_jobs + 1)))
    edge_offsets = array("i", bytes(4 * (num_jobs + 1)))
    # the views must outlive the call: the structs below only hold their addresses
    views = [
        _views(*(getattr(jobs, name) for name in jobs.C_ARRAYS)) for jobs in (ops, edges, syncs)
    ]
    user_views = _views(tables.users_at, tables.user_op, tables.user_template)
    table_views = _views(tables.op_at, tables.ids, tables.device)
    table = ffi.new("ff_op_table *", (*table_views, table_size))
    sync_table = templates.struct()
    parts = (
        ffi.new("ff_op_jobs *", (len(ops), *views[0])),
        ffi.new("ff_edge_jobs *", (len(edges), *views[1], edge_table.struct(), pool.struct())),
        ffi.new("ff_sync_jobs *", (len(syncs), *views[2], *user_views, sync_table, empty_set)),
    )
    c_jobs = ffi.new("ff_block_jobs *", (*parts, table))
    out_views = _views(*per_task, free)
    edge_views = _views(edge_src, edge_dst)
    offset_views = _views(new_ids, task_offsets, edge_offsets)
    out = ffi.new(
        "ff_block_out *",
        (
            *out_views, len(free), 0, size, offset_views[0], offset_views[1],
            edge_views[0] + first_edge, edge_views[1] + first_edge, offset_views[2],
        ),
    )  # fmt: skip
    result = lib.ff_build_blocks(c_jobs, routes.struct, out)
    if result == lib.FF_NO_MEMORY:
        raise MemoryError("the simulator could not allocate its scratch memory")
    if result == lib.FF_KEY_OVERFLOW:
        raise AssertionError(f"a parameter has {FIELD_LIMIT} groups or more; keys hold fewer")
    used, next_id = out.free_used, out.next_id
    # release the buffers before resizing the arrays (an exported array cannot resize)
    del out_views, edge_views, offset_views, out, views, user_views, table_views, table, parts
    del c_jobs
    del free[len(free) - used :]
    if grow:  # else every new task took a free id: next_id is where it was
        for values in per_task:
            del values[next_id:]
    del edge_src[first_edge + result :], edge_dst[first_edge + result :]
    return new_ids, task_offsets, edge_offsets


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
