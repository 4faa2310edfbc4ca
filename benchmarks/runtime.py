"""Training-iteration time on Legate against PyTorch on the CPU, side by side in one run.

LeNet (28x28x1, batch 64) and an MLP (784-512-512-10, batch 64), SGD on sparse cross-entropy.
Ours: data parallelism on 2 Legate CPU processors (a subprocess with LEGATE_CONFIG="--cpus 2
--gpus 0"), as `fit` runs it: FFConfig's steps_per_execution (8) training steps per Legate
launch where the model allows (flexflow.runtime.step_launches: steps that run as one C call in
C++ task bodies, LeNet's and the MLP's among them), and such a model also one step per launch,
in turn. PyTorch: the
same layers and batch with torch.set_num_threads(2), in this process.
Both: WARMUP iterations, then BLOCKS blocks of ITERATIONS timed back to back; the median
block's mean. The two sides take turns, --rounds times per model (ours, PyTorch, ours, ...),
and each side's figure is its median round: this host's speed drifts (PyTorch's MLP took 1.9
ms in one run and 3.4 ms in the next), and turns keep a slow spell from landing on one side.
The table also gives the lowest and highest ratio of a round's two sides, and our time for
the same model on one Legate CPU processor (also in turn): whether data parallelism over the
host's processors pays at all.

Where our time goes, from the task bodies' own timers (`Executor(record_timeline=True)`):
"kernel" is the busiest processor's summed op-tile time per iteration (the numpy and C work of
each op's tile inside a task, fused or not); "overhead" is the rest of the iteration's wall time, i.e.
Legate's dependence analysis, mapping, copies and the tasks waiting on each other or on the GIL.
And from /proc, the CPU each kind of thread used per iteration: the processors' (our tasks,
from their start to their end), Legate's runtime threads' and the Python thread's. Also timed:
an evaluation batch on each side (the forward pass and the loss; ours as `eval` runs it).

    .venv/bin/pip install torch==2.13.0     # not a dependency of flexflow
    .venv/bin/python benchmarks/runtime.py [--iterations 20] [--rounds 3]
    .venv/bin/python benchmarks/runtime.py --models resnet101   # results/runtime-resnet101.md
    .venv/bin/python benchmarks/runtime.py --models rnnlm       # results/runtime-rnnlm.md
    .venv/bin/python benchmarks/runtime.py --models nmt         # results/runtime-nmt.md
    .venv/bin/python benchmarks/runtime.py --models resnet20    # results/runtime-resnet20.md

`--models resnet20` times the CIFAR ResNet-20 of He et al. (32x32x3, batch 64: a 3x3
convolution of 16 channels, three stages of three basic blocks of 16, 32 and 64 channels, the
first block of the second and third stages striding 2 with a 1x1 projection shortcut, batch
norms, global average pooling), a laptop-sized CNN with batch norm. ResNet-101 (at 32x32,
batch 8) is a deep CNN with batch norm, next to the same layers in PyTorch; its blocks run --iterations / 5 iterations (about a second each here). `--models
rnnlm` times the RNN language model of benchmarks/fidelity.py (8 steps, 2 LSTM layers of 64,
256 words, batch 64, a prediction per word) against torch.nn.LSTM, cuDNN-style fused layers
where ours unrolls one op per step. `--models nmt` times the zoo's NMT at the same sizes
(source and target of 8 words, 2 encoder and 2 decoder LSTM layers of 64, single-head
attention of the decoder's states over the encoder's, a prediction per target word) against
torch.nn.LSTM and torch.nn.MultiheadAttention.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from flexflow.config import FFConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import RESULTS, write_csv, write_markdown  # noqa: E402
from timing import LOSS, thread_cpu_s, timed_block  # noqa: E402

BATCH = 64
CPUS = 2
WARMUP = 3
BLOCKS = 5
"""Each side times BLOCKS blocks of --iterations iterations and keeps the median block."""
MODELS = ("lenet", "mlp")
"""The models the issue's goals name; --models adds others."""
BATCHES = {
    "lenet": BATCH,
    "mlp": BATCH,
    "resnet101": 8,
    "rnnlm": BATCH,
    "nmt": BATCH,
    "transformer": BATCH,
    "resnet20": BATCH,
}
"""ResNet-101 (at 32x32, batch 8: about a second per iteration here) shows a deep CNN with
batch norm; it runs --iterations / SLOW_DIVISOR iterations per block."""
SLOW_DIVISOR = {"resnet101": 5}
RESNET_IMAGE = 32
RNNLM = {"seq_length": 8, "vocab_size": 256, "embed_size": 64, "hidden_size": 64}
"""benchmarks/fidelity.py's RNNLM (the zoo's at laptop size)."""
NMT = RNNLM
"""The zoo's NMT at the RNNLM's sizes (2 encoder and 2 decoder layers, its default)."""
TRANSFORMER = {
    "seq_length": 16,
    "vocab_size": 256,
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "ff_size": 256,
    "num_classes": 10,
    "dropout": 0.1,
}
"""The zoo's BERT-like encoder at laptop size."""


