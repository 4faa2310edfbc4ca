"""How the MCMC inverse temperature beta changes what the search finds, at a fixed proposal budget.

For each model and machine below, the search runs with every BETAS value and every seed in
SEEDS, with PROPOSALS proposals in all (so runs are exactly reproducible), and reports the mean
speedup over data parallelism and the acceptance rate. The default beta of flexflow.search is
the value with the best mean speedup here. Results: benchmarks/results/beta.{csv,md}.

    .venv/bin/python benchmarks/beta.py
"""

from __future__ import annotations

import statistics

from results_io import RESULTS, no_options, write_csv, write_markdown

from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.simulator import SimContext
from flexflow.zoo import load_model

CASES = (("lenet", "p100:1"), ("rnnlm", "p100:1"), ("alexnet", "k80:1"), ("inception_v3", "p100:1"))
BETAS = (5.0, 20.0, 50.0, 200.0, 1000.0)
SEEDS = (0, 1, 2)
PROPOSALS = 1500


def main() -> None:
    rows = []
    for model, machine_spec in CASES:
        graph, machine = load_model(model).graph(), parse_machine(machine_spec)
        for beta in BETAS:
            speedups, acceptance = [], []
            for seed in SEEDS:
                result = search(
                    SimContext(graph, machine),
                    budget_s=3600,
                    seed=seed,
                    beta=beta,
                    max_proposals=PROPOSALS,
                )
                speedups.append(result.speedup_over_dp)
                acceptance.append(result.acceptance_rate)
            row = {
                "model": model,
                "machine": machine_spec,
                "beta": beta,
                "mean_speedup_over_dp": round(statistics.mean(speedups), 4),
                "min_speedup_over_dp": round(min(speedups), 4),
                "mean_acceptance": round(statistics.mean(acceptance), 3),
            }
            rows.append(row)
            print(row, flush=True)
    write_csv(RESULTS / "beta.csv", rows)
    lines = [
        "| model | machine | beta | mean speedup over DP | worst seed | acceptance |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['machine']} | {r['beta']:g} | {r['mean_speedup_over_dp']:.3f}x "
        f"| {r['min_speedup_over_dp']:.3f}x | {r['mean_acceptance']:.0%} |"
        for r in rows
    ]
    write_markdown(RESULTS / "beta.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    no_options(__doc__)
    main()
