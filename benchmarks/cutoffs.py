"""Proposals cut short, side by side: the same search work with and without cutoffs.

A delta simulation given a cutoff stops once a device's or link's end plus the work still
queued for it passes the cutoff (`flexflow.simulator.native_loop.simulate`), and under the
runtime's per-task cost is not run at all when the cores' whole work passes it
(`DeltaSimulator.change_many`): MCMC passes the
acceptance threshold of a draw made first, scans (the final descent, `check-local`) the
strategy's cost. This runs, for each case, the same work both ways in one process, taking turns
(ROUNDS rounds after one warm-up of the simulation context's caches), and checks that both give
the same answer:
- a chain of PROPOSALS proposals (`run_chain`, seed 0) from the case's initial strategy;
- `improving_neighbours` (check-local) of the strategy a seeded 2,000-proposal search found.
"Without" drops every cutoff (the evaluator is given none). Each figure is the median round.
Results: benchmarks/results/cutoffs.{csv,md}.

    .venv/bin/python benchmarks/cutoffs.py [--cases inception_v3/p100:4/dp,...] [--rounds 3]
        [--proposals 600] [--no-check-local]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import time

import numpy as np
from results_io import RESULTS, write_csv, write_markdown

from flexflow.cli_args import positive_int
from flexflow.errors import FlexFlowError
from flexflow.machine import parse_machine
from flexflow.planning import planning_context
from flexflow.search import search
from flexflow.search.evaluator import Evaluator
from flexflow.search.local import improving_neighbours
from flexflow.search.mcmc import DEFAULT_BETA, run_chain
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model

CASES = (
    "alexnet/p100:1/random",
    "resnet101/p100:1/random",
    "inception_v3/p100:4/dp",
    "nmt/p100:4/dp",
    "inception_v3/k80:16/dp/chain",
    "lenet/local/random",
)
"""model/machine/initial strategy of the chain, and "/chain" for no check-local (a 64-GPU
model's neighbours take many minutes to check without cutoffs). On `local`, this host's CPUs
as LEGATE_CONFIG gives them (else all its cores), the context is a training run's
(`planning_context`: fused launches and the runtime's per-task cost, so the cores' whole work
bounds an iteration too)."""
ROUNDS, PROPOSALS = 3, 600


@contextlib.contextmanager
def no_cutoffs():
    """Every proposal simulated to its end, as before cutoffs existed."""
    propose, propose_many = Evaluator.propose, Evaluator.propose_many
    Evaluator.propose = lambda self, op, config, cutoff=math.inf: propose(self, op, config)
    Evaluator.propose_many = lambda self, ops, config, cutoff=math.inf: propose_many(
        self, ops, config
    )
    try:
        yield
    finally:
        Evaluator.propose, Evaluator.propose_many = propose, propose_many


def timed(work, cut: bool):
    begin = time.perf_counter()
    if cut:
        result = work()
    else:
        with no_cutoffs():
            result = work()
    return time.perf_counter() - begin, result


def side_by_side(work, rounds: int, same) -> tuple[float, float]:
    """Median seconds of `work` without and with cutoffs, taking turns; `same(a, b)` checks
    their results agree."""
    work()  # warm the context's caches
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        results = {}
        for cut in (False, True):
            seconds, results[cut] = timed(work, cut)
            times[cut].append(seconds)
        if not same(results[False], results[True]):
            raise AssertionError("the search answered differently with cutoffs")
    return statistics.median(times[False]), statistics.median(times[True])


def run_case(case: str, rounds: int, proposals: int, check_local: bool) -> dict:
    model, machine_name, init, *chain_only = case.split("/")
    check_local = check_local and chain_only != ["chain"]
    graph, machine = load_model(model).graph(), parse_machine(machine_name)
    if machine.name.startswith("local"):  # as a training run plans on this host's CPUs
        context = planning_context(graph, machine, None, "sparse_categorical_crossentropy", 8)
    else:
        context = SimContext(graph, machine)
    space = make_space("soap", graph, machine)
    dp_s = full_simulate(TaskGraph(context, named_strategy("dp", graph, machine))).iteration_s
    start = named_strategy(init, graph, machine, 0)

    def chain():
        return run_chain(
            context, init, start, space, np.random.default_rng(0), dp_s, DEFAULT_BETA,
            max_proposals=proposals,
        )  # fmt: skip

    def same_chain(a, b) -> bool:
        return (a.best, a.best_s, a.accepted) == (b.best, b.best_s, b.accepted)

    without, with_cuts = side_by_side(chain, rounds, same_chain)
    row = {
        "model": model,
        "machine": machine_name,
        "init": init,
        "proposals": proposals,
        "chain_us_without": round(without / proposals * 1e6),
        "chain_us_with": round(with_cuts / proposals * 1e6),
        "chain_speedup": round(without / with_cuts, 2),
    }
    if check_local:
        found = search(context, budget_s=math.inf, seed=0, max_proposals=2000, polish=False)

        def neighbours():
            return improving_neighbours(context, found.best, space)

        without, with_cuts = side_by_side(neighbours, 1, lambda a, b: a == b)
        row |= {
            "check_local_s_without": round(without, 2),
            "check_local_s_with": round(with_cuts, 2),
            "check_local_speedup": round(without / with_cuts, 2),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=positive_int, default=ROUNDS)
    parser.add_argument("--proposals", type=positive_int, default=PROPOSALS)
    parser.add_argument("--no-check-local", dest="check_local", action="store_false")
    parser.add_argument("--out", default="cutoffs", help="results file stem under results/")
    args = parser.parse_args()
    for case in args.cases.split(","):
        fields = case.split("/")
        if len(fields) not in (3, 4) or fields[3:] not in ([], ["chain"]):
            parser.error(f"a case is model/machine/init[/chain], e.g. {CASES[0]}; got {case!r}")
    rows = []
    for case in args.cases.split(","):
        try:
            rows.append(run_case(case, args.rounds, args.proposals, args.check_local))
        except FlexFlowError as exc:  # an unknown model, machine or initial strategy
            parser.error(f"{case}: {exc}")
        print(rows[-1], flush=True)
    write_csv(RESULTS / f"{args.out}.csv", rows)
    lines = [
        "# Proposals cut short: the same search work without and with cutoffs",
        "",
        f"`.venv/bin/python benchmarks/cutoffs.py --cases {args.cases} --rounds {args.rounds} "
        f"--proposals {args.proposals}`: a {args.proposals}-proposal MCMC chain (seed 0, "
        f"median of {args.rounds} rounds taking turns) and check-local of the strategy a "
        "2,000-proposal search found (one round each way); both answers checked equal.",
        "",
        "| model | machine | chain from | chain us/proposal without | with | speedup "
        "| check-local s without | with | speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        local = (
            f"{r['check_local_s_without']} | {r['check_local_s_with']} | "
            f"{r['check_local_speedup']}x"
            if "check_local_speedup" in r
            else "– | – | –"
        )
        lines.append(
            f"| {r['model']} | {r['machine']} | {r['init']} | {r['chain_us_without']:,} "
            f"| {r['chain_us_with']:,} | {r['chain_speedup']}x | {local} |"
        )
    write_markdown(RESULTS / f"{args.out}.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
