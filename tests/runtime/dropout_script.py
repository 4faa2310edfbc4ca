"""Run in a Legate process by test_dropout.py: dropout drops a new set of elements each training
iteration, the same set under any strategy, and nothing outside training."""

from __future__ import annotations

import json

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.runtime.stores import read_store
from flexflow.strategies import named_strategy


def build(with_dropout: bool):
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16), name="x")
    h = model.dense(x, 32, name="hidden")  # no ReLU: only dropout makes zeros
    if with_dropout:
        h = model.dropout(h, 0.5, seed=7, name="drop")
    model.dense(h, 4, name="out")
    return model.graph()


graph, plain = build(True), build(False)
local = parse_machine("local")
rng = np.random.default_rng(0)
inputs = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
target = rng.standard_normal((8, 4)).astype(np.float32)
drop_out = next(node.outputs[0] for node in graph.ops if node.name == "drop")

report = {}
with Executor(graph, named_strategy("dp", graph, local)) as executor:
    weights = executor.get_weights()
    evaluated = [executor.forward(inputs), executor.forward(inputs)]
    masks = []
    for _ in range(2):
        # a training step keeps its activations in memory: a training-mode forward pass at
        # the same iteration draws the mask that step uses, into the dropout's store
        executor.forward(inputs, read=False, training=True)
        masks.append((read_store(executor.tensors[drop_out]) != 0).tolist())
        executor.train_batch(inputs, target).read()
with Executor(plain, named_strategy("dp", plain, local)) as reference:
    reference.set_weights(weights)
    report["eval_is_identity"] = all(
        np.array_equal(e, reference.forward(inputs)) for e in evaluated
    )
report["masks_differ"] = masks[0] != masks[1]
report["drop_fraction"] = 1 - float(np.mean(masks))
losses = {}
for name in ("dp", "random", "model"):
    with Executor(graph, named_strategy(name, graph, local, 5)) as executor:
        losses[name] = [executor.step(inputs, target) for _ in range(3)]
report["losses"] = losses
print(json.dumps(report))
