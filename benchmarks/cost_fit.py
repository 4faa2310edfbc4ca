"""Fit the analytic CPU cost model's per-kind constants to task times measured on this host.

A search on CPU processors without a measured profile (`examples/train.py --budget` without
`--profile`, `flexflow search MODEL --machine local`) prices every task with the analytic
roofline of `flexflow.cost`: max(flops / (peak * efficiency[kind]), bytes / (bandwidth *
memory_efficiency[kind])). This profiles laptop-size models (zoo models and the benchmarks'
MLP and ResNet-20) with `flexflow.profiler` (every distinct tile of every configuration on the `local` machine, forward and backward, its
configuration's other tasks running at once), then for each op kind picks the (efficiency,
memory efficiency) pair, on a log grid, that minimizes the mean |log(analytic / measured)| over
its tiles, and the memory efficiency that prices an optimizer update at the measured rate. It
prints the fit, each kind's error with the constants in `flexflow.cost` and with the fit, and
each model's data-parallel iteration simulated as `examples/train.py` plans it
(`flexflow.planning.planning_context`) with the current constants, with the fitted ones and
with the measured profile. Results: results/cost_fit.{md,csv}.

    .venv/bin/python benchmarks/cost_fit.py [--models lenet,mlp,...] [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import RESULTS, write_csv, write_markdown  # noqa: E402

os.environ.setdefault("LEGATE_CONFIG", "--cpus 2 --gpus 0")  # the `local` machine's shape

MODELS = ("lenet", "mlp", "alexnet", "transformer", "rnnlm", "resnet20", "inception_v3")
GRID = tuple(10 ** (k / 20) for k in range(-60, 21))
"""Candidate efficiencies: 0.001 to 10 in steps of 10^(1/20) (12%)."""
MIN_POINTS = 6
"""Kinds with fewer measured passes keep their constants (too few to fit)."""
RESOLUTION_S = 2e-6
"""Measured passes shorter than this (views: flat, reshape) say nothing about a roofline."""


def build(name: str):
    """The laptop sizes of benchmarks/runtime.py (and AlexNet at 64x64, Inception-v3 at 75x75)."""
    import runtime as bench

    from flexflow import FFConfig
    from flexflow.zoo import load_model

    if name == "alexnet":
        return load_model("alexnet", FFConfig(batch_size=32), image_size=64)
    if name == "inception_v3":
        return load_model("inception_v3", FFConfig(batch_size=8), image_size=75)
    return bench.build(name)


@dataclasses.dataclass(frozen=True)
class Pass:
    """One measured pass of one tile: its op kind, FLOPs, bytes and time (launch excluded)."""

    model: str
    kind: str
    flops: float
    bytes: float
    seconds: float


def measured_passes(name: str, graph, machine, profile) -> list[Pass]:
    from flexflow.cost import cost_key
    from flexflow.ops.base import region_shape
    from flexflow.profiler import TASK_OVERHEAD_S
    from flexflow.space import enumerate_configs

    model = machine.devices[0].model
    found, seen = [], set()
    for node in graph.ops:
        for config in enumerate_configs(node.sig, machine):
            region = config.task_regions(node.sig.output_shape)[0]
            # (an op reading only model inputs is timed without its input gradient, under
            # another key: left out, the roofline's backward counts one)
            key = cost_key(node, region_shape(region), model)
            if key in seen or key not in profile.times:
                continue
            seen.add(key)
            cost, time = node.op.tile_cost(node.sig, region), profile.times[key]
            for flops, moved, seconds in (
                (cost.forward_flops, cost.forward_bytes_read + cost.forward_bytes_written,
                 time.forward_s),
                (cost.backward_flops, cost.backward_bytes_read + cost.backward_bytes_written,
                 time.backward_s),
            ):  # fmt: skip
                found.append(Pass(name, node.kind, flops, moved, seconds - TASK_OVERHEAD_S))
    return found


def roofline_error(passes, peak: float, bandwidth: float, efficiency: float, memory: float):
    """Mean |log(analytic / measured)| of `passes` under these constants."""
    return statistics.mean(
        abs(
            math.log(max(p.flops / (peak * efficiency), p.bytes / (bandwidth * memory)) / p.seconds)
        )
        for p in passes
    )


def fit(passes, peak: float, bandwidth: float, efficiency: float) -> tuple[float, float, float]:
    """(error, efficiency, memory efficiency) minimizing the error on the grid; a kind that
    does no arithmetic (concatenations, views) keeps `efficiency`, which prices nothing."""
    candidates = GRID if any(p.flops for p in passes) else (efficiency,)
    return min(
        (roofline_error(passes, peak, bandwidth, e, m), e, m) for e in candidates for m in GRID
    )


def dp_iteration_ms(graph, machine, profile, constants) -> float:
    """Data parallelism's iteration as examples/train.py plans it, the analytic model taking
    CPU `constants`."""
    from flexflow.cost import DEVICE_CONSTANTS, CostModel
    from flexflow.planning import planning_context
    from flexflow.simulator import TaskGraph, full_simulate
    from flexflow.strategies import named_strategy

    cost = CostModel(profile, {**DEVICE_CONSTANTS, "cpu": constants})
    context = planning_context(graph, machine, loss="sparse_categorical_crossentropy", cost=cost)
    dp = named_strategy("dp", graph, machine)
    return full_simulate(TaskGraph(context, dp)).iteration_s * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="cost_fit", help="results file stem")
    args = parser.parse_args()
    from flexflow.cost import DEVICE_CONSTANTS, UPDATE_BYTES_PER_ELEMENT
    from flexflow.machine import parse_machine
    from flexflow.profiler import profile_graph

    machine = parse_machine("local")
    device = machine.devices[0]
    peak, bandwidth = device.peak_flops, device.memory_bandwidth_bytes_per_s
    current = DEVICE_CONSTANTS["cpu"]
    graphs, profiles, passes = {}, {}, []
    for name in args.models.split(","):
        graphs[name] = build(name).graph()
        profiles[name] = profile_graph(graphs[name], machine, args.repeats)
        passes += measured_passes(name, graphs[name], machine, profiles[name])
        print(f"{name}: {len(profiles[name].times)} tiles measured", flush=True)
    by_kind: dict[str, list[Pass]] = defaultdict(list)
    for p in passes:
        if p.seconds >= RESOLUTION_S:
            by_kind[p.kind].append(p)
    rows, efficiency, memory = [], dict(current.efficiency), dict(current.kind_memory_efficiency)
    for kind, found in sorted(by_kind.items()):
        now = roofline_error(
            found, peak, bandwidth, current.efficiency.get(kind, current.default_efficiency),
            current.memory_efficiency_of(kind),
        )  # fmt: skip
        if len(found) < MIN_POINTS:
            rows.append([kind, len(found), "", "", f"{math.exp(now):.2f}x", ""])
            continue
        error, e, m = fit(
            found, peak, bandwidth, current.efficiency.get(kind, current.default_efficiency)
        )
        efficiency[kind], memory[kind] = e, m
        rows.append([kind, len(found), f"{e:.3f}", f"{m:.3f}", f"{math.exp(now):.2f}x",
                     f"{math.exp(error):.2f}x"])  # fmt: skip
    rates = [rate for profile in profiles.values() for rate in profile.update_bytes_per_s.values()]
    update_memory = statistics.median(rates) / bandwidth
    fitted = dataclasses.replace(
        current, efficiency=efficiency, memory_efficiency=update_memory,
        kind_memory_efficiency=memory,
    )  # fmt: skip
    models = []
    for name, graph in graphs.items():
        old = dp_iteration_ms(graph, machine, None, current)
        new = dp_iteration_ms(graph, machine, None, fitted)
        # the op-by-op times the constants are fitted to (not the C step's: `native_times`)
        measured = dp_iteration_ms(graph, machine, profiles[name].op_by_op(), current)
        models.append([name, f"{old:.2f}", f"{new:.2f}", f"{measured:.2f}",
                       f"{old / measured:.2f}", f"{new / measured:.2f}"])  # fmt: skip
    kinds_header = ["op kind", "passes", "fitted efficiency", "fitted memory efficiency",
                    "typical error now", "typical error fitted"]  # fmt: skip
    models_header = ["model", "analytic now ms", "analytic fitted ms", "profile ms",
                     "now / profile", "fitted / profile"]  # fmt: skip
    command = f".venv/bin/python benchmarks/cost_fit.py --models {args.models}"
    note = (
        f"`{command}` (LEGATE_CONFIG={os.environ['LEGATE_CONFIG']!r}: the `local` machine's "
        f"shape; peak {peak / 1e9:.0f} GFLOP/s and {bandwidth / 1e9:.0f} GB/s per core, as "
        f"`flexflow.machine_presets` estimates them). Per op kind, the constants of the "
        f"analytic roofline that best fit the measured passes (mean |log(analytic / measured)|, "
        f"'typical error' its exp: 1.5x means typically 50% off either way). Optimizer updates "
        f"measured at {statistics.median(rates) / 1e9:.1f} GB/s (the models' median; "
        f"{min(rates) / 1e9:.1f}-{max(rates) / 1e9:.1f}; {UPDATE_BYTES_PER_ELEMENT} "
        f"bytes per weight): memory efficiency {update_memory:.3f}. Per model, data "
        f"parallelism's iteration as examples/train.py plans it, with the analytic constants "
        f"flexflow/cost.py holds as this runs ('now'), with the fitted ones, and with the "
        f"measured profile's op-by-op times (its times of each op inside the C step, which "
        f"price data parallelism where a profile measured them, left out: the constants "
        f"price op-by-op tasks)."
    )
    write_csv(RESULTS / f"{args.out}.csv", [dict(zip(kinds_header, r, strict=True)) for r in rows])
    lines = ["# Analytic CPU costs fitted to this host's measured tasks", "", note, ""]
    for header, table in ((kinds_header, rows), (models_header, models)):
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(map(str, row)) + " |" for row in table]
        lines.append("")
    write_markdown(RESULTS / f"{args.out}.md", lines)
    print(note)
    for header, table in ((kinds_header, rows), (models_header, models)):
        print(" | ".join(header))
        for row in table:
            print(" | ".join(map(str, row)))
    print("fitted CPU_EFFICIENCY =", {k: float(f"{v:.2g}") for k, v in sorted(efficiency.items())})
    print(
        "fitted CPU_MEMORY_EFFICIENCY =", {k: float(f"{v:.2g}") for k, v in sorted(memory.items())}
    )
    print(f"fitted memory_efficiency (updates) = {update_memory:.3f}")


if __name__ == "__main__":
    main()
