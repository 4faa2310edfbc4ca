"""The task graph of one training iteration (paper §5.1, Table 2), built from (operator graph, machine, strategy).

Tasks and what they model:
- compute: a forward and a backward task per task of each op's configuration, on its device,
  timed by the cost model. Backward depends on its own forward (it needs the activations).
- communication: for every tensor edge, every producer tile that overlaps a consumer tile's
  input region gives a dependency when both are on one device, else a transfer of the overlap
  (and, for float tensors, the reverse transfer of its gradient in the backward pass). A
  transfer is ONE task that occupies every link of its route at once (cut-through, as NVLink,
  PCIe and InfiniBand forward data), for latency + bytes / bottleneck bandwidth; so transfers
  sharing any link of their routes queue behind each other.
- parameter synchronization: the tasks of all ops using a parameter are grouped by the weight
  region they read; each group whose region lives on several devices all-reduces its gradient
  around a ring of those devices (2(r-1)/r of the region's bytes over each ring hop, so the
  bytes moved are the 2(r-1) x size of data parallelism), then every holder updates its copy.
  Groups on one device just update. Zero-time barrier tasks join the group's backward tasks to
  the ring and the ring to the updates.
- batch norm split in the sample dimension adds the all-reduce of its per-channel statistics
  to each forward and backward task's time (a few KB: latency-bound), not as separate tasks.

Model inputs are assumed resident wherever their consumers run (data loading is not modeled).

The graph is kept in blocks (an op's compute tasks, an edge's transfers, a parameter's sync) so
that changing one op's configuration rebuilds only the blocks that op touches: that is what
delta simulation (Algorithm 2) updates. Every task has a canonical `key` independent of build
order, used to break ties between tasks ready at the same time on one device, so a graph
updated by deltas and a graph built afresh schedule identically.

Storage is shaped for the C event loop (native/simulator.c), which reads it in place: per-task
values in parallel `array`s indexed by task id (ids of removed tasks are reused), the devices
and links of a task as one id into the context's `ResourceSets`, and the dependencies as two
edge arrays (`edge_src[e] -> edge_dst[e]`). A block's edges are created together, so they are
one contiguous range of those arrays, and every edge lives exactly as long as its block (each
edge touches a task of the block or of the op whose change rebuilds it). Rebuilding a block
marks its range removed (source -1) instead of editing adjacency lists; the arrays are compacted
when half of them is removed. So a delta changes only the entries of the blocks it rebuilds.

The blocks are built in C (native/blocks.c), all blocks of a build or a delta in one call (the
op blocks first, then the edge and sync blocks, which read the ops' tasks from the task graph's
op table, flexflow/simulator/blocks.py): the edge and sync blocks hold nearly all tasks (a
transfer per overlapping pair of tiles on two devices, a ring per replicated weight region),
and a delta of an unrolled layer rebuilds dozens of ops. What an op block takes, and an op's
share of a sync block, depend only on its configuration, so they are made once per
configuration (`SimContext.op_tasks`, `SimContext.op_sync_parts`);
flexflow/simulator/reference.py specifies every kind. A task's
name, kind and resources are read back from its key and resource set when asked for (traces,
exports; flexflow/simulator/task_views.py), never stored: a search builds millions of tasks
and names none of them.
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from flexflow.fusion import cpu_devices, joins_previous
from flexflow.ops.base import Region
from flexflow.simulator.blocks import BlockTables
from flexflow.simulator.context import SimContext
from flexflow.simulator.keys import (
    A_LIMIT,
    A_SHIFT,
    B_SHIFT,
    BWD_KEY,
    FIELD_LIMIT,
    FWD_KEY,
    GRAD_XFER_KEY,
    KIND_SHIFT,
    UPDATE_KEY,
    XFER_KEY,
)
from flexflow.simulator.native_blocks import EdgeJobs, EdgeTable, OpJobs, SyncJobs, build_blocks
from flexflow.simulator.native_loop import EdgeIndex, load_bound, resource_load, set_flags
from flexflow.simulator.task_views import Block, TaskGraphViews
from flexflow.strategy import ParallelConfig, Strategy

_NO_OVERLAPS = (-1, 0)  # an edge job's overlap set for a model input (`EdgeJobs.add`)
_MANY_OPS_MEMO = 4096
"""How many changes of several ops `TaskGraph.affected_blocks` remembers (layer moves repeat a
few tuples; path moves draw many, so the memo is bounded)."""


@dataclass(frozen=True, slots=True)
class GraphChange:
    """What `TaskGraph.set_config` changed, which is what delta simulation starts from."""

    removed: array  # ids of removed tasks (new tasks may reuse some)
    added: array  # ids of new tasks
    touched: array  # the targets of removed edges: tasks that lost a predecessor (some now free)
    first_new_edge: int = 0
    """Where the rebuilt blocks' edges start: every edge into a new task is at or after it
    (an edge lives in the block of the op whose change rebuilds it)."""


class _Load:
    """What `TaskGraph.load_bound` keeps of one graph (until it changes): each device's and
    link's load, the tasks a change of each op would remove, and scratch for the C call."""

    __slots__ = ("resources", "removed", "scratch")

    def __init__(self, resources: array) -> None:
        self.resources = resources
        self.removed: dict[int, array] = {}
        self.scratch = array("d", resources)


