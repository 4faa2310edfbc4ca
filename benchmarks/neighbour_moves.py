"""What neighbour moves change in what the search finds: the same searches with and without them.

For each model and machine in CASES and each seed in SEEDS, `flexflow.search.search` runs with
the default chains (dp, expert, random) and a BUDGET_S-second budget, once with only the
paper's uniform one-op draws (neighbour_moves=0) and once with the default share of neighbour
moves, both before the final descent (polish=False: the chains' own best). It prints each
pair's speedups over data parallelism and their ratio, and the geometric mean of the ratios
per machine and overall. Results: benchmarks/results/neighbour_moves.{csv,md}.

    .venv/bin/python benchmarks/neighbour_moves.py [--budget 20] [--seeds 3]
"""

from __future__ import annotations

import argparse
import math
import statistics

from results_io import RESULTS, write_csv, write_markdown

from flexflow.cli_args import positive_float, positive_int
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.mcmc import DEFAULT_NEIGHBOUR_MOVES
from flexflow.simulator import SimContext
from flexflow.zoo import load_model

MACHINES = ("p100:4", "k80:4")
MODELS = ("alexnet", "rnntc", "rnnlm", "nmt")
BUDGET_S = 20.0
SEEDS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=positive_float, default=BUDGET_S)
    parser.add_argument("--seeds", type=positive_int, default=SEEDS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--machines", default=",".join(MACHINES))
    args = parser.parse_args()
    rows = []
    for machine_spec in args.machines.split(","):
        machine = parse_machine(machine_spec)
        for model in args.models.split(","):
            graph = load_model(model).graph()
            for seed in range(args.seeds):
                found = {}
                for share in (0.0, DEFAULT_NEIGHBOUR_MOVES):
                    result = search(
                        SimContext(graph, machine),
                        budget_s=args.budget,
                        seed=seed,
                        polish=False,
                        neighbour_moves=share,
                    )
                    found[share] = result
                uniform, moves = found[0.0], found[DEFAULT_NEIGHBOUR_MOVES]
                row = {
                    "machine": machine_spec,
                    "model": model,
                    "seed": seed,
                    "uniform_x_dp": round(uniform.speedup_over_dp, 4),
                    "neighbour_x_dp": round(moves.speedup_over_dp, 4),
                    "ratio": round(moves.speedup_over_dp / uniform.speedup_over_dp, 4),
                    "uniform_proposals": uniform.proposals,
                    "neighbour_proposals": moves.proposals,
                }
                rows.append(row)
                print(row, flush=True)
    write_csv(RESULTS / "neighbour_moves.csv", rows)

    def geomean(ratios: list[float]) -> float:
        return math.exp(statistics.mean(math.log(r) for r in ratios))

    lines = [
        f"# Neighbour moves (share {DEFAULT_NEIGHBOUR_MOVES:g}) against uniform draws only",
        "",
        f"`.venv/bin/python benchmarks/neighbour_moves.py --budget {args.budget:g} --seeds "
        f"{args.seeds}`: the best of the chains (dp, expert, random) in a {args.budget:g} s "
        "search, before the final descent, as a speedup over data parallelism.",
        "",
        "| machine | model | seed | uniform only x DP | with neighbour moves x DP | ratio "
        "| proposals (uniform / with) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['machine']} | {r['model']} | {r['seed']} | {r['uniform_x_dp']:.3f}x "
        f"| {r['neighbour_x_dp']:.3f}x | {r['ratio']:.3f} "
        f"| {r['uniform_proposals']:,} / {r['neighbour_proposals']:,} |"
        for r in rows
    ]
    lines.append("")
    for machine_spec in dict.fromkeys(r["machine"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["machine"] == machine_spec]
        better = sum(r > 1 for r in ratios)
        lines.append(
            f"- {machine_spec}: geometric mean ratio {geomean(ratios):.3f} "
            f"({better} of {len(ratios)} searches better with neighbour moves)"
        )
    ratios = [r["ratio"] for r in rows]
    lines.append(f"- all: geometric mean ratio {geomean(ratios):.3f}")
    write_markdown(RESULTS / "neighbour_moves.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