def block_iterations(name: str, iterations: int) -> int:
    return max(1, iterations // SLOW_DIVISOR.get(name, 1))


def build(name: str):
    """Our model's FFModel."""
    from flexflow import ActiMode, FFConfig, FFModel
    from flexflow.zoo import load_model

    if name == "lenet":
        return load_model("lenet", FFConfig(batch_size=BATCH))
    if name == "resnet101":
        config = FFConfig(batch_size=BATCHES[name])
        return load_model("resnet101", config, image_size=RESNET_IMAGE)
    if name in ("rnnlm", "nmt"):
        return load_model(name, FFConfig(batch_size=BATCH), **RNNLM)
    if name == "transformer":
        return load_model(name, FFConfig(batch_size=BATCH), **TRANSFORMER)
    if name == "resnet20":
        return resnet20(FFModel(FFConfig(batch_size=BATCH)))
    model = FFModel(FFConfig(batch_size=BATCH))
    x = model.create_tensor((BATCH, 784), name="x")
    x = model.dense(x, 512, ActiMode.AC_MODE_RELU)
    x = model.dense(x, 512, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(x, 10))
    return model


RESNET20_STAGES = (16, 32, 64)
"""ResNet-20's stage widths; three basic blocks each."""


def resnet20(model):
    """He et al.'s CIFAR ResNet-20 (projection shortcuts where a stage strides), at BATCH."""
    from flexflow import PoolType

    def conv_bn(x, width, kernel, stride, relu):
        pad = kernel // 2
        x = model.conv2d(x, width, kernel, kernel, stride, stride, pad, pad, use_bias=False)
        return model.batch_norm(x, relu=relu)

    x = conv_bn(model.create_tensor((BATCH, 3, 32, 32), name="image"), 16, 3, 1, True)
    for stage, width in enumerate(RESNET20_STAGES):
        for block in range(3):
            stride = 2 if stage and not block else 1
            y = conv_bn(conv_bn(x, width, 3, stride, True), width, 3, 1, False)
            shortcut = conv_bn(x, width, 1, stride, False) if stride > 1 else x
            x = model.relu(model.add(shortcut, y))
    x = model.pool2d(x, 8, 8, 1, 1, 0, 0, PoolType.POOL_AVG)
    model.softmax(model.dense(model.flat(x), 10))
    return model


def torch_resnet20(nn):
    """`resnet20`'s layers in PyTorch."""

    def conv_bn(cin, cout, kernel, stride, relu):
        layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)]
        return nn.Sequential(*layers, nn.BatchNorm2d(cout), *([nn.ReLU()] if relu else []))

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(
                conv_bn(cin, cout, 3, stride, True), conv_bn(cout, cout, 3, 1, False)
            )
            self.shortcut = conv_bn(cin, cout, 1, stride, False) if stride > 1 else nn.Identity()

        def forward(self, x):
            return nn.functional.relu(self.shortcut(x) + self.body(x))

    layers, cin = [conv_bn(3, 16, 3, 1, True)], 16
    for stage, width in enumerate(RESNET20_STAGES):
        for block in range(3):
            layers.append(Block(cin, width, 2 if stage and not block else 1))
            cin = width
    return nn.Sequential(*layers, nn.AvgPool2d(8), nn.Flatten(), nn.Linear(64, 10))


