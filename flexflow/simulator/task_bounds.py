"""Lower bounds of a task graph's iteration time, known before simulating it: the cores' work, a change's busiest device.

A search skips the delta simulation (paper §5.2) of a change whose bound already passes its
cutoff (`DeltaSimulator.change_many`), and most proposals that overload a device never build
their tasks.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np

from flexflow.simulator.context import SimContext
from flexflow.simulator.keys import BWD_KEY, FWD_KEY, KIND_SHIFT, UPDATE_KEY
from flexflow.simulator.native_loop import load_bound, resource_load
from flexflow.simulator.task_times import one_native_split
from flexflow.strategy import ParallelConfig


class GraphLoad:
    """What `TaskGraph.load_bound` keeps of one graph (until it changes): each device's and
    link's load, the tasks a change of each op would remove, and scratch for the C call."""

    __slots__ = ("resources", "removed", "scratch")

    def __init__(self, resources: array) -> None:
        self.resources = resources
        self.removed: dict[int, array] = {}
        self.scratch = array("d", resources)


_IS_WORK = np.isin(np.arange(8), (FWD_KEY, BWD_KEY, UPDATE_KEY))
"""By task key kind: the tasks that keep a processor's core busy (compute and update)."""


class TaskGraphBounds:
    """`TaskGraph`'s lower bounds of its iteration time, read from its tasks' times and the
    change asked about, never from a simulation."""

    # what TaskGraph sets (flexflow/simulator/taskgraph.py); `native`, `_splits_after` and
    # `affected_blocks` are its and TaskGraphDeltas'
    context: SimContext
    runtime_s: float
    exe: array
    order: array
    live: array
    _block_tasks: list[array]
    _load: GraphLoad | None
    _work_s: float | None

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

    def load_bound(self, changes: Sequence[tuple[int, ParallelConfig]]) -> float:
        """A lower bound of the makespan after `set_configs(changes)`, found without making
        the change: the busiest device's or link's load once the blocks the change rebuilds
        lose their tasks and the changed ops gain their compute tasks under the new
        configurations (the rebuilt transfers, all-reduces and updates only add load). A
        search rejects most proposals that overload a device this way before building
        anything (AlexNet's chains from random strategies on 4 GPUs: 43% of them)."""
        native = one_native_split(self._splits_after(changes))
        if native != self.native:  # every op's tasks change: no bound from the changed ops
            return 0.0
        load = self._load
        if load is None:
            load = self._load = GraphLoad(resource_load(self))
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

    def _removed_by(self, load: GraphLoad, op: int) -> array:
        """The tasks a change of `op` removes from this graph (memoized in its `GraphLoad`: a
        scan tries every configuration of one op in turn)."""
        removed = load.removed.get(op)
        if removed is None:
            removed = load.removed[op] = array("i")
            for block in self.affected_blocks((op,)):
                removed += self._block_tasks[block]
        return removed
