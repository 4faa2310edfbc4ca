"""Local optimality (paper §8.4): does any single-op change make a strategy faster?"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from flexflow.search.evaluator import Evaluator
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
    """The strategy's cost and every single-op change that lowers it, fastest first."""
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
            evaluator.revert()
        if on_op is not None:
            on_op(op)
    return base, sorted(better, key=lambda n: n.iteration_s)


def descend(context: SimContext, strategy: Strategy, space: Space) -> Strategy:
    """Take the best improving neighbour until none is left: a locally optimal strategy."""
    while True:
        _, better = improving_neighbours(context, strategy, space)
        if not better:
            return strategy
        strategy = strategy.replace(better[0].op, better[0].config)
