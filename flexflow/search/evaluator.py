"""A strategy under evaluation: its simulated cost, changed one op at a time by delta simulation (paper §6)."""

from __future__ import annotations

from collections.abc import Sequence

from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph
from flexflow.strategy import ParallelConfig, Strategy


class Evaluator:
    """Holds the current strategy and its task graph; `propose` applies a one-op change, `revert` undoes it.

    Every evaluation is a delta simulation; reverting a rejected proposal restores the task
    graph and schedule as they were (`DeltaSimulator.undo`).
    """

    def __init__(self, context: SimContext, strategy: Strategy) -> None:
        self.context = context
        self.strategy = strategy
        self._delta = DeltaSimulator(TaskGraph(context, strategy))
        self._undo: tuple[int, ParallelConfig] | None = None
        self.evaluations = 1

    @property
    def cost_s(self) -> float:
        """Simulated time of one training iteration under the current strategy."""
        return self._delta.iteration_s

    def propose(self, op: int, config: ParallelConfig) -> float:
        """Give `op` the configuration `config`; returns the new cost."""
        self._undo = (op, self.strategy[op])
        self.strategy = self.strategy.replace(op, config)
        self._delta.change(op, config)
        self.evaluations += 1
        return self.cost_s

    def propose_many(self, ops: Sequence[int], config: ParallelConfig) -> float:
        """Give every op of `ops` the configuration `config` (a layer's unrolled steps); one
        full simulation of the new strategy, kept beside the old one so `revert` is free."""
        strategy = self.strategy
        for op in ops:
            strategy = strategy.replace(op, config)
        self._undo = (self.strategy, self._delta)
        self.strategy = strategy
        self._delta = DeltaSimulator(TaskGraph(self.context, strategy))
        self.evaluations += 1
        return self.cost_s

    def revert(self) -> float:
        """Undo the last `propose` or `propose_many`."""
        if self._undo is None:
            raise AssertionError("revert() without a proposal to undo")
        undo, self._undo = self._undo, None
        if isinstance(undo[0], Strategy):  # a many-op change: the old simulation is kept
            self.strategy, self._delta = undo
            return self.cost_s
        op, config = undo
        self.strategy = self.strategy.replace(op, config)
        self._delta.undo()  # the graph and schedule restored, not simulated again
        return self.cost_s
