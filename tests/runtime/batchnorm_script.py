"""Run in a Legate process by test_modes.py: batch norm keeps running statistics while training
(under a sample split, from the whole batch's statistics), evaluates with them, and checkpoints
them."""

from __future__ import annotations

import json
import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.runtime.stores import read_store
from flexflow.strategies import named_strategy

model = FFModel(FFConfig(batch_size=8))
x = model.create_tensor((8, 4, 3, 3), name="x")
model.dense(model.flat(model.batch_norm(x, relu=False, name="bn")), 2, name="out")
graph = model.graph()
bn = next(node for node in graph.ops if node.name == "bn")
rng = np.random.default_rng(0)
images = (3.0 + 2.0 * rng.standard_normal((8, 4, 3, 3))).astype(np.float32)
inputs, target = {"x": images}, rng.standard_normal((8, 2)).astype(np.float32)

running = np.stack([np.zeros(4), np.ones(4)])
for _ in range(3):  # what three training batches make of the running statistics
    stats = bn.op.statistics_forward(images)
    running = bn.op.running_update(bn.sig, stats, running)

report = {}
with Executor(graph, named_strategy("dp", graph, parse_machine("local"))) as executor:
    for _ in range(3):
        executor.train_batch(inputs, target).read()
    got = read_store(executor.running[bn.id])
    report["running_matches"] = bool(np.allclose(got, running, rtol=1e-10))
    # evaluation normalizes with the running statistics (not the batch's)
    executor.forward(inputs, read=False)
    normalized = read_store(executor.tensors[bn.outputs[0]])
    mean, var = running
    gamma, beta = (executor.get_weights()[f"bn.{w}"] for w in ("gamma", "beta"))
    shape = (1, 4, 1, 1)
    want = (images - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + bn.op.eps)
    want = want * gamma.reshape(shape) + beta.reshape(shape)
    report["eval_uses_running"] = bool(np.allclose(normalized, want, rtol=1e-4, atol=1e-5))
    executor.save_checkpoint(f"{sys.argv[1]}/bn.npz")
with Executor(graph, named_strategy("dp", graph, parse_machine("local"))) as restored:
    restored.load_checkpoint(f"{sys.argv[1]}/bn.npz")
    report["checkpoint_keeps_running"] = bool(
        np.array_equal(read_store(restored.running[bn.id]), got)
    )
print(json.dumps(report))
