"""Run in a Legate process by test_unread_batches.py: thousands of training batches issued
without reading their results, as a benchmark's timing loop issues them."""

from __future__ import annotations

import json
import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
import flexflow.runtime.batches as batches_module
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.strategies import named_strategy

BATCHES = int(sys.argv[1])
if sys.argv[2:] == ["unbounded"]:  # to see the deadlock the bound prevents
    batches_module.UnreadBatches.add = lambda self, stats, began, issued: None
# the runtime benchmark's MLP: tasks slow enough that the program runs far ahead of them
model = FFModel(FFConfig(batch_size=64))
x = model.create_tensor((64, 784), name="x")
x = model.dense(model.dense(x, 512, ActiMode.AC_MODE_RELU), 512, ActiMode.AC_MODE_RELU)
model.softmax(model.dense(x, 10))
graph = model.graph()
rng = np.random.default_rng(0)
inputs = {"x": rng.standard_normal((64, 784)).astype(np.float32)}
target = rng.integers(0, 10, 64)
loss = "sparse_categorical_crossentropy"
with Executor(graph, named_strategy("dp", graph, parse_machine("local"))) as executor:
    most = 0
    for _ in range(BATCHES):
        stats = executor.train_batch(inputs, target, loss)
        if executor.unread:
            most = max(most, executor.tasks_issued - executor.unread.oldest_began)
    final = stats.read()
    per_batch = executor.tasks_per_iteration()
print(json.dumps({"loss": final[0], "most_unread_tasks": most, "tasks_per_batch": per_batch}))
