"""Exhaustive search (paper §8.4): depth-first branch and bound over every strategy of a small space.

The ops are assigned in topological order; at each node the configurations of the next op are
tried in increasing order of the lower bound of `flexflow.search.bound` (an admissible bound:
it never exceeds the simulated time of any completion), and a subtree is cut as soon as its
bound reaches the best cost found, since nothing in it can be strictly faster. The search
starts from the best of the named strategies (dp, expert, model, moved into the space) and a
short MCMC chain from it, so cutting starts strong. Complete strategies are evaluated by delta
simulation from the previous one (neighbouring leaves in depth-first order differ in the last
op only). When the search finishes, the best strategy is the global optimum of the simulated
iteration time over the space; with a time budget it may stop early, and then
`ExhaustiveResult.complete` is False and the best is only the best found.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flexflow.errors import FlexFlowError
from flexflow.search.bound import LowerBound, Prefix, check_tabulable
from flexflow.search.collector import fewer_collections
from flexflow.search.mcmc import run_chain
from flexflow.search.spaces import Space, project
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.strategy import Strategy

SEED_STRATEGIES = ("dp", "expert", "model")
DEFAULT_SEED_PROPOSALS = 2000
# A subtree is cut when bound * (1 - SLACK) >= best: float rounding in the bound's sums (about
# 1e-15 relative) can then never cut a strategy that is strictly faster than the best.
SLACK = 1e-9
PROGRESS_EVERY_S = 0.25


@dataclass(frozen=True, slots=True)
class ExhaustiveStatus:
    """What a progress display shows while the search runs."""

    examined: int
    pruned: int
    pruned_leaves: int
    total: int
    best_s: float
    elapsed_s: float

    @property
    def covered(self) -> float:
        """Fraction of all strategies either simulated or inside a cut subtree."""
        return (self.examined + self.pruned_leaves) / self.total


@dataclass(frozen=True, slots=True)
class ExhaustiveResult:
    best: Strategy
    best_s: float
    examined: int  # complete strategies simulated
    pruned: int  # subtrees cut (a cut complete strategy counts as a subtree of one)
    seconds: float
    pruned_leaves: int = 0  # complete strategies inside the cut subtrees
    total: int = 0  # strategies in the space: examined + pruned_leaves when complete
    complete: bool = True  # False: stopped by the budget, best_s is NOT proven optimal
    seed_s: float = math.inf  # best of the named strategies and the MCMC chain
    seed_from: str = ""
    root_bound_s: float = 0.0  # the lower bound before any op is assigned

    @property
    def covered(self) -> float:
        """Fraction of the space simulated or cut (1 when complete)."""
        return (self.examined + self.pruned_leaves) / self.total if self.total else 1.0

    def to_json(self) -> dict:
        return {
            "best_iteration_ms": self.best_s * 1e3,
            "proven_optimal": self.complete,
            "examined": self.examined,
            "pruned": self.pruned,
            "pruned_strategies": self.pruned_leaves,
            "total_strategies": self.total,
            "covered": self.covered,
            "search_seconds": self.seconds,
            "seed_iteration_ms": self.seed_s * 1e3,
            "seed_from": self.seed_from,
            "root_bound_ms": self.root_bound_s * 1e3,
            "best": [
                {"op": op, "degrees": list(c.degrees), "devices": list(c.devices)}
                for op, c in self.best.items()
            ],
        }


def seed_incumbent(
    context: SimContext, space: Space, seed: int, proposals: int
) -> tuple[Strategy, float, str]:
    """The best of the named strategies in the space, improved by a short MCMC chain."""
    graph, machine = context.graph, context.machine
    starts = []
    for name in SEED_STRATEGIES:
        strategy = project(named_strategy(name, graph, machine, seed), space)
        starts.append((full_simulate(TaskGraph(context, strategy)).iteration_s, name, strategy))
    cost, name, strategy = min(starts, key=lambda s: s[0])
    if proposals > 0:
        chain = run_chain(
            context,
            name,
            strategy,
            space,
            np.random.default_rng(seed),
            reference_s=cost,
            max_proposals=proposals,
        )
        if chain.best_s < cost:
            cost, name, strategy = chain.best_s, f"mcmc from {name}", chain.best
    return strategy, cost, name


class _BranchAndBound:
    def __init__(
        self,
        context: SimContext,
        space: Space,
        incumbent: Strategy,
        incumbent_s: float,
        on_progress: Callable[[ExhaustiveStatus], None] | None,
        budget_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.bound = LowerBound(context, space)
        self.configs = self.bound.configs
        self.ops = tuple(node.name for node in context.graph.ops)
        n = len(self.configs)
        self.total = math.prod(len(c) for c in self.configs)
        # complete strategies below one configuration of op i
        self.leaves_below = [math.prod(len(c) for c in self.configs[i + 1 :]) for i in range(n)]
        self.best, self.best_s = incumbent, incumbent_s
        self.current = [0] * n
        first = Strategy(self.ops, tuple(c[0] for c in self.configs))
        self.sim = DeltaSimulator(TaskGraph(context, first))
        self.examined = self.pruned = self.pruned_leaves = 0
        self.on_progress, self.budget_s, self.clock = on_progress, budget_s, clock
        self.begin = self.last_report = clock()
        self.stopped = False

    def status(self) -> ExhaustiveStatus:
        return ExhaustiveStatus(
            self.examined,
            self.pruned,
            self.pruned_leaves,
            self.total,
            self.best_s,
            self.clock() - self.begin,
        )

    def visit(self, prefix: Prefix) -> None:
        i = len(prefix.chosen)
        children = self.bound.children(prefix)
        order = np.argsort(children.bounds, kind="stable")
        last = i == len(self.configs) - 1
        for rank, k in enumerate(order.tolist()):
            if self._out_of_time():
                return
            if children.bounds[k] * (1 - SLACK) >= self.best_s:
                left = len(order) - rank  # sorted: every later sibling is cut too
                self.pruned += left
                self.pruned_leaves += left * self.leaves_below[i]
                return
            if last:
                self.evaluate(prefix.chosen + (k,))
            else:
                self.visit(self.bound.extend(prefix, children, k))
            if self.stopped:
                return

    def evaluate(self, chosen: tuple[int, ...]) -> None:
        for op, k in enumerate(chosen):
            if self.current[op] != k:
                self.sim.change(op, self.configs[op][k])
                self.current[op] = k
        self.examined += 1
        cost = self.sim.iteration_s
        if cost < self.best_s:
            configs = tuple(c[k] for c, k in zip(self.configs, chosen, strict=True))
            self.best, self.best_s = Strategy(self.ops, configs), cost

    def _out_of_time(self) -> bool:
        now = self.clock()
        if self.on_progress is not None and now - self.last_report >= PROGRESS_EVERY_S:
            self.last_report = now
            self.on_progress(self.status())
        if now - self.begin >= self.budget_s:
            self.stopped = True
        return self.stopped


REACH_DIGITS = 15
"""Without a time budget, exhaustive search refuses a space of more than 10^this strategies:
pruning proves LeNet's 10^9.7 on p100:1 in about 30 s, while the paper's 10^11 (a 2-step RNNLM)
took it 18 hours; ResNet-101 on p100:1 has 10^353 (and tables small enough to build)."""


@fewer_collections()
def exhaustive_search(
    context: SimContext,
    space: Space,
    on_progress: Callable[[ExhaustiveStatus], None] | None = None,
    seed: int = 0,
    seed_proposals: int = DEFAULT_SEED_PROPOSALS,
    budget_s: float = math.inf,
    clock: Callable[[], float] = time.perf_counter,
) -> ExhaustiveResult:
    """The strategy of `space` with the least simulated iteration time, proven by branch and bound.

    `seed` and `seed_proposals` set the MCMC chain that seeds the best cost (0 proposals: named
    strategies only); the optimum found does not depend on them, only how fast it is proven.
    """
    if context.fused_launches:
        raise FlexFlowError(
            "exhaustive search bounds a launch per op; simulate without fused launches "
            "(SimContext(..., fused_launches=False), as `flexflow exhaustive` does)."
        )
    configs = [space(o) for o in range(len(context.graph.ops))]
    check_tabulable(context, configs)  # before seeding
    digits = sum(math.log10(len(c)) for c in configs)
    if digits > REACH_DIGITS and math.isinf(budget_s):
        raise FlexFlowError(
            f"exhaustive search: about 10^{digits:.0f} strategies on {context.machine.name}; no "
            "proof of a space that size ends (LeNet's 10^9.7 on p100:1 takes about 30 s). "
            f"Search it with MCMC (`flexflow search MODEL --machine {context.machine.name} "
            "--budget SECONDS`), or give a budget (--budget SECONDS) for the best strategy "
            "found in that time."
        )
    begin = clock()
    incumbent, incumbent_s, seed_from = seed_incumbent(context, space, seed, seed_proposals)
    search = _BranchAndBound(
        context, space, incumbent, incumbent_s, on_progress, budget_s - (clock() - begin), clock
    )
    root = search.bound.root()
    root_bound = float(search.bound.children(root).bounds.min())
    search.visit(root)
    # report the full simulation of the best strategy (delta and full simulation agree)
    best_s = full_simulate(TaskGraph(context, search.best)).iteration_s
    return ExhaustiveResult(
        search.best,
        best_s,
        search.examined,
        search.pruned,
        clock() - begin,
        search.pruned_leaves,
        search.total,
        not search.stopped,
        incumbent_s,
        seed_from,
        root_bound,
    )
