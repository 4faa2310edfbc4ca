"""Which ops fuse: groups of consecutive ops whose tiles line up (`fuse`, `joins_previous`).

The rules are the package's (flexflow.fusion): one Legate task per device for a chain of ops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flexflow.graph import OperatorGraph, OpNode
from flexflow.ops.base import Region
from flexflow.strategy import ParallelConfig, Strategy


@dataclass(frozen=True, slots=True)
class FusedGroup:
    """Consecutive ops (graph order) run by one task per device; `internal`: see module doc."""

    ops: tuple[int, ...]
    internal: frozenset[int]
    shared_statistics: bool = False
    """One op whose tasks share batch statistics (`flexflow.fusion.shared_statistics`): alone,
    run by flexflow.runtime.batch_statistics from its stores."""
    exchanges: bool = False
    """Its tasks share batch statistics in memory: a concurrent launch per pass whose points
    exchange them (`fuse(exchanging=...)`, flexflow.runtime.concurrent)."""


def fuse(
    graph: OperatorGraph,
    strategy: Strategy,
    regions: Sequence[tuple[Region, ...]],
    cpu_devices: frozenset[int] = frozenset(),
    exchanging: frozenset[int] = frozenset(),
    memo: FusionMemo | None = None,
) -> tuple[FusedGroup, ...]:
    """Split the graph's ops into fused groups, in order; `regions[op]` are its task tiles.
    Groups whose devices are all in `cpu_devices` may also read part of a tile made in the
    group (a window: a numpy view; see the module doc). The batch norms in `exchanging`
    whose CPU tasks share statistics join groups too, which then exchange them in memory
    (only for a run that launches the group's tasks together: `flexflow.launches.run_groups`).
    `memo` (made for this graph and `cpu_devices`) keeps what the tests found for the next
    strategies, a search's."""
    memo = _memo_for(memo, graph, cpu_devices)
    configs = tuple(strategy[op] for op in range(len(graph.ops)))
    flags = tuple(op in exchanging for op in range(len(graph.ops)))
    groups: list[FusedGroup] = []
    start = 0
    while start < len(graph.ops):
        groups.append(memo.group(strategy, regions, start, configs, flags))
        start = groups[-1].ops[-1] + 1
    return tuple(groups)


class FusionMemo:
    """What `fuse` finds from one or two ops' configurations, kept for the next strategies.

    A search asks for the groups of thousands of strategies that differ from the one before
    in an op or a few, and almost every test `fuse` makes is one it made before on the same
    configurations (ResNet-101 on two CPUs: counting a strategy's launches took 6 ms, nine
    tenths of a proposal, without it). The keys hold the configurations themselves (immutable
    values), so an entry is never stale; a memo belongs to one graph and one set of CPU
    devices, and starts afresh past LIMIT entries of a kind."""

    LIMIT = 1 << 18
    GROUPS_PER_START = 4
    """Groups kept per first op: the last ones made from it (a chain's current strategy's and
    its proposals')."""

    def __init__(self, graph: OperatorGraph, cpu_devices: frozenset[int]) -> None:
        self.graph, self.cpu_devices = graph, cpu_devices
        self._groups: dict[int, list[tuple]] = {}
        """Per first op: (end, configs, flags, group) as `group` made them, the newest first."""
        self._shared: dict[tuple[int, ParallelConfig], bool] = {}
        self._reads: dict[tuple[int, int, ParallelConfig, ParallelConfig], bool] = {}
        """(op, input position, its config, the producer's): whether its tasks read exactly
        the producer's tiles of that tensor (or, on CPUs and read once, windows of them)."""
        self._kept: dict[tuple[int, int], int] = {}
        self._internal: dict[tuple[int, int, bool], frozenset[int]] = {}

    def group(
        self,
        strategy,
        regions: Sequence[tuple[Region, ...]],
        start: int,
        configs: tuple[ParallelConfig, ...],
        flags: tuple[bool, ...],
    ) -> FusedGroup:
        """The group `fuse` makes from op `start` on. It depends on the configurations
        (`configs`, each op's) and the exchanging flags (`flags`: whether each op is in
        `fuse`'s `exchanging`) of the ops from `start` to the first op that does not join,
        and is kept with them: a search's next strategy mostly changes no op of it."""
        entries = self._groups.setdefault(start, [])
        for end, seen_configs, seen_flags, group in entries:
            if configs[start:end] == seen_configs and flags[start:end] == seen_flags:
                return group
        stop = start + 1
        while stop < len(self.graph.ops) and self.joins(strategy, regions, start, stop, flags):
            stop += 1
        end = min(stop + 1, len(self.graph.ops))  # the ops it looked at
        stop = self.kept(start, stop)
        shared = [self.shared(strategy, regions, op) for op in range(start, stop)]
        alone = shared[0] and not flags[start]
        exchanges = any(s and flags[start + i] for i, s in enumerate(shared))
        ops = tuple(range(start, stop))
        group = FusedGroup(ops, self.internal(start, stop, alone), alone, exchanges)
        entries.insert(0, (end, configs[start:end], flags[start:end], group))
        del entries[self.GROUPS_PER_START :]
        return group

    def shared(self, strategy, regions: Sequence[tuple[Region, ...]], op: int) -> bool:
        """`shared_statistics` of `op` (`strategy[op]` its config, `regions[op]` its tiles)."""
        key = (op, strategy[op])
        found = self._shared.get(key)
        if found is None:
            make_room(self._shared, self.LIMIT)
            found = self._shared[key] = shared_statistics(
                self.graph, strategy, regions, op, self.cpu_devices
            )
        return found

    def joins(
        self,
        strategy,
        regions: Sequence[tuple[Region, ...]],
        start: int,
        op: int,
        flags: Sequence[bool] | None = None,
    ) -> bool:
        """Whether `op` joins the group of ops `start .. op - 1`: neither it nor the group's
        first op has batch statistics its tasks share (unless exchanging them: `flags[op]`,
        none where None), it runs as many tasks on the same devices, reads some tensor of the
        group or only model inputs, and reads each through exactly its producer's tiles (or,
        read once, windows of them, on CPUs)."""
        if any(
            not (flags and flags[member]) and self.shared(strategy, regions, member)
            for member in (op, start)
        ):
            return False
        config = strategy[op]
        if config.devices != strategy[start].devices:
            return False
        node, linked, inputs_only = self.graph.ops[op], False, True
        for position, tid in enumerate(node.inputs):
            producer = self.graph.tensor(tid).producer
            inputs_only = inputs_only and producer is None
            if producer is None or not start <= producer < op:
                continue
            once = node.inputs.count(tid) == 1  # else read whole each time, no window
            key = (op, position, config, strategy[producer])
            reads = self._reads.get(key)
            if reads is None:
                make_room(self._reads, self.LIMIT)
                reads = self._reads[key] = self._reads_tiles(config, regions, op, position, once)
            if not reads:
                return False
            linked = True
        return linked or inputs_only

    def _reads_tiles(
        self,
        config: ParallelConfig,
        regions: Sequence[tuple[Region, ...]],
        op: int,
        position: int,
        windows_allowed: bool = True,
    ) -> bool:
        node = self.graph.ops[op]
        tensor = self.graph.tensor(node.inputs[position])
        producer = self.graph.ops[tensor.producer]
        windows = windows_allowed and set(config.devices) <= self.cpu_devices
        for index, region in enumerate(regions[op]):
            read = node.op.input_regions(node.sig, region)[position]
            made = producer.op.output_regions(producer.sig, regions[producer.id][index])
            if read != made[tensor.index] and not (windows and _within(read, made[tensor.index])):
                return False
        return True

    def kept(self, start: int, stop: int) -> int:
        """The end of the longest prefix of ops `start .. stop - 1` in which no op reads, in
        memory, a tensor of the group that an op after the group also reads: such a tensor's
        gradient would come both from the task and from its store, which one task cannot read
        after adding into it. Depends on the graph alone."""
        key = (start, stop)
        found = self._kept.get(key)
        if found is None:
            make_room(self._kept, self.LIMIT)
            found = self._kept[key] = _without_escapes(self.graph, start, stop)
        return found

    def internal(self, start: int, stop: int, alone: bool) -> frozenset[int]:
        """`_internal` of the group of ops `start .. stop - 1`."""
        key = (start, stop, alone)
        found = self._internal.get(key)
        if found is None:
            make_room(self._internal, self.LIMIT)
            found = self._internal[key] = _internal(self.graph, range(start, stop), alone)
        return found


def _memo_for(
    memo: FusionMemo | None, graph: OperatorGraph, cpu_devices: frozenset[int]
) -> FusionMemo:
    """`memo`, or a new one where None; one made for another graph or other CPUs is a bug."""
    if memo is None:
        return FusionMemo(graph, cpu_devices)
    if memo.graph is not graph or memo.cpu_devices != cpu_devices:
        raise ValueError("the fusion memo was made for another graph or other CPU devices")
    return memo


def make_room(memo: dict, limit: int) -> None:
    """Empty `memo` once it holds `limit` entries (a search's early entries are rarely asked
    for again; the memos start afresh rather than grow without end)."""
    if len(memo) >= limit:
        memo.clear()


def _without_escapes(graph: OperatorGraph, start: int, stop: int) -> int:
    """`FusionMemo.kept`, worked out."""
    while True:
        escaping = {
            tid
            for op in range(start, stop)
            for tid in graph.ops[op].outputs
            if any(not start <= c < stop for c in graph.consumers(tid))
        }
        cut = next(
            (
                op
                for op in range(start, stop)
                if any(
                    t in escaping and start <= graph.tensor(t).producer < stop
                    for t in graph.ops[op].inputs
                )
            ),
            None,
        )
        if cut is None:
            return stop
        stop = cut


def _internal(graph: OperatorGraph, ops: Sequence[int], shared: bool) -> frozenset[int]:
    """The tensors the group's ops make and only its ops read (see the module doc), and those
    nothing reads (an LSTM's last cell state): their gradient is zero, made in memory. The
    model's output, whose gradient the loss makes, is neither."""
    if shared:  # alone, run by batch_statistics from its stores
        return frozenset()
    members, output = set(ops), graph.ops[-1].outputs[0]
    return frozenset(
        tid
        for op in ops
        for tid in graph.ops[op].outputs
        if tid != output and all(c in members for c in graph.consumers(tid))
    )


def joins_previous(
    graph: OperatorGraph,
    configs,
    regions,
    op: int,
    cpu_devices: frozenset[int] = frozenset(),
    memo: FusionMemo | None = None,
) -> bool:
    """Whether `op` runs inside the fused task of op - 1 as far as the two ops tell: `fuse`'s
    rule looking at the op before only, so the simulator can decide it from two configurations
    (the same as `fuse` on chains; on other graphs an op may also join through an earlier op,
    or leave a group whose tensor escapes it). `configs[op]` and `regions[op]` are an op's
    configuration and task tiles; `cpu_devices` and `memo` as `fuse` takes them."""
    return op > 0 and _memo_for(memo, graph, cpu_devices).joins(configs, regions, op - 1, op)


def _within(read: Region, made: Region) -> bool:
    return all(m0 <= r0 and r1 <= m1 for (r0, r1), (m0, m1) in zip(read, made, strict=True))


def window(read: Region, made: Region) -> tuple[slice, ...] | None:
    """Where the tile `read` lies in the tile `made` that contains it; None when they are one."""
    if read == made:
        return None
    return tuple(slice(r0 - m0, r1 - m0) for (r0, r1), (m0, _) in zip(read, made, strict=True))


def cpu_devices(kinds: Sequence[str]) -> frozenset[int]:
    """The devices, of kinds `kinds[d]`, whose fused tasks may read parts of tiles (`fuse`)."""
    return frozenset(d for d, kind in enumerate(kinds) if kind == "cpu")


def tile_shares_statistics(node: OpNode, region: Region) -> bool:
    """Whether a task's tile holds part of a dimension its op's batch statistics span."""
    shape = node.sig.output_shape
    return any(
        region[i] != (0, shape[i])
        for i, d in enumerate(node.sig.dims)
        if d.name in node.op.statistics_dims
    )


def shared_statistics(
    graph: OperatorGraph,
    strategy,
    regions: Sequence[tuple[Region, ...]],
    op: int,
    cpu_devices: frozenset[int],
) -> bool:
    """Whether `op` has batch statistics its tasks must share: some task's tile holds part of
    a dimension the statistics span (batch norm's samples), or a task runs on a GPU (the GPU
    variant runs batch norm alone, with cuDNN). Otherwise each task computes its tile's
    statistics itself, inside a fused task. `strategy[op]`, `regions[op]`: its configuration
    and task tiles (`fuse`)."""
    node = graph.ops[op]
    if not node.op.statistics_dims:
        return False
    if not set(strategy[op].devices) <= cpu_devices:
        return True
    return any(tile_shares_statistics(node, region) for region in regions[op])
