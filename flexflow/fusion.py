"""Fused tasks: consecutive ops whose tiles line up run as one Legate task per device.

FlexFlow's runtime fuses ops with the same parallel configuration (its FusedOp); so do we, as
a runtime choice that leaves the strategy untouched. Every Legate task costs the issuing
thread and the runtime a fixed price (measured here: LeNet's 38 tasks per data-parallel
iteration cost 5 ms with empty task bodies), and on a small host that thread competes with the
task threads for the cores. One task per device for a chain of ops pays that price once.

Op b joins the group of the ops just before it when it has no batch statistics its tasks
share (their all-reduce sits between forward steps: batch norm under a sample split, or on
GPUs, whose variant runs it alone; each CPU task of a batch norm whose tiles hold whole
samples computes its own statistics in the group, `shared_statistics`), runs the same number
of tasks on the same devices,
reads at least one tensor made in the group or nothing but model inputs (a second input's
embedding, as NMT's target), and reads every tensor it reads from the group through exactly
the tile its producer's task wrote (or, on CPUs, once and part of it: an LSTM step reads its
time step of the embedding's tile, as a view; a tensor read twice, as attention's keys and
values, is read whole both times, its gradient summed in memory). A group ends before the first op
that reads a tensor of the group which an op after the group also reads. The tensors a group
makes and only its ops read are *internal*: inside the fused task their values and gradients
pass in memory (a gradient summed over the group's readers; zeros for a tensor nothing reads). Internal values are still
written to their stores (the backward task reads them), internal gradients never touch a
store. So a chain of ops fuses, and so does a graph whose tensors have several readers (an
LSTM step's output feeds the next step and the layer above): under data parallelism a whole
unrolled RNN is one task per device.

A fused task's store arguments are named by `Slot`s; `TaskLayout` fixes their order, once per
(group, task, pass), for both the issuing side (flexflow.runtime.executor) and the task bodies
(flexflow.runtime.tasks, flexflow.gpu.variant), which run it with `flexflow.fused_run`.

In training, the last group also computes the loss and, where its backward reads nothing but
what the task already holds (`FusedTask.step_ready`), its backward: one task per device for a
data-parallel chain. Partial weight gradients that one task per device writes whole
(`sole_gradients`) are overwritten each iteration instead of zeroed and accumulated.
`joins_previous` lets the simulator charge a fused op no launch when planning a run.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from flexflow.graph import OperatorGraph, OpNode
from flexflow.ops.base import Region, full_region
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


def _tile_shares_statistics(node: OpNode, region: Region) -> bool:
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
    return any(_tile_shares_statistics(node, region) for region in regions[op])


class SlotKind(enum.IntEnum):
    TENSOR = 0
    WEIGHT = 1
    GRAD = 2
    WEIGHT_GRAD = 3
    RUNNING = 4
    """Batch norm's running (mean, variance) of the tile's channels: its id is the op's."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One store argument of a fused task: a tile of a tensor, weight or their gradients."""

    kind: SlotKind
    id: int
    region: Region
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.id, self.region)))

    def __hash__(self) -> int:  # kept: task bodies look slots up every iteration
        return self._hash


@dataclass(frozen=True, slots=True)
class TaskLayout:
    """A fused task's store arguments in the order they are added (each slot once)."""

    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    reductions: tuple[Slot, ...]
    accumulators: tuple[Slot, ...] = ()
    """Read and written (added after the inputs and after the outputs): this device's partial
    weight gradients. Each device adds into its own copy, and the update sums the copies: a
    Legate reduction from tasks on two processors into one weight gradient serialized them
    (LeNet's data-parallel backward tasks ran one after the other)."""
    overwrites: tuple[Slot, ...] = ()
    """Partial weight gradients this task alone writes, whole, each iteration: written (after
    the accumulators' outputs), never read, so nothing zeroes them first."""
    states: tuple[Slot, ...] = ()
    """Of the inputs and outputs (a forward's), those read and written: the running
    statistics of the batch norms that compute their own (`shared_statistics`), updated by
    a training forward. A training step, which writes none of the layout's outputs, writes
    these after its loss row."""


def _unique(slots) -> tuple[Slot, ...]:
    return tuple(dict.fromkeys(slots))


def _tiles(graph: OperatorGraph, op: int, region: Region):
    node = graph.ops[op]
    return (
        node.op.input_regions(node.sig, region),
        node.op.weight_regions(node.sig, region),
        node.op.output_regions(node.sig, region),
    )


OpTiles = tuple[tuple[Region, ...], tuple[Region, ...], tuple[Region, ...]]
"""An op's tiles in one task: of its inputs, its weights and its outputs."""


