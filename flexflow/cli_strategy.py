"""The strategy subcommands: `flexflow strategy` (named strategies, strategy files) and `space` (the SOAP space of §4), and the tables of a strategy they and the search print."""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.table import Table

from flexflow.cli_args import add_batch_size, add_model_and_machine, batch_config, seed_int
from flexflow.fileio import output_file
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import parse_machine
from flexflow.strategy import ParallelConfig


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

    graph = load_model(args.model, batch_config(args)).graph()
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

    graph = load_model(args.model, batch_config(args)).graph()
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


def register(add: Callable) -> None:
    """Add the strategy subcommands to the `flexflow` parser."""
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
