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
delta simulation (Algorithm 2) updates (flexflow/simulator/task_deltas.py; the bounds a
search reads before simulating a change: task_bounds.py). Every task has a canonical `key` independent of build
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
from array import array
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from flexflow.fusion import cpu_devices, joins_previous
from flexflow.ops.base import Region
from flexflow.simulator.blocks import BlockTables
from flexflow.simulator.context import SimContext
from flexflow.simulator.keys import (
    A_LIMIT,
    A_SHIFT,
    B_SHIFT,
    FIELD_LIMIT,
    GRAD_XFER_KEY,
    KIND_SHIFT,
    XFER_KEY,
)
from flexflow.simulator.native_blocks import BlockBuilder, EdgeTable
from flexflow.simulator.native_loop import EdgeIndex
from flexflow.simulator.task_bounds import GraphLoad, TaskGraphBounds
from flexflow.simulator.task_deltas import TaskGraphDeltas
from flexflow.simulator.task_times import one_native_split
from flexflow.simulator.task_views import Block, TaskGraphViews
from flexflow.strategy import ParallelConfig, Strategy

_NO_OVERLAPS = (-1, 0)  # an edge job's overlap set for a model input (`EdgeJobs.add`)


class TaskGraph(TaskGraphDeltas, TaskGraphBounds, TaskGraphViews):
    """Tasks in parallel arrays indexed by task id; ids of removed tasks are reused. Built
    here; changed by `TaskGraphDeltas`, bounded by `TaskGraphBounds`, read back by
    `TaskGraphViews`."""

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
        self._undo = None  # how to take back the last set_config
        self._ops_blocks: dict[tuple[int, ...], tuple[int, ...]] = {}  # affected_blocks
        self._load: GraphLoad | None = None  # `load_bound`'s view of this graph, made when asked
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
        self._builder = BlockBuilder(
            context.routes(), self.resource_sets.empty, self._tables, self._edge_table,
            context.overlap_pool, context.sync_table,
        )  # fmt: skip
        self._build(range(len(self._block_names)))
        self.runtime_s = context.runtime_s(self.configs)
        """The runtime's CPU time per iteration (`SimContext.runtime_s`): see `iteration_s`."""

    # ---- queries -------------------------------------------------------------------------------
    @property
    def native(self) -> bool:
        """Whether every op shares one `SimContext.native_split`: the whole step runs as one C
        call per device, and the ops' tasks are timed as the profile measured them inside it."""
        return one_native_split(self._splits)

    def live_tasks(self) -> Iterable[int]:
        return itertools.compress(range(len(self.exe)), self.live)

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
        ops, edges, syncs = self._builder.clear_jobs()
        first_edge_block, first_sync_block = self._first_edge, self._first_sync
        # ascending: the builder's order, ops, then edges, then syncs
        at_edges = bisect_left(blocks, first_edge_block)
        at_syncs = bisect_left(blocks, first_sync_block, at_edges)
        fusing, native = context.fused_launches, self.native
        for b in blocks[:at_edges]:
            fused = fusing and joins_previous(
                self.graph, configs, _TaskTiles(self), b, self._cpu_devices, context.fusion
            )
            config = configs[b]
            tasks = context.op_tasks(b, config, fused, native)
            ops.add(b, tasks.devices, tasks.exe, tasks.order)
            tables.set_count(b, len(tasks.devices))
            tables.use_templates(b, context.op_sync_parts(b, config))
        overlap_set = context.overlap_set
        for b in blocks[at_edges:at_syncs]:
            edge = b - first_edge_block
            producer, c, j = self._edges[edge]
            if producer < 0:  # a model input: no block content
                edges.add(edge, _NO_OVERLAPS)
                continue
            edges.add(edge, overlap_set(c, j, configs[producer].degrees, configs[c].degrees))
        for b in blocks[at_syncs:]:
            pid = self._syncs[b - first_sync_block]
            syncs.add(pid, pid << A_SHIFT, tables.max_tasks[pid], tables.max_edges[pid])
        first_edge = len(self.edge_src)
        new_ids, task_offsets, edge_offsets = self._builder.build(
            self, self._free, self.edge_src, self.edge_dst
        )
        block_tasks, ranges, fwd, bwd = self._block_tasks, self._block_ranges, self.fwd, self.bwd
        n = len(blocks)  # the builder's arrays are longer (its scratch): n + 1 offsets are ours
        task_ends, edge_ends = task_offsets[1 : n + 1], edge_offsets[1 : n + 1]
        for b, lo, hi, edges_lo, edges_hi in zip(
            blocks, task_offsets, task_ends, edge_offsets, edge_ends, strict=False
        ):
            block_tasks[b] = ids = new_ids[lo:hi]
            ranges[2 * b] = first_edge + edges_lo
            ranges[2 * b + 1] = first_edge + edges_hi
            if b < first_edge_block:
                fwd[b], bwd[b] = ids[0::2], ids[1::2]
        self.edge_index.extend(self.edge_src, self.edge_dst, self.size)
        return new_ids[: task_offsets[n]]


class _TaskTiles:
    """`regions[op]`: an op's task tiles under the task graph's current configurations."""

    def __init__(self, graph: TaskGraph) -> None:
        self._graph = graph

    def __getitem__(self, op: int) -> tuple[Region, ...]:
        return self._graph.context.regions(op, self._graph.configs[op].degrees)
