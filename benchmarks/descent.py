"""The final descent with and without narrow sweeps, side by side, from the same chains' results.

`flexflow search` runs MCMC chains, then descends from their best strategy to a local optimum
(`flexflow.search.local.descend`). With narrow sweeps (the default) each op first tries only
its graph neighbours' configurations, and every op's whole space only in the wide sweeps, the
last of which proves local optimality; without them every sweep is wide. For each case and
seed this runs the search's chains once (`search(..., polish=False)`, the CLI's default
initial strategies), then both descents from their best strategy, one after the other, the
order alternating by seed so that host drift falls on both. Reported: when each descent last
improved the strategy and when it ended (the proof), the locally optimal cost it reached, and
the search's convergence either way (the chains' seconds plus the descent's last improvement,
`SearchResult.converged_s`). Results: benchmarks/results/descent.{csv,md} (or --out's name).

    .venv/bin/python benchmarks/descent.py [--cases nmt/p100:4,...] [--seeds 0-4] [--budget 20]
        [--out descent]
"""

from __future__ import annotations

import argparse
import statistics
import time

from results_io import RESULTS, write_csv, write_markdown

from flexflow.cli_args import positive_float
from flexflow.errors import FlexFlowError
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.local import descend
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.zoo import load_model

CASES = ("nmt/p100:4",)
SEEDS = "0-4"


def parse_seeds(text: str) -> list[int]:
    """The seeds of a range ("0-4") or a list ("0,2,5"); ValueError for anything else."""
    if "-" in text:
        lo, hi = text.split("-")
        seeds = list(range(int(lo), int(hi) + 1))
    else:
        seeds = [int(s) for s in text.split(",")]
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    return seeds


def timed_descent(context: SimContext, start, space, narrow: bool) -> dict:
    begin = time.perf_counter()
    descent = descend(context, start, space, narrow=narrow)
    seconds = time.perf_counter() - begin
    if not descent.finished:
        raise AssertionError("a descent without a budget ended unfinished")
    cost = full_simulate(TaskGraph(context, descent.strategy)).iteration_s
    return {
        "last_improvement_s": round(descent.improved_at_s or 0.0, 1),
        "proof_s": round(seconds, 1),
        "iteration_ms": round(cost * 1e3, 4),
    }


def run_case(case: str, seed: int, budget_s: float) -> dict:
    model, machine_name = case.split("/")
    graph, machine = load_model(model).graph(), parse_machine(machine_name)
    context = SimContext(graph, machine)
    space = make_space("soap", graph, machine)
    chains = search(context, budget_s, seed=seed, polish=False)
    chains_s = chains.seconds
    results = {}
    for narrow in (seed % 2 == 0, seed % 2 == 1):  # alternate which goes first
        results[narrow] = timed_descent(context, chains.best, space, narrow)
    wide, narrow = results[False], results[True]
    return {
        "model": model,
        "machine": machine_name,
        "seed": seed,
        "chains_s": round(chains_s, 1),
        "chains_ms": round(chains.best_s * 1e3, 4),
        "wide_last_s": wide["last_improvement_s"],
        "wide_proof_s": wide["proof_s"],
        "wide_ms": wide["iteration_ms"],
        "narrow_last_s": narrow["last_improvement_s"],
        "narrow_proof_s": narrow["proof_s"],
        "narrow_ms": narrow["iteration_ms"],
        "converged_s_wide": round(chains_s + wide["last_improvement_s"], 1),
        "converged_s_narrow": round(chains_s + narrow["last_improvement_s"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--seeds", default=SEEDS)
    parser.add_argument("--budget", type=positive_float, default=20.0)
    parser.add_argument("--out", default="descent", help="results file name (no suffix)")
    args = parser.parse_args()
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        parser.error(f"--seeds takes a range (0-4) or a list (0,2,5); got {args.seeds!r}")
    cases = args.cases.split(",")
    for case in cases:
        if case.count("/") != 1:
            parser.error(f"a case is model/machine, e.g. {CASES[0]}; got {case!r}")
    rows = []
    for case in cases:
        for seed in seeds:
            try:
                rows.append(run_case(case, seed, args.budget))
            except FlexFlowError as exc:  # an unknown model or machine
                parser.error(f"{case}: {exc}")
            print(rows[-1], flush=True)
    write_csv(RESULTS / f"{args.out}.csv", rows)
    lines = [
        "# The final descent without and with narrow sweeps, from the same chains' results",
        "",
        f"`.venv/bin/python benchmarks/descent.py --cases {args.cases} --seeds {args.seeds} "
        f"--budget {args.budget:g} --out {args.out}`: per seed, the search's chains ({args.budget:g} s, "
        "no descent), then both descents from their best strategy, one after the other. "
        "last: seconds into the descent of its last improvement; proof: when it ended "
        "(locally optimal); converged: the chains' seconds plus the last improvement.",
        "",
        "| model | machine | seed | chains ms | wide: last s | proof s | ms "
        "| narrow: last s | proof s | ms | converged s wide | narrow |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['machine']} | {r['seed']} | {r['chains_ms']} "
            f"| {r['wide_last_s']} | {r['wide_proof_s']} | {r['wide_ms']} "
            f"| {r['narrow_last_s']} | {r['narrow_proof_s']} | {r['narrow_ms']} "
            f"| {r['converged_s_wide']} | {r['converged_s_narrow']} |"
        )
    for case in cases:
        mine = [r for r in rows if f"{r['model']}/{r['machine']}" == case]
        lines.append("")
        lines.append(
            f"{case}: median last improvement {statistics.median(r['wide_last_s'] for r in mine):.1f}"
            f" s wide-only vs {statistics.median(r['narrow_last_s'] for r in mine):.1f} s with "
            f"narrow sweeps; median proof {statistics.median(r['wide_proof_s'] for r in mine):.1f}"
            f" vs {statistics.median(r['narrow_proof_s'] for r in mine):.1f} s; geometric mean "
            f"cost ratio narrow/wide {statistics.geometric_mean([r['narrow_ms'] / r['wide_ms'] for r in mine]):.4f}."
        )
    write_markdown(RESULTS / f"{args.out}.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
