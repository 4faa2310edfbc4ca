"""The calls into the C block builders (native/blocks.c; paper §5.1's task graph): the tables a
context and a task graph keep for them, the jobs of one build, and the call that builds the op,
edge and synchronization blocks of those jobs.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial, wraps
from typing import TYPE_CHECKING, Protocol

from flexflow._simulator import ffi, lib
from flexflow.simulator.keys import FIELD_LIMIT
from flexflow.simulator.native_arrays import c_views
from flexflow.simulator.native_overlaps import OverlapArrays

if TYPE_CHECKING:
    from flexflow.simulator.blocks import BlockTables


def _field_writer(cdata, first: str, last: str) -> Callable[..., None]:
    """A call writing the fields `first` to `last` (consecutive) of the struct `cdata`
    points to, in one `struct.pack_into`: pointers given as addresses (`_address`), int32
    fields as ints. A build used to set ~40 fields one by one from 28 views
    (`ffi.from_buffer`, each released after the call): more Python time than the C builder."""
    fields = ffi.typeof(cdata).item.fields
    names = [name for name, _ in fields]
    run = [field for _, field in fields[names.index(first) : names.index(last) + 1]]
    layout, at = "=", run[0].offset
    for field in run:
        if field.type.kind == "pointer" and ffi.sizeof(field.type) == 8:
            code = "Q"
        elif field.type.cname == "int32_t":
            code = "i"
        else:
            raise AssertionError(f"no struct code for field type {field.type.cname}")
        layout += f"{field.offset - at}x{code}"  # the alignment padding, then the field
        at = field.offset + ffi.sizeof(field.type)
    # the buffer keeps `cdata`'s memory alive
    return partial(struct.Struct(layout).pack_into, ffi.buffer(cdata), run[0].offset)


def _address(values: array) -> int:
    """Where `values`' items are now (`buffer_info`): unlike a view (`ffi.from_buffer`) it
    leaves the array free to resize, and is valid until it does, so it is taken just before
    the C call that reads it."""
    return values.buffer_info()[0]


class OpJobs:
    """The op jobs of `BlockBuilder.build`: per job (an op's block), its tasks interleaved, the
    forward task of task k at 2k and its backward at 2k + 1 (`SimContext.op_tasks`)."""

    __slots__ = ("op", "offsets", "device", "exe", "order")

    def __init__(self) -> None:
        self.op, self.offsets = array("i"), array("i", [0])
        self.device, self.exe, self.order = array("i"), array("d"), array("Q")

    def clear(self) -> None:
        del self.op[:], self.offsets[1:], self.device[:], self.exe[:], self.order[:]

    def add(self, op: int, device: array, exe: array, order: array) -> None:
        self.op.append(op)
        self.device += device
        self.exe += exe
        self.order += order
        self.offsets.append(len(self.device))

    def __len__(self) -> int:
        return len(self.op)


class _CTable:
    """A table the C block builders read through a struct (C_TYPE, made once: `struct`) of
    its size fields (`_sizes`) and the addresses of its arrays (C_ARRAYS), written again
    whenever the table grows (`_grows`): a growing array's items may move."""

    C_TYPE = ""
    C_ARRAYS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.struct = ffi.new(self.C_TYPE)
        """The C view (`C_TYPE *`)."""
        fields = ffi.typeof(self.struct).item.fields
        self._write = _field_writer(self.struct, fields[0][0], fields[-1][0])

    def _sizes(self) -> tuple[int, ...]:
        return ()

    def _write_struct(self) -> None:
        self._write(*self._sizes(), *(_address(getattr(self, n)) for n in self.C_ARRAYS))


def _grows(add: Callable) -> Callable:
    """Mark a `_CTable` method that grows its arrays: the struct is written again after it,
    even if it fails part way (the arrays may have moved), so it is always current."""

    @wraps(add)
    def grown(self, *args):
        try:
            return add(self, *args)
        finally:
            self._write_struct()

    return grown


class EdgeTable(_CTable):
    """A task graph's edges (one per op input) as the C edge builder reads them
    (`ff_edge_table`): what an edge block needs besides the two ops' configurations."""

    C_TYPE = "ff_edge_table *"
    C_ARRAYS = ("producer", "consumer", "itemsize", "grads", "transfer_key", "grad_key")

    def __init__(self) -> None:
        super().__init__()
        self.producer, self.consumer = array("i"), array("i")
        self.itemsize, self.grads = array("q"), array("b")
        self.transfer_key, self.grad_key = array("Q"), array("Q")
        self._write_struct()

    def _sizes(self) -> tuple[int, ...]:
        return (len(self.producer),)

    @_grows
    def add(
        self, producer: int, consumer: int, itemsize: int, grads: bool, transfer_key: int,
        grad_key: int,
    ) -> int:  # fmt: skip
        """A new edge (producer -1: a model input); returns its number."""
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
        super().__init__()
        self.at, self.count = array("i"), array("i")
        self.consumer, self.producer, self.volume = array("i"), array("i"), array("q")
        self._write_struct()

    def _sizes(self) -> tuple[int, ...]:
        return (len(self.at),)

    @_grows
    def add(self, overlaps: OverlapArrays) -> int:
        """A new set of overlaps (three columns, `grid_overlap_arrays`); returns its number."""
        consumer, producer, volume = overlaps
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

    def clear(self) -> None:
        del self.edge[:], self.overlaps[:]
        self.count = 0

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
        super().__init__()
        self.template_first, self.template_parts = array("i"), array("i")
        self.part_dims, self.bounds_at, self.bounds = array("i"), array("i"), array("q")
        self.elements, self.part_devices, self.device_at = array("q"), array("i"), array("i")
        self.device, self.update_s = array("i"), array("d")
        self.part_tasks, self.task_at, self.task = array("i"), array("i"), array("i")
        self._write_struct()

    @_grows
    def add(
        self,
        parts: Sequence[tuple[tuple[int, ...], int, Sequence[int], Sequence[float], Sequence[int]]],
    ) -> SyncTemplate:
        """A new template of `parts`: (bounds, elements, devices, their update times, task
        indices) each."""
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

    def clear(self) -> None:
        del self.param[:], self.key[:]
        self.tasks = self.edges = 0

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
job's range of the edges it appended (offsets from where they start). The builder's scratch,
longer than that: read them before the next build."""


class BlockBuilder:
    """The calls of one task graph into the C block builders (native/blocks.c). A delta
    builds a few blocks, so a build's Python work is kept near the C builder's: the structs
    are made once, the fields that stay (the routes, the tables' structs, the arrays that
    never resize) set once, the others written by `_field_writer` on every call; the jobs
    and the outputs are reused."""

    def __init__(
        self, routes: Routes, empty_set: int, tables: BlockTables, edge_table: EdgeTable,
        pool: OverlapPool, templates: SyncTable,
    ) -> None:  # fmt: skip
        self._routes, self._tables = routes, tables
        self.ops, self.edges, self.syncs = OpJobs(), EdgeJobs(), SyncJobs()
        """The jobs of the next build, filled by the caller after `clear_jobs`."""
        ops, edges = ffi.new("ff_op_jobs *"), ffi.new("ff_edge_jobs *")
        syncs, table = ffi.new("ff_sync_jobs *"), ffi.new("ff_op_table *")
        # the tables' structs stay, only their fields are written again (`_CTable`)
        edges.table, edges.pool = edge_table.struct, pool.struct
        syncs.templates = templates.struct
        # these arrays never resize (`BlockTables`): views for good, which also forbid it
        self._views = c_views(tables.users_at, tables.user_op, tables.user_template, tables.op_at)
        syncs.users_at, syncs.user_op, syncs.user_template, table.op_at = self._views
        syncs.empty_set = empty_set
        self._jobs = ffi.new("ff_block_jobs *", (ops, edges, syncs, table))
        self._out = ffi.new("ff_block_out *")
        self._write_ops = _field_writer(ops, "num_jobs", "order")
        self._write_edges = _field_writer(edges, "num_jobs", "overlaps")
        self._write_syncs = _field_writer(syncs, "num_jobs", "key")
        self._write_table = _field_writer(table, "ids", "size")
        self._write_out = _field_writer(self._out, "exe", "edge_offsets")
        self._new_ids, self._task_offsets, self._edge_offsets = array("i"), array("i"), array("i")

    def clear_jobs(self) -> tuple[OpJobs, EdgeJobs, SyncJobs]:
        """The jobs of the next build, emptied."""
        self.ops.clear()
        self.edges.clear()
        self.syncs.clear()
        return self.ops, self.edges, self.syncs

    def build(self, tg: TaskArrays, free: array, edge_src: array, edge_dst: array) -> Blocks:
        """Every op, edge and sync job's block in one C call: new tasks take ids from the end
        of `free` (removed from it), then new ids (the per-task arrays grow); edges are
        appended to `edge_src`/`edge_dst`; the op jobs' tasks are appended to the op table.
        Jobs are numbered ops, then edges, then syncs."""
        ops, edges, syncs, tables = self.ops, self.edges, self.syncs, self._tables
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
        if len(self._new_ids) < task_capacity:
            self._new_ids = array("i", bytes(4 * task_capacity))
        if len(self._task_offsets) < num_jobs + 1:
            self._task_offsets = array("i", bytes(4 * (num_jobs + 1)))
            self._edge_offsets = array("i", bytes(4 * (num_jobs + 1)))
        new_ids, task_offsets, edge_offsets = self._new_ids, self._task_offsets, self._edge_offsets
        # the addresses of the arrays resized above (`_address`, inlined: a build takes 28),
        # taken now: none resizes until the C call returns
        self._write_ops(
            num_ops, ops.op.buffer_info()[0], ops.offsets.buffer_info()[0],
            ops.device.buffer_info()[0], ops.exe.buffer_info()[0], ops.order.buffer_info()[0],
        )  # fmt: skip
        self._write_edges(num_edges, edges.edge.buffer_info()[0], edges.overlaps.buffer_info()[0])
        self._write_syncs(num_syncs, syncs.param.buffer_info()[0], syncs.key.buffer_info()[0])
        self._write_table(tables.ids.buffer_info()[0], tables.device.buffer_info()[0], table_size)
        self._write_out(
            tg.exe.buffer_info()[0], tg.order.buffer_info()[0], tg.live.buffer_info()[0],
            tg.res_set.buffer_info()[0], tg.size_bytes.buffer_info()[0],
            tg.res_src.buffer_info()[0], tg.res_dst.buffer_info()[0], free.buffer_info()[0],
            len(free), 0, size, new_ids.buffer_info()[0], task_offsets.buffer_info()[0],
            edge_src.buffer_info()[0] + 4 * first_edge, edge_dst.buffer_info()[0] + 4 * first_edge,
            edge_offsets.buffer_info()[0],
        )  # fmt: skip
        out = self._out
        result = lib.ff_build_blocks(self._jobs, self._routes.struct, out)
        if result < 0:
            if result == lib.FF_NO_MEMORY:
                raise MemoryError("the simulator could not allocate its scratch memory")
            raise AssertionError(f"a parameter has {FIELD_LIMIT} groups or more; keys hold fewer")
        del free[len(free) - out.free_used :]
        if grow > 0:  # else every new task took a free id: next_id is where it was
            next_id = out.next_id
            for values in per_task:
                del values[next_id:]
        del edge_src[first_edge + result :], edge_dst[first_edge + result :]
        return new_ids, task_offsets, edge_offsets
