"""What our proposal kinds change in what the search finds: the same searches with and without one.

For each model and machine in CASES and each seed in SEEDS, `flexflow.search.search` runs with
the default chains and a BUDGET_S-second budget, once without the kind of move (`--move
neighbour`: only the paper's uniform one-op draws, neighbour_moves=0; `--move path`: no path
moves, path_moves=0) and once with SHARES[kind] of them, both before the final descent
(polish=False: the chains' own best). It prints each pair's speedups over data parallelism and
their ratio, and the geometric mean of the ratios per machine and overall. Results:
benchmarks/results/{neighbour,path}_moves.{csv,md}.

    .venv/bin/python benchmarks/neighbour_moves.py [--move path] [--budget 20] [--seeds 3]
        [--share 0.5]
"""

from __future__ import annotations

import argparse
import math
import statistics

from results_io import RESULTS, write_csv, write_markdown

from flexflow.cli_args import positive_float, positive_int
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.mcmc import DEFAULT_NEIGHBOUR_MOVES, DEFAULT_PATH_MOVES
from flexflow.simulator import SimContext
from flexflow.zoo import load_model

MACHINES = ("p100:4", "k80:4")
MODELS = ("alexnet", "rnntc", "rnnlm", "nmt")
BUDGET_S = 20.0
SEEDS = 3
SHARES = {"neighbour": DEFAULT_NEIGHBOUR_MOVES, "path": DEFAULT_PATH_MOVES}
WITHOUT = {"neighbour": "uniform", "path": "no_path"}
"""The column name of the searches without the kind of move."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=positive_float, default=BUDGET_S)
    parser.add_argument("--seeds", type=positive_int, default=SEEDS)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--move", choices=tuple(SHARES), default="neighbour")
    parser.add_argument("--share", type=float, default=None, help="default: the search's")
    parser.add_argument(
        "--out", default=None, help="results file stem under results/ (default MOVE_moves)"
    )
    args = parser.parse_args()
    kind, without = args.move, WITHOUT[args.move]
    share = SHARES[kind] if args.share is None else args.share
    rows = []
    for machine_spec in args.machines.split(","):
        machine = parse_machine(machine_spec)
        for model in args.models.split(","):
            graph = load_model(model).graph()
            for seed in range(args.seeds):
                base, moves = (
                    search(
                        SimContext(graph, machine),
                        budget_s=args.budget,
                        seed=seed,
                        polish=False,
                        **{f"{kind}_moves": value},
                    )
                    for value in (0.0, share)
                )
                row = {
                    "machine": machine_spec,
                    "model": model,
                    "seed": seed,
                    f"{without}_x_dp": round(base.speedup_over_dp, 4),
                    f"{kind}_x_dp": round(moves.speedup_over_dp, 4),
                    "ratio": round(moves.speedup_over_dp / base.speedup_over_dp, 4),
                    f"{without}_proposals": base.proposals,
                    f"{kind}_proposals": moves.proposals,
                }
                rows.append(row)
                print(row, flush=True)
    write_csv(RESULTS / f"{args.out or kind + '_moves'}.csv", rows)

    def geomean(ratios: list[float]) -> float:
        return math.exp(statistics.mean(math.log(r) for r in ratios))

    title = {"neighbour": "against uniform draws only", "path": "against none"}[kind]
    lines = [
        f"# {kind.capitalize()} moves (share {share:g}) {title}",
        "",
        f"`.venv/bin/python benchmarks/neighbour_moves.py --move {kind} --share {share:g} "
        f"--budget {args.budget:g} --seeds {args.seeds} --models {args.models} --machines "
        f"{args.machines}`: the best of the default chains in a {args.budget:g} s "
        "search, before the final descent, as a speedup over data parallelism.",
        "",
        f"| machine | model | seed | without x DP | with {kind} moves x DP | ratio "
        "| proposals (without / with) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['machine']} | {r['model']} | {r['seed']} | {r[f'{without}_x_dp']:.3f}x "
        f"| {r[f'{kind}_x_dp']:.3f}x | {r['ratio']:.3f} "
        f"| {r[f'{without}_proposals']:,} / {r[f'{kind}_proposals']:,} |"
        for r in rows
    ]
    lines.append("")
    for machine_spec in dict.fromkeys(r["machine"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["machine"] == machine_spec]
        better = sum(r > 1 for r in ratios)
        lines.append(
            f"- {machine_spec}: geometric mean ratio {geomean(ratios):.3f} "
            f"({better} of {len(ratios)} searches better with {kind} moves)"
        )
    ratios = [r["ratio"] for r in rows]
    lines.append(f"- all: geometric mean ratio {geomean(ratios):.3f}")
    write_markdown(RESULTS / f"{args.out or kind + '_moves'}.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
