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

Both run in C (native/simulator.c through flexflow/simulator/native_loop.py);
flexflow/simulator/reference.py keeps the event loop in Python as the specification.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

from flexflow.simulator.native_loop import TimesLog, restore, simulate
from flexflow.simulator.taskgraph import TaskGraph
from flexflow.strategy import ParallelConfig


class Schedule:
    """ready/start/end time of every task id (0 for free ids), in arrays the C loop writes."""

    def __init__(self, tg: TaskGraph) -> None:
        self.tg = tg
        zeros = array("d", bytes(8 * tg.size))
        self.ready, self.start, self.end = zeros, array("d", zeros), array("d", zeros)
        self.iteration_s = 0.0  # the latest end, set by each simulation

    def grow(self) -> None:
        """Give the task ids the graph gained since the last simulation an entry."""
        missing = self.tg.size - len(self.end)
        if missing > 0:
            zeros = array("d", bytes(8 * missing))
            self.ready += zeros
            self.start += zeros
            self.end += zeros


def full_simulate(tg: TaskGraph) -> Schedule:
    """Algorithm 1: every task from scratch, taken from a ready queue in (ready_time, key) order."""
    schedule = Schedule(tg)
    simulate(tg, schedule, -math.inf, index=tg.edge_index)
    return schedule


class DeltaSimulator:
    """Keeps a task graph and its schedule; `change` applies one op's new configuration
    (`change_many` several ops' at once).

    Delta simulation (Algorithm 2): the task graph is updated in place (only the blocks of
    the changed op, its edges and its parameters are rebuilt), and the schedule is kept up
    to the first moment T0 the change can affect: the earliest start of a removed task (its
    ready time if it held several links: a task queued behind it on a link it left idle
    can now start earlier), the earliest time a new task or a task that lost a predecessor
    can become ready. Every task that started before T0 keeps its times (nothing it depends
    on moved, nothing can now overtake it on its devices); only the tasks starting at or
    after T0 are simulated again, from the device and link states at T0 (each is free from
    the latest end of the kept tasks on it).
    """

    def __init__(self, tg: TaskGraph) -> None:
        self.tg = tg
        self.schedule = full_simulate(tg)
        self.replayed = 0  # tasks re-simulated by the last change, for benchmarks
        self._before: float | None = None  # the iteration time before the last change
        self._log = TimesLog()  # the times the last change overwrote (`undo`)
        self._skipped = False  # the last change was not simulated (its cores' bound: `undo`)

    @property
    def iteration_s(self) -> float:
        return self.schedule.iteration_s

    def change(self, op: int, config: ParallelConfig, cutoff: float = math.inf) -> None:
        self.change_many(((op, config),), cutoff)

    def change_many(
        self, changes: Sequence[tuple[int, ParallelConfig]], cutoff: float = math.inf
    ) -> None:
        """Several ops' new configurations as one delta (`TaskGraph.set_configs`). Once the
        iteration surely ends after `cutoff` (`native_loop.simulate`'s bounds), the simulation
        stops with `iteration_s` inf; only `undo` may come next (the graph is changed; the
        times are as before). Under the runtime's per-task cost a change whose cores' whole
        work already ends the iteration after `cutoff` (`TaskGraph.cores_bound_s`) is not
        simulated at all: a third of LeNet's proposals on this host's 2 CPUs, which the
        timeline's bounds never cut (its cores, not one of them, set the iteration)."""
        if self.iteration_s == math.inf and self._before is not None:
            raise AssertionError("a change stopped at its cutoff must be undone first")
        s = self.schedule
        self._before = s.iteration_s
        change = self.tg.set_configs(changes)
        if self.tg.cores_bound_s() > cutoff:
            self._skipped, self.replayed = True, 0
            s.iteration_s = math.inf
            return
        if len(s.end) < self.tg.size:  # the schedule grows: the log's view of it goes
            self._log.release()
            s.grow()
        # what `undo` restores: the C loop logs each time before it overwrites it (a change
        # stopped early by its cutoff logs a few, where a copy would take every task's)
        self._log.reserve(len(change.removed) + len(change.added) + self.tg.size)
        self.replayed = simulate(
            self.tg, s, math.inf, change, cutoff, self._log, self.tg.edge_index
        )

    def undo(self) -> None:
        """Take back the last `change`: the task graph and the schedule are as before it."""
        self.tg.undo()
        if self._skipped:  # neither the times nor the index's kept selection were touched
            self._skipped = False
        else:
            restore(self.schedule, self._log)
            self.tg.edge_index.undone()  # the schedule is the one the change started from
        self.schedule.iteration_s = self._before
        self._before = None
