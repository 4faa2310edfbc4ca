"""Paper Table 4 (§8.3) measured: the search's time with full and with delta simulation.

The paper averages the search time over 10 random initial strategies. Here one MCMC chain
starts from each random initial strategy (seeds 0..STARTS-1, the SOAP space, the default
beta and layer moves) and runs until the progress rule stops it: its best has not improved
during the last half of its proposals, after at least 10 proposals per op (`patience=
"progress"` in `flexflow.search.mcmc`), or until CAP_S passes. The rule counts proposals, so
the same chain evaluated by full simulation (every proposal's task graph built and simulated
whole) makes exactly the same proposals and finds the same strategy: it is run again that
way, each run in a fresh simulation context (every search pays its own cache warm-up).

Full simulation is slow (ResNet-101 on 4 GPUs: about 8-10x the delta chain's time), so a full
run stops at FULL_CAP_S; its total is then the delta chain's total times the full/delta time
ratio measured over the proposals both made (marked "est." in the table). Only the first
FULL_STARTS starts are run with full simulation.
Results: benchmarks/results/table4.{md,csv}.

    .venv/bin/python benchmarks/table4.py [--models alexnet,nmt] [--machines p100:1]
        [--starts 10] [--full-starts 3] [--cap 120] [--full-cap 30] [--space soap|sample]

`--space sample` draws the random strategies and the proposals from each op's sample-only
configurations (`sample_space`): the space FlexFlow's released code searches, for a comparison
with the paper's times on the space its code most likely searched.
`--models resnet101_flexflow` runs ResNet-101 as FlexFlow's search code built it (105 ops, no
batch norm or shortcut: benchmarks/models/resnet101_flexflow.py), the graph the paper's
ResNet-101 times most likely come from, against the zoo's real network (279 ops).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import statistics
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
from paper import PAPER
from results_io import RESULTS, write_csv, write_markdown
from rich.console import Console

from flexflow.cli_args import positive_float, positive_int
from flexflow.errors import FlexFlowError
from flexflow.graph import OperatorGraph
from flexflow.machine import parse_machine
from flexflow.ops import DimKind
from flexflow.search.mcmc import DEFAULT_BETA, ChainResult, ChainStatus, run_chain
from flexflow.search.spaces import Space, make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy, random_strategy
from flexflow.strategy import ParallelConfig, Strategy
from flexflow.zoo import load_model

HERE = Path(__file__).resolve().parent
MODELS = ("alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt")
WORKLOADS = {"resnet101_flexflow": (HERE / "models" / "resnet101_flexflow.py", "resnet101")}
"""Models of the paper's experiments as FlexFlow's own code built them, not in the zoo: the
file that builds each and the zoo model whose paper figures it is compared with."""
MACHINES = ("p100:1", "p100:4", "k80:16")  # 4, 16 and 64 GPUs, Table 4's columns
STARTS, FULL_STARTS = 10, 3
SAMPLE = DimKind.SAMPLE
CAP_S, FULL_CAP_S = 120.0, 30.0


@dataclass(frozen=True, slots=True)
class Start:
    """One random initial strategy's chain, with delta and (maybe) full simulation."""

    model: str
    machine: str
    gpus: int
    seed: int
    proposals: int
    capped: bool  # the delta chain hit CAP_S before the progress rule stopped it
    delta_s: float
    full_s: float | None  # None: not run with full simulation
    full_estimated: bool  # full_s extrapolated from the proposals the capped full run made
    initial_x_dp: float
    best_x_dp: float
    converged_s: float | None = None
    """When the delta chain's best was in hand (its last improvement), from the same start as
    delta_s: the rest of delta_s is the progress rule's wait that shows nothing better comes.
    None in the CSVs of runs before it was recorded."""
    space: str = "soap"
    """Where the random strategies and proposals come from (SPACES); soap in older CSVs."""


SPACES = ("soap", "sample")


def sample_space(graph: OperatorGraph, soap: Space) -> Space:
    """The SOAP configurations that split an op's sample dimension only: the space FlexFlow's
    released code draws its random strategies and its proposals from (every op's output split
    by sample, on contiguous devices in `Op::get_random_parallel_config`, 2020; one dimension,
    any devices, in the 2018 research simulator `scripts/simulator.cc`; github.com/flexflow/
    FlexFlow), against which this module compares its SOAP chains."""
    found: dict[int, tuple[ParallelConfig, ...]] = {}

    def space(op: int) -> tuple[ParallelConfig, ...]:
        if op not in found:
            kinds = [d.kind for d in graph.ops[op].sig.dims]
            found[op] = tuple(
                c
                for c in soap(op)
                if all(n == 1 for n, k in zip(c.degrees, kinds, strict=True) if k != SAMPLE)
            )
        return found[op]

    return space


