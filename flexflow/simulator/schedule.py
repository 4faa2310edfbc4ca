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
from bisect import bisect_left

from flexflow.simulator.taskgraph import BARRIER, TaskGraph

Entry = tuple[float, int, tuple, int]  # (ready_time, device task?, key, task id)


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
    exe, res, succs, key, kind, preds = tg.exe, tg.res, tg.succs, tg.key, tg.kind, tg.preds
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
            heap.append((r, kind[t] != BARRIER, key[t], t))
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        entry = pop(heap)
        r, _, _, t = entry
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
                push(heap, (ready[u], kind[u] != BARRIER, key[u], u))
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
        for t in removed:
            s.ready[t] = s.start[t] = s.end[t] = -1.0  # marks "not an old task" below
        neighbours, added = tg.set_config(op, config)
        s._grow()
        fresh = set(added)
        for t in added:
            s.ready[t] = s.start[t] = s.end[t] = -1.0
        for t in added:
            old_preds = [s.end[p] for p in tg.preds[t] if p not in fresh]
            t0 = min(t0, max(old_preds, default=0.0))
            for u in tg.succs[t]:
                if u not in fresh:
                    neighbours.add(u)
        for u in neighbours:
            t0 = min(
                t0, s.start[u], max((s.end[p] for p in tg.preds[u] if p not in fresh), default=0.0)
            )
        self._replay(t0, fresh | neighbours)

    def _replay(self, t0: float, forced: set[int]) -> None:
        tg, s = self.tg, self.schedule
        start, end, live = s.start, s.end, tg.live
        tasks = [t for t in range(tg.size) if live[t] and (start[t] >= t0 or t in forced)]
        free = [0.0] * tg.num_resources
        for x, queue in enumerate(s.queues):
            # tasks on a device or link run in start order: those starting before t0 are kept
            keep = bisect_left(queue, t0, key=lambda entry: start[entry[3]])
            while keep and not live[queue[keep - 1][3]]:
                keep -= 1  # cannot happen for removed tasks (they start at or after t0)
            del queue[keep:]
            if keep:
                free[x] = end[queue[keep - 1][3]]
        self.replayed = len(tasks)
        _run(tg, s, tasks, free)
