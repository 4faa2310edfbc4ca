"""The analytic roofline against GPU task times measured on an NVIDIA H200, on `dgx-h200:1`.

    python benchmarks/gpu_costs.py [--profile FILE] [--budget SECONDS] [--models NAME ...]

The profile (default: benchmarks/results/gpu-profiles-h200/zoo-dgx-h200.json, written on an
H200 by `scripts/gpu_profile.py MODEL... --machine dgx-h200:1`) holds every distinct task of the
zoo's models on that machine. For each model this prints, side by side in one run:

- per op kind, measured / analytic time of each distinct task (forward + backward; median and
  10th-90th percentiles, and the ratio of the sums);
- the simulated iteration time of data parallelism and the expert strategy under each cost
  model, and of two SOAP searches (seed 0; each `--budget` seconds of chains, then up to as long
  again descending to a local optimum), one pricing tasks analytically and one by the measured
  profile, each pick simulated under both: what the analytic model's pick costs in measured
  times, against the measured model's own pick. The budgets are wall-clock, so the picks (not
  the simulated times of a given pick) depend on the host's speed and load.

The measured times are this project's GPU task bodies (Python issuing cuBLAS/cuDNN/NVRTC kernels
through cffi, then a synchronization) on one H200, not the paper's C++ runtime. Writes
benchmarks/results/gpu-costs-h200.{md,csv,png} (gpu-costs-h200-MODEL-....* for a subset).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from results_io import RESULTS, png_bytes, write_csv, write_markdown  # noqa: E402
from rich.console import Console  # noqa: E402

from flexflow.cost import CostModel, Profile  # noqa: E402
from flexflow.fileio import atomic_write_bytes  # noqa: E402
from flexflow.machine import parse_machine  # noqa: E402
from flexflow.profiler import distinct_tiles, profile_coverage  # noqa: E402
from flexflow.search import search  # noqa: E402
from flexflow.simulator import SimContext, TaskGraph, full_simulate, summarize  # noqa: E402
from flexflow.strategies import named_strategy  # noqa: E402
from flexflow.zoo import ZOO, load_model  # noqa: E402

MACHINE = "dgx-h200:1"
PROFILE = RESULTS / "gpu-profiles-h200" / "zoo-dgx-h200.json"
MODELS = ("alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt", "lenet", "transformer")
SEED = 0


def _ms(context: SimContext, strategy) -> float:
    graph = TaskGraph(context, strategy)
    return summarize(graph, full_simulate(graph)).iteration_ms


def task_ratios(graph, machine, analytic: CostModel, measured: CostModel) -> dict[str, list]:
    """(measured, analytic) seconds of each distinct task, forward + backward, by op kind."""
    device = next(d for d in machine.devices if d.kind == "gpu")
    pairs: dict[str, list] = defaultdict(list)
    for node in graph.ops:
        grads = graph.computes_input_grads(node.id)
        for region, _ in distinct_tiles(node, machine, 1).values():
            m = measured.task_time(node, region, device, grads)
            a = analytic.task_time(node, region, device, grads)
            pairs[node.kind].append((m.forward_s + m.backward_s, a.forward_s + a.backward_s))
    return pairs


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=PROFILE)
    parser.add_argument("--budget", type=float, default=15.0, help="seconds per search (15)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=sorted(ZOO))
    args = parser.parse_args()
    console = Console()
    profile = Profile.load(args.profile)
    machine = parse_machine(MACHINE)
    by_kind: dict[str, list] = defaultdict(list)
    rows = []
    for name in args.models:
        graph = load_model(name).graph()
        held, total = profile_coverage(profile, graph, machine)
        if held != total:
            raise SystemExit(f"{args.profile} holds {held} of {name}'s {total} tasks; measure it.")
        analytic, measured = CostModel(), CostModel(profile)
        for kind, pairs in task_ratios(graph, machine, analytic, measured).items():
            by_kind[kind].extend(pairs)
        contexts = {
            "analytic": SimContext(graph, machine, analytic),
            "measured": SimContext(graph, machine, measured),
        }
        strategies = {
            "DP": named_strategy("dp", graph, machine),
            "Expert": named_strategy("expert", graph, machine),
        }
        for cost, context in contexts.items():
            console.print(f"{name}: searching {args.budget:g} s pricing tasks by the {cost} model")
            found = search(context, budget_s=args.budget, seed=SEED, polish_budget_s=args.budget)
            strategies[f"SOAP searched on {cost} costs"] = found.best
        dp = {cost: _ms(context, strategies["DP"]) for cost, context in contexts.items()}
        for label, strategy in strategies.items():
            times = {cost: _ms(context, strategy) for cost, context in contexts.items()}
            rows.append(
                {
                    "model": name,
                    "batch": graph.input_tensors[0].spec.shape[0],
                    "strategy": label,
                    "analytic_ms": round(times["analytic"], 4),
                    "measured_ms": round(times["measured"], 4),
                    "measured_over_analytic": round(times["measured"] / times["analytic"], 3),
                    "speedup_over_dp_analytic": round(dp["analytic"] / times["analytic"], 3),
                    "speedup_over_dp_measured": round(dp["measured"] / times["measured"], 3),
                }
            )
            console.print(rows[-1])
    kinds = []
    for kind, pairs in sorted(by_kind.items()):
        ratios = [m / a for m, a in pairs]
        kinds.append(
            {
                "op_kind": kind,
                "tasks": len(pairs),
                "median": statistics.median(ratios),
                "p10": _percentile(ratios, 0.1),
                "p90": _percentile(ratios, 0.9),
                "sum_ratio": sum(m for m, _ in pairs) / sum(a for _, a in pairs),
                "median_measured_us": statistics.median(m for m, _ in pairs) * 1e6,
            }
        )
    write_outputs(rows, kinds, profile, args)


def plot(kinds: list[dict]) -> bytes:
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(kinds) + 1.2))
    names = [k["op_kind"] for k in kinds]
    medians = [k["median"] for k in kinds]
    low = [k["median"] - k["p10"] for k in kinds]
    high = [k["p90"] - k["median"] for k in kinds]
    ax.barh(names, medians, xerr=[low, high], color="#4c72b0", capsize=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("measured / analytic task time on an H200 (median, 10th-90th percentile)")
    ax.set_title("GPU task costs: H200 measurements against the roofline")
    return png_bytes(fig)


def write_outputs(rows: list[dict], kinds: list[dict], profile: Profile, args) -> None:
    subset = "" if sorted(args.models) == sorted(MODELS) else "-" + "-".join(args.models)
    out = RESULTS / f"gpu-costs-h200{subset}"
    write_csv(out.with_suffix(".csv"), rows)
    atomic_write_bytes(out.with_suffix(".png"), plot(kinds))
    rate = next(iter(profile.update_bytes_per_s.values()), None)
    lines = [
        "# GPU task costs: measured on an NVIDIA H200 against the analytic roofline",
        "",
        f"`python benchmarks/gpu_costs.py --budget {args.budget:g}` on `{MACHINE}` with "
        f"`{args.profile.name}` (measured by `scripts/gpu_profile.py` on one H200); SGD update "
        f"measured at {rate / 1e12:.2f} TB/s."
        if rate
        else "",
        "",
        "## Per op kind (measured / analytic, forward + backward, each op's distinct tiles)",
        "",
        "| op kind | op tiles | median | 10th pct | 90th pct | sum ratio | median measured (us) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k in kinds:
        lines.append(
            f"| {k['op_kind']} | {k['tasks']} | {k['median']:.2f} | {k['p10']:.2f} | "
            f"{k['p90']:.2f} | {k['sum_ratio']:.2f} | {k['median_measured_us']:.0f} |"
        )
    lines += [
        "",
        "## Simulated iteration (ms) under each cost model",
        "",
        "| model | batch | strategy | analytic | measured | measured / analytic | "
        "speedup over DP (analytic) | speedup over DP (measured) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['strategy']} | {r['analytic_ms']:.3f} | "
            f"{r['measured_ms']:.3f} | {r['measured_over_analytic']:.2f} | "
            f"{r['speedup_over_dp_analytic']:.2f} | {r['speedup_over_dp_measured']:.2f} |"
        )
    write_markdown(out.with_suffix(".md"), lines)
    print(f"wrote {out}.md, .csv, .png")


if __name__ == "__main__":
    main()
