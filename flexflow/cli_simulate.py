"""The simulator's subcommands: `flexflow simulate` (one training iteration under a strategy, §5) and `flexflow profile` (the measured task times it can price tasks with)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from rich.console import Console

from flexflow.cli_args import (
    add_batch_size,
    add_fused_launches,
    add_model_and_machine,
    add_profile,
    batch_config,
    fused_context,
    load_profile,
    positive_int,
    seed_int,
    strategy_arg,
)
from flexflow.figures import picture_file
from flexflow.fileio import output_file
from flexflow.machine import parse_machine


def cmd_profile(args: argparse.Namespace, console: Console) -> int:
    """Measure the model's tasks on the machine's CPU devices and write the profile atomically."""
    from rich.progress import Progress

    from flexflow.profiler import profile_graph
    from flexflow.zoo import load_model

    graph = load_model(args.model, batch_config(args)).graph()
    machine = parse_machine(args.machine)
    with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(f"profiling {args.model}", total=len(graph.ops))
        result = profile_graph(
            graph, machine, args.repeats, lambda done, _: bar.update(task, completed=done)
        )
    result.save(args.out)
    console.print(
        f"{len(result.times)} task times of {args.model} measured, and "
        f"{len(result.native_times)} of ops inside whole-model C steps; wrote {args.out}"
    )
    return 0


def cmd_simulate(args: argparse.Namespace, console: Console) -> int:
    """Simulate one training iteration of a model under a strategy on a machine (paper §5)."""
    from flexflow.simulator import TaskGraph, full_simulate, summarize
    from flexflow.simulator.export import write_taskgraph, write_trace
    from flexflow.zoo import load_model

    graph = load_model(args.model, batch_config(args)).graph()
    machine = parse_machine(args.machine)
    profile = load_profile(args.profile, graph, machine, args.model)
    context = fused_context(args, graph, machine, profile)
    tg = TaskGraph(context, strategy_arg(args.strategy, context, args.seed))
    schedule = full_simulate(tg)
    result = summarize(tg, schedule)
    if args.trace:
        write_trace(
            args.trace, tg, schedule, title=f"{args.model} / {args.strategy} / {machine.name}"
        )
    if args.taskgraph:
        write_taskgraph(args.taskgraph, tg, schedule)
    if args.timeline_png:
        from flexflow.simulator.plot import render_timeline

        render_timeline(
            tg,
            schedule,
            args.timeline_png,
            title=f"{args.model} / {args.strategy} / {machine.name}: "
            f"{result.iteration_ms:.3f} ms per iteration",
        )
    if result.memory_note():
        Console(stderr=True).print(f"[yellow]note:[/yellow] {result.memory_note()}")
    if args.json:
        data = {"model": args.model, "machine": machine.name, "strategy": args.strategy}
        print(json.dumps(data | result.to_json(), indent=1))
        return 0
    console.print(
        f"{args.model} on {machine.name} with '{args.strategy}': "
        f"[bold]{result.iteration_ms:.3f} ms[/bold] per iteration; compute "
        f"{result.compute_ms_total:.1f} ms summed over devices; "
        f"{result.comm_bytes_total / 1e6:,.1f} MB transferred; {result.num_tasks:,} tasks; "
        f"peak memory {max(result.peak_memory_bytes) / 2**30:.2f} GiB"
        + ("; each device's step one C call, priced by the profile's C step times"
           if result.c_steps else "")
    )  # fmt: skip
    return 0


def register(add: Callable) -> None:
    """Add the simulator's subcommands to the `flexflow` parser."""
    simulate = add("simulate", cmd_simulate, "simulate one training iteration under a strategy")
    add_model_and_machine(simulate)
    simulate.add_argument(
        "--strategy",
        default="dp",
        help="dp, expert, model, random, dp-width, optcnn or a strategy file",
    )
    simulate.add_argument("--seed", type=seed_int, default=0, help="seed of the random strategy")
    add_profile(simulate)
    add_fused_launches(simulate)
    add_batch_size(simulate)
    simulate.add_argument("--json", action="store_true", help="print one JSON object")
    simulate.add_argument(
        "--trace", metavar="FILE", type=output_file, help="write a Chrome/Perfetto trace"
    )
    simulate.add_argument(
        "--taskgraph",
        metavar="FILE",
        type=output_file,
        help="write the simulated task graph as JSON",
    )
    simulate.add_argument(
        "--timeline-png",
        metavar="FILE",
        type=picture_file,
        help="draw the timeline (.png, .svg or .pdf)",
    )

    profile = add(
        "profile",
        cmd_profile,
        "measure every distinct task of a model on this host's CPU processors (a profile file)",
    )
    add_model_and_machine(profile)
    add_batch_size(profile)
    profile.add_argument(
        "--out", metavar="FILE", type=output_file, required=True, help="the profile to write"
    )
    profile.add_argument("--repeats", type=positive_int, default=3, help="runs per kernel (median)")
