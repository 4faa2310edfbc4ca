"""Full vs delta simulation time for every zoo model on 4, 16 and 64 GPUs (paper Table 4's ratio).

Starting from data parallelism, a walk of PROPOSALS random single-op configuration changes
(drawn as the MCMC search draws them) is applied with delta simulation (`DeltaSimulator.change`:
update the task graph, re-simulate what can move); every FULL_EVERY steps the strategy reached
is also simulated in full (build its task graph + Algorithm 1). Both share one SimContext with
warm caches, as during a search, and must agree exactly. Results:
benchmarks/results/simulator.{csv,md}.

    .venv/bin/python benchmarks/simulator.py [--models nmt,lenet] [--proposals 300]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from results_io import RESULTS, write_csv, write_markdown

from flexflow.cost import CostModel
from flexflow.machine import parse_machine
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph, full_simulate
from flexflow.space import enumerate_configs
from flexflow.strategies import named_strategy
from flexflow.zoo import ZOO, load_model

MACHINES = {4: "p100:1", 16: "p100:4", 64: "p100:16"}
PROPOSALS = 300
FULL_EVERY = 10  # full simulations of the walk's strategies, for the side-by-side ratio
SEED = 0


def measure(model: str, gpus: int, proposals: int) -> dict:
    """Walk PROPOSALS random one-op changes from data parallelism; time each delta, and a full
    simulation of the strategy reached every FULL_EVERY steps, so both see the same strategies."""
    graph, machine = load_model(model).graph(), parse_machine(MACHINES[gpus])
    context = SimContext(graph, machine, CostModel())
    strategy = named_strategy("dp", graph, machine)
    dp_tasks = sum(TaskGraph(context, strategy).live)
    dp_times = []
    for _ in range(5):  # one full simulation of data parallelism (warm context)
        begin = time.perf_counter()
        full_simulate(TaskGraph(context, strategy))
        dp_times.append(time.perf_counter() - begin)
    delta = DeltaSimulator(TaskGraph(context, strategy))
    rng = np.random.default_rng(SEED)
    delta_times, full_times, replayed, tasks = [], [], [], []
    for step in range(proposals):
        op = int(rng.integers(len(graph.ops)))
        space = enumerate_configs(graph.ops[op].sig, machine)
        config = space[int(rng.integers(len(space)))]
        strategy = strategy.replace(op, config)
        begin = time.perf_counter()
        delta.change(op, config)
        delta_times.append(time.perf_counter() - begin)
        replayed.append(delta.replayed)
        if step % FULL_EVERY == 0:
            begin = time.perf_counter()
            tg = TaskGraph(context, strategy)
            full = full_simulate(tg)
            full_times.append(time.perf_counter() - begin)
            tasks.append(sum(tg.live))
            if full.iteration_s != delta.iteration_s:
                raise AssertionError("delta and full simulation disagree")
    full_ms = statistics.mean(full_times) * 1e3
    delta_ms = statistics.mean(delta_times) * 1e3
    return {
        "model": model,
        "gpus": gpus,
        "machine": MACHINES[gpus],
        "dp_tasks": dp_tasks,
        "dp_full_ms": round(statistics.median(dp_times) * 1e3, 2),
        "mean_tasks": round(statistics.mean(tasks)),
        "mean_replayed": round(statistics.mean(replayed)),
        "full_ms": round(full_ms, 2),
        "delta_ms": round(delta_ms, 2),
        "speedup": round(full_ms / delta_ms, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--gpus", default="4,16,64")
    parser.add_argument("--proposals", type=int, default=PROPOSALS)
    parser.add_argument(
        "--out", default="simulator", help="results file stem under results/ (default simulator)"
    )
    args = parser.parse_args()
    rows = []
    for model in args.models.split(","):
        for gpus in (int(g) for g in args.gpus.split(",")):
            row = measure(model, gpus, args.proposals)
            rows.append(row)
            print(row, flush=True)
    write_csv(RESULTS / f"{args.out}.csv", rows)
    lines = [
        "| model | GPUs | tasks (DP) | full DP ms | tasks (walk) | re-simulated per delta | full ms | delta ms | full/delta |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['gpus']} | {r['dp_tasks']} | {r['dp_full_ms']} | {r['mean_tasks']} | {r['mean_replayed']} "
        f"| {r['full_ms']} | {r['delta_ms']} | {r['speedup']}x |"
        for r in rows
    ]
    write_markdown(RESULTS / f"{args.out}.md", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