def random_start_chain(
    context: SimContext,
    space,
    dp_s: float,
    seed: int,
    budget_s: float,
    init: Strategy | None = None,
    **options,
) -> ChainResult:
    """Table 4's chain: one MCMC chain from the seed's random strategy (SOAP's, or `init`; its
    own random stream), stopped by the progress rule or after `budget_s`; `options` go to
    `run_chain`."""
    graph, machine = context.graph, context.machine
    return run_chain(
        context,
        "random",
        init or named_strategy("random", graph, machine, seed),
        space,
        np.random.default_rng(seed),
        dp_s,
        DEFAULT_BETA,
        budget_s,
        patience="progress",
        **options,
    )


def load_workload(name: str) -> OperatorGraph:
    """The graph of a zoo model or of one of WORKLOADS."""
    path, _ = WORKLOADS.get(name, (None, None))
    return load_model(name if path is None else str(path)).graph()


def run_start(
    model, machine_name, seed, with_full, cap_s, full_cap_s, show, space_name="soap"
) -> Start:
    graph, machine = load_workload(model), parse_machine(machine_name)
    dp = named_strategy("dp", graph, machine)
    dp_s = full_simulate(TaskGraph(SimContext(graph, machine), dp)).iteration_s
    space = make_space("soap", graph, machine)
    init = None
    if space_name == "sample":
        space = sample_space(graph, space)
        init = random_strategy(graph, machine, seed, space)

    def chain(simulation: str, budget_s: float, marks: list) -> tuple[ChainResult, float]:
        def on_status(status: ChainStatus) -> None:
            marks.append((status.proposals, status.elapsed_s))
            show(f"{model} {machine_name} seed {seed} {simulation}: {status.proposals:,} proposals")

        context = SimContext(graph, machine)
        begin = time.perf_counter()
        result = random_start_chain(
            context, space, dp_s, seed, budget_s, init, on_status=on_status, simulation=simulation
        )
        return result, time.perf_counter() - begin

    delta_marks: list[tuple[int, float]] = []
    delta, delta_s = chain("delta", cap_s, delta_marks)
    full_s, estimated = None, False
    if with_full:
        full, full_s = chain("full", full_cap_s, [])
        if full.proposals == 0:
            full_s = None
        elif full.proposals < delta.proposals:  # capped: scale by the ratio over the same proposals
            ratio = full.seconds / _elapsed_at(delta_marks, full.proposals, delta)
            full_s, estimated = delta_s * ratio, True
        elif (full.best_s, full.proposals) != (delta.best_s, delta.proposals):
            raise AssertionError(
                f"{model} {machine_name} seed {seed}: full and delta chains differ"
            )
    return Start(
        model,
        machine_name,
        machine.num_devices,
        seed,
        delta.proposals,
        delta.proposals > 0 and delta.seconds >= cap_s,
        delta_s,
        full_s,
        estimated,
        dp_s / delta.initial_s,
        dp_s / delta.best_s,
        delta_s - delta.seconds + delta.history[-1][0],  # the set-up, then the chain's clock
        space_name,
    )


def _elapsed_at(marks: list[tuple[int, float]], proposals: int, chain: ChainResult) -> float:
    """Seconds the delta chain had run after `proposals` proposals (linear between marks)."""
    points = [(0, 0.0), *marks, (chain.proposals, chain.seconds)]
    i = bisect.bisect_left([p for p, _ in points], proposals)
    (p0, t0), (p1, t1) = points[max(i - 1, 0)], points[min(i, len(points) - 1)]
    return t1 if p1 == p0 else t0 + (t1 - t0) * (proposals - p0) / (p1 - p0)