def data(name: str):
    rng = np.random.default_rng(0)
    batch = BATCHES[name]
    if name == "rnnlm":  # word ids, and the next word at every step
        shape, vocab = (batch, RNNLM["seq_length"]), RNNLM["vocab_size"]
        return rng.integers(0, vocab, shape, np.int32), rng.integers(0, vocab, shape)
    if name == "nmt":  # source and target word ids, and a word for every target position
        shape, vocab = (batch, NMT["seq_length"]), NMT["vocab_size"]
        words = tuple(rng.integers(0, vocab, shape, np.int32) for _ in range(2))
        return words, rng.integers(0, vocab, shape)
    if name == "transformer":  # token and position ids, a class per sequence
        shape = (batch, TRANSFORMER["seq_length"])
        tokens = rng.integers(0, TRANSFORMER["vocab_size"], shape, np.int32)
        positions = np.broadcast_to(np.arange(shape[1], dtype=np.int32), shape).copy()
        return (tokens, positions), rng.integers(0, TRANSFORMER["num_classes"], batch)
    shape = {
        "lenet": (batch, 1, 28, 28),
        "mlp": (batch, 784),
        "resnet101": (batch, 3, RESNET_IMAGE, RESNET_IMAGE),
        "resnet20": (batch, 3, 32, 32),
    }[name]
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, 10, batch)


def torch_resnet101(nn):
    """ResNet-101 as flexflow.zoo.resnet101 builds it (torchvision's v1.5 layout)."""

    def conv_bn(cin, cout, kernel, stride, relu=True):
        layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False)]
        return nn.Sequential(*layers, nn.BatchNorm2d(cout), *([nn.ReLU()] if relu else []))

    class Bottleneck(nn.Module):
        def __init__(self, cin, planes, stride):
            super().__init__()
            cout = planes * 4
            self.body = nn.Sequential(
                conv_bn(cin, planes, 1, 1),
                conv_bn(planes, planes, 3, stride),
                conv_bn(planes, cout, 1, 1, relu=False),
            )
            same = stride == 1 and cin == cout
            self.shortcut = nn.Identity() if same else conv_bn(cin, cout, 1, stride, relu=False)

        def forward(self, x):
            return nn.functional.relu(self.body(x) + self.shortcut(x))

    layers, cin = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
    for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 23, 2), (512, 3, 2)):
        for block in range(blocks):
            layers.append(Bottleneck(cin, planes, stride if block == 0 else 1))
            cin = planes * 4
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000))


def torch_rnnlm(nn):
    """flexflow.zoo.rnnlm at `RNNLM`'s sizes: embedding, 2 LSTM layers, a decoder per step."""

    class RNNLMNet(nn.Module):
        def __init__(self):
            super().__init__()
            size, vocab = RNNLM["hidden_size"], RNNLM["vocab_size"]
            self.embed = nn.Embedding(vocab, RNNLM["embed_size"])
            self.lstm = nn.LSTM(RNNLM["embed_size"], size, num_layers=2, batch_first=True)
            self.decoder = nn.Linear(size, vocab)

        def forward(self, words):
            states, _ = self.lstm(self.embed(words))
            return self.decoder(states).reshape(-1, RNNLM["vocab_size"])

    return RNNLMNet()


def torch_nmt(nn):
    """flexflow.zoo.nmt at `NMT`'s sizes: two embeddings, 2-layer encoder and decoder LSTMs,
    single-head attention (projections with biases, as ours), the projection per word."""

    class NMTNet(nn.Module):
        def __init__(self):
            super().__init__()
            size, embed, vocab = NMT["hidden_size"], NMT["embed_size"], NMT["vocab_size"]
            self.source, self.target = nn.Embedding(vocab, embed), nn.Embedding(vocab, embed)
            self.encoder = nn.LSTM(embed, size, num_layers=2, batch_first=True)
            self.decoder = nn.LSTM(embed, size, num_layers=2, batch_first=True)
            self.attention = nn.MultiheadAttention(size, 1, batch_first=True)
            self.projection = nn.Linear(size, vocab)

        def forward(self, words):
            source, target = words
            encoded, _ = self.encoder(self.source(source))
            decoded, _ = self.decoder(self.target(target))
            context, _ = self.attention(decoded, encoded, encoded, need_weights=False)
            return self.projection(context).reshape(-1, NMT["vocab_size"])

    return NMTNet()


