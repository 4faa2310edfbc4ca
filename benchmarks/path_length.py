"""How long path moves' walks should be: the same chains and searches with several lengths.

A path move gives one drawn configuration to an op and to a random walk of its neighbours that
can take it, going on with probability `path_continue` after each step (`flexflow.search.mcmc`;
the mean walk is about 1 / (1 - path_continue) ops where the graph allows). A value such as
0.75/0.97 draws one of the two per walk (the default since session 39). For each model and
machine, seed and value (the first is the baseline: 0.75, the default before) this runs, side by
side in one process:

- `chain`: Table 4's protocol (`benchmarks/table4.py`): one chain from the seed's random
  strategy until the progress rule stops it (no improvement in the last half of its proposals,
  after 10 per op) or CAP_S passes: its seconds, when its best was in hand, and its best as a
  speedup over data parallelism;
- `search`: the default search (dp, expert and random chains) with a BUDGET_S budget, before
  the final descent (polish=False): its best as a speedup over data parallelism.

Only graphs without unrolled layers get path moves by default (`path_moves_for`), so the models
are the zoo's CNNs and the transformer. Results: benchmarks/results/OUT.{csv,md}
(path_length-chains and path_length-searches: session 39's runs).

    .venv/bin/python benchmarks/path_length.py [--values 0.75,0.97,0.75/0.97]
        [--models resnet101,inception_v3] [--machines p100:1,k80:16] [--seeds 3]
        [--parts chain,search] [--cap 120] [--budget 10] [--out path_length]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from results_io import RESULTS, write_csv, write_markdown
from table4 import random_start_chain

from flexflow.cli_args import positive_float, positive_int
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.mcmc import path_chances
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model

VALUES = ("0.75", "0.97", "0.75/0.97")
MODELS = ("alexnet", "inception_v3", "resnet101", "transformer")
MACHINES = ("p100:1", "p100:4", "k80:16")  # 4, 16 and 64 GPUs, Table 4's columns
PARTS = ("chain", "search")
SEEDS, CAP_S, BUDGET_S = 3, 120.0, 10.0


def continues(value: str) -> tuple[float, ...]:
    """`path_continue` from its text: one chance, or several (a/b) drawn per walk."""
    return path_chances(tuple(float(v) for v in value.split("/")))


def chain_row(graph, machine, space, dp_s: float, seed: int, value: str, cap_s: float) -> dict:
    """One Table 4 chain from the seed's random strategy with walks going on at `value`."""
    context = SimContext(graph, machine)
    begin = time.perf_counter()
    result = random_start_chain(context, space, dp_s, seed, cap_s, path_continue=continues(value))
    seconds = time.perf_counter() - begin
    return {
        "seconds": round(seconds, 3),
        "in_hand_s": round(result.history[-1][0], 3),
        "proposals": result.proposals,
        "best_at": result.best_at,
        "capped": seconds >= cap_s,
        "x_dp": round(dp_s / result.best_s, 4),
    }


def search_row(graph, machine, seed: int, value: str, budget_s: float) -> dict:
    """The default search's chains (no final descent) with walks going on at `value`."""
    result = search(
        SimContext(graph, machine),
        budget_s=budget_s,
        seed=seed,
        polish=False,
        path_continue=continues(value),
    )
    return {"proposals": result.proposals, "x_dp": round(result.speedup_over_dp, 4)}