def forward_layout(
    graph: OperatorGraph, group: FusedGroup, op_tiles: Sequence[OpTiles]
) -> TaskLayout:
    """Forward: reads the inputs from outside the group and the weights, writes every output;
    reads and writes the running statistics of its batch norms (`TaskLayout.states`).
    `op_tiles[k]` are the tiles of `group.ops[k]` in this task."""
    inputs, outputs, states = [], [], []
    for op, (in_regions, w_regions, out_regions) in zip(group.ops, op_tiles, strict=True):
        node = graph.ops[op]
        for tid, r in zip(node.inputs, in_regions, strict=True):
            if tid not in group.internal:
                inputs.append(Slot(SlotKind.TENSOR, tid, r))
        inputs += [
            Slot(SlotKind.WEIGHT, p, r) for p, r in zip(node.weights, w_regions, strict=True)
        ]
        outputs += [
            Slot(SlotKind.TENSOR, t, r) for t, r in zip(node.outputs, out_regions, strict=True)
        ]
        running = running_slot(graph, group, op, out_regions[0])
        if running is not None:
            states.append(running)
    return TaskLayout(
        _unique(inputs) + tuple(states), _unique(outputs) + tuple(states), (), states=tuple(states)
    )


def running_slot(graph: OperatorGraph, group: FusedGroup, op: int, tile: Region) -> Slot | None:
    """The running statistics a batch norm computing its own statistics in the group reads
    and writes (its channels of the (2, C) store, `tile` being its output tile); None for
    other ops."""
    if group.shared_statistics or not graph.ops[op].op.statistics_dims:
        return None
    return Slot(SlotKind.RUNNING, op, ((0, 2), tile[1]))


def backward_layout(
    graph: OperatorGraph,
    group: FusedGroup,
    op_tiles: Sequence[OpTiles],
    sole: frozenset[int] = frozenset(),
) -> TaskLayout:
    """Backward: reads inputs, weights, outputs and the gradients of outputs leaving the group;
    adds into the gradients of inputs from outside the group and of the weights, or writes
    those of the parameters in `sole` (see `TaskLayout.overwrites`)."""
    inputs, reductions, accumulators = [], [], []
    made: dict[int, Region] = {}
    for op, (in_regions, w_regions, out_regions) in zip(group.ops, op_tiles, strict=True):
        node = graph.ops[op]
        inputs += [  # (a part of a tile made in the task is cut from that tile: `OpStep.windows`)
            Slot(SlotKind.TENSOR, t, r)
            for t, r in zip(node.inputs, in_regions, strict=True)
            if t not in group.internal or made.get(t) == r
        ]
        made.update(zip(node.outputs, out_regions, strict=True))
        inputs += [
            Slot(SlotKind.WEIGHT, p, r) for p, r in zip(node.weights, w_regions, strict=True)
        ]
        inputs += [
            Slot(SlotKind.TENSOR, t, r) for t, r in zip(node.outputs, out_regions, strict=True)
        ]
        for tid, r in zip(node.outputs, out_regions, strict=True):
            if tid not in group.internal:
                inputs.append(Slot(SlotKind.GRAD, tid, r))
        for tid, spec, r in zip(node.inputs, node.sig.inputs, in_regions, strict=True):
            if _gradient_leaves(graph, group, tid, spec):
                reductions.append(Slot(SlotKind.GRAD, tid, r))
        accumulators += [
            Slot(SlotKind.WEIGHT_GRAD, p, r) for p, r in zip(node.weights, w_regions, strict=True)
        ]
    partials = _unique(accumulators)
    return TaskLayout(
        _unique(inputs),
        (),
        _unique(reductions),
        tuple(s for s in partials if s.id not in sole),
        tuple(s for s in partials if s.id in sole),
    )


def sole_gradients(
    graph: OperatorGraph,
    strategy: Strategy,
    regions: Sequence[tuple[Region, ...]],
    groups: Sequence[FusedGroup],
) -> frozenset[int]:
    """Parameters whose partial gradient on each device comes from one task that reads the
    whole weight (a replicated weight of one op, or of several ops in one fused task, such as
    an unrolled LSTM's steps: the task sums their contributions in memory and writes once):
    those tasks write their device's partial outright and nothing zeroes it each iteration.
    The weights of a batch norm run alone from its stores (`FusedGroup.shared_statistics`)
    always accumulate; one in a fused task is like any op (ResNet-101's 208 batch-norm
    weights cost a fill each per iteration, and a read of their partials in every step).
    `regions[op]` are the op's task tiles."""
    group_of = {op: g for g, group in enumerate(groups) for op in group.ops}
    writers: dict[tuple[int, int], set[tuple[int, int]]] = {}
    shared: set[int] = set()
    for node, config in zip(graph.ops, strategy.configs, strict=True):
        alone = groups[group_of[node.id]].shared_statistics
        for index, region in enumerate(regions[node.id]):
            for pid, r in zip(node.weights, node.op.weight_regions(node.sig, region), strict=True):
                full = full_region(graph.parameters[pid].spec.shape)
                if r != full or alone:
                    shared.add(pid)
                task = (group_of[node.id], index)
                writers.setdefault((pid, config.devices[index]), set()).add(task)
    shared |= {pid for (pid, _), tasks in writers.items() if len(tasks) > 1}
    return frozenset(p.id for p in graph.parameters) - shared