def torch_transformer(nn):
    """flexflow.zoo.transformer at `TRANSFORMER`'s sizes: token and position embeddings,
    post-norm encoder layers as the zoo's (dropout after attention and after the feed-forward,
    none on attention probabilities), the first token pooled through tanh."""
    sizes = TRANSFORMER
    hidden, rate = sizes["hidden_size"], sizes["dropout"]

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = nn.MultiheadAttention(hidden, sizes["num_heads"], batch_first=True)
            self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.ff = nn.Sequential(
                nn.Linear(hidden, sizes["ff_size"]),
                nn.GELU(approximate="tanh"),  # ours (ops/activations.py)
                nn.Linear(sizes["ff_size"], hidden),
            )
            self.drop1, self.drop2 = nn.Dropout(rate), nn.Dropout(rate)

        def forward(self, x):
            attended, _ = self.attention(x, x, x, need_weights=False)
            x = self.norm1(x + self.drop1(attended))
            return self.norm2(x + self.drop2(self.ff(x)))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(sizes["vocab_size"], hidden)
            self.positions = nn.Embedding(max(512, sizes["seq_length"]), hidden)
            self.norm, self.drop = nn.LayerNorm(hidden), nn.Dropout(rate)
            self.layers = nn.Sequential(*(Layer() for _ in range(sizes["num_layers"])))
            self.pooler = nn.Linear(hidden, hidden)
            self.classifier = nn.Linear(hidden, sizes["num_classes"])

        def forward(self, words):
            tokens, positions = words
            x = self.drop(self.norm(self.tokens(tokens) + self.positions(positions)))
            x = self.layers(x)
            return self.classifier(self.pooler(x[:, 0]).tanh())

    return Encoder()


