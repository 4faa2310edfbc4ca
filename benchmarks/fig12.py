"""Paper Figure 12 (§8.3): the search's best strategy over time, with delta and with full simulation.

The paper plots the best expected iteration time found so far against search time for NMT on
16 P100 GPUs: with full simulation the search plateaus around 150 ms after 8 minutes, with
delta simulation it reaches about 140 ms in 6 minutes and keeps improving (about 135 ms at 16
minutes). Here `flexflow.search.search` runs twice with the same model, machine, seed, chains
(dp, expert, random, one after the other with an equal share of the budget) and budget, once
evaluating proposals by delta simulation and once by full simulation, both before the final
descent (polish=False: the chains' own progress). The two searches run at the same time in two
processes, one per core of a 2-core host, so both see the same machine load.

Given the same seed the two searches make the same proposals in the same order; full
simulation only makes fewer of them in the same time. So the curves differ by how fast each
evaluates a proposal, and "time to reach" compares them at equal strategy quality: the seconds
each search took to first reach the best the full-simulation search found.
Results: benchmarks/results/fig12.{csv,md,png}.

    .venv/bin/python benchmarks/fig12.py [--model nmt] [--machine p100:4] [--budget 240] [--seed 0]

The times are simulated iteration times of this re-creation's cost model; the paper's are its
simulator's estimates for its P100 cluster, so the two curves' levels differ, not their story.
"""

from __future__ import annotations

import argparse
import multiprocessing
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from results_io import RESULTS, png_bytes, write_csv, write_markdown  # noqa: E402

from flexflow.cli_args import positive_float, seed_int  # noqa: E402
from flexflow.errors import FlexFlowError  # noqa: E402
from flexflow.fileio import atomic_write_bytes  # noqa: E402
from flexflow.machine import parse_machine  # noqa: E402
from flexflow.search import search  # noqa: E402
from flexflow.simulator import SimContext  # noqa: E402
from flexflow.zoo import load_model  # noqa: E402

MODEL, MACHINE = "nmt", "p100:4"  # the paper's Figure 12: NMT on 16 P100 GPUs
BUDGET_S = 240.0
SIMULATIONS = ("delta", "full")
PAPER = (
    "Paper (NMT, 16 P100 GPUs, its simulator's estimates): full simulation plateaus near 150 ms "
    "after about 8 minutes; delta simulation reaches about 140 ms within 6 minutes and about "
    "135 ms at 16 minutes; full simulation would need about 16 minutes to reach the region "
    "delta simulation reaches in 6."
)


@dataclass(frozen=True, slots=True)
class Curve:
    """One search's best-so-far iteration time over its run."""

    simulation: str
    points: tuple[tuple[float, float], ...]  # (seconds from the start, best iteration s)
    dp_s: float
    proposals: int
    seconds: float

    @property
    def best_s(self) -> float:
        return self.points[-1][1]

    def reached_s(self, target_s: float) -> float | None:
        """Seconds until the best first was at or below `target_s` (None: never)."""
        return next((t for t, best in self.points if best <= target_s), None)


CHAINS = ("dp", "expert", "random")
"""The chains of the run in benchmarks/results (the search's default has since gained dp-width)."""


def run(model: str, machine: str, budget_s: float, seed: int, simulation: str) -> Curve:
    """One search; its chains' improvements merged into one best-so-far curve."""
    graph = load_model(model).graph()
    result = search(
        SimContext(graph, parse_machine(machine)),
        budget_s=budget_s,
        seed=seed,
        inits=CHAINS,
        polish=False,
        simulation=simulation,
    )
    marks = sorted(
        (started + elapsed, best)
        for chain, started in zip(result.chains, result.chains_started_s, strict=True)
        for elapsed, best in chain.history
    )
    points, best = [], float("inf")
    for t, cost in marks:
        if cost < best:
            best = cost
            points.append((t, cost))
    points.append((result.chains_ended_s, best))  # the curve runs on to the search's end
    return Curve(simulation, tuple(points), result.dp_s, result.proposals, result.seconds)


def _run_packed(args: tuple) -> Curve:
    return run(*args)


def plot(curves: list[Curve], title: str) -> bytes:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for curve, style in zip(curves, ("-", "--"), strict=True):
        minutes = [t / 60 for t, _ in curve.points]
        ms = [best * 1e3 for _, best in curve.points]
        ax.step(minutes, ms, style, where="post", label=f"{curve.simulation} simulation")
    ax.axhline(curves[0].dp_s * 1e3, color="grey", linewidth=0.8, label="data parallelism")
    ax.set_xlabel("search time (minutes)")
    ax.set_ylabel("best simulated iteration time (ms)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return png_bytes(fig)


def summary(curves: list[Curve], model: str, machine: str, budget_s: float, seed: int) -> list:
    delta, full = curves
    target = full.best_s
    lines = [
        f"# Paper Figure 12: best strategy over search time, {model} on {machine}",
        "",
        f"`.venv/bin/python benchmarks/fig12.py --model {model} --machine {machine} "
        f"--budget {budget_s:g} --seed {seed}`: two searches (chains dp, expert, random; "
        "no final descent) run side by side, one per core; the same proposals in the same "
        "order, evaluated by delta or by full simulation. Plot: fig12.png.",
        "",
        "| simulation | best ms | x DP | proposals | proposals/s | reached full's best (s) |",
        "|---|---|---|---|---|---|",
    ]
    for curve in curves:
        reached = curve.reached_s(target)
        lines.append(
            f"| {curve.simulation} | {curve.best_s * 1e3:.2f} | {curve.dp_s / curve.best_s:.2f}x "
            f"| {curve.proposals:,} | {curve.proposals / curve.seconds:.1f} "
            f"| {'–' if reached is None else f'{reached:.1f}'} |"
        )
    delta_reached, full_reached = delta.reached_s(target), full.reached_s(target)
    lines.append("")
    if delta_reached and full_reached:  # both after their first strategy
        lines.append(
            f"Delta simulation reached the full-simulation search's best ({target * 1e3:.2f} ms) "
            f"{full_reached / delta_reached:.1f}x sooner ({delta_reached:.1f} s vs "
            f"{full_reached:.1f} s) and ended {full.best_s / delta.best_s:.3f}x better."
        )
    lines += ["", PAPER]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--machine", default=MACHINE)
    parser.add_argument("--budget", type=positive_float, default=BUDGET_S, help="seconds each")
    parser.add_argument("--seed", type=seed_int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    args = parser.parse_args()
    try:  # bad names fail here, not inside the worker processes
        load_model(args.model)
        gpus = parse_machine(args.machine).num_devices
    except FlexFlowError as error:
        parser.error(str(error))
    jobs = [(args.model, args.machine, args.budget, args.seed, sim) for sim in SIMULATIONS]
    print(f"{args.model} on {args.machine}: delta and full searches of {args.budget:g} s each")
    with multiprocessing.get_context("fork").Pool(len(jobs)) as pool:
        curves = pool.map(_run_packed, jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [
        {"simulation": c.simulation, "seconds": t, "best_ms": best * 1e3}
        for c in curves
        for t, best in c.points
    ]
    write_csv(args.out / "fig12.csv", rows)
    lines = summary(curves, args.model, args.machine, args.budget, args.seed)
    write_markdown(args.out / "fig12.md", lines)
    title = f"{args.model} on {args.machine} ({gpus} GPUs)"
    atomic_write_bytes(args.out / "fig12.png", plot(curves, title))
    print("\n".join(lines))
    print(f"wrote {args.out}/fig12.csv, fig12.md, fig12.png")


if __name__ == "__main__":
    main()
