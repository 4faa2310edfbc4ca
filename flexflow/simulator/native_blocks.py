"""The calls into the C block builders (native/blocks.c; paper §5.1's task graph): the tables a
context and a task graph keep for them, the jobs of one build, and the call that builds the op,
edge and synchronization blocks of those jobs.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from flexflow._simulator import ffi, lib
from flexflow.simulator.keys import FIELD_LIMIT
from flexflow.simulator.native_arrays import c_views
from flexflow.simulator.native_overlaps import OverlapArrays

if TYPE_CHECKING:
    from flexflow.simulator.blocks import BlockTables

from_buffer = ffi.from_buffer
_I8, _I32, _I64, _U64, _F64 = (
    ffi.typeof(f"{name}[]") for name in ("int8_t", "int32_t", "int64_t", "uint64_t", "double")
)


class OpJobs:
    """The op jobs of `BlockBuilder.build`: per job (an op's block), its tasks interleaved, the
    forward task of task k at 2k and its backward at 2k + 1 (`SimContext.op_tasks`)."""

    __slots__ = ("op", "offsets", "device", "exe", "order")

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
            views = c_views(*(getattr(self, name) for name in self.C_ARRAYS))
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
    """The edge jobs of `BlockBuilder.build` (one job per edge block): its edge and overlap set."""

    __slots__ = ("edge", "overlaps", "count")

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
    """The sync jobs of `BlockBuilder.build` (one job per parameter's sync block)."""

    __slots__ = ("param", "key", "tasks", "edges")

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
        self._views = c_views(*tables)
        self.struct = ffi.new("ff_routes *", (num_devices, *self._views))


Blocks = tuple[array, array, array]
"""What a block builder returns: the new task ids, each job's range of them (offsets), each
job's range of the edges it appended (offsets from where they start)."""


class BlockBuilder:
    """The calls of one task graph into the C block builders (native/blocks.c): its structs
    are made once and their fields pointed at the arrays on every call, since a delta builds
    a few blocks and making the structs anew took as long as the builder itself."""

    def __init__(self, routes: Routes, empty_set: int) -> None:
        self._routes = routes
        self._ops = ffi.new("ff_op_jobs *")
        self._edges = ffi.new("ff_edge_jobs *")
        self._syncs = ffi.new("ff_sync_jobs *")
        self._syncs.empty_set = empty_set
        self._table = ffi.new("ff_op_table *")
        self._jobs = ffi.new("ff_block_jobs *", (self._ops, self._edges, self._syncs, self._table))
        self._out = ffi.new("ff_block_out *")

    def build(
        self,
        tg: TaskArrays,
        free: array,
        ops: OpJobs,
        edges: EdgeJobs,
        syncs: SyncJobs,
        tables: BlockTables,
        edge_table: EdgeTable,
        pool: OverlapPool,
        templates: SyncTable,
        edge_src: array,
        edge_dst: array,
    ) -> Blocks:
        """Every op, edge and sync job's block in one C call: new tasks take ids from the end
        of `free` (removed from it), then new ids (the per-task arrays grow); edges are
        appended to `edge_src`/`edge_dst`; the op jobs' tasks are appended to `tables`' op
        table. Jobs are numbered ops, then edges, then syncs."""
        num_ops, num_edges, num_syncs = len(ops.op), len(edges.edge), len(syncs.param)
        op_tasks = len(ops.device)
        task_capacity = op_tasks + 2 * edges.count + syncs.tasks
        edge_capacity = op_tasks // 2 + 4 * edges.count + syncs.edges
        num_jobs = num_ops + num_edges + num_syncs
        size = len(tg.exe)
        grow = task_capacity - len(free)
        per_task = (tg.exe, tg.order, tg.live, tg.res_set, tg.size_bytes, tg.res_src, tg.res_dst)
        if grow > 0:
            for values in per_task:
                values.frombytes(bytes(values.itemsize * grow))
        first_edge = len(edge_src)
        room = bytes(4 * edge_capacity)
        edge_src.frombytes(room)
        edge_dst.frombytes(room)
        table_size = tables.grow(op_tasks)
        new_ids = array("i", bytes(4 * task_capacity))
        task_offsets = array("i", bytes(4 * (num_jobs + 1)))
        edge_offsets = array("i", bytes(4 * (num_jobs + 1)))
        # the views must outlive the call: the structs only hold their addresses
        views = [
            from_buffer(_I32, ops.op), from_buffer(_I32, ops.offsets),
            from_buffer(_I32, ops.device), from_buffer(_F64, ops.exe),
            from_buffer(_U64, ops.order), from_buffer(_I32, edges.edge),
            from_buffer(_I32, edges.overlaps), from_buffer(_I32, syncs.param),
            from_buffer(_U64, syncs.key), from_buffer(_I32, tables.users_at),
            from_buffer(_I32, tables.user_op), from_buffer(_I32, tables.user_template),
            from_buffer(_I32, tables.op_at), from_buffer(_I32, tables.ids),
            from_buffer(_I32, tables.device), from_buffer(_F64, tg.exe),
            from_buffer(_U64, tg.order), from_buffer(_I8, tg.live),
            from_buffer(_I32, tg.res_set), from_buffer(_I64, tg.size_bytes),
            from_buffer(_I32, tg.res_src), from_buffer(_I32, tg.res_dst),
            from_buffer(_I32, free), from_buffer(_I32, new_ids),
            from_buffer(_I32, task_offsets), from_buffer(_I32, edge_offsets),
            from_buffer(_I32, edge_src), from_buffer(_I32, edge_dst),
        ]  # fmt: skip
        c = self._ops
        c.num_jobs, c.op, c.task_offsets, c.device, c.exe, c.order = num_ops, *views[0:5]
        c = self._edges
        c.num_jobs, c.edge, c.overlaps = num_edges, views[5], views[6]
        c.table, c.pool = edge_table.struct(), pool.struct()
        c = self._syncs
        c.num_jobs, c.param, c.key = num_syncs, views[7], views[8]
        c.users_at, c.user_op, c.user_template = views[9:12]
        c.templates = templates.struct()
        c = self._table
        c.op_at, c.ids, c.device, c.size = *views[12:15], table_size
        c = self._out
        c.exe, c.order, c.live, c.resource_set, c.size_bytes, c.src, c.dst = views[15:22]
        c.free_ids, c.num_free, c.free_used, c.next_id = views[22], len(free), 0, size
        c.new_ids, c.task_offsets, c.edge_offsets = views[23:26]
        c.edge_src, c.edge_dst = views[26] + first_edge, views[27] + first_edge
        result = lib.ff_build_blocks(self._jobs, self._routes.struct, c)
        if result == lib.FF_NO_MEMORY:
            raise MemoryError("the simulator could not allocate its scratch memory")
        if result == lib.FF_KEY_OVERFLOW:
            raise AssertionError(f"a parameter has {FIELD_LIMIT} groups or more; keys hold fewer")
        used, next_id = c.free_used, c.next_id
        # release the buffers before resizing the arrays (an exported array cannot resize)
        for view in views:
            ffi.release(view)
        del free[len(free) - used :]
        if grow > 0:  # else every new task took a free id: next_id is where it was
            for values in per_task:
                del values[next_id:]
        del edge_src[first_edge + result :], edge_dst[first_edge + result :]
        return new_ids, task_offsets, edge_offsets