def measure_ours(name: str, iterations: int, per_launch: int) -> dict:
    """Runs inside the Legate subprocess; `per_launch` is the executor's steps_per_execution."""
    import flexflow  # noqa: F401
    from flexflow.machine import parse_machine
    from flexflow.runtime import Executor
    from flexflow.strategies import named_strategy

    graph = build(name).graph()
    strategy = named_strategy("dp", graph, parse_machine("local"))
    x, y = data(name)
    xs = x if isinstance(x, tuple) else (x,)
    inputs = {t.name: value for t, value in zip(graph.input_tensors, xs, strict=True)}
    with Executor(
        graph, strategy, learning_rate=0.01, record_timeline=True, steps_per_execution=per_launch
    ) as executor:
        warmup = max(WARMUP, executor.steps_per_launch)  # a whole launch at least
        executor.train_batches([(inputs, y, None)] * warmup, LOSS)[-1].read()
        blocks = []  # (wall s, busiest processor's op-tile s) per block of iterations
        cpu_before, tasks_before = thread_cpu_s(), executor.tasks_issued
        for _ in range(BLOCKS):
            begin, end = timed_block(executor, inputs, y, iterations)
            busy: dict[int, float] = defaultdict(float)
            for *_, start, stop, thread in executor.timeline:
                if begin <= start < end:
                    busy[thread] += stop - start
            blocks.append((end - begin, max(busy.values())))
        cpu = _cpu_by_role(cpu_before, thread_cpu_s(), {e[5] for e in executor.timeline})
        wall, kernel = sorted(blocks)[BLOCKS // 2]  # the median block: this host is noisy
        tasks = (executor.tasks_issued - tasks_before) / (BLOCKS * iterations)
        evaluation = _evaluation_s(executor, inputs, y, iterations)
        native = len(executor.native_steps)
        cpp = executor.cpp_steps_issued / executor.iteration  # C++ task bodies per iteration
        launched = executor.steps_per_launch
    wall, kernel = wall / iterations, kernel / iterations
    return {
        "iteration_s": wall,
        "evaluation_s": evaluation,
        "kernel_s": kernel,
        "overhead_s": wall - kernel,
        "tasks_per_iteration": tasks,
        "native_step_tasks": native,
        "cpp_step_tasks": cpp,
        "steps_per_launch": launched,
        **{f"cpu_{role}_s": seconds / (BLOCKS * iterations) for role, seconds in cpu.items()},
    }


def _evaluation_s(executor, inputs: dict, y, iterations: int) -> float:
    """Seconds per evaluation batch (the forward pass and the loss, issued as `eval` issues
    them: `eval_batches`, several per launch where training steps launch so): BLOCKS blocks
    of `iterations` batches, fenced on both sides, after one batch that applies the last
    training step's pending update; the median."""
    executor.eval_batch(inputs, y, LOSS).read()
    blocks = []
    for _ in range(BLOCKS):
        executor.runtime.issue_execution_fence(block=True)
        begin = time.perf_counter()
        for stats in executor.eval_batches([(inputs, y, None)] * iterations, LOSS):
            stats.read()
        executor.runtime.issue_execution_fence(block=True)
        blocks.append((time.perf_counter() - begin) / iterations)
    return sorted(blocks)[BLOCKS // 2]


def _cpu_by_role(before: dict, after: dict, task_threads: set[int]) -> dict[str, float]:
    """CPU seconds used between the snapshots by the threads that ran our tasks (the CPU
    processors), by this process's Python thread (issuing the tasks) and by every other thread
    (Legate's utility processor and runtime threads). /proc counts in clock ticks (10 ms):
    over the blocks' few hundred iterations, a few percent."""
    used = {"tasks": 0.0, "python": 0.0, "runtime": 0.0}
    for tid, seconds in after.items():
        role = "tasks" if tid in task_threads else "python" if tid == os.getpid() else "runtime"
        used[role] += seconds - before.get(tid, 0.0)
    return used


def measure_torch(name: str, iterations: int) -> tuple[float, float]:
    """Seconds per training iteration and per evaluation batch (`net.eval()`, no gradients:
    the forward pass and the loss), each the median of BLOCKS blocks."""
    import torch
    from torch import nn

    torch.set_num_threads(CPUS)
    torch.manual_seed(0)
    if name == "lenet":
        net = nn.Sequential(
            nn.Conv2d(1, 20, 5),
            nn.MaxPool2d(2),
            nn.Conv2d(20, 50, 5),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(800, 500),
            nn.ReLU(),
            nn.Linear(500, 10),
        )
    elif name == "resnet101":
        net = torch_resnet101(nn)
    elif name == "resnet20":
        net = torch_resnet20(nn)
    elif name == "rnnlm":
        net = torch_rnnlm(nn)
    elif name == "nmt":
        net = torch_nmt(nn)
    elif name == "transformer":
        net = torch_transformer(nn)
    else:
        net = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = data(name)
    y = torch.from_numpy(y)
    if name == "nmt":  # words as int64, one prediction per target word
        x, y = tuple(torch.from_numpy(a).long() for a in x), y.reshape(-1)
    elif name == "transformer":
        x = tuple(torch.from_numpy(a).long() for a in x)
    else:
        x = torch.from_numpy(x)
    if name == "rnnlm":  # one prediction per word: (B * T, V) against (B * T,)
        x, y = x.long(), y.reshape(-1)
    loss_fn = nn.CrossEntropyLoss()  # softmax + cross-entropy, as ours

    def step() -> float:
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    def evaluate() -> float:
        with torch.no_grad():
            return loss_fn(net(x), y).item()

    def timed(work) -> float:
        for _ in range(WARMUP):
            work()
        blocks = []
        for _ in range(BLOCKS):
            begin = time.perf_counter()
            for _ in range(iterations):
                work()
            blocks.append((time.perf_counter() - begin) / iterations)
        return sorted(blocks)[BLOCKS // 2]

    training = timed(step)
    net.eval()  # batch norms on their running statistics, dropouts off
    return training, timed(evaluate)


def run_ours(name: str, iterations: int, per_launch: int, env: dict) -> dict:
    """`measure_ours` in a Legate subprocess."""
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            name,
            "--iterations",
            str(iterations),
            "--steps-per-execution",
            str(per_launch),
        ],  # fmt: skip
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the Legate run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="turns per side and model")
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"comma-separated, of {', '.join(BATCHES)} (default: {', '.join(MODELS)})",
    )
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=FFConfig().steps_per_execution,
        metavar="K",
        help="our training steps per Legate launch where the model allows (default: "
        "FFConfig's, what `fit` runs); such models are also timed with one step per launch",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps_per_execution < 1:
        parser.error("--steps-per-execution must be at least 1")
    if args.worker:  # the Legate side, in its own process
        print(json.dumps(measure_ours(args.worker, args.iterations, args.steps_per_execution)))
        return
    try:
        import torch
    except ImportError:
        raise SystemExit("install PyTorch first: .venv/bin/pip install torch==2.13.0") from None
    from flexflow.ops import blas

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env["LEGATE_CONFIG"] = f"--cpus {CPUS} --gpus 0"
    # the same model on one Legate CPU (its "dp" strategy is one device): whether data
    # parallelism over the host's processors pays at all
    one_cpu = {**env, "LEGATE_CONFIG": "--cpus 1 --gpus 0"}
    if args.rounds < 1 or args.iterations < 1:
        parser.error("--rounds and --iterations must be at least 1")
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(BATCHES))
    if unknown or not models:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(BATCHES)}")  # fmt: skip
    per_launch = args.steps_per_execution
    command = f" --iterations {args.iterations} --rounds {args.rounds}"
    if per_launch != FFConfig().steps_per_execution:
        command += f" --steps-per-execution {per_launch}"
    stem = "runtime"  # the issue's models; other selections get their own results files
    if tuple(models) != MODELS:
        command += f" --models {','.join(models)}"
        stem = f"runtime-{'-'.join(models)}"
    rows, lines = [], []
    for name in models:
        turns = []  # (ours, PyTorch's, ours on one CPU, ours one step per launch) per round
        count = block_iterations(name, args.iterations)
        for _ in range(args.rounds):
            ours, theirs = run_ours(name, count, per_launch, env), measure_torch(name, count)
            single = run_ours(name, count, per_launch, one_cpu)["iteration_s"]
            one_step = None  # the same launches when they hold one step anyway
            if ours["steps_per_launch"] > 1:
                one_step = run_ours(name, count, 1, env)["iteration_s"]
            turns.append((ours, theirs, single, one_step))
        middle = args.rounds // 2
        ours = sorted((t[0] for t in turns), key=lambda o: o["iteration_s"])[middle]
        theirs = sorted(t[1][0] for t in turns)[middle]
        ours_eval = sorted(t[0]["evaluation_s"] for t in turns)[middle]
        theirs_eval = sorted(t[1][1] for t in turns)[middle]
        single = sorted(t[2] for t in turns)[middle]
        one_step = (
            ours["iteration_s"] if turns[0][3] is None else sorted(t[3] for t in turns)[middle]
        )
        ratios = [o["iteration_s"] / t[0] for o, t, *_ in turns]
        row = {
            "model": name,
            "batch": BATCHES[name],
            "iterations_per_block": count,
            "ours_ms": ours["iteration_s"] * 1e3,
            "torch_ms": theirs * 1e3,
            "ratio": ours["iteration_s"] / theirs,
            "round_ratio_min": min(ratios),
            "round_ratio_max": max(ratios),
            "ours_eval_ms": ours_eval * 1e3,
            "torch_eval_ms": theirs_eval * 1e3,
            "eval_ratio": ours_eval / theirs_eval,
            "kernel_ms": ours["kernel_s"] * 1e3,
            "overhead_ms": ours["overhead_s"] * 1e3,
            "overhead_over_kernel": ours["overhead_s"] / ours["kernel_s"],
            "tasks_per_iteration": ours["tasks_per_iteration"],
            "native_step_tasks": ours["native_step_tasks"],
            "cpp_step_tasks": ours["cpp_step_tasks"],
            "one_cpu_ms": single * 1e3,
            "steps_per_launch": ours["steps_per_launch"],
            "one_step_per_launch_ms": one_step * 1e3,
            # CPU per iteration by thread (the median round's), ms
            **{f"cpu_{k}_ms": ours[f"cpu_{k}_s"] * 1e3 for k in ("tasks", "runtime", "python")},
        }
        rows.append(row)
        print(
            f"{name:<6} ours {row['ours_ms']:8.2f} ms  torch {row['torch_ms']:7.2f} ms  "
            f"ratio {row['ratio']:5.2f}x (rounds {row['round_ratio_min']:.2f}-"
            f"{row['round_ratio_max']:.2f}x)  evaluation {row['ours_eval_ms']:.2f} ms, torch "
            f"{row['torch_eval_ms']:.2f} ms ({row['eval_ratio']:.2f}x)  (kernel "
            f"{row['kernel_ms']:.2f} ms, overhead "
            f"{row['overhead_ms']:.2f} ms = {row['overhead_over_kernel']:.0%} of kernel, "
            f"{row['tasks_per_iteration']:.2f} tasks, {row['steps_per_launch']} steps per "
            f"launch, one per launch {row['one_step_per_launch_ms']:.2f} ms; on one CPU "
            f"{row['one_cpu_ms']:.2f} ms; "
            f"CPU per iteration: task threads {row['cpu_tasks_ms']:.2f}, Legate runtime "
            f"{row['cpu_runtime_ms']:.2f}, Python {row['cpu_python_ms']:.2f} ms)"
        )
    lines = [
        f"# Training iteration: ours on {CPUS} Legate CPUs (data parallel) vs PyTorch "
        f"{torch.__version__} with {CPUS} threads",
        "",
        f"`.venv/bin/python benchmarks/runtime.py{command}`; the sides take turns, "
        f"{args.rounds} rounds per model, and each side's figure is its median round (a round: "
        f"the median of {BLOCKS} blocks of the iterations given, mean, after at least {WARMUP} "
        'warm-up ones); "rounds" is the range of the ratio within one round; "1 CPU" is the same '
        'model on one Legate CPU processor, also in turn. "Steps per launch": the training steps '
        "of one Legate launch (`FFConfig.steps_per_execution`, where the model allows: "
        "flexflow.runtime.step_launches); such models are also timed with one step per launch, "
        "in turn. Tasks: Legate launches per iteration. Goals (LeNet and the MLP): ratio <= 1.5, "
        "overhead <= 20% of kernel time. CPU per iteration (from /proc, the median round's, "
        "all blocks): the threads that ran our tasks (both processors together), Legate's "
        "other threads (its utility processor: dependence analysis, mapping) and the Python "
        "thread issuing the tasks. Evaluation: ms per batch of the forward pass and the loss "
        "(ours `eval_batches` after training, as `eval` issues them; PyTorch `net.eval()` "
        "under `torch.no_grad()`), each side's median round.",
        "",
        "| model | batch | iterations per block | ours ms | PyTorch ms | ratio | rounds "
        "| evaluation: ours / PyTorch ms | evaluation ratio "
        "| kernel ms | overhead ms | overhead/kernel | tasks | steps per launch "
        "| ours, 1 step per launch ms | ours on 1 CPU ms "
        "| CPU ms: task threads / Legate runtime / Python |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['iterations_per_block']} "
            f"| {r['ours_ms']:.2f} | {r['torch_ms']:.2f} | "
            f"{r['ratio']:.2f}x | {r['round_ratio_min']:.2f}-{r['round_ratio_max']:.2f}x "
            f"| {r['ours_eval_ms']:.2f} / {r['torch_eval_ms']:.2f} | {r['eval_ratio']:.2f}x "
            f"| {r['kernel_ms']:.2f} | {r['overhead_ms']:.2f} | "
            f"{r['overhead_over_kernel']:.0%} | {r['tasks_per_iteration']:.2f} "
            f"| {r['steps_per_launch']} | {r['one_step_per_launch_ms']:.2f} "
            f"| {r['one_cpu_ms']:.2f} | {r['cpu_tasks_ms']:.2f} / {r['cpu_runtime_ms']:.2f} / "
            f"{r['cpu_python_ms']:.2f} |"
        )
    lines += [
        "",
        f"Matrix products through {blas.provider().split()[0]} (flexflow.ops.blas); step tasks "
        "run as one C call (flexflow.runtime.native_step), and of them in C++ task bodies per "
        "iteration (flexflow.runtime.native_tasks): "
        + ", ".join(
            f"{r['model']} {r['native_step_tasks']} / {r['cpp_step_tasks']:g}" for r in rows
        )
        + ".",
    ]
    write_csv(RESULTS / f"{stem}.csv", rows)
    write_markdown(RESULTS / f"{stem}.md", lines)


if __name__ == "__main__":
    main()