def geomean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(v) for v in values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", default=",".join(VALUES))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--seeds", type=positive_int, default=SEEDS)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--cap", type=positive_float, default=CAP_S, help="seconds per chain")
    parser.add_argument("--budget", type=positive_float, default=BUDGET_S, help="per search")
    parser.add_argument("--out", default="path_length", help="results file stem in results/")
    args = parser.parse_args()
    values = args.values.split(",")
    for value in values:
        continues(value)  # a bad value fails now, not after an hour
    parts = args.parts.split(",")
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    rows = []
    for machine_spec in args.machines.split(","):
        machine = parse_machine(machine_spec)
        for model in args.models.split(","):
            graph = load_model(model).graph()
            dp = named_strategy("dp", graph, machine)
            dp_s = full_simulate(TaskGraph(SimContext(graph, machine), dp)).iteration_s
            space = make_space("soap", graph, machine)
            for seed in range(args.seeds):
                for value in values:  # taking turns, so host drift spreads over all values
                    row = {"machine": machine_spec, "model": model, "seed": seed, "value": value}
                    if "chain" in parts:
                        chain = chain_row(graph, machine, space, dp_s, seed, value, args.cap)
                        row.update({f"chain_{k}": v for k, v in chain.items()})
                    if "search" in parts:
                        found = search_row(graph, machine, seed, value, args.budget)
                        row.update({f"search_{k}": v for k, v in found.items()})
                    rows.append(row)
                    print(row, flush=True)
    write_csv(RESULTS / f"{args.out}.csv", rows)
    lines = report(rows, values, parts, args)
    write_markdown(RESULTS / f"{args.out}.md", lines)
    print("\n".join(lines))


def report(rows: list[dict], values: list[str], parts: list[str], args) -> list[str]:
    """Per machine, model and value: means over the seeds, and the baseline's ratios."""
    lines = [
        "# Path moves' walk length",
        "",
        f"`.venv/bin/python benchmarks/path_length.py --values {args.values} --models "
        f"{args.models} --machines {args.machines} --seeds {args.seeds} --parts {args.parts} "
        f"--cap {args.cap:g} --budget {args.budget:g}`, all in one process, the values taking "
        f"turns per seed. `path_continue` is the chance a walk goes on after each step; the "
        f"first value, {values[0]}, is the baseline.",
        "",
    ]
    header = ["machine", "model", "path_continue"]
    if "chain" in parts:
        header += ["chain s (mean)", "best in hand s", "proposals", "capped",
                   "chain x DP (geomean, min-max)"]  # fmt: skip
    if "search" in parts:
        header += [f"{args.budget:g} s search x DP (geomean, min-max)"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    summary = []
    for machine_spec in dict.fromkeys(r["machine"] for r in rows):
        for model in dict.fromkeys(r["model"] for r in rows if r["machine"] == machine_spec):
            group = [r for r in rows if (r["machine"], r["model"]) == (machine_spec, model)]
            for value in values:
                mine = [r for r in group if r["value"] == value]
                cells = [machine_spec, model, value]
                if "chain" in parts:
                    x = [r["chain_x_dp"] for r in mine]
                    cells += [
                        f"{statistics.mean(r['chain_seconds'] for r in mine):.2f}",
                        f"{statistics.mean(r['chain_in_hand_s'] for r in mine):.2f}",
                        f"{round(statistics.mean(r['chain_proposals'] for r in mine)):,}",
                        f"{sum(r['chain_capped'] for r in mine)}/{len(mine)}",
                        f"{geomean(x):.3f}x ({min(x):.3f}-{max(x):.3f})",
                    ]
                if "search" in parts:
                    x = [r["search_x_dp"] for r in mine]
                    cells += [f"{geomean(x):.3f}x ({min(x):.3f}-{max(x):.3f})"]
                lines.append("| " + " | ".join(cells) + " |")
    for value in values[1:]:
        for part, key, runs in (
            ("chain", "chain_x_dp", "chains"),
            ("search", "search_x_dp", "searches"),
        ):
            if part not in parts:
                continue
            ratios = [
                new[key] / base[key]
                for base in rows
                if base["value"] == values[0]
                for new in rows
                if new["value"] == value
                and (new["machine"], new["model"], new["seed"])
                == (base["machine"], base["model"], base["seed"])
            ]
            better = sum(r > 1.0005 for r in ratios)
            worse = sum(r < 0.9995 for r in ratios)
            summary.append(
                f"- {value} against {values[0]}, {runs}: best x DP geometric mean ratio "
                f"{geomean(ratios):.3f} ({better} better, {worse} worse, of {len(ratios)})"
            )
        if "chain" in parts:

            def mean_s(at: str) -> float:
                return statistics.mean(r["chain_seconds"] for r in rows if r["value"] == at)

            summary.append(
                f"- {value} against {values[0]}: mean chain time "
                f"x{mean_s(value) / mean_s(values[0]):.2f}"
            )
    return [*lines, "", *summary]


if __name__ == "__main__":
    main()
