"""The strategy a training run uses, chosen at compile time as FlexFlow does.

`--import-strategy FILE` uses a strategy file (validated against this machine); otherwise
`--budget SECONDS` > 0 runs the MCMC search for that long on the machine Legate gives this
process (`local`), and no budget means data parallelism. `--export-strategy FILE` writes the
chosen strategy atomically. Importing a strategy and searching are exclusive: a search can
start from a file with `flexflow search --init FILE` instead.

After a search, the strategies the simulation cannot tell from its pick are timed (`trials`):
the pick, data parallelism, everything on one device and the expert strategy, those of them
that simulate within TRIAL_MARGIN of the fastest, each trained for a few iterations on
synthetic batches (`flexflow.runtime.trials`), and the fastest measured is kept. Why: on a
small host the planning simulation is off by 11-38% on average (benchmarks/results/
fidelity-s25.md), enough to prefer a strategy that runs slower: on a 2-core host a search's
pick simulated 1.04x faster than data parallelism trained LeNet 2x slower, and ResNet-101's
data parallelism, simulated 4% faster than one CPU, ran 1.3x slower than it (README,
Training).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from flexflow.cost import CostModel, Profile
from flexflow.errors import StrategyError
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.ops import DimKind
from flexflow.strategy import Strategy

if TYPE_CHECKING:
    from flexflow.search.search import SearchResult

TRIAL_MARGIN = 0.25
"""Strategies simulated within this fraction of the fastest are timed after a search: about
the planning simulation's mean error on this project's hosts (11-38%, fidelity-s25)."""


MIN_TRIAL_LAUNCHES = 2
"""Timed launches per candidate at least, after one to warm it up
(`flexflow.runtime.trials`)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A strategy timed after a search (`close_candidates`), and what it measured."""

    label: str
    strategy: Strategy
    simulated_ms: float
    measured_ms: float | None = None


Measure = Callable[[Sequence[Candidate], float], Sequence[float]]
"""Seconds per training iteration of each candidate, measured within about a budget in
seconds (`flexflow.runtime.trials.time_candidates`)."""
Agree = Callable[..., tuple[Strategy, str]]
"""(strategy, simulated seconds, imported=FILE or None) -> the strategy every rank of the run
keeps, with a note for people (`flexflow.runtime.agreement.agree_on_strategy`)."""


@dataclass(frozen=True, slots=True)
class Plan:
    strategy: Strategy
    source: str
    """How it was chosen, for people: 'data parallelism', 'imported from F', 'searched ...'."""
    simulated_ms: float
    dp_simulated_ms: float
    trials: tuple[Candidate, ...] = ()
    """The candidates timed after the search, with their measured times (none: no trials)."""
    search: SearchResult | None = None
    """The search's chains and descent (`flexflow.search.plot` draws them); None when the
    strategy was imported, resumed or data parallelism without a search."""

    def describe(self) -> str:
        ratio = self.dp_simulated_ms / self.simulated_ms
        if round(ratio, 2) == 1:  # data parallelism itself, or as fast
            return f"{self.source}; simulated {self.simulated_ms:.3f} ms per iteration"
        versus = (
            f"{ratio:.2f}x faster than" if ratio > 1 else f"{1 / ratio:.2f}x slower than"
        )  # a ratio below 1 ("0.02x data parallelism's") read as the opposite
        return (
            f"{self.source}; simulated {self.simulated_ms:.3f} ms per iteration ({versus} "
            f"data parallelism's {self.dp_simulated_ms:.3f} ms)"
        )


def _idle_devices(graph: OperatorGraph, dp: Strategy, machine: Machine) -> str:
    """A note when the batch does not split over every device, so data parallelism leaves
    some idle (each op splits its batch by the largest degree that divides it)."""
    used = max(config.num_tasks for config in dp.configs)
    if used == machine.num_devices:
        return ""
    sig = graph.ops[0].sig
    batch = next(
        n for d, n in zip(sig.dims, sig.output_shape, strict=True) if d.kind is DimKind.SAMPLE
    )
    return (
        f" on {used} of {machine.num_devices} devices: batch {batch} does not split over "
        f"{machine.num_devices} (a batch size divisible by {machine.num_devices} uses them all)"
    )


def sparse(loss: str | None) -> bool:
    """Whether the loss named `loss` (any name `compile` takes) takes integer labels (its
    steps may run in C++ bodies)."""
    from flexflow.runtime.loss import loss_name  # no Legate

    return loss is not None and loss_name(loss) == "sparse_categorical_crossentropy"


def planning_context(
    graph: OperatorGraph,
    machine: Machine,
    profile: Profile | None = None,
    loss: str | None = None,
    steps_per_execution: int = 1,
    cost: CostModel | None = None,
):
    """The simulation a training run's strategy is planned with: this project's runtime, which
    fuses ops (`flexflow.fusion`) and costs the host CPU time per Legate task
    (`flexflow.launches`), priced by `cost` (default: the analytic model, or `profile` where it
    has the task); `loss` tells which step tasks run in C++ bodies, and `steps_per_execution`
    how many iterations `fit` issues per launch of them."""
    from flexflow.simulator import SimContext

    return SimContext(
        graph,
        machine,
        cost or CostModel(profile),
        fused_launches=True,
        sparse_labels=sparse(loss),
        steps_per_execution=steps_per_execution,
    )


def _is_name(import_path: str | os.PathLike[str]) -> bool:
    """Whether `import_path` names a strategy (`flexflow.strategies.NAMED_STRATEGIES`, as the
    `flexflow` commands take them) and no file of that name exists."""
    from flexflow.strategies import NAMED_STRATEGIES

    return str(import_path) in NAMED_STRATEGIES and not os.path.exists(import_path)


def plan_strategy(
    graph: OperatorGraph,
    machine: Machine,
    *,
    budget_s: float = 0.0,
    import_path: str | os.PathLike[str] | None = None,
    export_path: str | os.PathLike[str] | None = None,
    seed: int = 0,
    model_name: str = "model",
    console: Console | None = None,
    profile: Profile | None = None,
    loss: str | None = None,
    steps_per_execution: int = 1,
    measure: Measure | None = None,
    agree: Agree | None = None,
    resumed: Strategy | None = None,
) -> Plan:
    """Choose the strategy for `graph` on `machine` (see the module doc), simulating with the
    measured task times of `profile` where it has them; `loss`, the run's loss, and
    `steps_per_execution`, its iterations per launch, tell what the runtime will cost
    (`planning_context`). After a search, `measure` times the close candidates (no trials
    where None), then `agree` makes the ranks of a run of several keep one pick (each
    searched with its own `seed`), or checks that they imported the same strategy.
    `resumed`: the strategy of the checkpoint a run resumes, which it keeps (no search) unless
    a strategy file is imported, so that it continues bit for bit."""
    from flexflow.search.progress import search_with_progress
    from flexflow.simulator import TaskGraph, full_simulate
    from flexflow.strategies import named_strategy
    from flexflow.strategy_file import export_strategy, load_strategy

    if import_path is not None and budget_s > 0:
        raise StrategyError(
            "give either --import-strategy or --budget, not both; to refine an imported "
            "strategy run `flexflow search MODEL --init FILE` and import its export."
        )
    if budget_s < 0:
        raise StrategyError(f"--budget must be >= 0 seconds, got {budget_s}.")
    console = console or Console(stderr=True)
    trials: tuple[Candidate, ...] = ()
    searched = None
    context = planning_context(graph, machine, profile, loss, steps_per_execution)
    dp = named_strategy("dp", graph, machine)
    dp_s = full_simulate(TaskGraph(context, dp)).iteration_s
    if import_path is not None and _is_name(import_path):  # --import-strategy dp
        strategy = named_strategy(str(import_path), graph, machine, seed)
        source = f"the named strategy '{import_path}'"
        if agree is not None:
            agree(strategy, dp_s, imported=str(import_path))
    elif import_path is not None:
        strategy = load_strategy(import_path, graph, machine)
        source = f"imported from {import_path}"
        if agree is not None:  # the same file on every rank
            agree(strategy, dp_s, imported=str(import_path))
    elif resumed is not None:
        strategy, source = resumed, "the checkpoint's, which the run it resumes trained with"
        if budget_s > 0:
            source += " (no search: another strategy would not continue it bit for bit)"
        if agree is not None:
            agree(strategy, dp_s, imported="the checkpoint")
    elif budget_s > 0:
        result = searched = search_with_progress(
            console,
            console.is_terminal,
            context,
            dp_s,
            budget_s,
            seed=seed,
            polish_budget_s=budget_s,
        )
        strategy = result.best
        source = (  # the chains stop early once they stop improving
            f"searched for {result.seconds:.1f} s of a {budget_s:g} s budget (its chains stop "
            f"once they stop improving; {result.proposals:,} proposals)"
        )
        if measure is not None:
            trials, why_not = _trial_runs(context, graph, machine, strategy, dp, budget_s, measure)
            if trials:
                kept = min(trials, key=lambda c: c.measured_ms)
                strategy, source = kept.strategy, f"{source}; {_describe_trials(trials, kept)}"
            elif why_not:
                source = f"{source}; {why_not}"
        if agree is not None:
            offered_s = full_simulate(TaskGraph(context, strategy)).iteration_s
            strategy, note = agree(strategy, offered_s)
            source = f"{source}; {note}" if note else source
    else:
        strategy, source = (
            dp,
            "data parallelism (no search: a budget of 0 s)" + _idle_devices(graph, dp, machine),
        )
    simulated_s = full_simulate(TaskGraph(context, strategy)).iteration_s
    if export_path is not None:
        export_strategy(export_path, strategy, graph, machine, model=model_name)
    return Plan(strategy, source, simulated_s * 1e3, dp_s * 1e3, trials, searched)


def close_candidates(
    context, graph: OperatorGraph, machine: Machine, searched: Strategy, dp: Strategy
) -> tuple[Candidate, ...]:
    """The search's pick, data parallelism, everything on one device and the expert strategy,
    each once, that simulate within TRIAL_MARGIN of the fastest of them, fastest first."""
    from flexflow.simulator import TaskGraph, full_simulate
    from flexflow.strategies import data_parallel_over, named_strategy

    named = {
        "searched": searched,
        "data parallelism": dp,
        "one device": data_parallel_over(graph, 1),
        "expert": named_strategy("expert", graph, machine),
    }
    seen: dict[Strategy, Candidate] = {}
    for label, strategy in named.items():
        if strategy not in seen:
            simulated = full_simulate(TaskGraph(context, strategy)).iteration_s * 1e3
            seen[strategy] = Candidate(label, strategy, simulated)
    fastest = min(c.simulated_ms for c in seen.values())
    close = [c for c in seen.values() if c.simulated_ms <= fastest * (1 + TRIAL_MARGIN)]
    return tuple(sorted(close, key=lambda c: c.simulated_ms))


def _trial_runs(
    context,
    graph: OperatorGraph,
    machine: Machine,
    searched: Strategy,
    dp: Strategy,
    budget_s: float,
    measure: Measure,
) -> tuple[tuple[Candidate, ...], str]:
    """The close candidates with their measured times, or none and why (nothing to say
    where the pick alone is close)."""
    candidates = close_candidates(context, graph, machine, searched, dp)
    if len(candidates) < 2:
        return (), ""
    # the least the trials take as simulated (a warm-up and MIN_TRIAL_LAUNCHES launches of
    # `fit`'s steps per launch each): never far past the budget
    least_s = sum(
        c.simulated_ms * 1e-3 * context.steps_per_launch(c.strategy.configs) for c in candidates
    )
    least_s *= 1 + MIN_TRIAL_LAUNCHES
    if least_s > 2 * budget_s:
        return (), (
            f"{len(candidates)} close candidates not timed: about {least_s:.1f} s simulated, "
            f"over twice the budget (give --budget {math.ceil(least_s / 2)} or more to time them)"
        )
    measured = measure(candidates, budget_s)
    trials = tuple(
        Candidate(c.label, c.strategy, c.simulated_ms, seconds * 1e3)
        for c, seconds in zip(candidates, measured, strict=True)
    )
    return trials, ""


def _describe_trials(trials: Sequence[Candidate], kept: Candidate) -> str:
    """Which candidate was kept; `trials_table` and `Plan.trials` have their times."""
    return (
        f"kept {kept.label}, the fastest measured of {len(trials)} close candidates "
        f"({kept.measured_ms:.3f} ms per iteration)"
    )


def trials_table(trials: Sequence[Candidate]) -> Table:
    """The timed candidates, for people: simulated and measured ms per iteration, the kept
    one (the fastest measured) marked."""
    kept = min(trials, key=lambda c: c.measured_ms)
    table = Table(title="close candidates timed after the search")
    for column in ("candidate", "simulated ms", "measured ms", "kept"):
        table.add_column(column, justify="left" if column == "candidate" else "right")
    for c in trials:
        table.add_row(
            c.label, f"{c.simulated_ms:.3f}", f"{c.measured_ms:.3f}", "*" if c is kept else ""
        )
    return table