def _gradient_leaves(graph: OperatorGraph, group: FusedGroup, tid: int, spec) -> bool:
    """Whether the group adds into the gradient store of its input `tid`: not for integer
    inputs (token ids), internal tensors (kept in memory) or model inputs (nobody reads it)."""
    return (
        spec.dtype.is_float and tid not in group.internal and graph.tensor(tid).producer is not None
    )


@dataclass(frozen=True, slots=True)
class OpStep:
    """One op of a fused task with the slots its tile reads and writes, built once (a task
    body looks them up every iteration; Python in a task body holds the interpreter lock the
    other processors' tasks wait for). Slots of tensors inside the group stand for arrays
    the task keeps in memory."""

    node: OpNode
    region: Region
    """The op's output tile in this task."""
    inputs: tuple[tuple[int, Slot], ...]
    """(tensor id, slot) per input, in the op's order."""
    weights: tuple[Slot, ...]
    outputs: tuple[tuple[int, str, Slot], ...]
    """(tensor id, dtype name, slot) per output."""
    output_grads: tuple[tuple[int, Slot], ...]
    """(tensor id, gradient slot) per output."""
    input_grads: tuple[Slot, ...]
    weight_grads: tuple[Slot, ...]
    windows: tuple[tuple[tuple[slice, ...], Slot] | None, ...] = ()
    """Per input (empty: none), None, or where the op reads it in the tile made in the task
    (an internal tensor read in part, `window`) with the producer's output slot."""
    running: Slot | None = None
    """A batch norm computing its tile's own statistics: its running statistics
    (`TaskLayout.states`)."""
    exchange: bool = False
    """A batch norm whose tile holds part of what its statistics span: the task's partial
    sums are exchanged with the launch's other points (`FusedGroup.exchanges`)."""


@dataclass(frozen=True, slots=True)
class FusedTask:
    """One task of a fused group as its body sees it, the same on every variant; built once
    per (group, task) by `fused_task`, run each iteration."""

    graph: OperatorGraph
    group: FusedGroup
    index: int
    tiles: tuple[Region, ...]
    """The output tile of each op of the group in this task."""
    op_tiles: tuple[OpTiles, ...]
    """Per op, its tiles in this task."""
    forward: TaskLayout
    backward: TaskLayout
    steps: tuple[OpStep, ...]
    """The group's ops in forward order (`op_steps`)."""

    @property
    def output_slot(self) -> Slot:
        """The tile of the last op's first output: what a loss after the group reads."""
        return self.steps[-1].outputs[0][2]

    @property
    def output_grad_slot(self) -> Slot:
        return self.steps[-1].output_grads[0][1]

    @property
    def step_ready(self) -> bool:
        """Whether forward, loss and backward can run as one task (FUSED_STEP): the backward
        reads nothing but the forward's inputs and outputs and the loss's gradient (no other
        output of the group leaves it, e.g. an LSTM's unread cell state)."""
        known = {*self.forward.inputs, *self.forward.outputs, self.output_grad_slot}
        return all(slot in known for slot in self.backward.inputs)


def fused_task(
    graph: OperatorGraph,
    group: FusedGroup,
    index: int,
    tiles: Sequence[Region],
    sole: frozenset[int] = frozenset(),
) -> FusedTask:
    op_tiles = tuple(_tiles(graph, op, region) for op, region in zip(group.ops, tiles, strict=True))
    forward = forward_layout(graph, group, op_tiles)
    backward = backward_layout(graph, group, op_tiles, sole)
    steps = op_steps(graph, group, tiles, op_tiles, (forward, backward))
    return FusedTask(graph, group, index, tuple(tiles), op_tiles, forward, backward, steps)


