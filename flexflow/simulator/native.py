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

if TYPE_CHECKING:  # context.py calls grid_overlaps: no import of the simulator at run time
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


_ERRORS = {
    lib.FF_CYCLE: "some tasks never became ready: the task graph has a cycle",
    lib.FF_NOT_CLOSED: "a re-simulated task has a successor that is not re-simulated",
}


def simulate(
    tg: GraphArrays,
    times: Times,
    t0: float,
    change: GraphChange | None = None,
    cutoff: float = math.inf,
) -> int:
    """Simulate again every task starting at or after `t0` or affected by `change`.

    `t0` = -inf simulates everything (Algorithm 1); a delta passes +inf and the change, and the
    C side finds the first moment the change can affect (Algorithm 2). `times` must already
    have an entry for every task id. Returns how many tasks were simulated; or, once a lower
    bound of the iteration's end passes `cutoff` (a device's or link's end plus the work still
    queued for it), stops there and returns 0 with `times.iteration_s` = inf, the times left
    half updated for the caller to restore: a search that only needs to know a strategy is
    slower than `cutoff` does not simulate the rest. The bounds are floating-point sums, so a
    cost within rounding of `cutoff` (a relative 1e-12 or so) may be cut too: callers leave a
    wider margin.
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
    delta = ffi.new("ff_change *", {"t0": t0, "cutoff": cutoff})
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
    if result == lib.FF_ABOVE_CUTOFF:
        times.iteration_s = math.inf
        return 0
    if result < 0:
        if result == lib.FF_NO_MEMORY:
            raise MemoryError("the simulator could not allocate its scratch memory")
        raise AssertionError(_ERRORS[result])
    times.iteration_s = tg.iteration_s(result_times.iteration_s)
    return result


class OpJobs:
    """The inputs of `build_ops`: per job (an op's block), its tasks interleaved, the forward
    task of task k at 2k and its backward at 2k + 1 (`SimContext.op_tasks`)."""

    __slots__ = ("offsets", "device", "exe", "order")
    C_ARRAYS = __slots__

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.device, self.exe, self.order = array("i"), array("d"), array("Q")

    def add(self, device: array, exe: array, order: array) -> None:
        self.device += device
        self.exe += exe
        self.order += order
        self.offsets.append(len(self.device))

    def __len__(self) -> int:
        return len(self.offsets) - 1


class EdgeJobs:
    """The inputs of `build_edges`, gathered job by job (one job per edge block)."""

    # in the order of ff_edge_jobs' arrays
    __slots__ = ("offsets", "consumer", "producer", "volume", "producer_row", "consumer_row",
                 "device", "forward", "backward", "itemsize", "grads", "transfer_key",
                 "grad_key")  # fmt: skip
    C_ARRAYS = __slots__

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.consumer, self.producer, self.volume = array("i"), array("i"), array("q")
        self.producer_row, self.consumer_row = array("i"), array("i")
        self.device, self.forward, self.backward = array("i"), array("i"), array("i")
        self.itemsize, self.grads = array("q"), array("b")
        self.transfer_key, self.grad_key = array("Q"), array("Q")

    def rows(self, devices: array, forward: array, backward: array) -> int:
        """Add an op's tasks to the task tables; returns their first row."""
        row = len(self.device)
        self.device += devices
        self.forward += forward
        self.backward += backward
        return row

    def add(
        self,
        overlaps: tuple[array, array, array],
        producer_row: int,
        consumer_row: int,
        itemsize: int,
        grads: bool,
        transfer_key: int,
        grad_key: int,
    ) -> None:
        consumer, producer, volume = overlaps
        self.consumer += consumer
        self.producer += producer
        self.volume += volume
        self.offsets.append(len(self.consumer))
        self.producer_row.append(producer_row)
        self.consumer_row.append(consumer_row)
        self.itemsize.append(itemsize)
        self.grads.append(grads)
        self.transfer_key.append(transfer_key)
        self.grad_key.append(grad_key)

    def __len__(self) -> int:
        return len(self.producer_row)


@dataclass(frozen=True, slots=True)
class SyncTemplate:
    """A template of a `SyncTable`: its id, and the most tasks and edges its parts may add
    to a sync block."""

    id: int
    max_tasks: int
    max_edges: int


class SyncTable:
    """Every template a context made (`ff_sync_table`): the parts of one op's tasks under one
    configuration that read one parameter. A sync job names a user by its template's id, so
    building a sync block copies two numbers and the user's backward task ids per user."""

    # ff_sync_table's arrays in order
    C_ARRAYS = ("template_first", "template_parts", "part_dims", "bounds_at", "bounds",
                "elements", "part_devices", "device_at", "device", "update_s", "part_tasks",
                "task_at", "task")  # fmt: skip

    def __init__(self) -> None:
        self.template_first, self.template_parts = array("i"), array("i")
        self.part_dims, self.bounds_at, self.bounds = array("i"), array("i"), array("q")
        self.elements, self.part_devices, self.device_at = array("q"), array("i"), array("i")
        self.device, self.update_s = array("i"), array("d")
        self.part_tasks, self.task_at, self.task = array("i"), array("i"), array("i")
        self._struct = None  # the C view, while no template is added

    def add(
        self,
        parts: Sequence[tuple[tuple[int, ...], int, Sequence[int], Sequence[float], Sequence[int]]],
    ) -> SyncTemplate:
        """A new template of `parts`: (bounds, elements, devices, their update times, task
        indices) each."""
        self._struct = None  # release the views: exported arrays cannot grow
        self.template_first.append(len(self.part_dims))
        self.template_parts.append(len(parts))
        max_tasks = max_edges = 0
        for bounds, elements, devices, update_s, tasks in parts:
            self.part_dims.append(len(bounds) // 2)
            self.bounds_at.append(len(self.bounds))
            self.bounds.extend(bounds)
            self.elements.append(elements)
            self.part_devices.append(len(devices))
            self.device_at.append(len(self.device))
            self.device.extend(devices)
            self.update_s.extend(update_s)
            self.part_tasks.append(len(tasks))
            self.task_at.append(len(self.task))
            self.task.extend(tasks)
            max_tasks += 2 + 2 * len(devices)
            max_edges += len(tasks) + 3 * len(devices)
        return SyncTemplate(len(self.template_first) - 1, max_tasks, max_edges)

    def struct(self):
        """The C view (`ff_sync_table *`), made again after templates are added."""
        if self._struct is None:
            views = _views(*(getattr(self, name) for name in self.C_ARRAYS))
            self._struct = (ffi.new("ff_sync_table *", tuple(views)), views)
        return self._struct[0]


class SyncJobs:
    """The inputs of `build_syncs`, gathered job by job (one job per parameter's sync block),
    user by user."""

    # ff_sync_jobs' arrays in order, then how many tasks and edges the jobs may create at most
    __slots__ = ("job_users", "job_key", "user_template", "user_tasks", "backward", "tasks",
                 "edges")  # fmt: skip
    C_ARRAYS = __slots__[:5]

    def __init__(self) -> None:
        self.job_users, self.job_key = array("i"), array("Q")
        self.user_template, self.user_tasks, self.backward = array("i"), array("i"), array("i")
        self.tasks = self.edges = 0

    def add_job(self, key: int, users: Sequence[tuple[SyncTemplate, array]]) -> None:
        """A job: `key` is its keys' parameter field; per user, its template and its backward
        task ids ("i")."""
        self.job_key.append(key)
        self.job_users.append(len(users))
        user_template, user_tasks, backward = self.user_template, self.user_tasks, self.backward
        for template, tasks in users:
            user_template.append(template.id)
            user_tasks.append(len(tasks))
            backward += tasks
            self.tasks += template.max_tasks
            self.edges += template.max_edges

    def __len__(self) -> int:
        return len(self.job_key)


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


def build_ops(
    tg: TaskArrays, free: array, jobs: OpJobs, edge_src: array, edge_dst: array
) -> Blocks:
    """Every op job's compute tasks and forward-to-backward dependencies (native/blocks.c);
    see `_build_blocks`."""
    views = _views(*(getattr(jobs, name) for name in jobs.C_ARRAYS))
    c_jobs = ffi.new("ff_op_jobs *", (len(jobs), *views))
    tasks = len(jobs.device)
    return _build_blocks(lib.ff_build_ops, c_jobs, len(jobs), tasks, tasks // 2,
                         tg, free, None, edge_src, edge_dst)  # fmt: skip


def build_edges(
    tg: TaskArrays, free: array, jobs: EdgeJobs, routes: Routes, edge_src: array, edge_dst: array
) -> Blocks:
    """Every edge job's transfers and dependencies (native/blocks.c); see `_build_blocks`."""
    views = _views(*(getattr(jobs, name) for name in jobs.C_ARRAYS))
    c_jobs = ffi.new("ff_edge_jobs *", (len(jobs), *views))
    overlaps = len(jobs.consumer)
    return _build_blocks(lib.ff_build_edges, c_jobs, len(jobs), 2 * overlaps, 4 * overlaps,
                         tg, free, routes, edge_src, edge_dst)  # fmt: skip


def build_syncs(
    tg: TaskArrays,
    free: array,
    jobs: SyncJobs,
    table: SyncTable,
    empty_set: int,
    routes: Routes,
    edge_src: array,
    edge_dst: array,
) -> Blocks:
    """Every sync job's barriers, ring transfers and updates (native/blocks.c); see
    `_build_blocks`."""
    views = _views(*(getattr(jobs, name) for name in jobs.C_ARRAYS))
    c_jobs = ffi.new("ff_sync_jobs *", (len(jobs), *views, table.struct(), empty_set))
    return _build_blocks(lib.ff_build_syncs, c_jobs, len(jobs), jobs.tasks, jobs.edges,
                         tg, free, routes, edge_src, edge_dst)  # fmt: skip


def _build_blocks(
    build, c_jobs, num_jobs: int, task_capacity: int, edge_capacity: int,
    tg: TaskArrays, free: array, routes: Routes | None, edge_src: array, edge_dst: array,
) -> Blocks:  # fmt: skip
    """Run a C block builder: new tasks take ids from the end of `free` (removed from it),
    then new ids (the per-task arrays grow); edges are appended to `edge_src`/`edge_dst`."""
    size = len(tg.exe)
    grow = max(0, task_capacity - len(free))
    per_task = (tg.exe, tg.order, tg.live, tg.res_set, tg.size_bytes, tg.res_src, tg.res_dst)
    for values in per_task:
        values.frombytes(bytes(values.itemsize * grow))
    first_edge = len(edge_src)
    room = array("i", bytes(4 * edge_capacity))
    edge_src += room
    edge_dst += room
    new_ids = array("i", bytes(4 * task_capacity))
    task_offsets = array("i", bytes(4 * (num_jobs + 1)))
    edge_offsets = array("i", bytes(4 * (num_jobs + 1)))
    # the views must outlive the call: the struct below only holds their addresses
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
    edges = build(c_jobs, ffi.NULL if routes is None else routes.struct, out)
    if edges == lib.FF_NO_MEMORY:
        raise MemoryError("the simulator could not allocate its scratch memory")
    if edges == lib.FF_KEY_OVERFLOW:
        raise AssertionError(f"a parameter has {1 << 14} groups or more; task keys hold fewer")
    used, next_id = out.free_used, out.next_id
    # release the buffers before resizing the arrays (an exported array cannot resize)
    del out_views, edge_views, offset_views, out
    del free[len(free) - used :]
    for values in per_task:
        del values[next_id:]
    del edge_src[first_edge + edges :], edge_dst[first_edge + edges :]
    return new_ids, task_offsets, edge_offsets


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