@dataclass(slots=True)
class _Undo:
    """What `TaskGraph.set_config` replaced: enough to restore the graph exactly."""

    configs: tuple[tuple[int, ParallelConfig], ...]  # (op, its configuration before)
    size: int  # task ids before the change
    free: array  # the free ids before the change
    edge_count: int
    removed_edges: int
    blocks: tuple[int, ...]  # the rebuilt blocks
    block_tasks: list[array]  # each one's task ids before
    edge_ranges: array  # each one's edges before: lo, hi ("i")
    tasks: list[tuple]  # per rebuilt op: (op, forward, backward ids, templates, op_at, op_count)
    table_size: int  # the op table's entries
    load: _Load | None  # the graph's `load_bound` view before the change
    splits: Counter  # `TaskGraph._splits` before the change
    removed: array = field(default_factory=lambda: array("i"))
    added: array = field(default_factory=lambda: array("i"))


class TaskGraph(TaskGraphViews):
    """Tasks in parallel arrays indexed by task id; ids of removed tasks are reused."""

    def __init__(self, context: SimContext, strategy: Strategy) -> None:
        self.context = context
        graph, machine = context.graph, context.machine
        self.graph, self.machine = graph, machine
        self._cpu_devices = cpu_devices([device.kind for device in machine.devices])
        self.num_devices = machine.num_devices
        self.num_resources = context.num_resources
        self.resource_sets = context.resource_sets
        self.configs: list[ParallelConfig] = list(strategy.configs)
        self._splits: Counter = Counter(
            context.native_split(op, config) for op, config in enumerate(self.configs)
        )
        """How many ops have each `SimContext.native_split` (None: none): see `native`."""
        # per task; the C event loop reads exe, order, live and res_set
        self.exe = array("d")
        self.order = array("Q")  # task_key, plus DEVICE_TASK if it holds a device or link
        self.live = array("b")
        self.res_set = array("i")  # id into resource_sets: its devices and links
        self.size_bytes = array("q")  # bytes a transfer moves, else 0
        self.res_src = array("i")  # source device of a transfer, else -1
        self.res_dst = array("i")  # destination device of a transfer, else -1
        self._free = array("i")  # ids of removed tasks, reused last first
        self._undo: _Undo | None = None  # how to take back the last set_config
        self._ops_blocks: dict[tuple[int, ...], tuple[int, ...]] = {}  # affected_blocks
        self._load: _Load | None = None  # `load_bound`'s view of this graph, made when asked
        self._work_s: float | None = None  # `work_s` of the graph as it is, once asked
        # dependencies: edge_src[e] -> edge_dst[e], source -1 once removed
        self.edge_src = array("i")
        self.edge_dst = array("i")
        self._removed_edges = 0
        self.edge_index = EdgeIndex()  # the edges by source and target, for the simulator
        # structure
        self.fwd: list[array] = [array("i") for _ in graph.ops]  # task ids, by task index
        self.bwd: list[array] = [array("i") for _ in graph.ops]
        self._users: dict[int, list[int]] = defaultdict(list)  # parameter -> ops using it
        for node in graph.ops:
            for pid in dict.fromkeys(node.weights):
                self._users[pid].append(node.id)
        # the ops' tasks and the parameters' users, where the C builders read them
        self._tables = BlockTables(
            [context.op_parameters(node.id) for node in graph.ops], len(graph.parameters)
        )
        self._consumers: dict[int, list[tuple[int, int]]] = defaultdict(list)
        # per edge block, in the edge table (what the C builder reads of it): the producer
        # (-1: a model input, no block content), the consumer and the input
        self._edge_table = EdgeTable()
        self._edges: list[tuple[int, int, int]] = []
        for node in graph.ops:
            for j, tid in enumerate(node.inputs):
                tensor = graph.tensor(tid)
                producer = -1 if tensor.producer is None else tensor.producer
                if producer >= 0:
                    self._consumers[producer].append((node.id, j))
                fields = node.id << A_SHIFT | j << B_SHIFT
                dtype = tensor.spec.dtype
                self._edge_table.add(
                    producer, node.id, dtype.itemsize, dtype.is_float,
                    XFER_KEY << KIND_SHIFT | fields, GRAD_XFER_KEY << KIND_SHIFT | fields,
                )  # fmt: skip
                self._edges.append((producer, node.id, j))
        if len(graph.ops) >= A_LIMIT or len(graph.parameters) >= A_LIMIT:
            raise AssertionError(f"task keys hold at most {A_LIMIT - 1} ops and parameters")
        if self.num_devices >= FIELD_LIMIT or any(len(n.inputs) >= FIELD_LIMIT for n in graph.ops):
            raise AssertionError(f"task keys hold at most {FIELD_LIMIT - 1} devices and inputs")
        # the blocks by number: the op blocks, then the edge blocks (one per op input, in op
        # order), then the sync blocks; a delta's blocks are numbers, their tasks and edges
        # found by indexing, not by hashing block names
        self._syncs = list(self._users)  # the parameter of each sync block
        self._first_edge = len(graph.ops)  # the number of the first edge block
        self._first_sync = self._first_edge + len(self._edges)
        self._block_names: tuple[Block, ...] = (
            *(("op", node.id) for node in graph.ops),
            *(("edge", c, j) for _, c, j in self._edges),
            *(("sync", pid) for pid in self._syncs),
        )
        self._block_numbers = {block: b for b, block in enumerate(self._block_names)}
        self._block_tasks = [array("i") for _ in self._block_names]  # each block's task ids
        # block b's edges: edge_src[lo:hi] with lo, hi at 2b and 2b + 1
        self._block_ranges = array("i", bytes(8 * len(self._block_names)))
        self._build(range(len(self._block_names)))
        self.runtime_s = context.runtime_s(self.configs)
        """The runtime's CPU time per iteration (`SimContext.runtime_s`): see `iteration_s`."""

    # ---- queries -------------------------------------------------------------------------------
    @property
    def native(self) -> bool:
        """Whether every op shares one `SimContext.native_split`: the whole step runs as one C
        call per device, and the ops' tasks are timed as the profile measured them inside it."""
        return _native(self._splits)

    def iteration_s(self, makespan_s: float) -> float:
        """An iteration's time from its timeline's end: under the runtime's per-task cost
        (`runtime_s` > 0, CPU processors), also no less than the cores' whole work, the compute
        and update tasks' times plus the runtime's, over `SimContext.cores` (a strategy that
        keeps every processor busy leaves the runtime no idle core). Summed exactly (fsum), so
        a graph updated by deltas and one built afresh agree to the last bit."""
        return max(makespan_s, self.cores_bound_s())

    def cores_bound_s(self) -> float:
        """The iteration's lower bound under the runtime's per-task cost (0 without it): the
        cores' whole work, the compute and update tasks' times plus the runtime's, over
        `SimContext.cores`. Known once the graph is built, before it is simulated: a delta
        whose bound passes its cutoff is not simulated at all (`DeltaSimulator.change_many`)."""
        if self.runtime_s <= 0:
            return 0.0
        return (self.work_s() + self.runtime_s) / self.context.cores

    def work_s(self) -> float:
        """The live compute and update tasks' times, summed exactly (once per graph: a delta
        asks before and after its simulation). Read through numpy views of the arrays,
        dropped before returning (an array exporting its buffer cannot grow): a search asks
        after every proposal, and a loop over ResNet-101's tasks in Python took a fifth of a
        proposal."""
        if self._work_s is None:
            order = np.frombuffer(self.order, dtype=np.uint64)
            kinds = (order >> np.uint64(KIND_SHIFT)) & np.uint64(7)
            work = _IS_WORK[kinds] & np.frombuffer(self.live, dtype=np.bool_)  # live: 0 or 1
            self._work_s = math.fsum(np.frombuffer(self.exe, dtype=np.float64)[work])
        return self._work_s

    def live_tasks(self) -> Iterable[int]:
        return itertools.compress(range(len(self.exe)), self.live)

    # ---- delta ---------------------------------------------------------------------------------
    def load_bound(self, changes: Sequence[tuple[int, ParallelConfig]]) -> float:
        """A lower bound of the makespan after `set_configs(changes)`, found without making
        the change: the busiest device's or link's load once the blocks the change rebuilds
        lose their tasks and the changed ops gain their compute tasks under the new
        configurations (the rebuilt transfers, all-reduces and updates only add load). A
        search rejects most proposals that overload a device this way before building
        anything (AlexNet's chains from random strategies on 4 GPUs: 43% of them)."""
        native = _native(self._splits_after(changes))
        if native != self.native:  # every op's tasks change: no bound from the changed ops
            return 0.0
        load = self._load
        if load is None:
            load = self._load = _Load(resource_load(self))
        fused = self.context.fused_launches  # then the lowest time an op's tasks may take
        removed, devices, exe = array("i"), array("i"), array("d")
        # an op given two configurations takes the last; blocks two ops rebuild are removed
        # twice, which only lowers the bound
        for op, config in dict(changes).items():
            removed += self._removed_by(load, op)
            tasks = self.context.op_tasks(op, config, fused, native)
            devices += tasks.devices
            exe += tasks.exe
        return load_bound(self, load.resources, removed, devices, exe, load.scratch)

    def _removed_by(self, load: _Load, op: int) -> array:
        """The tasks a change of `op` removes from this graph (memoized in its `_Load`: a
        scan tries every configuration of one op in turn)."""
        removed = load.removed.get(op)
        if removed is None:
            removed = load.removed[op] = array("i")
            for block in self.affected_blocks((op,)):
                removed += self._block_tasks[block]
        return removed

    def _splits_after(self, changes: Sequence[tuple[int, ParallelConfig]]) -> Counter:
        """`_splits` once `changes` are made (a new count; this one stays)."""
        if not self.context.prices_native_steps:  # every op's split is None, now and after
            return self._splits
        splits = self._splits.copy()
        split = self.context.native_split
        for op, config in dict(changes).items():  # an op given two configurations takes the last
            splits[split(op, self.configs[op])] -= 1
            splits[split(op, config)] += 1
        return +splits  # without the zero counts

    def affected_blocks(self, ops: Iterable[int]) -> tuple[int, ...]:
        """The blocks (numbers, ascending: ops, then edges, then syncs, the builder's order) a
        change of `ops` rebuilds: their own; with fused launches also those of the op after
        each, whose task times depend on whether it still fuses with it. Memoized (the blocks
        depend only on the graph): per op, and per tuple of ops up to _MANY_OPS_MEMO of them
        (a chain moves each unrolled layer again and again)."""
        ops = tuple(ops)
        blocks = self._ops_blocks.get(ops)
        if blocks is None:
            if len(ops) == 1:
                blocks = self._affected_blocks(ops[0])
            else:
                blocks = tuple(sorted({b for op in ops for b in self.affected_blocks((op,))}))
            if len(self._ops_blocks) < _MANY_OPS_MEMO or len(ops) == 1:
                self._ops_blocks[ops] = blocks
        return blocks

    def _affected_blocks(self, op: int) -> tuple[int, ...]:
        changed = [op]
        if self.context.fused_launches and op < len(self.graph.ops) - 1:
            changed.append(op + 1)
        number = self._block_numbers
        blocks: set[int] = set()
        for o in changed:
            node = self.graph.ops[o]
            blocks.add(o)
            blocks.update(number[("edge", o, j)] for j in range(len(node.inputs)))
            blocks.update(number[("edge", c, j)] for c, j in self._consumers[o])
            blocks.update(number[("sync", pid)] for pid in node.weights)
        return tuple(sorted(blocks))

    def set_config(self, op: int, config: ParallelConfig) -> GraphChange:
        """Give `op` a new configuration, rebuilding only its blocks. Until the next call,
        `undo` can take the change back: the removed tasks keep their ids and data (new tasks
        take free ids of earlier changes, or new ones) and only become free at that call."""
        return self.set_configs(((op, config),))

    def set_configs(self, changes: Sequence[tuple[int, ParallelConfig]]) -> GraphChange:
        """`set_config` for several ops at once (a layer's unrolled steps): every block any
        of them affects is rebuilt once, and the change is one delta (and one `undo`)."""
        self._commit()
        blocks = self.affected_blocks(op for op, _ in changes)
        splits = self._splits_after(changes)
        if _native(splits) != self.native:  # every op's tasks change their times: rebuild all
            blocks = tuple(range(len(self._block_names)))
        block_tasks, ranges = self._block_tasks, self._block_ranges
        edge_ranges = array("i", [ranges[k] for b in blocks for k in (2 * b, 2 * b + 1)])
        tables = self._tables
        undo = _Undo(
            tuple((op, self.configs[op]) for op, _ in changes),
            len(self.exe),
            array("i", self._free),
            len(self.edge_src),
            self._removed_edges,
            blocks,
            [block_tasks[b] for b in blocks],
            edge_ranges,
            [
                (
                    o,
                    self.fwd[o],
                    self.bwd[o],
                    tables.templates[o],
                    tables.op_at[o],
                    tables.op_count[o],
                )
                for o in itertools.takewhile(self._first_edge.__gt__, blocks)  # the op blocks
            ],
            len(tables.ids),
            self._load,
            self._splits,
        )
        self._load = None
        self._work_s = None
        self._splits = splits
        for op, config in changes:
            self.configs[op] = config
        removed, touched = array("i"), array("i")
        edge_dst = self.edge_dst
        for tasks in undo.block_tasks:
            removed += tasks
        for k in range(0, len(edge_ranges), 2):
            lo, hi = edge_ranges[k], edge_ranges[k + 1]
            touched += edge_dst[lo:hi]
            self._removed_edges += hi - lo
        self.edge_index.remove(self.edge_src, edge_ranges)  # sources -1, kept in the index
        set_flags(self.live, removed, 0)
        first_new_edge = len(self.edge_src)
        added = self._build(blocks)
        undo.removed, undo.added = removed, added
        self.runtime_s = self.context.runtime_s(self.configs)
        self._undo = undo
        return GraphChange(removed, added, touched, first_new_edge)

    def undo(self) -> None:
        """Take back the last `set_config` (the graph is then as before it, task ids too)."""
        undo, self._undo = self._undo, None
        if undo is None:
            raise AssertionError("TaskGraph.undo() without a change to take back")
        set_flags(self.live, undo.added, 0)
        set_flags(self.live, undo.removed, 1)
        for per_task in self._per_task():
            del per_task[undo.size :]
        self._free = undo.free
        del self.edge_src[undo.edge_count :], self.edge_dst[undo.edge_count :]
        self.edge_index.truncate(undo.edge_count)
        self.edge_index.restore(self.edge_src, undo.edge_ranges)
        self._removed_edges = undo.removed_edges
        block_tasks, ranges, old_ranges = self._block_tasks, self._block_ranges, undo.edge_ranges
        for i, b in enumerate(undo.blocks):
            block_tasks[b] = undo.block_tasks[i]
            ranges[2 * b], ranges[2 * b + 1] = old_ranges[2 * i], old_ranges[2 * i + 1]
        tables = self._tables
        for o, fwd, bwd, templates, at, count in undo.tasks:
            self.fwd[o], self.bwd[o] = fwd, bwd
            tables.use_templates(o, templates)
            tables.op_at[o] = at
            tables.set_count(o, count)
        tables.truncate(undo.table_size)
        for op, config in undo.configs:
            self.configs[op] = config
        self.runtime_s = self.context.runtime_s(self.configs)  # memoized: the count before
        self._load = undo.load
        self._work_s = None
        self._splits = undo.splits

    def _per_task(self) -> tuple:
        """The containers with an entry per task id."""
        return (self.exe, self.order, self.live, self.res_set, self.size_bytes, self.res_src,
                self.res_dst)  # fmt: skip

    def _commit(self) -> None:
        """The last change stays: its removed tasks' ids become free (reused first to last)."""
        undo, self._undo = self._undo, None
        if undo is not None:
            self._free.extend(reversed(undo.removed))
        if 2 * self._removed_edges > len(self.edge_src):
            self._compact_edges()
        if self._tables.needs_compacting():
            self._tables.compact()

    def _compact_edges(self) -> None:
        """Drop removed edges: copy each block's range into fresh arrays."""
        old_src, old_dst, ranges = self.edge_src, self.edge_dst, self._block_ranges
        src, dst = array("i"), array("i")
        for k in range(0, len(ranges), 2):
            lo, hi = ranges[k], ranges[k + 1]
            ranges[k], ranges[k + 1] = len(src), len(src) + hi - lo
            src += old_src[lo:hi]
            dst += old_dst[lo:hi]
        self.edge_src, self.edge_dst = src, dst
        self._removed_edges = 0
        self.edge_index.truncate(0)
        self.edge_index.extend(src, dst, self.size)

    # ---- building blocks -------------------------------------------------------------------------
    def _build(self, blocks: Sequence[int]) -> array:
        """Build `blocks` (numbers, ascending) in one C call (native/blocks.c); returns their
        new tasks. An op block is a forward and a
        backward task per task of the op's configuration (`SimContext.op_tasks`), the
        backward after the forward (it needs the activations). An edge block: for every
        producer tile overlapping a consumer tile's input region, dependencies on one device,
        else a transfer (and its gradient's transfer back). A sync block merges the users'
        tasks reading one weight region into a group: the ring all-reduce of its gradient
        where several devices hold it (2(r-1)/r of the region over each hop), then every
        holder's update (the optimizer's time for the region)."""
        context, configs, tables = self.context, self.configs, self._tables
        ops, edges, syncs = OpJobs(), EdgeJobs(), SyncJobs()
        fusing, native = context.fused_launches, self.native
        overlap_set = context.overlap_set
        first_edge_block, first_sync_block = self._first_edge, self._first_sync
        for b in blocks:  # ascending: the builder's order, ops, then edges, then syncs
            if b < first_edge_block:
                fused = fusing and joins_previous(
                    self.graph, configs, _TaskTiles(self), b, self._cpu_devices, context.fusion
                )
                config = configs[b]
                tasks = context.op_tasks(b, config, fused, native)
                ops.add(b, tasks.devices, tasks.exe, tasks.order)
                tables.set_count(b, len(tasks.devices))
                tables.use_templates(b, context.op_sync_parts(b, config))
            elif b < first_sync_block:
                edge = b - first_edge_block
                producer, c, j = self._edges[edge]
                if producer < 0:  # a model input: no block content
                    edges.add(edge, _NO_OVERLAPS)
                    continue
                edges.add(edge, overlap_set(c, j, configs[producer].degrees, configs[c].degrees))
            else:
                pid = self._syncs[b - first_sync_block]
                syncs.add(pid, pid << A_SHIFT, tables.max_tasks[pid], tables.max_edges[pid])
        first_edge = len(self.edge_src)
        new_ids, task_offsets, edge_offsets = build_blocks(
            self, self._free, ops, edges, syncs, tables, self._edge_table, context.overlap_pool,
            context.sync_table,
            self.resource_sets.empty, context.routes(), self.edge_src, self.edge_dst,
        )  # fmt: skip
        block_tasks, ranges = self._block_tasks, self._block_ranges
        for i, b in enumerate(blocks):
            block_tasks[b] = ids = new_ids[task_offsets[i] : task_offsets[i + 1]]
            ranges[2 * b] = first_edge + edge_offsets[i]
            ranges[2 * b + 1] = first_edge + edge_offsets[i + 1]
            if b < first_edge_block:
                self.fwd[b], self.bwd[b] = ids[0::2], ids[1::2]
        self.edge_index.extend(self.edge_src, self.edge_dst, self.size)
        return new_ids[: task_offsets[len(blocks)]]


_IS_WORK = np.isin(np.arange(8), (FWD_KEY, BWD_KEY, UPDATE_KEY))
"""By task key kind: the tasks that keep a processor's core busy (compute and update)."""


class _TaskTiles:
    """`regions[op]`: an op's task tiles under the task graph's current configurations."""

    def __init__(self, graph: TaskGraph) -> None:
        self._graph = graph

    def __getitem__(self, op: int) -> tuple[Region, ...]:
        return self._graph.context.regions(op, self._graph.configs[op].degrees)


def _native(splits: Counter) -> bool:
    """Whether every op of a count of `SimContext.native_split`s has one, the same."""
    return len(splits) == 1 and next(iter(splits)) is not None
