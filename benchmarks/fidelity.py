"""Simulator fidelity on this host (the paper's §8.3.1, Figure 11): simulated vs measured iteration times.

The search is only as good as the order its simulator puts strategies in. For each model this
measures, in one Legate process with LEGATE_CONFIG="--cpus 2 --gpus 0", the task-time profile
the search uses (`flexflow.profiler`), then for each strategy of the `local` machine (data
parallelism, everything on one CPU, the expert and model-parallel strategies, RANDOM seeded
random strategies and the strategies a --budget search picks with each simulator below) its
simulated iteration (the
planning context of `flexflow.planning`: the profile, fused launches, each Legate task's cost
to the host) and its measured one: the Executor training on a fixed batch, WARMUP iterations,
then BLOCKS blocks of --iterations, the median block, issued as `fit` issues them:
--steps-per-execution per Legate launch where the strategy allows (`flexflow.runtime.
step_launches`), which the simulation knows (`flexflow.launches`). The strategies take turns, --rounds
times, and each keeps its fastest round (this host's speed drifts; the fastest is the least
disturbed). Each strategy is also simulated without the profile's times of each op inside
the C step a whole-model sample split runs per device (`Profile.native_times`,
`flexflow.step_profiler`): every task priced as op by op, the model the planner used before,
side by side. The simulation's parts (timeline, work, the runtime's CPU time) and the CPU time
the measured iterations used are in the CSV.

Reported per strategy: measured and simulated ms; per model: how many pairs of strategies
each simulator orders as measured (pairs whose measured times are within TIE of each other are
too close to call and left out), the mean error, how many strategies are within the paper's 30%,
and which strategy each simulator would pick. Results: results/fidelity.{csv,md,png} (the plot:
simulated against measured, log-log, the y = x line and the paper's 30% band).

    .venv/bin/python benchmarks/fidelity.py [--models lenet,mlp,rnnlm] [--rounds 2]
        [--iterations 16] [--steps-per-execution 8] [--out STEM] [--profiles DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import RESULTS, png_bytes, write_csv, write_markdown  # noqa: E402
from timing import LOSS, thread_cpu_s, timed_block  # noqa: E402

CPUS = 2
BATCH = 64
WARMUP = 2
BLOCKS = 3
RANDOM = 8
SEARCH_BUDGET_S = 10.0
WORKER_TIMEOUT_S = 1800
"""A model's whole run (profile, searches, measurements) takes 1-3 minutes here."""
TIE = 0.05
"""Pairs whose measured times differ by less than this fraction are not counted as ordered."""
PAPER_BAND = 0.3
"""The paper's Figure 11: simulated times within 30% of measured ones."""
MODELS = ("lenet", "mlp", "rnnlm")
RNNLM_SIZES = {"seq_length": 8, "vocab_size": 256, "embed_size": 64, "hidden_size": 64}
"""RNNLM shrunk to a laptop (its zoo size is 40 steps of 1024-wide LSTMs over 10,000 words)."""
CHOICES = (*MODELS, "transformer", "resnet20")
"""--models may also take the zoo's transformer at benchmarks/runtime.py's laptop size, and
benchmarks/runtime.py's CIFAR ResNet-20 (a CNN with batch norm)."""


def build(name: str):
    from flexflow import ActiMode, FFConfig, FFModel
    from flexflow.zoo import load_model

    config = FFConfig(batch_size=BATCH)
    if name == "lenet":
        return load_model("lenet", config)
    if name == "rnnlm":
        return load_model("rnnlm", config, **RNNLM_SIZES)
    if name == "transformer":
        from runtime import TRANSFORMER  # the runtime benchmark's sizes

        return load_model("transformer", config, **TRANSFORMER)
    if name == "resnet20":
        from runtime import resnet20

        return resnet20(FFModel(config))
    if name != "mlp":
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(CHOICES)}")
    model = FFModel(config)
    x = model.create_tensor((BATCH, 784), name="x")
    x = model.dense(x, 512, ActiMode.AC_MODE_RELU)
    x = model.dense(x, 512, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(x, 10))
    return model


