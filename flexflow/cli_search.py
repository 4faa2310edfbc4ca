"""The optimizer's subcommands: `flexflow search` (MCMC, §6, or the OptCNN baseline), `flexflow exhaustive` and `flexflow check-local` (§8.4)."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from flexflow.cli_args import (
    add_batch_size,
    add_fused_launches,
    add_model_and_machine,
    add_profile,
    batch_config,
    fused_context,
    load_profile,
    nonnegative_int,
    positive_float,
    seed_int,
    strategy_arg,
    workers_arg,
)
from flexflow.cli_search_flags import (
    DEFAULT_BUDGET_S,
    DEFAULT_INITS,
    add_chain_flags,
    add_descent_flags,
    add_move_flags,
    add_simulation_flag,
)
from flexflow.cli_strategy import config_text, strategy_table
from flexflow.errors import FlexFlowError
from flexflow.figures import picture_file
from flexflow.fileio import output_file
from flexflow.search.exhaustive import DEFAULT_SEED_PROPOSALS, ExhaustiveStatus
from flexflow.search.mcmc import DEFAULT_BETA, DEFAULT_NEIGHBOUR_MOVES
from flexflow.search.progress import search_with_progress
from flexflow.search.spaces import SPACES


def _setup(args: argparse.Namespace):
    """The model's graph, the machine and a simulation context (with --profile if given)."""
    from flexflow.machine import parse_machine
    from flexflow.zoo import load_model

    graph = load_model(args.model, batch_config(args)).graph()
    machine = parse_machine(args.machine)
    profile = load_profile(args.profile, graph, machine, args.model)
    return graph, machine, fused_context(args, graph, machine, profile)


def _export_and_print_json(args: argparse.Namespace, graph, machine, best, data: dict) -> bool:
    """Write --export (atomically) and, with --json, print the result; True when printed."""
    from flexflow.strategy_file import export_strategy

    if args.export:
        export_strategy(args.export, best, graph, machine, model=args.model)
    if args.json:
        header = {"model": args.model, "machine": machine.name, "space": args.space}
        if getattr(args, "workers", None) is not None:  # optcnn runs no workers
            header["workers"] = args.workers
        print(json.dumps(header | data, indent=1))
    return args.json


def _refuse_unused_search_flags(args: argparse.Namespace) -> None:
    """Flags that the other flags given make moot are an error, not silently dropped, and so
    is a search that would never end."""
    chains = args.space != "optcnn"
    if chains and args.budget is not None and math.isinf(args.budget) and args.proposals is None:
        raise FlexFlowError(
            "search: --budget inf never ends; give a number of seconds, or --proposals N to stop "
            "after N proposals."
        )
    if args.no_polish and args.polish_budget is not None:
        raise FlexFlowError(
            "search: --polish-budget times the final descent, which --no-polish skips; drop one."
        )
    if args.space == "optcnn":
        given = [
            flag
            for flag, value in (
                ("--budget", args.budget),
                ("--workers", args.workers),
                ("--plot", args.plot),
                ("--init", args.init),
                ("--proposals", args.proposals),
                ("--polish-budget", args.polish_budget),
                ("--beta", args.beta),
                ("--neighbour-moves", args.neighbour_moves),
                ("--path-moves", args.path_moves),
                ("--simulation", args.simulation),
                ("--no-polish", args.no_polish or None),
                ("--no-narrow-sweeps", args.no_narrow_sweeps or None),
            )
            if value is not None
        ]
        if given:
            raise FlexFlowError(
                f"search --space optcnn runs OptCNN's dynamic programming, with no chains and no "
                f"descent: {', '.join(given)} would be ignored; drop them."
            )


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    """Search a strategy with MCMC over delta simulations; print, export and summarize it."""
    from flexflow.simulator import TaskGraph, full_simulate
    from flexflow.simulator.result import memory_note, over_memory
    from flexflow.strategies import named_strategy

    _refuse_unused_search_flags(args)
    # the defaults of flags optcnn refuses (its dynamic programming takes no budget and no workers)
    args.budget = DEFAULT_BUDGET_S if args.budget is None else args.budget
    if args.space != "optcnn":
        args.workers = workers_arg("auto") if args.workers is None else args.workers
    graph, machine, context = _setup(args)
    inits = [i for text in args.init or [DEFAULT_INITS] for i in text.split(",") if i]
    dp_s = full_simulate(TaskGraph(context, named_strategy("dp", graph, machine))).iteration_s
    result = search_with_progress(
        console,
        not args.json and console.is_terminal,
        context,
        dp_s,
        args.budget,
        seed=args.seed,
        inits=inits,
        space=args.space,
        beta=DEFAULT_BETA if args.beta is None else args.beta,
        neighbour_moves=(
            DEFAULT_NEIGHBOUR_MOVES if args.neighbour_moves is None else args.neighbour_moves
        ),
        path_moves=args.path_moves,
        max_proposals=args.proposals,
        polish=not args.no_polish,
        polish_budget_s=args.polish_budget,
        narrow_sweeps=not args.no_narrow_sweeps,
        simulation=args.simulation or "delta",
        workers=args.workers or 1,  # None with optcnn, which runs none
    )
    over = over_memory(TaskGraph(context, result.best))  # the search prices time only
    if over:
        Console(stderr=True).print(f"[yellow]note:[/yellow] {memory_note(over)}")
    found = result.to_json() | {"over_memory": list(over)}
    printed = _export_and_print_json(args, graph, machine, result.best, found)
    if args.plot:  # after the strategy is safe: a picture that cannot be written loses nothing
        from flexflow.search.plot import render_search

        render_search(
            result,
            args.plot,
            title=f"{args.model} on {machine.name}: {result.best_s * 1e3:.3f} ms, "
            f"{result.speedup_over_dp:.2f}x over data parallelism",
        )
    if printed:
        return 0
    if not args.quiet:
        console.print(
            strategy_table(f"best strategy for {args.model} on {machine.name}", graph, result.best)
        )
    console.print(
        f"{args.model} on {machine.name}: best {result.best_s * 1e3:.3f} ms per iteration, data "
        f"parallel {result.dp_s * 1e3:.3f} ms ([bold]{result.speedup_over_dp:.2f}x[/bold]); "
        f"{result.proposals:,} proposal{'' if result.proposals == 1 else 's'} in "
        f"{result.seconds:.1f} s, "
        f"{result.acceptance_rate:.0%} accepted"
        + {
            True: "; locally optimal",
            False: "; the final descent ran out of time (not proven locally optimal)",
            None: "",
        }[result.locally_optimal]
        + (f"; exported to {args.export}" if args.export else "")
        + (f"; drawn in {args.plot}" if args.plot else "")
    )
    return 0


