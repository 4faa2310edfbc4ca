"""How much of a delta simulation's replay is the old schedule moved by a constant shift.

A change of one op moves the start of most tasks after it, and Algorithm 2 simulates all of
them again. This measures how those new starts relate to the old ones: over a walk of random
one-op changes (each op and configuration drawn uniformly, a change kept if the iteration is no
more than 0.2% slower, or with probability 0.05), each change is simulated to the end and every
task that exists before and after it (same id, same key) gets its shift, new start less old.
Along the new processing order (ready time, then key) it reports the share of the replayed
tasks whose shift equals the shift of the task before them, the number of distinct shifts per
change, and the last run of one shift (the rest of the iteration) as a share of the replay.
Shifts are equal within a relative 1e-12 of the iteration (float sums round). What a replay
that moved such runs instead of simulating them again could save; see benchmarks/README.md,
"Search time".

    .venv/bin/python benchmarks/delta_shifts.py --models resnet101 --machine p100:1 --inits random
"""

from __future__ import annotations

import argparse
import random
import statistics
from dataclasses import dataclass

import numpy as np
from results_io import RESULTS, write_csv, write_markdown
from rich.console import Console
from rich.progress import track

from flexflow.cli_args import positive_int
from flexflow.errors import FlexFlowError
from flexflow.machine import parse_machine
from flexflow.search.spaces import make_space
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model

KEEP_WITHIN = 1.002
"""A change that leaves the iteration at most this much slower is kept."""
KEEP_ANYWAY = 0.05
"""The chance that a slower change is kept anyway (the walk wanders as a chain does)."""
TOLERANCE = 1e-12
"""Shifts this close (relative to the iteration time) are one shift."""


@dataclass(frozen=True)
class ChangeShifts:
    replayed: int  # tasks the delta simulated again
    live: int  # live tasks after the change
    same_as_previous: int  # replayed tasks shifted as the task before them
    tail: int  # the last run of one shift, in tasks
    shifts: int  # distinct shifts among the replayed tasks


def _change_shifts(delta: DeltaSimulator, old: tuple, old_end_s: float) -> ChangeShifts:
    tg, s = delta.tg, delta.schedule
    old_start, old_order, old_live = old
    n = tg.size
    live = np.array(tg.live, dtype=np.int8)[:n].astype(bool)
    order = np.array(tg.order, dtype=np.uint64)[:n]
    start, ready = np.array(s.start)[:n], np.array(s.ready)[:n]
    m = min(len(old_start), len(old_live), n)
    same = np.zeros(n, bool)
    same[:m] = live[:m] & old_live[:m] & (order[:m] == old_order[:m])
    shift = np.full(n, np.nan)
    shift[:m][same[:m]] = start[:m][same[:m]] - old_start[:m][same[:m]]
    ids = np.nonzero(live)[0]
    sequence = shift[ids[np.lexsort((order[ids], ready[ids]))]]  # the processing order
    tol = TOLERANCE * old_end_s
    moved = np.isnan(sequence) | (np.abs(sequence) > tol)
    replay = sequence[int(np.argmax(moved)) if moved.any() else len(sequence) :]
    known = ~np.isnan(replay)
    equal = known[1:] & known[:-1] & (np.abs(replay[1:] - replay[:-1]) <= tol)
    last = s.iteration_s - old_end_s
    tail = 0
    for value in replay[::-1]:
        if np.isnan(value) or abs(value - last) > tol:
            break
        tail += 1
    distinct = len(set(np.round(replay[known] / tol).tolist())) if known.any() else 0
    return ChangeShifts(delta.replayed, int(live.sum()), int(equal.sum()), tail, distinct)


def walk(model: str, machine_name: str, init: str, changes: int, seed: int) -> list[ChangeShifts]:
    graph, machine = load_model(model).graph(), parse_machine(machine_name)
    space = make_space("soap", graph, machine)
    delta = DeltaSimulator(
        TaskGraph(SimContext(graph, machine), named_strategy(init, graph, machine, seed))
    )
    rng = random.Random(seed)
    found = []
    for _ in track(range(changes), description=f"{model} {machine_name} from {init}"):
        op = rng.randrange(len(graph.ops))
        config = rng.choice(space(op))
        s, tg = delta.schedule, delta.tg
        old = (
            np.array(s.start),
            np.array(tg.order, dtype=np.uint64),
            np.array(tg.live, dtype=np.int8).astype(bool),
        )
        old_end_s = s.iteration_s
        delta.change(op, config)
        found.append(_change_shifts(delta, old, old_end_s))
        if not (delta.iteration_s <= old_end_s * KEEP_WITHIN or rng.random() < KEEP_ANYWAY):
            delta.undo()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet101")
    parser.add_argument("--machine", default="p100:1")
    parser.add_argument("--inits", default="random,dp")
    parser.add_argument("--changes", type=positive_int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="delta_shifts")
    args = parser.parse_args()
    console = Console()
    rows = []
    for model in args.models.split(","):
        for init in args.inits.split(","):
            try:
                found = walk(model, args.machine, init, args.changes, args.seed)
            except FlexFlowError as exc:  # an unknown model, machine or initial strategy
                parser.error(f"{model} {args.machine} from {init}: {exc}")
            replayed = sum(c.replayed for c in found)
            rows.append(
                {
                    "model": model,
                    "machine": args.machine,
                    "init": init,
                    "changes": len(found),
                    "live_tasks_mean": round(statistics.mean(c.live for c in found), 1),
                    "replayed_mean": round(replayed / len(found), 1),
                    "same_shift_as_previous": round(
                        sum(c.same_as_previous for c in found) / replayed, 4
                    ),
                    "distinct_shifts_median": statistics.median(c.shifts for c in found),
                    "last_run_share": round(sum(c.tail for c in found) / replayed, 4),
                }
            )
            console.print(rows[-1])
    write_csv(RESULTS / f"{args.out}.csv", rows)
    lines = [
        "# The shift structure of delta simulations",
        "",
        f"`benchmarks/delta_shifts.py --models {args.models} --machine {args.machine} --inits "
        f"{args.inits} --changes {args.changes} --seed {args.seed}` ({__doc__.splitlines()[0]}"
        " See the script's docstring for the walk.)",
        "",
        "| model | machine | from | changes | live tasks | replayed | shifted as the task before | distinct shifts (median) | last run of one shift |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['machine']} | {r['init']} | {r['changes']} | {r['live_tasks_mean']:,} "
            f"| {r['replayed_mean']:,} | {r['same_shift_as_previous']:.1%} "
            f"| {r['distinct_shifts_median']:g} | {r['last_run_share']:.1%} |"
        )
    write_markdown(RESULTS / f"{args.out}.md", lines)


if __name__ == "__main__":
    main()
