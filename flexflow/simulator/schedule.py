"""Full simulation (paper Algorithm 1) and delta simulation (Algorithm 2) of a task graph.

The schedule both compute is the same, defined by three rules (Table 2):
- a task is ready when all its predecessors have ended (`ready_time`, 0 with none);
- every device and link runs its tasks one at a time (FIFO) in order of
  (`ready_time`, canonical task key) — the key breaks ties independently of task ids;
- `start_time` = max(`ready_time`, end of the previous task on each of its devices/links),
  `end_time` = `start_time` + `exe_time`. A transfer holds all links of its route at once.

Full simulation processes every task from a ready queue (a heap on that order). Delta
simulation (`DeltaSimulator`) updates the task graph in place and re-simulates only the tasks
that can be affected (see its docstring). Because every task on a device or link takes
positive time, the order in which tasks are taken never contradicts a device's FIFO order, so
both produce the same timeline (tests/simulator checks this property with hypothesis).
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left

from flexflow.simulator.taskgraph import TaskGraph

Entry = tuple[float, int, int]  # (ready_time, order: device-task flag and canonical key, task id)


class Schedule:
    """ready/start/end time of every task id (0 for free ids) and each resource's task order."""

    def __init__(self, tg: TaskGraph) -> None:
        self.tg = tg
        n = tg.size
        self.ready = [0.0] * n
        self.start = [0.0] * n
        self.end = [0.0] * n
        self.queues: list[list[Entry]] = [[] for _ in range(tg.num_resources)]

    @property
    def iteration_s(self) -> float:
        return max(self.end, default=0.0)

    def _grow(self) -> None:
        missing = self.tg.size - len(self.end)
        if missing > 0:
            self.ready += [0.0] * missing
            self.start += [0.0] * missing
            self.end += [0.0] * missing


def _run(tg: TaskGraph, schedule: Schedule, tasks: list[int], free: list[float]) -> None:
    """The event loop of Algorithm 1 over `tasks`, whose other predecessors have already ended.

    `free` holds the time each device and link becomes free; each task runs on all its
    resources as soon as it is ready and they are free, in (ready_time, key) order.
    """
    ready, start, end, queues = schedule.ready, schedule.start, schedule.end, schedule.queues
    exe, res, succs, order, preds = tg.exe, tg.res, tg.succs, tg.order, tg.preds
    member = set(tasks)
    remaining = {}
    heap: list[Entry] = []
    for t in tasks:
        r = 0.0
        waiting = 0
        for p in preds[t]:
            if p in member:
                waiting += 1
            elif end[p] > r:
                r = end[p]
        ready[t] = r
        if waiting:
            remaining[t] = waiting
        else:
            heap.append((r, order[t], t))
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        entry = pop(heap)
        r, _, t = entry
        s = r
        for x in res[t]:
            if free[x] > s:
                s = free[x]
        e = s + exe[t]
        for x in res[t]:
            free[x] = e
            queues[x].append(entry)
        start[t] = s
        end[t] = e
        for u in succs[t]:
            if e > ready[u]:
                ready[u] = e
            left = remaining[u] - 1
            if left:
                remaining[u] = left
            else:
                del remaining[u]
                push(heap, (ready[u], order[u], u))
    if remaining:
        raise AssertionError(
            f"{len(remaining)} tasks never became ready: the task graph has a cycle"
        )


def full_simulate(tg: TaskGraph) -> Schedule:
    """Algorithm 1: every task from scratch, taken from a ready queue in (ready_time, key) order."""
    schedule = Schedule(tg)
    _run(tg, schedule, list(tg.live_tasks()), [0.0] * tg.num_resources)
    return schedule


class DeltaSimulator:
    """Keeps a task graph and its schedule; `change` applies one op's new configuration.

    Delta simulation (Algorithm 2): the task graph is updated in place (only the blocks of
    the changed op, its edges and its parameters are rebuilt), and the schedule is kept up
    to the first moment T0 the change can affect: the earliest start of a removed task, the
    earliest time a new task or a task that lost a predecessor can become ready. Every task
    that started before T0 keeps its times (nothing it depends on moved); only the tasks
    starting at or after T0 are simulated again, from the device and link states at T0.
    """

    def __init__(self, tg: TaskGraph) -> None:
        self.tg = tg
        self.schedule = full_simulate(tg)
        self.replayed = 0  # tasks re-simulated by the last change, for benchmarks

    @property
    def iteration_s(self) -> float:
        return self.schedule.iteration_s

    def change(self, op: int, config) -> None:
        tg, s = self.tg, self.schedule
        removed = [t for block in tg.affected_blocks(op) for t in tg.blocks.get(block, [])]
        t0 = min((s.start[t] for t in removed), default=float("inf"))
        self._truncate(t0)  # drops every removed task from the device and link queues
        neighbours, added = tg.set_config(op, config)
        s._grow()
        fresh = set(added)
        for t in itertools.chain(removed, added):
            s.ready[t] = s.start[t] = s.end[t] = 0.0  # free ids and new tasks hold no time
        neighbours -= fresh  # a removed task's id may already be reused by a new task
        earliest = self._earliest_ready(fresh)
        for t in added:
            t0 = min(t0, earliest[t])
            neighbours.update(u for u in tg.succs[t] if u not in fresh)
        for u in neighbours:
            ready = max(
                (s.end[p] if p not in fresh else earliest[p] + tg.exe[p] for p in tg.preds[u]),
                default=0.0,
            )
            t0 = min(t0, s.start[u], ready)
        self._truncate(t0)
        forced = fresh | neighbours
        tasks = [t for t in range(tg.size) if tg.live[t] and (s.start[t] >= t0 or t in forced)]
        free = [0.0] * tg.num_resources
        for x, queue in enumerate(s.queues):
            if queue:
                free[x] = s.end[queue[-1][2]]
        self.replayed = len(tasks)
        _run(tg, s, tasks, free)

    def _earliest_ready(self, fresh: set[int]) -> dict[int, float]:
        """A lower bound of each new task's ready time: old predecessors' ends, new ones' bounds."""
        tg, end = self.tg, self.schedule.end
        bound: dict[int, float] = {}

        def visit(t: int) -> float:
            if t not in bound:
                bound[t] = max(
                    (end[p] if p not in fresh else visit(p) + tg.exe[p] for p in tg.preds[t]),
                    default=0.0,
                )
            return bound[t]

        for t in fresh:
            visit(t)
        return bound

    def _truncate(self, t0: float) -> None:
        """Keep in each device's and link's queue only the tasks that started before `t0`."""
        start = self.schedule.start
        for queue in self.schedule.queues:
            # a queue runs its tasks in start order, so those starting before t0 are a prefix
            del queue[bisect_left(queue, t0, key=lambda entry: start[entry[2]]) :]
