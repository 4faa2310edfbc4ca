"""Run by test_multirank.py on every Legate rank: a few training steps of LeNet, an MLP and a
small NMT (whose steps run as one C call each, flexflow.runtime.native_step; LeNet and NMT
then evaluate a batch, also as one C call per device), data parallel
over the `local` machine's devices, and of a small CNN split by channel and by sample, printing
one JSON line per rank."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFModel
from flexflow.config import FFConfig
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.strategies import named_strategy
from flexflow.strategy import ParallelConfig, Strategy
from flexflow.zoo import load_model

BATCH, STEPS = 8, 3

graph = load_model("lenet", FFConfig(batch_size=BATCH)).graph()
machine = parse_machine("local")
strategy = named_strategy("dp", graph, machine)
rng = np.random.default_rng(0)  # every rank builds the same batch (control replication)
images = rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)  # (B, C, H, W)
labels = rng.integers(0, 10, BATCH)

with Executor(graph, strategy, seed=0, learning_rate=0.05) as executor:
    losses = [
        executor.step({"image": images}, labels, loss="sparse_categorical_crossentropy")
        for _ in range(STEPS)
    ]
    # an evaluation batch, padded, as one C call per device (NativeStep.evaluate)
    evaluated = executor.eval_batch(
        {"image": images}, labels, "sparse_categorical_crossentropy", BATCH - 3
    ).read()

mlp = FFModel(FFConfig(batch_size=BATCH))
features = mlp.create_tensor((BATCH, 12), name="features")
mlp.softmax(mlp.dense(mlp.dense(features, 16, ActiMode.AC_MODE_RELU), 4))
mlp_graph = mlp.graph()
rows = rng.standard_normal((BATCH, 12)).astype(np.float32)
classes = rng.integers(0, 4, BATCH)
with Executor(mlp_graph, named_strategy("dp", mlp_graph, machine), seed=0) as executor:
    mlp_losses = [
        executor.step({"features": rows}, classes, loss="sparse_categorical_crossentropy")
        for _ in range(STEPS)
    ]
    native_steps = len(executor.native_steps)
    cpp_steps = executor.cpp_steps_issued

# NMT: two inputs of int32 token ids, its steps one C call each, the ids reaching them as
# stores across ranks
nmt = load_model(
    "nmt", FFConfig(batch_size=BATCH), seq_length=3, vocab_size=20, embed_size=6, hidden_size=8,
    num_layers=1,
).graph()  # fmt: skip
source, target = (rng.integers(0, 20, (BATCH, 3)).astype(np.int32) for _ in range(2))
words = rng.integers(0, 20, (BATCH, 3))
with Executor(nmt, named_strategy("dp", nmt, machine), seed=0) as executor:
    nmt_losses = [
        executor.step(
            {"source": source, "target": target}, words, "sparse_categorical_crossentropy"
        )
        for _ in range(STEPS)
    ]
    nmt_native_steps = len(executor.native_steps)
    nmt_evaluated = executor.eval_batch(
        {"source": source, "target": target}, words, "sparse_categorical_crossentropy"
    ).read()

# a strategy other than data parallelism: a convolution split by output channel over both
# devices adds its input's gradient into two parts (flexflow.runtime.gradients), and a batch
# norm split by sample outside a concurrent launch writes its statistics a row per device
# (flexflow.runtime.batch_statistics), across ranks
split = FFModel(FFConfig(batch_size=BATCH))
x = split.create_tensor((BATCH, 3, 8, 8), name="x")
y = split.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="first")
y = split.batch_norm(split.conv2d(y, 6, 3, 3, 1, 1, 1, 1, name="by_channel"), name="bn")
split.softmax(split.dense(split.flat(y), 4, name="head"))
split_graph = split.graph()
single = [ParallelConfig.single(len(n.sig.output_shape), 0) for n in split_graph.ops]
at = {n.name: i for i, n in enumerate(split_graph.ops)}
single[at["by_channel"]] = ParallelConfig((1, 2, 1, 1), (0, 1))
single[at["bn"]] = ParallelConfig((2, 1, 1, 1), (0, 1))
split_strategy = Strategy(tuple(n.name for n in split_graph.ops), tuple(single))
pictures = rng.standard_normal((BATCH, 3, 8, 8)).astype(np.float32)
with Executor(split_graph, split_strategy, seed=0, learning_rate=0.05) as executor:
    split_losses = [
        executor.step({"x": pictures}, classes, "sparse_categorical_crossentropy")
        for _ in range(STEPS)
    ]
    split_parts = len(executor.gradients.plan.counts)

# every rank's offer reaches every rank (flexflow.runtime.agreement), and a search's pick is
# one strategy on all ranks, each having searched with its own seed
from legate.core import get_legate_runtime  # noqa: E402

from flexflow.runtime.agreement import gather_rows  # noqa: E402

rank = get_legate_runtime().node_id
table = gather_rows([rank, 10.0 * rank + 1])
searched = load_model("lenet", FFConfig(batch_size=BATCH, search_budget=0.5, seed=0))
plan = searched.compile(loss_type="sparse_categorical_crossentropy", progress=False)
searched_losses = [
    searched.executor.step({"image": images}, labels, loss="sparse_categorical_crossentropy")
    for _ in range(2)
]
searched.executor.close()

report = {
    "rank": int(os.environ.get("LEGATE_GLOBAL_RANK", "0")),
    "table": table.tolist(),
    "plan": [[list(c.degrees), list(c.devices)] for c in plan.strategy.configs],
    "plan_source": plan.source,
    "searched_losses": searched_losses,
    "nodes": machine.num_nodes,
    "devices": machine.num_devices,
    "losses": losses,
    "evaluated": evaluated,
    "nmt_evaluated": nmt_evaluated,
    "mlp_losses": mlp_losses,
    "native_steps": native_steps,
    "cpp_steps": cpp_steps,
    "nmt_losses": nmt_losses,
    "nmt_native_steps": nmt_native_steps,
    "split_losses": split_losses,
    "split_parts": split_parts,
}
print(json.dumps(report), flush=True)
sys.exit(0)
