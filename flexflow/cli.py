"""The `flexflow` command (also `python -m flexflow`): one subcommand per job, bad input -> one line and exit 2."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from flexflow.cli_args import (
    add_batch_size,
    add_fused_launches,
    add_model_and_machine,
    add_profile,
    fused_context,
    load_profile,
    positive_int,
    seed_int,
)
from flexflow.errors import FlexFlowError, FlexFlowWarning, one_line_warnings
from flexflow.figures import picture_file
from flexflow.fileio import atomic_write_text, check_outputs, output_file
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import Machine, link_groups, parse_machine
from flexflow.machine_presets import PRESET_EXAMPLES
from flexflow.ops.base import full_region
from flexflow.strategy import ParallelConfig

if TYPE_CHECKING:  # the commands import the simulator when they run: a fast --help
    from flexflow.simulator import SimContext
    from flexflow.strategy import Strategy

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""The shell's code for a command ended by SIGINT (128 + 2)."""
EXIT_BROKEN_PIPE = 1
"""A command whose output's reader went away (`flexflow summary resnet101 --json | head`) ends
quietly with it: what Python's documentation advises, and what rich's console does when the
reader of its tables goes."""


def _stats(name: str, graph: OperatorGraph, batch_size: int) -> dict[str, object]:
    forward, backward = graph.flops_per_iteration()
    return {
        "name": name,
        "batch_size": batch_size,
        "ops": len(graph.ops),
        "parameters": graph.num_parameters,
        "gflops_per_iteration": round((forward + backward) / 1e9, 3),
        "forward_gflops_per_iteration": round(forward / 1e9, 3),
    }


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    """List the zoo: ops, parameters and forward+backward GFLOPs of one training iteration."""
    from flexflow.zoo import ZOO, load_model

    rows = []
    for name, entry in ZOO.items():
        model = load_model(name)
        rows.append(
            _stats(name, model.graph(), entry.batch_size) | {"description": entry.description}
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    table = Table(title="flexflow model zoo (one training iteration at the paper's batch size)")
    for column in ("model", "batch", "ops", "parameters", "GFLOPs fwd+bwd", "description"):
        table.add_column(column, justify="left" if column in ("model", "description") else "right")
    for row in rows:
        table.add_row(
            str(row["name"]),
            str(row["batch_size"]),
            str(row["ops"]),
            f"{row['parameters']:,}",
            f"{row['gflops_per_iteration']:,.1f}",
            str(row["description"]),
        )
    console.print(table)
    return 0


def summary_table(name: str, graph: OperatorGraph) -> Table:
    """Per-op table: name, kind, output shape, SOAP dims, parameters it owns, forward MFLOPs."""
    owner: dict[int, str] = {}
    for node in graph.ops:
        for pid in node.weights:
            owner.setdefault(pid, node.name)
    sizes = {p.id: p.spec.size for p in graph.parameters}
    table = Table(title=f"{name}: {len(graph.ops)} ops, {graph.num_parameters:,} parameters")
    for column in ("op", "kind", "output", "partitionable dims", "parameters", "fwd MFLOPs"):
        table.add_column(
            column, justify="right" if column in ("parameters", "fwd MFLOPs") else "left"
        )
    for node in graph.ops:
        params = sum(sizes[p] for p in node.weights if owner[p] == node.name)
        dims = ", ".join(f"{d.name}:{d.kind.value[0].upper()}" for d in node.sig.dims if d.kind)
        forward, _ = node.op.flops(node.sig, full_region(node.sig.output_shape))
        table.add_row(
            node.name,
            node.kind,
            str(node.sig.output_shape),
            dims,
            f"{params:,}" if params else "",
            f"{forward / 1e6:,.1f}",
        )
    return table


def cmd_summary(args: argparse.Namespace, console: Console) -> int:
    """Print the per-op summary of a zoo model or a model file."""
    from flexflow.zoo import load_model

    graph = load_model(args.model, _config(args)).graph()
    if args.json:
        print(json.dumps(_stats(args.model, graph, graph.input_tensors[0].spec.shape[0]), indent=1))
    else:
        console.print(summary_table(args.model, graph))
    return 0


def cmd_graph(args: argparse.Namespace, console: Console) -> int:
    """Export the operator graph as JSON, DOT and/or PNG (each written atomically)."""
    from flexflow.render import render_png, to_dot
    from flexflow.zoo import load_model

    if not (args.json or args.dot or args.png):
        raise FlexFlowError(
            "flexflow graph: nothing to write; pass --json FILE, --dot FILE or --png FILE."
        )
    graph = load_model(args.model, _config(args)).graph()
    if args.json:
        atomic_write_text(args.json, graph.dumps())
    if args.dot:
        atomic_write_text(args.dot, to_dot(graph))
    if args.png:
        render_png(graph, args.png, title=args.model)
    written = [p for p in (args.json, args.dot, args.png) if p]
    console.print(f"{args.model}: {len(graph.ops)} ops -> {', '.join(written)}")
    return 0


def cmd_info(args: argparse.Namespace, console: Console) -> int:
    """How this process was prepared for Legate (driver, configuration) and the versions in use."""
    from importlib.metadata import PackageNotFoundError, version

    import flexflow

    info: dict[str, object] = {
        "driver": flexflow.LEGATE_SETUP.driver,
        "driver_library": flexflow.LEGATE_SETUP.driver_path,
        "legate_config": flexflow.LEGATE_SETUP.legate_config,
    }
    for package in ("legate", "nvidia-cupynumeric", "numpy", "cffi", "mkl"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = None
    from flexflow.ops import blas
    from flexflow.runtime import native_tasks

    info["cpu_matrix_products"] = blas.provider()  # MKL's GEMM, or numpy's without MKL
    # the step tasks with C++ bodies (flexflow.runtime.native_tasks)
    info["cpp_step_tasks"] = str(native_tasks.LIBRARY) if native_tasks.built() else "not built"
    from flexflow.gpu import libraries

    info["gpu_kernels"] = libraries.summary()  # the CUDA release and libraries they would use
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        for key, value in info.items():
            console.print(f"{key:>20}: {value}")
    return 0


def _machine_row(machine: Machine) -> tuple[str, ...]:
    """Devices by model (count, FP32 peak, memory each), links by kind (count, speed, latency)."""
    models: dict[tuple[str, str], list] = {}
    for device in machine.devices:
        models.setdefault((device.kind, device.model), []).append(device)
    devices = "\n".join(
        f"{len(ds)} x {kind} {model}\n  {ds[0].peak_flops / 1e12:.3g} TFLOP/s, "
        f"{ds[0].memory_bytes / 2**30:.3g} GiB each"
        for (kind, model), ds in models.items()
    )
    links = "\n".join(
        f"{count} {kind} {bandwidth / 1e9:.4g} GB/s {latency * 1e6:.3g} us"
        for (kind, bandwidth, latency), count in link_groups(machine.links).items()
    )
    nodes = f"{machine.num_nodes} node" + ("s" if machine.num_nodes > 1 else "")
    return (f"{machine.name}\n{nodes}", devices, links)


def cmd_machines(args: argparse.Namespace, console: Console) -> int:
    """List the machine presets (or describe the given specs): devices, peak FLOP/s, links."""
    machines = [parse_machine(spec) for spec in (args.specs or PRESET_EXAMPLES)]
    if args.json:
        print(json.dumps([machine.to_json() for machine in machines], indent=1))
        return 0
    table = Table(
        title="flexflow machines" if args.specs else "flexflow machine presets",
        caption=None
        if args.specs
        else "p100:N, k80:N, dgx-h100:N, dgx-h200:N: N nodes; local: LEGATE_CONFIG",
        show_lines=True,
    )
    table.add_column("machine", no_wrap=True)
    table.add_column("devices (FP32 peak, memory)", no_wrap=True)
    table.add_column("links (per direction)", no_wrap=True)
    for machine in machines:
        table.add_row(*_machine_row(machine))
    console.print(table)
    return 0


def _config(args: argparse.Namespace):
    from flexflow.config import FFConfig

    return FFConfig(batch_size=args.batch_size) if args.batch_size else None


def strategy_table(title: str, graph: OperatorGraph, strategy) -> Table:
    """One row per op: its degrees on the dims it splits and the devices of its tasks."""
    table = Table(title=title)
    for column in ("op", "kind", "output", "degrees", "tasks", "devices"):
        table.add_column(column, justify="right" if column == "tasks" else "left")
    for node, config in zip(graph.ops, strategy.configs, strict=True):
        split = [
            f"{dim.name}={degree}"
            for dim, degree in zip(node.sig.dims, config.degrees, strict=True)
            if degree > 1
        ]
        table.add_row(
            node.name,
            node.kind,
            str(node.sig.output_shape),
            " ".join(split) or "-",
            str(config.num_tasks),
            _ranges(config.devices),
        )
    return table


def config_text(node: OpNode, config: ParallelConfig) -> str:
    """A configuration as people read it: 'channel=2 on 0-1', 'no split on 3'."""
    split = [
        f"{dim.name}={degree}"
        for dim, degree in zip(node.sig.dims, config.degrees, strict=True)
        if degree > 1
    ]
    return f"{' '.join(split) or 'no split'} on {_ranges(config.devices)}"


def _ranges(ids: Sequence[int]) -> str:
    """(0, 1, 2, 3, 6) -> "0-3,6": runs of consecutive ids as ranges."""
    parts = []
    for _, run in itertools.groupby(enumerate(ids), key=lambda pair: pair[1] - pair[0]):
        members = [i for _, i in run]
        parts.append(str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}")
    return ",".join(parts)


def cmd_strategy(args: argparse.Namespace, console: Console) -> int:
    """Build a named strategy, or check a strategy file against a model and machine; either
    can be exported (a checked file written again in this flexflow's form)."""
    from flexflow.strategies import named_strategy
    from flexflow.strategy_file import export_strategy, load_strategy
    from flexflow.zoo import load_model

    graph = load_model(args.model, _config(args)).graph()
    machine = parse_machine(args.machine)
    if args.check:
        strategy = load_strategy(args.check, graph, machine)
        title = f"{args.check}: valid for {args.model} on {machine.name}"
    else:
        strategy = named_strategy(args.name, graph, machine, args.seed)
        title = f"strategy '{args.name}' for {args.model} on {machine.name}"
    if args.export:  # a checked file is written again in this flexflow's form
        export_strategy(args.export, strategy, graph, machine, model=args.model)
        title += f" -> {args.export}"
    if args.quiet:
        console.print(title)
    else:
        console.print(strategy_table(title, graph, strategy))
    return 0


def cmd_space(args: argparse.Namespace, console: Console) -> int:
    """The SOAP space per op on a machine: degree tuples, configurations, and the total size."""
    import math

    from flexflow.space import degree_choices, space_size
    from flexflow.zoo import load_model

    graph = load_model(args.model, _config(args)).graph()
    machine = parse_machine(args.machine)
    rows = []
    for node in graph.ops:
        splittable = [d.name for d in node.sig.dims if d.partitionable]
        rows.append(
            {
                "op": node.name,
                "kind": node.kind,
                "output": list(node.sig.output_shape),
                "partitionable": splittable,
                "degree_tuples": len(degree_choices(node.sig, machine.num_devices)),
                "configurations": space_size(node.sig, machine),
            }
        )
    log10_total = sum(math.log10(r["configurations"]) for r in rows)
    if args.json:
        print(
            json.dumps(
                {"machine": machine.name, "ops": rows, "log10_strategies": log10_total}, indent=1
            )
        )
        return 0
    table = Table(
        title=f"SOAP space of {args.model} on {machine.name}: about 10^{log10_total:.1f} strategies"
    )
    for column in ("op", "kind", "output", "partitionable", "degree tuples", "configurations"):
        table.add_column(
            column, justify="right" if column in ("degree tuples", "configurations") else "left"
        )
    for r in rows:
        table.add_row(
            r["op"],
            r["kind"],
            str(tuple(r["output"])),
            ", ".join(r["partitionable"]),
            str(r["degree_tuples"]),
            str(r["configurations"]),
        )
    console.print(table)
    return 0


def _strategy_arg(value: str, context: SimContext, seed: int) -> Strategy:
    """A named strategy, data parallelism at its fastest width, OptCNN's, or a strategy file
    (validated against the model and machine): what `search --init` takes."""
    from flexflow.search.search import initial_strategy

    return initial_strategy(value, context, seed, role="strategy", warn_other_machine=True)


def cmd_profile(args: argparse.Namespace, console: Console) -> int:
    """Measure the model's tasks on the machine's CPU devices and write the profile atomically."""
    from rich.progress import Progress

    from flexflow.profiler import profile_graph
    from flexflow.zoo import load_model

    graph = load_model(args.model, _config(args)).graph()
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

    graph = load_model(args.model, _config(args)).graph()
    machine = parse_machine(args.machine)
    profile = load_profile(args.profile, graph, machine, args.model)
    context = fused_context(args, graph, machine, profile)
    tg = TaskGraph(context, _strategy_arg(args.strategy, context, args.seed))
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flexflow",
        description="SOAP parallelization search and training on Legate (FlexFlow, SysML 2019).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace, Console], int], help: str):
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(handler=handler)
        return sub

    models = add("models", cmd_models, "list the model zoo: ops, parameters, GFLOPs per iteration")
    models.add_argument("--json", action="store_true", help="print one JSON list")

    for name, handler, help in (
        ("summary", cmd_summary, "print the per-op summary of a model"),
        ("graph", cmd_graph, "export a model's operator graph as JSON, DOT or PNG"),
    ):
        sub = add(name, handler, help)
        sub.add_argument(
            "model", help="a zoo name (see `flexflow models`) or a .py file defining build(model)"
        )
        add_batch_size(sub)
        if name == "summary":
            sub.add_argument("--json", action="store_true", help="print totals as JSON")
        else:
            sub.add_argument(
                "--json",
                metavar="FILE",
                type=output_file,
                help="write the graph as JSON (- for standard output)",
            )
            sub.add_argument("--dot", metavar="FILE", type=output_file, help="write Graphviz DOT")
            sub.add_argument(
                "--png",
                metavar="FILE",
                type=picture_file,
                help="draw the graph (.png, .svg or .pdf)",
            )

    machines = add("machines", cmd_machines, "list the machine presets or describe machine specs")
    machines.add_argument(
        "specs",
        nargs="*",
        metavar="SPEC",
        help="p100:N, k80:N, dgx-h100:N, dgx-h200:N, local or a machine JSON file (default: the presets)",
    )
    machines.add_argument("--json", action="store_true", help="print a JSON list of machine files")

    strategy = add(
        "strategy", cmd_strategy, "build and export a named strategy, or check a strategy file"
    )
    add_model_and_machine(strategy)
    which = strategy.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--name", choices=("dp", "expert", "model", "random"), help="a named strategy"
    )
    which.add_argument(
        "--check", metavar="FILE", help="validate a strategy file; exit 2 listing every problem"
    )
    strategy.add_argument("--seed", type=seed_int, default=0, help="seed of the random strategy")
    strategy.add_argument(
        "--export",
        metavar="FILE",
        type=output_file,
        help="write the strategy, named or checked, to FILE (atomically)",
    )
    add_batch_size(strategy)
    strategy.add_argument(
        "--quiet", action="store_true", help="print one line instead of the table"
    )

    space = add("space", cmd_space, "show the SOAP configuration space of every op on a machine")
    add_model_and_machine(space)
    add_batch_size(space)
    space.add_argument("--json", action="store_true", help="print one JSON object")

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

    from flexflow.cli_search import register

    register(add)

    info = add(
        "info", cmd_info, "show how Legate is configured for this host and the versions in use"
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _terminated(signum: int, frame) -> None:
    """SIGTERM (a job scheduler's, `kill`): leave as Ctrl-C does, through the cleanup that
    stops the search's worker processes."""
    raise KeyboardInterrupt


def output_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every subcommand's flags naming an output file (or picture), by destination: `-` sends
    them to standard output."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(output_flags(sub))
        elif action.type in (output_file, picture_file):
            found[action.dest] = action.option_strings[-1]
    return found


READS = {"the model file": "model", "the --machine file": "machine",
         "the --profile file": "profile", "the --strategy file": "strategy",
         "the --check file": "check"}  # fmt: skip
"""What a command reads, by Namespace dest: no output may replace it (`check_outputs`)."""
REWRITES = frozenset({("--export", "the --check file")})
"""`strategy --check F --export F` writes the checked strategy back."""


def _console_for(args: argparse.Namespace, outputs: dict[str, str]) -> Console:
    """The console for the command's messages: stderr when an output file is standard output
    (`-`), so what is piped is that file alone. Outputs on one file (standard output included)
    or over a file the command reads (a model or machine file, a profile) are an error."""
    given = {  # a dest another subcommand uses for a switch (--json) holds a bool here
        flag: value
        for dest, flag in outputs.items()
        if isinstance(value := getattr(args, dest, None), str | os.PathLike)
    }
    reads = {what: value for what, dest in READS.items()
             if isinstance(value := getattr(args, dest, None), str)}  # fmt: skip
    report = "--json" if getattr(args, "json", None) is True else None  # a command's report
    to_stdout = check_outputs(given, reads, report, REWRITES)
    return Console(soft_wrap=True, stderr=bool(to_stdout))  # one line per message, for grep


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        console = _console_for(args, output_flags(parser))
    except FlexFlowError as exc:
        print(f"flexflow: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if threading.current_thread() is not threading.main_thread():  # no signals there
        return _run(args, console)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(args, console)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, console: Console) -> int:
    """The command's handler, its errors reported as one line and an exit code."""
    try:
        with one_line_warnings():
            return args.handler(args, console)
    except (FlexFlowError, FlexFlowWarning) as exc:  # a warning too, where -W error makes it one
        print(f"flexflow: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        broken = isinstance(exc, BrokenPipeError) and exc.filename is None
        if broken and _stdout_gone():  # its reader has what it wanted (not a worker's pipe)
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        print(
            f"flexflow: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
            file=sys.stderr,
        )
        return EXIT_USAGE
    except MemoryError as exc:  # numpy's allocations of a model too large for this host
        print(
            f"flexflow: error: out of memory ({exc}); use a smaller --batch-size or model.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C
        print(
            "flexflow: interrupted (every file it writes is written whole or not at all).",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader went away (its write end polls as an
    error), not another pipe of the command's (a scan worker's) that broke."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no file descriptor (a test's capture)
        return False


def _silence_stdout() -> None:
    """Point standard output at /dev/null: what is still buffered for the closed pipe would
    otherwise fail again, loudly, when the interpreter flushes it at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
