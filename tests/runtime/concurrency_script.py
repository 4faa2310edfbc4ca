"""Run in a Legate process by test_concurrency.py: two independent dense ops placed on CPU 0 and
CPU 1; prints the start and end times their forward tasks measured while running. Then a
data-parallel MLP trains on both CPUs: the times of its two devices' backward tiles (one fused
task per device: forward, loss and backward) and its Legate tasks per iteration."""

from __future__ import annotations

import json

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import FFConfig, FFModel
from flexflow.errors import FlexFlowError
from flexflow.runtime import Executor
from flexflow.runtime.passes import Pass
from flexflow.strategy import ParallelConfig, Strategy

model = FFModel(FFConfig(batch_size=256))
x = model.create_tensor((256, 2048), name="x")
left = model.dense(x, 2048, name="left")
right = model.dense(x, 2048, name="right")
model.add(left, right, name="join")
graph = model.graph()
strategy = Strategy(
    ("left", "right", "join"),
    (ParallelConfig.single(2, 0), ParallelConfig.single(2, 1), ParallelConfig.single(2, 0)),
)
executor = Executor(graph, strategy, record_timeline=True)
inputs = {"x": np.random.default_rng(0).standard_normal((256, 2048)).astype(np.float32)}
for _ in range(3):
    executor.forward(inputs)
spans = {}
for op, _, which, start, end, _thread in executor.timeline:
    if which is Pass.FORWARD:
        spans.setdefault(graph.ops[op].name, []).append((start, end))
try:  # a strategy using a processor this process does not have is refused before any task runs
    Executor(graph, strategy.replace("join", ParallelConfig.single(2, 5)))
    refused = ""
except FlexFlowError as exc:
    refused = str(exc)

mlp = FFModel(FFConfig(batch_size=256))
h = mlp.dense(mlp.create_tensor((256, 1024), name="x"), 1024, name="hidden")
mlp.dense(h, 10, name="out")
mlp_graph = mlp.graph()
dp = Strategy(("hidden", "out"), (ParallelConfig((2, 1), (0, 1)), ParallelConfig((2, 1), (0, 1))))
trainer = Executor(mlp_graph, dp, record_timeline=True)
batch = {"x": inputs["x"][:, :1024]}
for _ in range(16):  # a slow spell of this host can delay one device for a few iterations
    trainer.train_batch(batch, np.zeros((256, 10), np.float32)).read()
backward = {0: [], 1: []}
for op, index, which, start, end, _thread in trainer.timeline:
    if op == 0 and which is Pass.BACKWARD:
        backward[index].append((start, end))
report = {"spans": spans, "refused": refused, "backward": backward}
report["tasks_per_iteration"] = trainer.tasks_per_iteration()
print(json.dumps(report))