def batch(graph):
    """One batch of random inputs and its labels (the loss's targets)."""
    rng = np.random.default_rng(0)
    inputs = {}
    for tensor in graph.input_tensors:
        shape = tensor.spec.shape
        if tensor.spec.dtype.is_float:
            inputs[tensor.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            inputs[tensor.name] = rng.integers(0, RNNLM_SIZES["vocab_size"], shape, np.int32)
    out = graph.ops[-1].sig.outputs[0].shape
    labels = rng.integers(0, out[-1], out[:-1])
    return inputs, labels


def strategies(graph, machine, contexts: dict, budget_s: float) -> dict:
    """The strategies measured, by label: the named ones, random ones, and what a search of
    `budget_s` (as `flexflow.planning` runs it) picks with each simulator of `contexts`."""
    from flexflow.search import search
    from flexflow.strategies import named_strategy
    from flexflow.strategy import ParallelConfig, Strategy

    names = tuple(node.name for node in graph.ops)
    one = Strategy(
        names, tuple(ParallelConfig.single(len(n.sig.output_shape), 0) for n in graph.ops)
    )
    found = {
        "dp": named_strategy("dp", graph, machine),
        "one cpu": one,
        "expert": named_strategy("expert", graph, machine),
        "model": named_strategy("model", graph, machine),
    }
    for seed in range(RANDOM):
        found[f"random {seed}"] = named_strategy("random", graph, machine, seed)
    for label, context in contexts.items():
        result = search(context, budget_s, seed=0, polish_budget_s=budget_s)
        found[f"searched ({label})"] = result.best
    labels: dict = {}  # one measurement per distinct strategy, named by all its labels
    for label, strategy in found.items():
        labels.setdefault(strategy, []).append(label)
    return {" = ".join(names): strategy for strategy, names in labels.items()}


def measure(executor, inputs, labels, iterations: int) -> tuple[float, float]:
    """Seconds per iteration, the median of BLOCKS blocks of `iterations`, and the CPU seconds
    every thread of the process used per iteration over the blocks (kernels and runtime: what
    the simulation's work and runtime parts predict)."""
    for _ in range(WARMUP):
        executor.train_batch(inputs, labels, LOSS).read()
    blocks = []
    before = thread_cpu_s()
    for _ in range(BLOCKS):
        begin, end = timed_block(executor, inputs, labels, iterations)
        blocks.append((end - begin) / iterations)
    after = thread_cpu_s()
    cpu = sum(used - before.get(tid, 0.0) for tid, used in after.items())
    return sorted(blocks)[BLOCKS // 2], cpu / (BLOCKS * iterations)


def worker(
    name: str,
    iterations: int,
    rounds: int,
    budget_s: float,
    per_launch: int,
    profiles: str | None = None,
) -> list[dict]:
    """Runs inside the Legate process: profile, simulate and measure every strategy; the
    profile is also written into the folder `profiles` when given (MODEL.json)."""
    from contextlib import ExitStack

    import flexflow  # noqa: F401  (prepares Legate)
    from flexflow.machine import parse_machine
    from flexflow.planning import planning_context
    from flexflow.profiler import profile_graph
    from flexflow.runtime import Executor
    from flexflow.simulator import TaskGraph, full_simulate
    from flexflow.simulator.export import tasks_end_s

    graph = build(name).graph()
    machine = parse_machine("local")
    profile = profile_graph(graph, machine)
    if profiles:
        profile.save(Path(profiles) / f"{name}.json")
    # as flexflow.planning plans a run with this loss and steps per launch
    context = planning_context(graph, machine, profile, LOSS, per_launch)
    # the model before: every task priced as op by op, the C steps' times left out
    op_by_op = planning_context(graph, machine, profile.op_by_op(), LOSS, per_launch)
    chosen = strategies(graph, machine, {"simulated": context, "op by op": op_by_op}, budget_s)
    inputs, labels = batch(graph)
    measured: dict[str, list[tuple[float, float]]] = {label: [] for label in chosen}
    with ExitStack() as stack:
        executors = {
            label: stack.enter_context(
                Executor(graph, strategy, learning_rate=0.001, steps_per_execution=per_launch)
            )
            for label, strategy in chosen.items()
        }
        for _ in range(rounds):
            for label, executor in executors.items():
                measured[label].append(measure(executor, inputs, labels, iterations))
    rows = []
    for label, s in chosen.items():
        wall, cpu = min(measured[label])  # the fastest round's block and CPU
        tg = TaskGraph(context, s)
        schedule = full_simulate(tg)
        rows.append({
            "model": name,
            "strategy": label,
            "simulated_ms": round(schedule.iteration_s * 1e3, 3),
            "op_by_op_ms": round(full_simulate(TaskGraph(op_by_op, s)).iteration_s * 1e3, 3),
            "measured_ms": round(wall * 1e3, 3),
            "steps_per_launch": executors[label].steps_per_launch,
            "devices_used": len({d for config in s.configs for d in config.devices}),
            # the simulation's parts (TaskGraph.iteration_s) against the process's CPU time
            "timeline_ms": round(tasks_end_s(tg, schedule) * 1e3, 3),
            "work_ms": round(tg.work_s() * 1e3, 3),
            "runtime_ms": round(tg.runtime_s * 1e3, 3),
            "cores": context.cores,
            "measured_cpu_ms": round(cpu * 1e3, 3),
            "strategy_json": json.dumps([[list(c.degrees), list(c.devices)] for c in s.configs]),
        })  # fmt: skip
    return rows


def ordered_pairs(rows: list[dict], column: str) -> tuple[int, int]:
    """(pairs `column` orders as measured, pairs counted), ties within TIE left out."""
    agree = counted = 0
    for a, b in itertools.combinations(rows, 2):
        ma, mb = a["measured_ms"], b["measured_ms"]
        if abs(ma - mb) < TIE * min(ma, mb):
            continue
        counted += 1
        agree += (a[column] < b[column]) == (ma < mb)
    return agree, counted


def errors(rows: list[dict], column: str) -> list[float]:
    """|simulated - measured| / measured per strategy."""
    return [abs(r[column] - r["measured_ms"]) / r["measured_ms"] for r in rows]


def pick(rows: list[dict], column: str) -> str:
    """The strategy `column` has fastest, with its measured time."""
    r = min(rows, key=lambda r: r[column])
    return f"{r['strategy']} ({r['measured_ms']:.2f} ms)"


def summary_lines(rows: list[dict], command: str) -> list[str]:
    lines = [
        "# Simulator fidelity on this host (paper §8.3.1, Figure 11)",
        "",
        f'`{command}` (LEGATE_CONFIG="--cpus {CPUS} --gpus 0", batch {BATCH}, '
        f"{time.strftime('%Y-%m-%d')}). Simulated: the planning simulator (this host's "
        "measured task profile with each op's time inside a whole-model sample split's C step, "
        "fused launches, each Legate task's cost to the host). Op by op: the same without the "
        "C steps' times (the model before). Measured: the Executor, fastest round's median "
        "block. Plot: fidelity.png.",
        "",
        "| model | strategy | devices | steps per launch | measured ms | simulated ms | "
        "sim. / measured | op by op ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = r["simulated_ms"] / r["measured_ms"]
        lines.append(
            f"| {r['model']} | {r['strategy']} | {r['devices_used']} | {r['steps_per_launch']} | "
            f"{r['measured_ms']:.2f} | "
            f"{r['simulated_ms']:.2f} | {ratio:.2f} | {r['op_by_op_ms']:.2f} |"
        )
    lines += [
        "",
        f"Pairs of strategies whose measured times differ by at least {TIE:.0%}, and how many "
        "each model orders as measured; the error is |simulated - measured| / measured; the "
        "pick is the strategy each model simulates fastest, with its measured time.",
        "",
        "| model | pairs | ordered: simulated | ordered: op by op | mean error: simulated "
        f"| within {PAPER_BAND:.0%}: simulated | mean error: op by op | pick: simulated "
        "| pick: op by op | fastest measured |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, group in itertools.groupby(rows, key=lambda r: r["model"]):
        group = list(group)
        agree, counted = ordered_pairs(group, "simulated_ms")
        agree_before, _ = ordered_pairs(group, "op_by_op_ms")
        now, before = errors(group, "simulated_ms"), errors(group, "op_by_op_ms")
        within = sum(e <= PAPER_BAND for e in now)

        lines.append(
            f"| {model} | {counted} | {agree} | {agree_before} | {np.mean(now):.0%} | "
            f"{within} of {len(group)} | {np.mean(before):.0%} | {pick(group, 'simulated_ms')} | "
            f"{pick(group, 'op_by_op_ms')} | {pick(group, 'measured_ms')} |"
        )
    return lines


def plot(rows: list[dict]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 4), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        group = [r for r in rows if r["model"] == model]
        sim = np.array([r["simulated_ms"] for r in group])
        real = np.array([r["measured_ms"] for r in group])
        values = [r[k] for r in group for k in ("simulated_ms", "op_by_op_ms", "measured_ms")]
        low, high = min(values) / 1.5, max(values) * 1.5
        line = np.array([low, high])
        ax.plot(line, line, color="black", lw=1, label="simulated = measured")
        ax.fill_between(line, line * (1 - PAPER_BAND), line * (1 + PAPER_BAND), alpha=0.15,
                        color="gray", label=f"±{PAPER_BAND:.0%}")  # fmt: skip
        before = np.array([r["op_by_op_ms"] for r in group])
        ax.scatter(real, before, zorder=2, marker="x", color="tab:red", alpha=0.6,
                   label="without C steps' times")  # fmt: skip
        ax.scatter(real, sim, zorder=3, color="tab:blue", label="simulated")
        for r in group:  # the random strategies stay unlabelled (dots)
            if not r["strategy"].startswith("random"):
                ax.annotate(r["strategy"], (r["measured_ms"], r["simulated_ms"]), fontsize=7,
                            xytext=(3, -9), textcoords="offset points")  # fmt: skip
        ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high),
               xlabel="measured ms per iteration", ylabel="simulated ms per iteration",
               title=f"{model}, {CPUS} Legate CPUs")  # fmt: skip
        ax.grid(alpha=0.3, which="both")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.legend(fontsize=7, loc="upper left")
    return png_bytes(fig)


def run_worker(name: str, args: argparse.Namespace) -> list[dict]:
    """`worker` in a Legate process; one that outlives WORKER_TIMEOUT_S is made to print where
    each of its threads is (faulthandler) and stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env |= {"LEGATE_CONFIG": f"--cpus {CPUS} --gpus 0", "PYTHONFAULTHANDLER": "1"}
    command = [sys.executable, __file__, "--worker", name, "--iterations", str(args.iterations),
               "--rounds", str(args.rounds), "--budget", str(args.budget),
               "--steps-per-execution", str(args.steps_per_execution)]  # fmt: skip
    if args.profiles:
        command += ["--profiles", str(Path(args.profiles).resolve())]
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            out, err = proc.communicate()
            raise SystemExit(
                f"{name}: no result after {WORKER_TIMEOUT_S} s; its threads:\n{err[-6000:]}"
            ) from None
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the Legate run failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    from flexflow.config import FFConfig
    from flexflow.fileio import atomic_write_bytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--iterations", type=int, default=10, help="per timed block")
    parser.add_argument("--rounds", type=int, default=2, help="turns of every strategy")
    parser.add_argument("--budget", type=float, default=SEARCH_BUDGET_S, help="search seconds")
    parser.add_argument(
        "--steps-per-execution", type=int, default=FFConfig().steps_per_execution, metavar="K",
        help="training steps per Legate launch where the strategy allows (as fit runs them)",
    )  # fmt: skip
    parser.add_argument("--out", default="fidelity", help="results file stem")
    parser.add_argument(
        "--profiles", metavar="DIR",
        help="also write each model's measured profile there (DIR/MODEL.json), to simulate the "
        "measured strategies again later",
    )  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.iterations, args.rounds, args.budget,
                                args.steps_per_execution, args.profiles)))  # fmt: skip
        return
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(CHOICES))
    if (
        unknown
        or not models
        or args.iterations < 1
        or args.rounds < 1
        or args.budget < 0
        or args.steps_per_execution < 1
    ):
        parser.error(f"--models from {', '.join(CHOICES)}; --iterations, --rounds and "
                     "--steps-per-execution >= 1; --budget >= 0")  # fmt: skip
    rows = [row for name in models for row in run_worker(name, args)]
    command = (f".venv/bin/python benchmarks/fidelity.py --models {','.join(models)} "
               f"--iterations {args.iterations} --rounds {args.rounds} --budget {args.budget:g} "
               f"--steps-per-execution {args.steps_per_execution}")  # fmt: skip
    lines = summary_lines(rows, command)
    write_csv(RESULTS / f"{args.out}.csv", rows)
    write_markdown(RESULTS / f"{args.out}.md", lines)
    atomic_write_bytes(RESULTS / f"{args.out}.png", plot(rows))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
