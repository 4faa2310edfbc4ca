"""Local optimality (paper §8.4): does any single-op change make a strategy faster?"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from flexflow.search.evaluator import Evaluator, FullEvaluator, make_evaluator
from flexflow.search.spaces import Space
from flexflow.simulator import SimContext
from flexflow.strategy import ParallelConfig, Strategy

RELATIVE_TOLERANCE = 1e-9  # a neighbour must be faster by more than rounding noise


@dataclass(frozen=True, slots=True)
class Neighbour:
    op: str
    config: ParallelConfig
    iteration_s: float


def improving_neighbours(
    context: SimContext,
    strategy: Strategy,
    space: Space,
    on_op: Callable[[int], None] | None = None,
) -> tuple[float, list[Neighbour]]:
    """The strategy's cost and every single-op change that lowers it, fastest first.

    An op's configurations are tried one after the other, each a delta simulation from the
    one before (delta simulation gives the same times whatever the path), and the op gets its
    own configuration back once after them: half the simulations of reverting each one."""
    evaluator = Evaluator(context, strategy)
    base = evaluator.cost_s
    better = []
    for op in range(len(strategy)):
        for config in space(op):
            if config == strategy[op]:
                continue
            cost = evaluator.propose(op, config)
            if cost < base * (1 - RELATIVE_TOLERANCE):
                better.append(Neighbour(strategy.ops[op], config, cost))
        _settle(evaluator, op, strategy[op])
        if on_op is not None:
            on_op(op)
    return base, sorted(better, key=lambda n: n.iteration_s)


def _settle(evaluator: Evaluator | FullEvaluator, op: int, config: ParallelConfig) -> float:
    """Give `op` the configuration `config` unless it has it; the cost either way."""
    if evaluator.strategy[op] != config:
        return evaluator.propose(op, config)
    return evaluator.cost_s


@dataclass(frozen=True, slots=True)
class Descent:
    """What `descend` returns."""

    strategy: Strategy
    finished: bool
    """The strategy is locally optimal (the descent did not run out of time)."""
    improved_at_s: float | None
    """Seconds into the descent when it last improved the strategy; None if it never did."""


@dataclass(frozen=True, slots=True)
class DescentStatus:
    """What a progress display shows while `descend` runs."""

    cost_s: float
    """The current strategy's simulated iteration time."""
    unchanged: int
    """Ops examined in a row without an improvement: the descent is done at `num_ops`."""
    num_ops: int
    neighbours: int
    """Single-op changes simulated so far."""
    improvements: int
    elapsed_s: float


STATUS_EVERY = 64
"""Neighbours between two `DescentStatus` reports inside one op (a 64-GPU op has thousands)."""


def descend(
    context: SimContext,
    strategy: Strategy,
    space: Space,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    simulation: str = "delta",
    on_status: Callable[[DescentStatus], None] | None = None,
) -> Descent:
    """Coordinate descent: give each op in turn its best configuration with the others fixed,
    cycling over the ops until a full sweep changes nothing, so the result is locally optimal.

    With `budget_s` it stops after that many seconds, and `finished` says whether it got
    there (the strategy is then locally optimal) or ran out of time (it is only no worse).
    `simulation` says how each neighbour is simulated (`make_evaluator`); `on_status` gets a
    `DescentStatus` after every op and every STATUS_EVERY neighbours."""
    begin = clock()
    deadline = None if budget_s is None else begin + budget_s
    evaluator = make_evaluator(context, strategy, simulation)
    current = evaluator.cost_s
    unchanged = 0  # ops examined since the last improvement
    improved_at = None
    improvements = 0
    op = 0

    def report() -> None:
        if on_status is not None:
            status = DescentStatus(
                current,
                unchanged,
                len(strategy),
                evaluator.evaluations - 1,
                improvements,
                clock() - begin,
            )
            on_status(status)

    while unchanged < len(strategy):
        start = evaluator.strategy[op]
        best, best_cost = start, current
        for config in space(op):  # each a delta from the last (see `improving_neighbours`)
            if deadline is not None and clock() > deadline:
                _settle(evaluator, op, best)
                improved_at = clock() - begin if best != start else improved_at
                return Descent(evaluator.strategy, False, improved_at)
            if config == start:
                continue
            cost = evaluator.propose(op, config)
            if cost < best_cost * (1 - RELATIVE_TOLERANCE):
                best, best_cost = config, cost
            if evaluator.evaluations % STATUS_EVERY == 0:
                report()
        current = _settle(evaluator, op, best)
        if best != start:
            unchanged, improved_at = 0, clock() - begin
            improvements += 1
        else:
            unchanged += 1
        report()
        op = (op + 1) % len(strategy)
    return Descent(evaluator.strategy, True, improved_at)