def _exhaustive_line(status: ExhaustiveStatus) -> str:
    return (
        f"{status.examined:,} simulated, {status.pruned:,} cut, best {status.best_s * 1e3:.4f} ms"
    )


def cmd_exhaustive(args: argparse.Namespace, console: Console) -> int:
    """Branch and bound over every strategy of the space: the simulated global optimum."""
    from flexflow.search.exhaustive import exhaustive_search
    from flexflow.search.spaces import make_space

    graph, machine, context = _setup(args)
    space = make_space(args.space, graph, machine)

    def run(on_progress: Callable[[ExhaustiveStatus], None] | None):
        return exhaustive_search(
            context, space, on_progress, args.seed, args.seed_proposals, args.budget
        )

    if not args.json and console.is_terminal:
        columns = (
            TextColumn("exhaustive"),
            BarColumn(bar_width=16),
            TaskProgressColumn(),
            TextColumn("{task.fields[line]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("", total=1.0, line="seeding with named strategies and MCMC")

            def update(status: ExhaustiveStatus) -> None:
                progress.update(task, completed=status.covered, line=_exhaustive_line(status))

            result = run(update)
    else:
        result = run(None)
    if _export_and_print_json(args, graph, machine, result.best, result.to_json()):
        return 0
    if not args.quiet:
        title = "optimal" if result.complete else "best found"
        console.print(
            strategy_table(
                f"{title} strategy for {args.model} on {machine.name}", graph, result.best
            )
        )
    counts = (
        f"{result.examined:,} strategies simulated, {result.pruned:,} subtrees cut "
        f"({result.pruned_leaves:,} strategies) of {result.total:,}"
    )
    if result.complete:
        console.print(
            f"{args.model} on {machine.name} ({args.space} space): optimum "
            f"[bold]{result.best_s * 1e3:.4f} ms[/bold] per iteration, proven in "
            f"{result.seconds:.1f} s; {counts}; start {result.seed_s * 1e3:.4f} ms "
            f"({result.seed_from})" + (f"; exported to {args.export}" if args.export else "")
        )
    else:
        console.print(
            f"{args.model} on {machine.name} ({args.space} space): stopped by the "
            f"{args.budget:g} s budget with {result.covered:.2%} of the space covered; best found "
            f"{result.best_s * 1e3:.4f} ms is NOT proven optimal; {counts}"
            + (f"; exported to {args.export}" if args.export else "")
        )
    return 0


def add_workers(parser: argparse.ArgumentParser, work: str, default: str | None = "auto") -> None:
    """--workers; a `default` of None lets the command tell a given value from its default
    (`auto`, which the command then resolves)."""
    parser.add_argument(
        "--workers",
        type=workers_arg,
        default=default,
        metavar="N|auto",
        help=f"processes that share the work: {work} (default auto: one per core, at most one "
        "per 4 GiB of available memory)",
    )


def cmd_check_local(args: argparse.Namespace, console: Console) -> int:
    """Try every single-op change of a strategy; list those that are faster (empty: locally optimal)."""
    from flexflow.search.local import improving_neighbours
    from flexflow.search.spaces import make_space
    from flexflow.strategy_file import op_entry

    graph, machine, context = _setup(args)
    strategy = strategy_arg(args.strategy, context, 0)
    space = make_space(args.space, graph, machine)
    if args.json or not console.is_terminal:
        base, better = improving_neighbours(context, strategy, space, workers=args.workers)
    else:  # every configuration of every op: minutes on a 16-GPU machine
        with Progress(
            TextColumn("check-local: ops"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("ops", total=len(strategy))
            base, better = improving_neighbours(
                context,
                strategy,
                space,
                lambda done: progress.update(task, completed=done),
                args.workers,
            )
    if args.json:
        print(
            json.dumps(
                {
                    "iteration_ms": base * 1e3,
                    "workers": args.workers,
                    "locally_optimal": not better,
                    "improving_neighbours": [
                        {
                            "op": n.op,
                            "degrees": list(n.config.degrees),
                            "devices": list(n.config.devices),
                            "iteration_ms": n.iteration_s * 1e3,
                            # as a strategy file's `ops` entry: paste it in to take the change
                            "strategy_entry": op_entry(context.graph.op(n.op), n.config),
                        }
                        for n in better
                    ],
                },
                indent=1,
            )
        )
        return 0
    if not better:
        console.print(f"{args.strategy}: locally optimal ({base * 1e3:.3f} ms per iteration)")
        return 0
    console.print(
        f"{args.strategy}: {len(better)} faster neighbour(s) of {base * 1e3:.3f} ms; best:"
    )
    for n in better[:10]:
        text = config_text(graph.op(n.op), n.config)
        console.print(f"  {n.op}: {text} -> {n.iteration_s * 1e3:.3f} ms")
    return 0


def register(add: Callable) -> None:
    """Add the optimizer's subcommands to the `flexflow` parser."""
    _add_search_flags(
        add("search", cmd_search, "search a parallelization strategy with MCMC (paper §6)")
    )
    _add_exhaustive_flags(
        add(
            "exhaustive",
            cmd_exhaustive,
            "prove the optimal strategy of a small space by branch and bound (paper §8.4)",
        )
    )
    _add_check_local_flags(
        add("check-local", cmd_check_local, "list single-op changes that make a strategy faster")
    )


def _add_search_flags(search: argparse.ArgumentParser) -> None:
    """`flexflow search`'s flags, in the order --help lists them."""
    add_model_and_machine(search)
    add_chain_flags(search)
    add_move_flags(search)
    add_profile(search)
    add_fused_launches(search)
    add_batch_size(search)
    _add_result_flags(search, plot=True)
    add_descent_flags(search)
    add_simulation_flag(search)
    add_workers(
        search,
        "that many chains run at once, each given the budget / (waves of chains), and "
        "the final descent tries that many ops' neighbours at once; with --proposals the same "
        "result as with one",
        default=None,
    )


def _add_result_flags(parser: argparse.ArgumentParser, plot: bool = False) -> None:
    """Where the best strategy is written and how the result is printed (search, exhaustive)."""
    parser.add_argument(
        "--export", metavar="FILE", type=output_file, help="write the best strategy (atomically)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    if plot:
        parser.add_argument(
            "--plot",
            metavar="FILE",
            type=picture_file,
            help="draw each chain's best iteration time over the search, and the final descent's "
            "(.png, .svg or .pdf)",
        )
    parser.add_argument("--quiet", action="store_true", help="print the summary line only")


def _add_exhaustive_flags(exhaustive: argparse.ArgumentParser) -> None:
    """`flexflow exhaustive`'s flags, in the order --help lists them."""
    add_model_and_machine(exhaustive)
    exhaustive.add_argument(
        "--space",
        choices=tuple(SPACES),
        default="soap",
        help="soap (FlexFlow) or operation (placement only, REINFORCE's space)",
    )
    exhaustive.add_argument(
        "--budget",
        type=positive_float,
        default=float("inf"),
        help="stop after this many seconds (the best found is then not proven optimal)",
    )
    exhaustive.add_argument(
        "--seed",
        type=seed_int,
        default=0,
        help="seed of the MCMC chain that finds a first strategy",
    )
    exhaustive.add_argument(
        "--seed-proposals",
        type=nonnegative_int,
        default=DEFAULT_SEED_PROPOSALS,
        help=f"proposals of that chain (default {DEFAULT_SEED_PROPOSALS}; 0: named strategies only)",
    )
    add_profile(exhaustive)
    add_batch_size(exhaustive)
    _add_result_flags(exhaustive)


def _add_check_local_flags(check: argparse.ArgumentParser) -> None:
    """`flexflow check-local`'s flags, in the order --help lists them."""
    add_model_and_machine(check)
    check.add_argument(
        "--strategy",
        required=True,
        help="a strategy file, or dp, expert, model, random, dp-width, optcnn",
    )
    check.add_argument(
        "--space", choices=tuple(SPACES), default="soap", help="the neighbourhood's space"
    )
    add_profile(check)
    add_fused_launches(check)
    add_batch_size(check)
    add_workers(check, "that many ops' neighbours tried at once; the same answer")
    check.add_argument("--json", action="store_true", help="print one JSON object")
