"""Paper §8.2-8.3 with the simulator: Figures 7, 8 and 10 and Table 4 for the zoo on P100/K80 machines.

For every model in MODELS on every machine in MACHINES it simulates five strategies: data
parallelism, the expert-designed strategy, the best of a search restricted to the operation
dimension (REINFORCE's space), the OptCNN baseline (its dynamic programming) and the full SOAP
search, each given BUDGET_S seconds with seed SEED. For each it reports the simulated iteration
time, samples/s per GPU (batch / iteration time / GPUs, Figure 7), bytes moved and total compute
time per iteration (Figure 8's panels, from `summarize`), the SOAP search's time with delta
simulation and an ESTIMATE of the same search with full simulation (Table 4): the mean time of
one full simulation (task graph build + Algorithm 1) over the strategies the search found, times
the search's number of proposals. The paper's published numbers (PAPER) are shown alongside.
Results: benchmarks/results/paper.{csv,md} and paper_fig7.png, paper_fig8.png, paper_fig10.png.

    .venv/bin/python benchmarks/paper.py [--models nmt,alexnet] [--machines k80:1] [--budget 60]
        [--polish-budget SECONDS|inf] [--per-gpu-batch] [--export DIR] [--out DIR]

`--polish-budget inf` lets each SOAP search's final descent run until it proves its strategy
locally optimal (paper §8.4), however long that takes; `--per-gpu-batch` scales the zoo's batch
by the GPU count (weak scaling: 64 samples per GPU, 256 for AlexNet) instead of keeping it
global; `--export DIR` writes each SOAP strategy there, as `flexflow check-local` reads it.

All numbers are simulated iteration times of this re-creation's cost model, not measurements of
real hardware; the paper's numbers are real executions on its clusters.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from results_io import png_bytes  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

from flexflow.config import FFConfig  # noqa: E402
from flexflow.fileio import atomic_write_bytes, atomic_write_text  # noqa: E402
from flexflow.machine import parse_machine  # noqa: E402
from flexflow.search import search  # noqa: E402
from flexflow.simulator import SimContext, TaskGraph, full_simulate, summarize  # noqa: E402
from flexflow.strategies import named_strategy  # noqa: E402
from flexflow.strategy_file import export_strategy  # noqa: E402
from flexflow.zoo import load_model  # noqa: E402

MODELS = ("alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt")
MACHINES = ("p100:1", "p100:4", "k80:1", "k80:4", "k80:16")  # 4, 16, 4, 16, 64 GPUs
BUDGET_S = 60.0  # per search (operation-only and SOAP; OptCNN is a dynamic program)
SEED = 0
FULL_SIM_SAMPLES = 5  # full simulations timed for Table 4's estimated column (plus repeats)
RESULTS = Path(__file__).resolve().parent / "results"

# (label, how the strategy is obtained: a named strategy or a search space)
STRATEGIES = (
    ("DP", "dp"),
    ("Expert", "expert"),
    ("Operation (REINFORCE space)", "operation"),
    ("OptCNN", "optcnn"),
    ("FlexFlow (SOAP)", "soap"),
)
SEARCHED = {"operation", "optcnn", "soap"}
FIG8_CASE = ("nmt", "k80:16")  # Figure 8's case; else the largest case run

# The paper's published numbers (Jia, Zaharia, Aiken, "Beyond Data and Model Parallelism for Deep
# Neural Networks", SysML 2019), as read in /work/shared/paper/flexflow-paper-summary.txt.
# Figure values are read off bar/line charts and are approximate. Machines: "k80:16" = 64 K80
# GPUs on 16 nodes, "p100:4" = 16 P100 GPUs on 4 nodes, "k80:1" = 4 K80 GPUs on one node.
PAPER = {
    # Figure 7 (§8.2.1): samples/s per GPU, by (model, machine) and strategy.
    "fig7": {
        ("alexnet", "k80:16"): {"dp": 1200, "expert": 900, "soap": 2200},
        ("inception_v3", "k80:16"): {"dp": 55, "expert": 60, "soap": 110},
        ("inception_v3", "p100:4"): {"dp": 85, "soap": 160},
        ("nmt", "k80:16"): {"dp": 65, "expert": 50, "soap": 160},
        ("rnntc", "p100:16"): {"dp": 260, "expert": 310, "soap": 520},
        ("rnnlm", "p100:16"): {"dp": 150, "expert": 200, "soap": 360},
    },
    # FlexFlow / DP throughput: NMT on 64 K80 1.7x (Figure 8a, 1.9 s vs 1.1 s per iteration);
    # ResNet-101 about 1.0x everywhere (§8.2.1: "similar parallelization performance").
    "soap_over_dp": {("nmt", "k80:16"): 1.7, ("resnet101", "*"): 1.0},
    # Figure 8 (§8.2.1), NMT on 64 K80 GPUs: iteration s, transfers GB, total compute s.
    "fig8": {
        "dp": {"iteration_s": 1.9, "comm_gb": 65.8, "compute_s": 35.7},
        "expert": {"iteration_s": 2.6, "comm_gb": 24.2, "compute_s": 28.2},
        "soap": {"iteration_s": 1.1, "comm_gb": 12.1, "compute_s": 28.7},
    },
    # Figure 10a (§8.2.3): FlexFlow / REINFORCE throughput on 4 K80 GPUs (one node).
    "fig10a": {("inception_v3", "k80:1"): 3.8, ("nmt", "k80:1"): 3.4},
    # Figure 10b (§8.2.3): FlexFlow / OptCNN throughput on 16 P100 GPUs.
    "fig10b": {
        ("alexnet", "p100:4"): 1.0,
        ("resnet101", "p100:4"): 1.0,
        ("inception_v3", "p100:4"): 1.6,
        ("rnntc", "p100:4"): 1.2,
        ("rnnlm", "p100:4"): 1.3,
        ("nmt", "p100:4"): 1.4,
    },
    # Table 4 (§8.3): search time in seconds, (full simulation, delta simulation), by GPU count.
    "table4": {
        ("alexnet", 4): (0.11, 0.04),
        ("alexnet", 64): (18, 5.9),
        ("resnet101", 4): (1.4, 0.4),
        ("resnet101", 64): (515, 158),
        ("inception_v3", 64): (8817, 1278),
        ("rnntc", 64): (4404, 1489),
        ("rnnlm", 64): (3406, 969),
        ("nmt", 64): (8982, 2190),
    },
}


def paper_value(table: str, model: str, machine: str):
    entries = PAPER[table]
    return entries.get((model, machine), entries.get((model, "*")))


@dataclass(frozen=True, slots=True)
class Row:
    machine: str
    gpus: int
    model: str
    batch: int
    strategy: str
    iteration_ms: float
    samples_per_s_per_gpu: float
    comm_bytes: int
    compute_ms: float
    speedup_over_dp: float
    search_s: float | None = None
    converged_s: float | None = None  # when the returned strategy was found (SOAP row)
    locally_optimal: bool | None = None  # the final descent finished within its budget
    proposals: int | None = None
    full_sim_ms: float | None = None  # mean time of one full simulation (SOAP row only)
    full_search_est_s: float | None = None  # full_sim_ms x proposals (SOAP row only)


def simulate(context: SimContext, strategy):
    tg = TaskGraph(context, strategy)
    return summarize(tg, full_simulate(tg))


def full_sim_ms(context: SimContext, strategies) -> float:
    """Mean wall time of one full simulation (TaskGraph build + Algorithm 1), warm context."""
    times = []
    for strategy in strategies:
        for _ in range(2):
            begin = time.perf_counter()
            full_simulate(TaskGraph(context, strategy))
            times.append(time.perf_counter() - begin)
    return statistics.mean(times) * 1e3


@dataclass(frozen=True, slots=True)
class Settings:
    """How every case of one run searches (see the module's docstring)."""

    budget_s: float = BUDGET_S
    polish_budget_s: float = BUDGET_S  # math.inf: until the descent proves a local optimum
    per_gpu_batch: bool = False
    export: Path | None = None


def run_case(
    model: str, machine_name: str, settings: Settings, progress, task, strategies=STRATEGIES
) -> list[Row]:
    machine = parse_machine(machine_name)
    gpus = machine.num_devices
    ff = load_model(model)
    if settings.per_gpu_batch:
        ff = load_model(model, FFConfig(batch_size=ff.config.batch_size * gpus))
    graph, batch = ff.graph(), ff.config.batch_size
    rows: list[Row] = []
    dp_ms = None
    for label, kind in strategies:
        context = SimContext(graph, machine)  # fresh caches: each search pays its own warm-up
        extra: dict = {}
        if kind in SEARCHED:

            def on_status(status, label=label):
                progress.update(
                    task,
                    description=f"{model} {machine_name} {label}: chain {status.init}, "
                    f"{status.proposals} proposals, best {status.best_s * 1e3:.2f} ms",
                )

            progress.update(task, description=f"{model} {machine_name} {label}")
            result = search(
                context,
                budget_s=settings.budget_s,
                seed=SEED,
                space=kind,
                on_status=on_status,
                polish_budget_s=settings.polish_budget_s,
            )
            strategy = result.best
            if kind == "soap" and settings.export is not None:
                path = settings.export / f"{model}-{machine_name.replace(':', '-')}.json"
                export_strategy(path, strategy, graph, machine, model=model)
            extra = {
                "locally_optimal": result.locally_optimal,
                "search_s": result.seconds,
                "converged_s": result.converged_s,
                "proposals": result.proposals,
            }
            if kind == "soap":
                found = [c.best for c in result.chains][: FULL_SIM_SAMPLES - 1] + [result.best]
                mean_ms = full_sim_ms(context, found)
                extra["full_sim_ms"] = mean_ms
                extra["full_search_est_s"] = mean_ms * 1e-3 * result.proposals
            progress.advance(task)
        else:
            strategy = named_strategy(kind, graph, machine)
        sim = simulate(context, strategy)
        dp_ms = sim.iteration_ms if dp_ms is None else dp_ms
        rows.append(
            Row(
                machine_name,
                gpus,
                model,
                batch,
                label,
                sim.iteration_ms,
                batch / (sim.iteration_ms * 1e-3) / gpus,
                sim.comm_bytes_total,
                sim.compute_ms_total,
                dp_ms / sim.iteration_ms,
                **extra,
            )
        )
    return rows


def _fmt(value, spec: str = ".3g", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def markdown(rows: list[Row], settings: Settings, fig8: tuple[str, str]) -> str:
    keys = {label: kind for label, kind in STRATEGIES}
    polish = (
        "until it proves a local optimum"
        if math.isinf(settings.polish_budget_s)
        else f"at most {settings.polish_budget_s:g} s"
    )
    batch = "scaled to the GPU count (per-GPU batch)" if settings.per_gpu_batch else "global"
    lines = [
        f"# FlexFlow paper figures with the simulator (budget {settings.budget_s:g} s per search, "
        f"seed {SEED})",
        "",
        f"Each search's final descent: {polish}. The zoo's batch: {batch}.",
        "",
        "Simulated iteration times of this re-creation's cost model; the paper's columns are its "
        "real executions (read off its figures, approximate). Operation = the search restricted "
        "to the operation dimension (REINFORCE's space), not REINFORCE itself.",
    ]
    for machine in dict.fromkeys(r.machine for r in rows):
        mrows = [r for r in rows if r.machine == machine]
        lines += [
            "",
            f"## {machine} ({mrows[0].gpus} GPUs)",
            "",
            "| model | strategy | iteration ms | samples/s/GPU | paper samples/s/GPU | GB/iter "
            "| compute ms | x DP | paper x DP |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in mrows:
            kind = keys[r.strategy]
            fig7 = (paper_value("fig7", r.model, machine) or {}).get(kind)
            over_dp = paper_value("soap_over_dp", r.model, machine) if kind == "soap" else None
            lines.append(
                f"| {r.model} | {r.strategy} | {r.iteration_ms:.2f} | {r.samples_per_s_per_gpu:.1f} "
                f"| {_fmt(fig7, 'g')} | {r.comm_bytes / 1e9:.3f} | {r.compute_ms:.1f} "
                f"| {r.speedup_over_dp:.2f}x | {_fmt(over_dp, '.1f', 'x')} |"
            )
        lines += [
            "",
            "| model | SOAP/operation | paper (Fig 10a) | SOAP/OptCNN | paper (Fig 10b) "
            "| proposals | search s, delta | converged s | locally optimal "
            "| search s, full (est.) | full/delta | paper Table 4 full/delta s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for model in dict.fromkeys(r.model for r in mrows):
            by = {keys[r.strategy]: r for r in mrows if r.model == model}
            soap = by["soap"]
            t4 = PAPER["table4"].get((model, soap.gpus))

            def over_soap(kind: str, by=by, soap=soap) -> str:
                return f"{by[kind].iteration_ms / soap.iteration_ms:.2f}x" if kind in by else "–"

            lines.append(
                f"| {model} | {over_soap('operation')} "
                f"| {_fmt(paper_value('fig10a', model, machine), '.1f', 'x')} "
                f"| {over_soap('optcnn')} "
                f"| {_fmt(paper_value('fig10b', model, machine), '.1f', 'x')} "
                f"| {soap.proposals:,} | {soap.search_s:.1f} | {soap.converged_s:.1f} "
                f"| {'yes' if soap.locally_optimal else 'not proven'} "
                f"| {soap.full_search_est_s:.1f} "
                f"| {soap.full_search_est_s / soap.search_s:.2f}x "
                f"| {'–' if t4 is None else f'{t4[0]:g} / {t4[1]:g}'} |"
            )
    lines += [
        "",
        "Search s, full (est.) is an ESTIMATE, not a run: the mean time of one full simulation "
        f"(task graph build + Algorithm 1) over up to {FULL_SIM_SAMPLES} strategies the SOAP search "
        "found, times its number of proposals. Search s, delta is the measured SOAP search time "
        "(with its final local descent); converged s is when its returned strategy was in hand "
        "(the rest of the budget found nothing better). Locally optimal: the final descent "
        "(bounded by the same budget) finished, so no single-op change is faster; 'not proven' "
        "when it ran out of time. The paper's Table 4 is keyed by GPU count.",
    ]
    model, machine = fig8
    frows = [r for r in rows if (r.model, r.machine) == fig8]
    lines += [
        "",
        f"## Figure 8: {model} on {machine}",
        "",
        "| strategy | iteration ms | paper s | GB/iter | paper GB | compute ms | paper compute s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in frows:
        paper = PAPER["fig8"].get(keys[r.strategy], {}) if fig8 == FIG8_CASE else {}
        lines.append(
            f"| {r.strategy} | {r.iteration_ms:.2f} | {_fmt(paper.get('iteration_s'), 'g')} "
            f"| {r.comm_bytes / 1e9:.3f} | {_fmt(paper.get('comm_gb'), 'g')} | {r.compute_ms:.1f} "
            f"| {_fmt(paper.get('compute_s'), 'g')} |"
        )
    return "\n".join(lines) + "\n"


def plot_fig7(rows: list[Row]) -> bytes:
    machines = list(dict.fromkeys(r.machine for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    fig, axes = plt.subplots(1, len(machines), figsize=(4.5 * len(machines), 4), squeeze=False)
    present = [
        (label, kind) for label, kind in STRATEGIES if any(r.strategy == label for r in rows)
    ]
    width = 0.8 / len(present)
    for ax, machine in zip(axes[0], machines, strict=True):
        for i, (label, kind) in enumerate(present):
            values = [
                next(r for r in rows if (r.machine, r.model, r.strategy) == (machine, m, label))
                for m in models
            ]
            x = np.arange(len(models)) + (i - (len(present) - 1) / 2) * width
            ax.bar(x, [v.samples_per_s_per_gpu for v in values], width, label=label)
            for xi, m in zip(x, models, strict=True):
                known = (paper_value("fig7", m, machine) or {}).get(kind)
                if known is not None:
                    ax.plot(xi, known, "k*", markersize=8)
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(models)), models, rotation=30, ha="right")
        plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
        low, high = ax.get_ylim()
        ax.yaxis.set_major_formatter(plain)  # minor ticks labelled only within one decade
        ax.yaxis.set_minor_formatter(
            plain if high / low < 10 else matplotlib.ticker.NullFormatter()
        )
        ax.set_title(f"{machine} ({_gpus(rows, machine)} GPUs)")
    axes[0][0].set_ylabel("samples/s per GPU (simulated, log)")
    axes[0][0].plot([], [], "k*", label="paper (Fig. 7, approx.)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.suptitle("Figure 7: training throughput per GPU")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return png_bytes(fig)


def _gpus(rows: list[Row], machine: str) -> int:
    return next(r.gpus for r in rows if r.machine == machine)


def plot_fig8(rows: list[Row], case: tuple[str, str]) -> bytes:
    frows = [r for r in rows if (r.model, r.machine) == case]
    labels = [r.strategy.split(" (")[0] for r in frows]
    panels = (
        ("(a) iteration time (ms)", [r.iteration_ms for r in frows]),
        ("(b) data transferred per iteration (GB)", [r.comm_bytes / 1e9 for r in frows]),
        ("(c) total task compute time (ms)", [r.compute_ms for r in frows]),
    )
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, values) in zip(axes, panels, strict=True):
        ax.bar(labels, values, color=colors[: len(values)])
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", rotation=30)
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.3g}", ha="center", va="bottom", fontsize=8)
    fig.suptitle(f"Figure 8: {case[0]} on {case[1]} (simulated)")
    return png_bytes(fig)


def plot_fig10(rows: list[Row]) -> bytes | None:
    """Figure 10's panels: SOAP against the operation-only and OptCNN searches; None when
    both were skipped (nothing to plot)."""
    machines = list(dict.fromkeys(r.machine for r in rows))
    models = list(dict.fromkeys(r.model for r in rows))
    ms = {(r.machine, r.model, r.strategy): r.iteration_ms for r in rows}
    soap = STRATEGIES[-1][0]
    labels = {kind: label for label, kind in STRATEGIES}
    panels = tuple(
        (kind, table)
        for kind, table in (("operation", "fig10a"), ("optcnn", "fig10b"))
        if any(r.strategy == labels[kind] for r in rows)
    )
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    axes = axes[0]
    width = 0.8 / len(machines)
    for ax, (kind, table) in zip(axes, panels, strict=True):
        label = next(label for label, k in STRATEGIES if k == kind)
        for i, machine in enumerate(machines):
            x = np.arange(len(models)) + (i - (len(machines) - 1) / 2) * width
            ax.bar(
                x,
                [ms[(machine, m, label)] / ms[(machine, m, soap)] for m in models],
                width,
                label=machine,
            )
            for xi, m in zip(x, models, strict=True):
                known = paper_value(table, m, machine)
                if known is not None:
                    ax.plot(xi, known, "k*", markersize=9)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_xticks(np.arange(len(models)), models, rotation=30, ha="right")
        ax.set_ylabel(f"SOAP speedup over {label}")
        ax.set_title(f"({table[-1]}) FlexFlow vs {label}", fontsize=10)
    axes[0].plot([], [], "k*", label="paper (Fig. 10)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Figure 10: SOAP search vs restricted searches (simulated iteration time ratio)")
    return png_bytes(fig)


def write_outputs(rows: list[Row], out: Path, settings: Settings, console: Console | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(Row.__dataclass_fields__))
    writer.writeheader()
    for r in rows:
        writer.writerow({k: getattr(r, k) for k in Row.__dataclass_fields__})
    atomic_write_text(out / "paper.csv", buffer.getvalue())
    cases = {(r.model, r.machine): r.gpus for r in rows}
    fig8 = FIG8_CASE if FIG8_CASE in cases else max(cases, key=lambda c: (cases[c], c[0]))
    text = markdown(rows, settings, fig8)
    atomic_write_text(out / "paper.md", text)
    atomic_write_bytes(out / "paper_fig7.png", plot_fig7(rows))
    atomic_write_bytes(out / "paper_fig8.png", plot_fig8(rows, fig8))
    fig10 = plot_fig10(rows)
    if fig10 is not None:
        atomic_write_bytes(out / "paper_fig10.png", fig10)
    if console is None:
        return
    console.print(text, markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"wrote {out}/paper.csv, paper.md, paper_fig7.png, paper_fig8.png, paper_fig10.png"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--budget", type=float, default=BUDGET_S, help="seconds per search")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument(
        "--polish-budget",
        type=float,
        default=None,
        help="seconds for each SOAP search's final descent (default: --budget; inf: until it "
        "proves a local optimum)",
    )
    parser.add_argument(
        "--per-gpu-batch",
        action="store_true",
        help="scale the zoo's batch by the GPU count (weak scaling) instead of keeping it global",
    )
    parser.add_argument("--export", type=Path, help="folder for the SOAP strategies found")
    parser.add_argument(
        "--skip",
        default="",
        help="strategies to leave out, e.g. optcnn (its tables grow with the square of each "
        "op's configurations: hours in Python for Inception-v3 on 64 GPUs)",
    )
    args = parser.parse_args()
    models, machines = args.models.split(","), args.machines.split(",")
    skip = {kind for kind in args.skip.split(",") if kind}
    if skip - {kind for _, kind in STRATEGIES}:
        parser.error(f"--skip takes {', '.join(k for _, k in STRATEGIES)}; got {args.skip}")
    strategies = tuple((label, kind) for label, kind in STRATEGIES if kind not in skip)
    polish_budget_s = args.budget if args.polish_budget is None else args.polish_budget
    if not args.budget > 0 or not polish_budget_s > 0:
        parser.error("--budget and --polish-budget take a positive number of seconds (or inf)")
    settings = Settings(args.budget, polish_budget_s, args.per_gpu_batch, args.export)
    console = Console()
    searches = len(models) * len(machines) * len(SEARCHED - skip)
    console.print(
        f"{len(models)} models x {len(machines)} machines x {len(SEARCHED - skip)} searches, "
        f"budget {args.budget:g} s each (up to ~{searches * args.budget / 60:.0f} min plus descents)"
    )
    rows: list[Row] = []
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
    )
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("starting", total=searches)
        for machine in machines:
            for model in models:
                case = run_case(model, machine, settings, progress, task, strategies)
                rows += case
                soap = case[-1]
                progress.console.print(
                    f"{model} on {machine}: DP {case[0].iteration_ms:.2f} ms, "
                    f"SOAP {soap.iteration_ms:.2f} ms ({soap.speedup_over_dp:.2f}x), "
                    f"{soap.proposals:,} proposals in {soap.search_s:.1f} s"
                )
            write_outputs(rows, args.out, settings, None)  # what is done so far is kept
    write_outputs(rows, args.out, settings, console)


if __name__ == "__main__":
    main()
