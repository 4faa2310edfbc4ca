"""The strategy a training run uses, chosen at compile time as FlexFlow does.

`--import-strategy FILE` uses a strategy file (validated against this machine); otherwise
`--budget SECONDS` > 0 runs the MCMC search for that long on the machine Legate gives this
process (`local`), and no budget means data parallelism. `--export-strategy FILE` writes the
chosen strategy atomically. Importing a strategy and searching are exclusive: a search can
start from a file with `flexflow search --init FILE` instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rich.console import Console

from flexflow.cost import CostModel, Profile
from flexflow.errors import StrategyError
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.ops import DimKind
from flexflow.strategy import Strategy


@dataclass(frozen=True, slots=True)
class Plan:
    strategy: Strategy
    source: str
    """How it was chosen, for people: 'data parallelism', 'imported from F', 'searched ...'."""
    simulated_ms: float
    dp_simulated_ms: float

    def describe(self) -> str:
        return (
            f"{self.source}; simulated {self.simulated_ms:.3f} ms per iteration "
            f"({self.dp_simulated_ms / self.simulated_ms:.2f}x data parallelism's "
            f"{self.dp_simulated_ms:.3f} ms)"
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
):
    """The simulation a training run's strategy is planned with: this project's runtime, which
    fuses ops (`flexflow.fusion`) and costs the host CPU time per Legate task
    (`flexflow.launches`), priced by `profile` where it has the task; `loss` tells which step
    tasks run in C++ bodies, and `steps_per_execution` how many iterations `fit` issues per
    launch of them."""
    from flexflow.simulator import SimContext

    return SimContext(
        graph,
        machine,
        CostModel(profile),
        fused_launches=True,
        sparse_labels=sparse(loss),
        steps_per_execution=steps_per_execution,
    )


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
) -> Plan:
    """Choose the strategy for `graph` on `machine` (see the module doc), simulating with the
    measured task times of `profile` where it has them; `loss`, the run's loss, and
    `steps_per_execution`, its iterations per launch, tell what the runtime will cost
    (`planning_context`)."""
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
    context = planning_context(graph, machine, profile, loss, steps_per_execution)
    dp = named_strategy("dp", graph, machine)
    dp_s = full_simulate(TaskGraph(context, dp)).iteration_s
    if import_path is not None:
        strategy = load_strategy(import_path, graph, machine)
        source = f"imported from {import_path}"
    elif budget_s > 0:
        result = search_with_progress(
            console,
            console.is_terminal,
            context,
            dp_s,
            budget_s,
            seed=seed,
            polish_budget_s=budget_s,
        )
        strategy = result.best
        source = f"searched for {budget_s:g} s ({result.proposals:,} proposals)"
    else:
        strategy, source = (
            dp,
            "data parallelism (no --budget given)" + _idle_devices(graph, dp, machine),
        )
    simulated_s = full_simulate(TaskGraph(context, strategy)).iteration_s
    if export_path is not None:
        export_strategy(export_path, strategy, graph, machine, model=model_name)
    return Plan(strategy, source, simulated_s * 1e3, dp_s * 1e3)