def op_steps(
    graph: OperatorGraph,
    group: FusedGroup,
    tiles: Sequence[Region],
    op_tiles: Sequence[OpTiles],
    layouts: Sequence[TaskLayout],
) -> tuple[OpStep, ...]:
    """Each op's `OpStep`, naming the very slot objects of `layouts` where they hold them (a
    dictionary lookup of the same object skips comparing fields)."""
    known: dict[Slot, Slot] = {}
    for layout in layouts:
        for slots in (layout.inputs, layout.outputs, layout.reductions, layout.accumulators):
            known.update((slot, slot) for slot in slots)
        known.update((slot, slot) for slot in layout.overwrites)

    def slot(kind: SlotKind, item: int, region: Region) -> Slot:
        made = Slot(kind, item, region)
        return known.setdefault(made, made)

    steps = []
    made: dict[int, tuple[Region, Slot]] = {}  # tensor -> its tile in this task, and slot
    for op, region, (in_regions, w_regions, out_regions) in zip(
        group.ops, tiles, op_tiles, strict=True
    ):
        node = graph.ops[op]
        ins = tuple(zip(node.inputs, in_regions, strict=True))
        outs = tuple(zip(node.outputs, node.sig.outputs, out_regions, strict=True))
        params = tuple(zip(node.weights, w_regions, strict=True))
        windows = tuple(
            (view, made[t][1])
            if t in group.internal and (view := window(r, made[t][0])) is not None
            else None
            for t, r in ins
        )
        made.update((t, (r, slot(SlotKind.TENSOR, t, r))) for t, _, r in outs)
        steps.append(
            OpStep(
                node,
                region,
                tuple((t, slot(SlotKind.TENSOR, t, r)) for t, r in ins),
                tuple(slot(SlotKind.WEIGHT, p, r) for p, r in params),
                tuple((t, spec.dtype.value, slot(SlotKind.TENSOR, t, r)) for t, spec, r in outs),
                tuple((t, slot(SlotKind.GRAD, t, r)) for t, _, r in outs),
                tuple(slot(SlotKind.GRAD, t, r) for t, r in ins),
                tuple(slot(SlotKind.WEIGHT_GRAD, p, r) for p, r in params),
                windows if any(windows) else (),
                _known(known, running_slot(graph, group, op, out_regions[0])),
                group.exchanges and _tile_shares_statistics(node, region),
            )
        )
    return tuple(steps)


def _known(known: dict[Slot, Slot], slot: Slot | None) -> Slot | None:
    return None if slot is None else known.setdefault(slot, slot)


def _one_step_group(groups: Sequence[FusedGroup], tasks: Sequence[Sequence[FusedTask]]) -> bool:
    """Whether the whole graph is one fused group that runs a training step in one task per
    device (`FusedTask.step_ready`)."""
    return len(groups) == 1 and all(task.step_ready for task in tasks[0])


def _on_cpus(tasks: Sequence[FusedTask], strategy: Strategy, kinds: Sequence[str]) -> bool:
    devices = strategy[tasks[0].group.ops[0]].devices
    return all(kinds[device] == "cpu" for device in devices)


def updates_in_step(
    graph: OperatorGraph,
    strategy: Strategy,
    groups: Sequence[FusedGroup],
    tasks: Sequence[Sequence[FusedTask]],
    sole: frozenset[int],
    kinds: Sequence[str],
) -> bool:
    """Whether each device can keep its own copy of every weight and apply the optimizer's
    update at the start of its next step task instead of in update tasks (data parallelism
    does so after its all-reduce): the whole model is one step task per device, on CPUs
    (`kinds[d]` is device d's kind; the GPU variant runs update tasks), and every task reads
    each weight it uses whole (`sole`), so every device updates all of it from every device's
    partial gradients, summed in the same order, and the copies stay bit-identical."""
    if not _one_step_group(groups, tasks) or not _on_cpus(tasks[0], strategy, kinds):
        return False
    return all(p.id in sole for p in graph.parameters)


def inputs_read_in_step(
    graph: OperatorGraph,
    strategy: Strategy,
    groups: Sequence[FusedGroup],
    tasks: Sequence[Sequence[FusedTask]],
    kinds: Sequence[str],
) -> dict[int, int]:
    """The model inputs a step task can read straight from the batch in its process instead of
    from a store a feed task filled, with how many task arguments read each: the whole model
    is one step task per device on CPUs (its backward reads the input in memory), and those
    tasks read the input."""
    if not _one_step_group(groups, tasks) or not _on_cpus(tasks[0], strategy, kinds):
        return {}
    readers = Counter(
        slot.id for task in tasks[0] for slot in task.forward.inputs if slot.kind is SlotKind.TENSOR
    )
    return {t.id: readers[t.id] for t in graph.input_tensors if readers[t.id]}
