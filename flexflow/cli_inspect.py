"""The inspection subcommands: `flexflow models`, `summary`, `graph` and `machines`, the zoo, a model's operator graph (§3) and the machines (§5) before any strategy."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from flexflow.cli_args import add_batch_size, batch_config
from flexflow.errors import FlexFlowError
from flexflow.figures import picture_file
from flexflow.fileio import atomic_write_text, output_file
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine, link_groups, parse_machine
from flexflow.machine_presets import PRESET_EXAMPLES
from flexflow.ops.base import full_region


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

    graph = load_model(args.model, batch_config(args)).graph()
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
    graph = load_model(args.model, batch_config(args)).graph()
    if args.json:
        atomic_write_text(args.json, graph.dumps())
    if args.dot:
        atomic_write_text(args.dot, to_dot(graph))
    if args.png:
        render_png(graph, args.png, title=args.model)
    written = [p for p in (args.json, args.dot, args.png) if p]
    console.print(f"{args.model}: {len(graph.ops)} ops -> {', '.join(written)}")
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


def register(add: Callable) -> None:
    """Add the inspection subcommands to the `flexflow` parser."""
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
