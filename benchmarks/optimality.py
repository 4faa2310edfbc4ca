"""Paper §8.4 on this machine: does MCMC with a 30 s budget find the global optimum that exhaustive search proves?

Runs `exhaustive_search` on LeNet on `p100:1` (the soap space), then `search` with BUDGET_S
seconds for every seed in SEEDS, and reports each seed's best against the proven optimum.
Results: benchmarks/results/optimality.md.

    .venv/bin/python benchmarks/optimality.py
"""

from __future__ import annotations

from results_io import RESULTS, no_options, write_markdown

from flexflow.machine import parse_machine
from flexflow.search import exhaustive_search, search
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext
from flexflow.zoo import load_model

MODEL, MACHINE = "lenet", "p100:1"
BUDGET_S = 30.0
SEEDS = (0, 1, 2, 3, 4)


def main() -> None:
    graph, machine = load_model(MODEL).graph(), parse_machine(MACHINE)
    context = SimContext(graph, machine)
    optimum = exhaustive_search(context, make_space("soap", graph, machine))
    if not optimum.complete:
        raise SystemExit("exhaustive search did not finish; no optimum to compare with")
    lines = [
        f"Exhaustive search, {MODEL} on {MACHINE}: optimum {optimum.best_s * 1e3:.6f} ms, "
        f"{optimum.examined:,} strategies simulated, {optimum.pruned:,} subtrees pruned, "
        f"{optimum.seconds:.1f} s.",
        "",
        "| seed | MCMC best ms | proposals | seconds | equals optimum |",
        "|---|---|---|---|---|",
    ]
    for seed in SEEDS:
        result = search(SimContext(graph, machine), budget_s=BUDGET_S, seed=seed)
        found = abs(result.best_s - optimum.best_s) <= 1e-12 * optimum.best_s
        lines.append(
            f"| {seed} | {result.best_s * 1e3:.6f} | {result.proposals:,} | {result.seconds:.1f} "
            f"| {'yes' if found else 'NO'} |"
        )
        print(lines[-1], flush=True)
    write_markdown(RESULTS / "optimality.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    no_options(__doc__)
    main()
