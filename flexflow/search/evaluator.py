"""A strategy under evaluation: its simulated cost, changed one op at a time (paper §6).

`Evaluator` evaluates every change by delta simulation (Algorithm 2), `FullEvaluator` by
building the task graph again and simulating it whole (Algorithm 1): the search the paper's
Table 4 compares delta simulation with. Both give every strategy exactly the same cost, so a
seeded search makes the same proposals and returns the same strategy with either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flexflow.errors import FlexFlowError
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph, full_simulate
from flexflow.strategy import ParallelConfig, Strategy

SIMULATIONS = ("delta", "full")
"""How a search evaluates its proposals (`make_evaluator`)."""

BOUND_PAYS = 16
"""`Evaluator` tries each proposal's load bound while it rejects one in this many tries."""


class Evaluator:
    """Holds the current strategy and its task graph; `propose` applies a one-op change, `revert` undoes it.

    Every evaluation is a delta simulation; reverting a rejected proposal restores the task
    graph and schedule as they were (`DeltaSimulator.undo`). A proposal with a finite cutoff
    is first bounded by its devices' and links' load (`TaskGraph.load_bound`): one that
    surely ends after the cutoff is rejected without building its task graph.
    """

    def __init__(self, context: SimContext, strategy: Strategy) -> None:
        self.context = context
        self.strategy = strategy
        self._delta = DeltaSimulator(TaskGraph(context, strategy))
        self._undo: Strategy | None = None  # the strategy before the last proposal
        self._bounded = False  # the last proposal was rejected by its load bound alone
        self._bound_tries = self._bound_hits = 0  # proposals it was tried on, rejected
        self.evaluations = 1

    @property
    def cost_s(self) -> float:
        """Simulated time of one training iteration under the current strategy (inf after
        a proposal above its cutoff, until `revert`)."""
        return math.inf if self._bounded else self._delta.iteration_s

    def propose(self, op: int, config: ParallelConfig, cutoff: float = math.inf) -> float:
        """Give `op` the configuration `config`; returns the new cost, or inf once the
        simulation shows it exceeds `cutoff` (then only `revert` may follow: a search that
        rejects every proposal above a cutoff need not simulate them to the end)."""
        changes = ((op, config),)
        if self._above(changes, cutoff):
            return math.inf
        self.strategy = self.strategy.replace(op, config)
        self._delta.change_many(changes, cutoff)
        return self.cost_s

    def propose_many(
        self, ops: Sequence[int], config: ParallelConfig, cutoff: float = math.inf
    ) -> float:
        """Give every op of `ops` the configuration `config` (a layer's unrolled steps): one
        delta simulation of all their changes; `cutoff` as for `propose`."""
        changes = tuple((op, config) for op in ops)
        if self._above(changes, cutoff):
            return math.inf
        self.strategy = self.strategy.replace_many(ops, config)
        self._delta.change_many(changes, cutoff)
        return self.cost_s

    def revert(self) -> float:
        """Undo the last `propose` or `propose_many`."""
        if self._undo is None:
            raise AssertionError("revert() without a proposal to undo")
        self.strategy, self._undo = self._undo, None
        if self._bounded:
            self._bounded = False  # nothing was changed
        else:
            self._delta.undo()  # the graph and schedule restored, not simulated again
        return self.cost_s

    def _above(self, changes: tuple[tuple[int, ParallelConfig], ...], cutoff: float) -> bool:
        """Start a proposal: whether its load bound alone puts it above `cutoff`. The bound
        costs a few percent of a proposal, so it is taken while it rejects at least one in
        BOUND_PAYS of those it is tried on, and on every BOUND_PAYS-th proposal otherwise
        (near a good strategy neighbours lose by their transfers, rarely by a device's load:
        0.6% of ResNet-101's chain proposals on 4 GPUs, 43% of AlexNet's). Whether it is
        taken never changes a decision, only how soon a rejection is known."""
        if self._bounded:
            raise AssertionError("a proposal above its cutoff must be reverted first")
        self._undo = self.strategy
        self.evaluations += 1
        if cutoff == math.inf or (
            self._bound_hits * BOUND_PAYS < self._bound_tries and self.evaluations % BOUND_PAYS
        ):
            return False
        self._bound_tries += 1
        self._bounded = self._delta.tg.load_bound(changes) > cutoff
        self._bound_hits += self._bounded
        return self._bounded


class FullEvaluator:
    """`Evaluator`'s interface with every proposal simulated from scratch: a new task graph
    and Algorithm 1. Only the current strategy and its cost are kept (and the last ones, for
    `revert`)."""

    def __init__(self, context: SimContext, strategy: Strategy) -> None:
        self.context = context
        self.strategy = strategy
        self.cost_s = self._simulate(strategy)
        self._undo: tuple[Strategy, float] | None = None
        self.evaluations = 1

    def propose(self, op: int, config: ParallelConfig, cutoff: float = math.inf) -> float:
        """The exact cost whatever `cutoff` (a cost above it is rejected all the same)."""
        return self._move(self.strategy.replace(op, config))

    def propose_many(
        self, ops: Sequence[int], config: ParallelConfig, cutoff: float = math.inf
    ) -> float:
        return self._move(self.strategy.replace_many(ops, config))

    def revert(self) -> float:
        if self._undo is None:
            raise AssertionError("revert() without a proposal to undo")
        (self.strategy, self.cost_s), self._undo = self._undo, None
        return self.cost_s

    def _move(self, strategy: Strategy) -> float:
        self._undo = (self.strategy, self.cost_s)
        self.strategy, self.cost_s = strategy, self._simulate(strategy)
        self.evaluations += 1
        return self.cost_s

    def _simulate(self, strategy: Strategy) -> float:
        return full_simulate(TaskGraph(self.context, strategy)).iteration_s


def make_evaluator(
    context: SimContext, strategy: Strategy, simulation: str = "delta"
) -> Evaluator | FullEvaluator:
    """An evaluator of `strategy` that simulates changes by `simulation` ("delta" or "full")."""
    if simulation == "delta":
        return Evaluator(context, strategy)
    if simulation == "full":
        return FullEvaluator(context, strategy)
    raise FlexFlowError(
        f"unknown simulation '{simulation}'; choose one of {', '.join(SIMULATIONS)}."
    )