def summary_lines(starts: list[Start], args) -> list[str]:
    lines = [
        "# Paper Table 4 measured: search time with full and with delta simulation",
        "",
        f"One MCMC chain from each of {args.starts} random initial strategies (seeds 0-"
        f"{args.starts - 1}), stopped by the progress rule (no improvement in the last half of "
        f"its proposals, after 10 per op) or after {args.cap:g} s; the first {args.full_starts} "
        f"rerun with full simulation (same proposals, same strategy), capped at {args.full_cap:g} "
        "s and then extrapolated by the full/delta time ratio over the proposals both made "
        '(est.). Means over the starts; "best in hand" is when the delta chain found the '
        "best it returns (the rest of its time is the progress rule's wait); x DP is the "
        "simulated speed-up over data parallelism of the chain's initial and best strategy. "
        "The paper's columns are its Table 4 (search time averaged over 10 random initial "
        "strategies), keyed by GPU count."
        + (
            " Random strategies and proposals in the sample-only space (`--space sample`: "
            "every op split by sample only, the space FlexFlow's released code searches), "
            "not SOAP's."
            if any(s.space == "sample" for s in starts)  # as run, also when rendered again
            else ""
        ),
        "",
        "| model | machine (GPUs) | delta s | best in hand after s "
        "| starts run both ways: delta s / full s | full/delta | paper full / delta s "
        "| proposals | capped | initial x DP | best x DP (min-max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    cases = dict.fromkeys((s.model, s.machine) for s in starts)
    for model, machine in cases:
        rows = [s for s in starts if (s.model, s.machine) == (model, machine)]
        both = [s for s in rows if s.full_s is not None]
        if both:
            est = " (est.)" if any(s.full_estimated for s in both) else ""
            pair = (
                f"{statistics.mean(s.delta_s for s in both):.2f} / "
                f"{statistics.mean(s.full_s for s in both):.2f}{est}"
            )
            # the mean of the starts' ratios, not the ratio of the means
            ratio = f"{statistics.mean(s.full_s / s.delta_s for s in both):.2f}x"
        else:
            pair = ratio = "–"
        paper = PAPER["table4"].get((WORKLOADS.get(model, (None, model))[1], rows[0].gpus))
        best = [s.best_x_dp for s in rows]
        converged = [s.converged_s for s in rows if s.converged_s is not None]
        in_hand = f"{statistics.mean(converged):.2f}" if converged else "–"
        lines.append(
            f"| {model} | {machine} ({rows[0].gpus}) "
            f"| {statistics.mean(s.delta_s for s in rows):.2f} | {in_hand} | {pair} | {ratio} "
            f"| {'–' if paper is None else f'{paper[0]:g} / {paper[1]:g}'} "
            f"| {statistics.mean(s.proposals for s in rows):,.0f} "
            f"| {sum(s.capped for s in rows)}/{len(rows)} "
            f"| {statistics.mean(s.initial_x_dp for s in rows):.2f}x "
            f"| {statistics.mean(best):.2f}x ({min(best):.2f}-{max(best):.2f}) |"
        )
    return lines


def _read_csv(path) -> list[Start]:
    """The starts of an earlier run, from its CSV (`write_csv` of `asdict`)."""
    types = {f.name: f.type for f in fields(Start)}
    parse = {
        "str": str,
        "int": int,
        "bool": lambda v: v == "True",
        "float": float,
        "float | None": lambda v: None if v == "" else float(v),
    }
    with open(path, newline="") as handle:
        return [
            Start(**{k: parse[types[k]](v) for k, v in row.items()})
            for row in csv.DictReader(handle)
        ]


def _check_cases(parser: argparse.ArgumentParser, models: list[str], machines: list[str]) -> None:
    """Exit with a message, not a traceback mid-run, on a model or machine that is not one."""
    for model in models:
        try:
            load_workload(model)
        except FlexFlowError as error:
            parser.error(f"--models: {error} Table 4 also takes {', '.join(WORKLOADS)}.")
    for machine in machines:
        try:
            parse_machine(machine)
        except FlexFlowError as error:
            parser.error(f"--machines: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"zoo models, or {', '.join(WORKLOADS)} (the paper's graphs as FlexFlow built them)",
    )
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--starts", type=positive_int, default=STARTS)
    parser.add_argument("--full-starts", type=int, default=FULL_STARTS)
    parser.add_argument("--cap", type=positive_float, default=CAP_S, help="seconds per chain")
    parser.add_argument(
        "--full-cap", type=positive_float, default=FULL_CAP_S, help="seconds per full run"
    )
    parser.add_argument(
        "--space",
        choices=SPACES,
        default="soap",
        help="soap, or sample: random strategies and proposals splitting each op by sample "
        "only (the space FlexFlow's released code searches)",
    )
    parser.add_argument("--out", default="table4", help="results file stem in benchmarks/results")
    parser.add_argument(
        "--render", action="store_true", help="only write the markdown again from the --out CSV"
    )
    args = parser.parse_args()
    _check_cases(parser, args.models.split(","), args.machines.split(","))
    if args.render:
        path = RESULTS / f"{args.out}.csv"
        if not path.is_file():
            parser.error(f"--render: no results at {path}; run the benchmark with --out first")
        starts = _read_csv(path)
        write_markdown(RESULTS / f"{args.out}.md", summary_lines(starts, args))
        return
    console = Console()
    starts: list[Start] = []
    with console.status("") as status:
        for machine in args.machines.split(","):
            for model in args.models.split(","):
                for seed in range(args.starts):
                    start = run_start(
                        model,
                        machine,
                        seed,
                        seed < args.full_starts,
                        args.cap,
                        args.full_cap,
                        status.update,
                        args.space,
                    )
                    starts.append(start)
                    console.log(start)
                # written after every case, so an interrupted run keeps what it measured
                write_csv(RESULTS / f"{args.out}.csv", [asdict(s) for s in starts])
                write_markdown(RESULTS / f"{args.out}.md", summary_lines(starts, args))
    console.print("\n".join(summary_lines(starts, args)))


if __name__ == "__main__":
    main()
