"""The Legate tasks one training iteration of this project's runtime issues under a strategy.

On CPU processors each Legate task costs the host a roughly fixed amount of CPU time (the
Python thread issuing it, the utility thread's dependence analysis and mapping, the task body
turning its stores into arrays), on the same cores as the kernels (`flexflow.bootstrap` gives
Legate one processor per core): a strategy that keeps every processor busy leaves that work
no idle core. So the count below is what the simulator charges that cost on
(`SimContext(fused_launches=True)`, `TaskGraph.iteration_s`), and what the Executor reports;
both read it from here, without Legate. It follows `flexflow.runtime.iteration`:

- a fused group (`flexflow.fusion`) issues a forward and a backward task per device; the last
  group's forward also computes the loss, and where its tasks can run forward, loss and
  backward at once (`FusedTask.step_ready`) that is one task per device;
- an op whose tasks share batch statistics runs alone (`flexflow.fusion.shared_statistics`):
  statistics, running statistics and forward tasks, then statistics and backward tasks;
  after it, the loss is a task of its own per device; unless it joins a data-parallel group
  launched as one concurrent launch per pass (`run_groups`), whose points exchange the
  statistics (flexflow.runtime.concurrent): counted as a task per point;
- updates run as one task per device owning update pieces (`flexflow.tiling.update_pieces`),
  unless each device updates its own copies inside its next step (`updates_in_step`);
- each shard of a model input is fed by a copy task, unless the step tasks read the batch
  straight from the process (`inputs_read_in_step`, single-rank runs: `staging`);
- where the step tasks run in C++ bodies and read their batch from the process, on consecutive
  CPUs (`consecutive_cpus`), `fit` issues K iterations' steps as one launch
  (`flexflow.runtime.step_launches`): those tasks count 1/K each (`IterationTasks.cpp_launches`).

Zero fills of gradient stores are not counted: Legate issues them without a task body.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flexflow.fusion import (
    FusedGroup,
    FusionMemo,
    cpu_devices,
    fuse,
    fused_task,
    inputs_read_in_step,
    make_room,
    sole_gradients,
    updates_in_step,
)
from flexflow.graph import OperatorGraph
from flexflow.ops.base import Region
from flexflow.runtime.native_step import runs_in_cpp_body
from flexflow.strategy import ParallelConfig, Strategy
from flexflow.tiling import Piece, first_users, input_shards, op_update_pieces


@dataclass(frozen=True, slots=True)
class IterationTasks:
    """Legate tasks per training iteration, by what they do."""

    steps: int
    """Forward, backward and fused-step tasks of the fused groups, the loss tasks included."""
    statistics: int
    """Batch statistics tasks (ops with batch norm's whole-batch statistics)."""
    updates: int
    feeds: int
    cpp_steps: int = 0
    """Of `steps`, those whose bodies are C++ (flexflow.runtime.native_tasks), which cost the
    runtime less each (`flexflow.cost.LEGATE_CPP_TASK_S`)."""
    steps_per_launch: int = 1
    """Iterations whose `cpp_steps` one launch runs (`consecutive_cpus`); 1 elsewhere."""

    @property
    def total(self) -> int:
        return self.steps + self.statistics + self.updates + self.feeds

    @property
    def cpp_launches(self) -> float:
        """The launches of C++ step tasks per iteration: `cpp_steps` over `steps_per_launch`."""
        return self.cpp_steps / self.steps_per_launch


def consecutive_cpus(devices: Sequence[int], kinds: Sequence[str]) -> range | str:
    """The CPU processor numbers of `devices`, or why several iterations' step tasks on them
    (one per device, in the order of the weights' copies: ascending) cannot be one launch,
    whose points are a contiguous range of CPU processors (`flexflow.runtime.step_launches`).
    `kinds[d]` is device d's kind; a device's CPU number is its index among the CPU devices."""
    if len(set(devices)) != len(devices) or any(kinds[d] != "cpu" for d in devices):
        return "the devices are not distinct CPUs in the order of the weights' copies"
    cpus = [d for d, kind in enumerate(kinds) if kind == "cpu"]
    ordinals = [cpus.index(d) for d in devices]
    found = range(ordinals[0], ordinals[0] + len(ordinals))
    if ordinals != list(found):
        return "the devices are not consecutive CPUs in ascending order"
    return found


def run_groups(
    graph: OperatorGraph,
    strategy: Strategy,
    regions: Sequence[tuple[Region, ...]],
    kinds: Sequence[str],
    staging: bool = True,
    memo: LaunchMemo | None = None,
) -> tuple[FusedGroup, ...]:
    """The fused groups a run executes (`fuse`). A batch norm whose tasks share statistics
    joins its neighbours' group when that group splits each of its ops by sample alone over
    consecutive CPUs of this process (data parallelism, for the whole model or part of it):
    the group runs as concurrent launches whose points exchange the statistics in memory
    (`FusedGroup.exchanges`, flexflow.runtime.concurrent). Any other such batch norm runs
    alone. `memo`: kept for the next strategies (`LaunchMemo`)."""
    memo = _memo_for(memo, graph, kinds)
    cpus = memo.fusion.cpu_devices
    # the batch norms that may exchange (split by sample alone over consecutive CPUs), less
    # those whose group turns out not to launch together (usually none: one fuse)
    exchanging = frozenset(
        op for op in range(len(graph.ops)) if staging and memo.may_exchange(strategy, regions, op)
    )
    while exchanging:
        joined = fuse(graph, strategy, regions, cpus, exchanging, memo.fusion)
        failing = {
            op
            for g in joined
            if g.exchanges and not _launches_together(strategy, g.ops, kinds)
            for op in g.ops
        }
        if not failing & exchanging:
            return joined
        exchanging -= failing
    return fuse(graph, strategy, regions, cpus, memo=memo.fusion)


class LaunchMemo:
    """What counting a strategy's tasks (`iteration_tasks`, `run_groups`) works out from one
    op's configuration, or two ops' (`FusionMemo`), kept for the next strategies: a search's
    differ from the one before in an op or a few. The keys hold the configurations, so an
    entry is never stale; a memo belongs to one graph and one machine's device kinds, and
    starts afresh past LIMIT entries of a kind."""

    LIMIT = FusionMemo.LIMIT

    def __init__(self, graph: OperatorGraph, kinds: Sequence[str]) -> None:
        self.graph, self.kinds = graph, tuple(kinds)
        self.fusion = FusionMemo(graph, cpu_devices(kinds))
        self._first = first_users(graph)
        self._input_readers = tuple(
            sorted({op for t in graph.input_tensors for op in graph.consumers(t.id)})
        )
        self._regions: dict[tuple[int, ParallelConfig], tuple[Region, ...]] = {}
        self._may_exchange: dict[tuple[int, ParallelConfig], bool] = {}
        self._owners: dict[tuple[int, ParallelConfig], frozenset[int]] = {}
        self._shards: dict[tuple[ParallelConfig, ...], dict[int, tuple[Piece, ...]]] = {}

    def regions(self, strategy: Strategy) -> list[tuple[Region, ...]]:
        """Each op's task tiles (`ParallelConfig.task_regions`)."""
        found = []
        for node, config in zip(self.graph.ops, strategy.configs, strict=True):
            key = (node.id, config)
            tiles = self._regions.get(key)
            if tiles is None:
                make_room(self._regions, self.LIMIT)
                tiles = self._regions[key] = config.task_regions(node.sig.output_shape)
            found.append(tiles)
        return found

    def may_exchange(self, strategy, regions: Sequence[tuple[Region, ...]], op: int) -> bool:
        """Whether `op`'s tasks share batch statistics and are split by sample alone over
        consecutive CPUs, so it may exchange them in its group's launch (`run_groups`)."""
        key = (op, strategy[op])
        found = self._may_exchange.get(key)
        if found is None:
            make_room(self._may_exchange, self.LIMIT)
            found = self._may_exchange[key] = bool(
                self.graph.ops[op].op.statistics_dims
                and self.fusion.shared(strategy, regions, op)
                and _launches_together(strategy, (op,), self.kinds)
            )
        return found

    def update_owners(self, strategy: Strategy, regions: Sequence[tuple[Region, ...]]) -> int:
        """How many devices own update pieces (`flexflow.tiling.update_pieces`)."""
        owners: set[int] = set()
        for node, config in zip(self.graph.ops, strategy.configs, strict=True):
            if not node.weights:
                continue
            key = (node.id, config)
            found = self._owners.get(key)
            if found is None:
                make_room(self._owners, self.LIMIT)
                pieces = op_update_pieces(
                    self.graph, node.id, config, regions[node.id], self._first
                )
                found = self._owners[key] = frozenset(d for p in pieces.values() for _, d in p)
            owners |= found
        return len(owners)

    def input_shards(
        self, strategy: Strategy, regions: Sequence[tuple[Region, ...]]
    ) -> dict[int, tuple[Piece, ...]]:
        """`flexflow.tiling.input_shards`, which only the ops reading model inputs decide."""
        key = tuple(strategy[op] for op in self._input_readers)
        found = self._shards.get(key)
        if found is None:
            make_room(self._shards, self.LIMIT)
            found = self._shards[key] = input_shards(self.graph, strategy, regions)
        return found


def _memo_for(memo: LaunchMemo | None, graph: OperatorGraph, kinds: Sequence[str]) -> LaunchMemo:
    """`memo`, or a new one where None; one made for another graph or machine is a bug."""
    if memo is None:
        return LaunchMemo(graph, kinds)
    if memo.graph is not graph or memo.kinds != tuple(kinds):
        raise ValueError("the launch memo was made for another graph or other device kinds")
    return memo


def _launches_together(strategy: Strategy, ops: Sequence[int], kinds: Sequence[str]) -> bool:
    """Whether the tasks of `ops` (a group) can be one launch's points, point i naming the
    i-th of equal tiles along the first (sample) dimension of every tensor, or the same whole
    weight: every op split by sample alone over the same devices, consecutive CPUs in
    ascending order."""
    devices = strategy[ops[0]].devices
    split = (len(devices),)
    return isinstance(consecutive_cpus(devices, kinds), range) and all(
        strategy[op].devices == devices
        and strategy[op].degrees == split + (1,) * (len(strategy[op].degrees) - 1)
        for op in ops
    )


def iteration_tasks(
    graph: OperatorGraph,
    strategy: Strategy,
    kinds: Sequence[str],
    staging: bool = True,
    regions: Sequence[tuple[Region, ...]] | None = None,
    sparse_labels: bool = False,
    steps_per_execution: int = 1,
    memo: LaunchMemo | None = None,
) -> IterationTasks:
    """The Legate tasks of one `Executor.train_batch` (see the module doc). `kinds[d]` is the
    kind of device d ('cpu' or 'gpu'); `staging`: a single-rank run, whose step tasks may read
    model inputs from the process; `regions[op]`, the op's task tiles, when already known;
    `sparse_labels`: the loss is sparse categorical cross-entropy on integer labels, under which
    step tasks of dense chains run in C++ bodies (`cpp_steps`); `steps_per_execution`: the
    iterations `fit` issues per launch where it can (`FFConfig.steps_per_execution`);
    `memo`: kept for the next strategies (`LaunchMemo`, as `LaunchCounter` does)."""
    memo = _memo_for(memo, graph, kinds)
    if regions is None:
        regions = memo.regions(strategy)
    groups = run_groups(graph, strategy, regions, kinds, staging, memo)
    # the last group's tasks are always step-ready: nothing after it reads what it makes but
    # the model's output (`_internal`); built only where one group is the whole model, whose
    # steps may update and read their inputs in the task (a large group costs ~25 ms to build)
    last_tasks, sole = [], frozenset()
    if len(groups) == 1:
        sole = sole_gradients(graph, strategy, regions, groups)
        last_tasks = [
            fused_task(
                graph, groups[-1], index, [regions[op][index] for op in groups[-1].ops], sole
            )
            for index in range(strategy[groups[-1].ops[0]].num_tasks)
        ]
    steps = statistics = 0
    for group in groups:
        count, last = strategy[group.ops[0]].num_tasks, group is groups[-1]
        if group.shared_statistics:  # a batch norm whose tasks share statistics, alone
            statistics += 2 * count + 1  # statistics, running statistics; statistics again
            steps += 2 * count + (count if last else 0)  # forward, backward; the loss
        elif last:
            steps += count  # forward, loss and backward in one task
        else:
            steps += 2 * count
    # only a model that is one step task per device updates and reads its inputs inside it
    in_step = updates_in_step(graph, strategy, groups, [last_tasks], sole, kinds)
    staged = inputs_read_in_step(graph, strategy, groups, [last_tasks], kinds) if staging else {}
    updates = 0 if in_step else memo.update_owners(strategy, regions)
    feeds = sum(
        len(shards)
        for tid, shards in memo.input_shards(strategy, regions).items()
        if tid not in staged
    )
    cpp, per_launch = 0, 1
    if in_step and sparse_labels:  # flat parameters: flexflow.runtime.step_tasks.runs_in_cpp
        cpp = sum(runs_in_cpp_body(task) for task in last_tasks)
        # as flexflow.runtime.step_launches.plan_step_launch decides
        if (
            steps_per_execution > 1
            and cpp == len(last_tasks)
            and staged
            and isinstance(consecutive_cpus(strategy[len(graph.ops) - 1].devices, kinds), range)
        ):
            per_launch = steps_per_execution
    return IterationTasks(steps, statistics, updates, feeds, cpp, per_launch)


class LaunchCounter:
    """`iteration_tasks` of one graph's strategies on one machine, memoized: a search asks for
    the same strategies again (an undone proposal, its chain's current strategy), and its new
    ones differ from those in an op or a few (`LaunchMemo`)."""

    MEMO_LIMIT = 1 << 16
    """Strategies remembered; the memo starts afresh beyond it (a long search's early
    strategies are rarely asked for again)."""

    def __init__(
        self,
        graph: OperatorGraph,
        kinds: Sequence[str],
        staging: bool = True,
        sparse_labels: bool = False,
        steps_per_execution: int = 1,
    ) -> None:
        self.graph, self.kinds, self.staging = graph, tuple(kinds), staging
        self.sparse_labels, self.steps_per_execution = sparse_labels, steps_per_execution
        self._names = tuple(node.name for node in graph.ops)
        self._memo: dict[tuple[ParallelConfig, ...], IterationTasks] = {}
        self.memo = LaunchMemo(graph, kinds)
        """What the counts work out per op (`LaunchMemo`)."""

    def __call__(self, configs: Sequence[ParallelConfig]) -> IterationTasks:
        key = tuple(configs)
        found = self._memo.get(key)
        if found is None:
            make_room(self._memo, self.MEMO_LIMIT)
            strategy = Strategy(self._names, key)
            found = self._memo[key] = iteration_tasks(
                self.graph,
                strategy,
                self.kinds,
                self.staging,
                sparse_labels=self.sparse_labels,
                steps_per_execution=self.steps_per_execution,
                memo=self.memo,
            )
        return found
