"""The execution optimizer (paper §6): MCMC chains from several initial strategies, best of all returned."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flexflow.errors import StrategyError
from flexflow.search.local import DescentStatus, descend
from flexflow.search.mcmc import (
    DEFAULT_BETA,
    DEFAULT_NEIGHBOUR_MOVES,
    PATH_CONTINUE,
    ChainResult,
    ChainStatus,
    path_chances,
    run_chain,
)
from flexflow.search.optcnn import optcnn_strategy
from flexflow.search.processes import run_in_processes
from flexflow.search.spaces import make_space, project
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import NAMED_STRATEGIES, data_parallel_over, named_strategy
from flexflow.strategy import Strategy
from flexflow.strategy_file import load_strategy

DP_WIDTH = "dp-width"
"""The initial strategy `fastest_dp_width` gives: data parallelism on the first n devices, at
the n that simulates fastest."""
DEFAULT_INITS = ("dp", "expert", "random", DP_WIDTH)


@dataclass(frozen=True, slots=True)
class SearchResult:
    best: Strategy
    best_s: float
    dp_s: float
    chains: tuple[ChainResult, ...]
    seconds: float
    polish_s: float = 0.0
    locally_optimal: bool | None = None
    """Whether the final descent finished (no single-op change is faster); None without one."""
    polish_improved_s: float | None = None
    """Seconds into the final descent when it last improved the strategy; None if it never
    did (the chains' best is returned)."""
    chains_started_s: tuple[float, ...] = ()
    """Seconds from the start when each chain started (one after the other, or at once)."""
    chains_ended_s: float = 0.0
    """Seconds from the start when the last chain ended."""
    descent_history: tuple[tuple[float, float], ...] = ()
    """The final descent's (seconds into it, simulated iteration time) at its start and after
    every improvement; empty without one."""

    @property
    def converged_s(self) -> float:
        """Seconds from the start until the returned strategy was in hand: set-up, the chains
        run before the best one and the best chain's last improvement; or, when the final
        descent improved on it, every chain and the descent up to its last improvement."""
        if not self.chains:
            return self.seconds
        best = min(self.chains, key=lambda c: c.best_s)
        if self.polish_improved_s is not None:
            return self.chains_ended_s + self.polish_improved_s
        return self.chains_started_s[self.chains.index(best)] + best.history[-1][0]

    @property
    def proposals(self) -> int:
        return sum(c.proposals for c in self.chains)

    @property
    def acceptance_rate(self) -> float:
        return sum(c.accepted for c in self.chains) / max(self.proposals, 1)

    @property
    def speedup_over_dp(self) -> float:
        return self.dp_s / self.best_s

    def to_json(self) -> dict:
        return {
            "best_iteration_ms": self.best_s * 1e3,
            "dp_iteration_ms": self.dp_s * 1e3,
            "speedup_over_dp": self.speedup_over_dp,
            "proposals": self.proposals,
            "acceptance_rate": self.acceptance_rate,
            "search_seconds": self.seconds,
            "converged_seconds": self.converged_s,
            "locally_optimal": self.locally_optimal,
            "chains": [
                {
                    "init": c.init,
                    "initial_iteration_ms": c.initial_s * 1e3,
                    "best_iteration_ms": c.best_s * 1e3,
                    "proposals": c.proposals,
                    "acceptance_rate": c.acceptance_rate,
                    "seconds": c.seconds,
                }
                for c in self.chains
            ],
        }


def fastest_dp_width(context: SimContext) -> Strategy:
    """Data parallelism on the first n devices (`data_parallel_over`), at the n dividing the
    device count whose strategy simulates fastest (the smallest n of equal times).

    A chain from data parallelism on every device cannot reach it by one-op moves, each of
    which pays transfers on both sides of the op it narrows, yet on a large machine with a
    small batch it can be much faster: on 64 K80s (k80:16, batch 64) Inception-v3's data
    parallelism on 16 GPUs simulates at 111 ms against 206 ms on all 64 (its batch norms'
    statistics all-reduce over 64 GPUs, one sample each), where the chains from data
    parallelism, the expert strategy and a random strategy found 185 ms."""
    graph, n = context.graph, context.machine.num_devices
    widths = [w for w in range(1, n + 1) if n % w == 0]
    candidates = {}  # a width whose batch split equals a smaller one's adds nothing
    for width in widths:
        candidates.setdefault(data_parallel_over(graph, width), width)
    timed = [
        (full_simulate(TaskGraph(context, strategy)).iteration_s, width, strategy)
        for strategy, width in candidates.items()
    ]
    return min(timed, key=lambda entry: entry[:2])[2]


def initial_strategy(
    init: str,
    context: SimContext,
    seed: int,
    role: str = "initial strategy",
    warn_other_machine: bool = False,
) -> Strategy:
    """A named strategy ("random" is seeded per chain), data parallelism at its fastest width
    ("dp-width", `fastest_dp_width`), the OptCNN baseline's strategy ("optcnn": it lies in the
    SOAP space, so a chain may start from it), or a strategy file. `role` names it in the
    error for a value that is none of these (the CLI's `--strategy` is not a chain's start);
    `warn_other_machine` warns of a file written for another machine (not for a chain's
    start, which the search adapts)."""
    if init == DP_WIDTH:
        return fastest_dp_width(context)
    if init in NAMED_STRATEGIES:
        return named_strategy(init, context.graph, context.machine, seed)
    if init == "optcnn":
        from flexflow.search.optcnn import optcnn_strategy

        return optcnn_strategy(context)
    if not Path(init).exists():  # most likely a misspelt name
        names = ", ".join((*NAMED_STRATEGIES, DP_WIDTH, "optcnn"))
        raise StrategyError(f"{role} '{init}' is neither a name ({names}) nor a strategy file.")
    return load_strategy(init, context.graph, context.machine, warn_other_machine)


def search(
    context: SimContext,
    budget_s: float = 30.0,
    seed: int = 0,
    inits: Sequence[str] = DEFAULT_INITS,
    space: str = "soap",
    beta: float = DEFAULT_BETA,
    max_proposals: int | None = None,
    on_status: Callable[[ChainStatus], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    polish: bool = True,
    polish_budget_s: float | None = None,
    simulation: str = "delta",
    on_descent: Callable[[DescentStatus], None] | None = None,
    workers: int = 1,
    neighbour_moves: float = DEFAULT_NEIGHBOUR_MOVES,
    path_moves: float | None = None,
    narrow_sweeps: bool = True,
    path_continue: float | Sequence[float] = PATH_CONTINUE,
) -> SearchResult:
    """Run one chain per initial strategy, each with an equal share of the budget (each with
    its own random stream, seeded by (`seed`, its index)).

    With `polish`, the best strategy then descends to a local optimum (no single-op change
    makes it faster, paper §8.4); that final descent is bounded by `polish_budget_s` only (a
    descent over every neighbour of a 200-op graph on 16 GPUs takes minutes), and
    `locally_optimal` says whether it finished; `narrow_sweeps` is the descent's `narrow`.
    `workers` > 1 runs that many chains at once in worker processes, each then given
    `budget_s` / (waves of chains), and the final descent's scans in that many
    processes; with a proposal budget the result is the same as with one worker.
    `on_status` and `on_descent` get the chains' and the final descent's progress.
    `simulation="full"` evaluates every proposal by simulating its whole task graph again
    instead of by delta simulation: the same result, slower (the paper's Table 4 compares them).
    `neighbour_moves` is the share of one-op proposals taking a neighbour's configuration
    (`flexflow.search.mcmc`), `path_moves` that of one-op proposals extended to a path of
    neighbours (None: the graph's default, `flexflow.search.mcmc.path_moves_for`), whose walks
    go on with probability `path_continue` after each step (one of them drawn per walk).
    `space="optcnn"` runs the OptCNN baseline's dynamic programming instead of MCMC (no
    chains, no polish) and reports its strategy's simulated cost.
    """
    if not inits and space != "optcnn":
        names = ", ".join((*NAMED_STRATEGIES, DP_WIDTH))
        raise StrategyError(
            f"search: no initial strategy to start a chain from; give one or more of {names} "
            "or a strategy file (--init dp,expert,random)."
        )
    path_chances(path_continue)  # here, not first in a worker process
    begin = clock()
    graph, machine = context.graph, context.machine
    dp = named_strategy("dp", graph, machine)
    dp_s = full_simulate(TaskGraph(context, dp)).iteration_s
    if space == "optcnn":
        strategy = optcnn_strategy(context)
        cost = full_simulate(TaskGraph(context, strategy)).iteration_s
        return SearchResult(strategy, cost, dp_s, (), clock() - begin)
    proposal_space = make_space(space, graph, machine)
    starts = [(init, initial_strategy(init, context, seed + i)) for i, init in enumerate(inits)]
    if "dp" in inits:  # dp-width is DP itself (fastest on every device): the dp chain covers it
        starts = [(name, s) for name, s in starts if name != DP_WIDTH or s != dp]
    if space != "soap":  # a restricted space's chains start inside it
        starts = [(name, project(s, proposal_space)) for name, s in starts]
    at_once = min(workers, len(starts))
    share = budget_s / math.ceil(len(starts) / at_once)  # chains run in waves of `at_once`

    def proposals_of(index: int) -> int | None:
        """The chain's share of `max_proposals`: all of them in all (the first chains take
        the remainder), so `--proposals N` makes at most N."""
        if max_proposals is None:
            return None
        each, rest = divmod(max_proposals, len(starts))
        return each + (index < rest)

    def run(index: int, name: str, start: Strategy, report, chain_clock) -> ChainResult:
        # a random stream per chain: the same proposals one after the other or at once
        rng = np.random.default_rng([seed, index])
        return run_chain(
            context,
            name,
            start,
            proposal_space,
            rng,
            dp_s,
            beta,
            share,
            proposals_of(index),
            report,
            chain_clock,
            simulation=simulation,
            neighbour_moves=neighbour_moves,
            path_moves=path_moves,
            path_continue=path_continue,
        )

    if at_once == 1:
        chains, started = [], []
        for index, (name, start) in enumerate(starts):
            started.append(clock() - begin)
            chains.append(run(index, name, start, on_status, clock))
    else:
        if clock is not time.perf_counter:
            raise ValueError("chains in processes read time.perf_counter; pass no other clock")
        chains, started = run_in_processes(starts, run, at_once, on_status)
        started = [t - begin for t in started]
    best = min(chains, key=lambda c: c.best_s)
    strategy, cost = best.best, best.best_s
    polish_begin = clock()
    local = improved = None
    descent_history: tuple[tuple[float, float], ...] = ()
    if polish:
        descent = descend(
            context,
            strategy,
            proposal_space,
            polish_budget_s,
            clock,
            simulation,
            on_descent,
            workers,
            narrow_sweeps,
        )
        strategy, local, improved = descent.strategy, descent.finished, descent.improved_at_s
        descent_history = descent.history
        cost = full_simulate(TaskGraph(context, strategy)).iteration_s
    polish_s = clock() - polish_begin
    return SearchResult(
        strategy,
        cost,
        dp_s,
        tuple(chains),
        clock() - begin,
        polish_s,
        local,
        improved,
        tuple(started),
        polish_begin - begin,
        descent_history,
    )
