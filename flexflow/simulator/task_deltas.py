"""How a task graph changes (paper §5.2's delta simulation): a new configuration rebuilds only the blocks it affects."""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from flexflow.graph import OperatorGraph
from flexflow.simulator.blocks import BlockTables
from flexflow.simulator.context import SimContext
from flexflow.simulator.native_loop import EdgeIndex, compact_ranges, set_flags
from flexflow.simulator.task_bounds import GraphLoad
from flexflow.simulator.task_times import one_native_split
from flexflow.simulator.task_views import Block
from flexflow.strategy import ParallelConfig

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


@dataclass(slots=True)
class _Undo:
    """What `TaskGraph.set_config` replaced: enough to restore the graph exactly."""

    configs: tuple[tuple[int, ParallelConfig], ...]  # (op, its configuration before)
    size: int  # task ids before the change
    free: array  # the free ids before the change
    edge_count: int
    removed_edges: int
    blocks: array  # the rebuilt blocks ("i")
    block_tasks: list[array]  # each one's task ids before
    edge_ranges: array  # each one's edges before: lo, hi ("i")
    tasks: list[tuple]  # per rebuilt op: (op, forward, backward ids, templates, op_at, op_count)
    table_size: int  # the op table's entries
    load: GraphLoad | None  # the graph's `load_bound` view before the change
    splits: Counter  # `TaskGraph._splits` before the change
    removed: array = field(default_factory=lambda: array("i"))
    added: array = field(default_factory=lambda: array("i"))


class TaskGraphDeltas:
    """`TaskGraph`'s changes of configuration: which blocks a change rebuilds, the rebuild
    (`_build`, TaskGraph's), what it takes to undo it, and the edge arrays' compaction."""

    # what TaskGraph sets (flexflow/simulator/taskgraph.py); `native`, `_build` and `size`
    # are its and TaskGraphViews'
    context: SimContext
    graph: OperatorGraph
    configs: list[ParallelConfig]
    runtime_s: float
    exe: array
    order: array
    live: array
    res_set: array
    size_bytes: array
    res_src: array
    res_dst: array
    edge_src: array
    edge_dst: array
    edge_index: EdgeIndex
    fwd: list[array]
    bwd: list[array]
    _free: array
    _undo: _Undo | None
    _ops_blocks: dict[tuple[int, ...], tuple[int, ...]]
    _load: GraphLoad | None
    _work_s: float | None
    _splits: Counter
    _removed_edges: int
    _tables: BlockTables
    _consumers: dict[int, list[tuple[int, int]]]
    _block_names: tuple[Block, ...]
    _block_numbers: dict[Block, int]
    _block_tasks: list[array]
    _block_ranges: array
    _first_edge: int

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
        if (
            one_native_split(splits) != self.native
        ):  # every op's tasks change their times: rebuild all
            blocks = tuple(range(len(self._block_names)))
        block_tasks = self._block_tasks
        block_numbers = array("i", blocks)
        edge_ranges, touched = self.edge_index.remove_blocks(  # sources -1, kept in the index
            self.edge_src, self.edge_dst, self._block_ranges, block_numbers
        )
        self._removed_edges += len(touched)
        tables = self._tables
        undo = _Undo(
            tuple((op, self.configs[op]) for op, _ in changes),
            len(self.exe),
            array("i", self._free),
            len(self.edge_src),
            self._removed_edges - len(touched),
            block_numbers,
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
        removed = array("i")
        for tasks in undo.block_tasks:
            removed += tasks
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
        self.edge_index.restore_blocks(
            self.edge_src, undo.edge_ranges, undo.blocks, self._block_ranges
        )
        self._removed_edges = undo.removed_edges
        block_tasks = self._block_tasks
        for b, tasks in zip(undo.blocks, undo.block_tasks, strict=True):
            block_tasks[b] = tasks
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
        self.edge_src, self.edge_dst = compact_ranges(
            self.edge_src, self.edge_dst, self._block_ranges
        )
        self._removed_edges = 0
        self.edge_index.truncate(0)
        self.edge_index.extend(self.edge_src, self.edge_dst, self.size)
