"""Run in a Legate process by test_modes.py: an evaluation batch under sparse cross-entropy,
as one C call per device where the model's step is one (`NativeStep.evaluate`) and op by op
where it is not, gives the same loss and correct count, reads the running statistics without
changing them, and leaves training as it was."""

from __future__ import annotations

import json

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.runtime.passes import Pass
from flexflow.runtime.stores import read_store
from flexflow.strategies import data_parallel_over, named_strategy
from flexflow.strategy import ParallelConfig, Strategy

LOSS = "sparse_categorical_crossentropy"
model = FFModel(FFConfig(batch_size=8))
x = model.create_tensor((8, 2, 8, 8), name="x")
x = model.batch_norm(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, use_bias=False), relu=True, name="bn")
x = model.dropout(model.flat(x), 0.4, seed=3)
model.softmax(model.dense(model.dense(x, 16, ActiMode.AC_MODE_RELU), 5))
graph = model.graph()
bn = next(node for node in graph.ops if node.name == "bn")
rng = np.random.default_rng(0)
inputs = {"x": rng.standard_normal((8, 2, 8, 8)).astype(np.float32)}
labels = rng.integers(0, 5, 8)
machine = parse_machine("local")


def check(strategy) -> dict:
    """Three training batches, evaluations of a whole and of a padded batch, one more batch."""
    report = {}
    with Executor(graph, strategy, learning_rate=0.05, record_timeline=True) as executor:
        report["losses"] = [executor.train_batch(inputs, labels, LOSS).read()[0] for _ in range(3)]
        executor.forward(inputs, read=False)  # the pending update applied before timing
        executor.runtime.issue_execution_fence(block=True)
        executor.timeline.clear()
        running = read_store(executor.running[bn.id])
        report["eval"] = [
            executor.eval_batch(inputs, labels, LOSS, valid).read() for valid in (8, 5)
        ]
        passes = {Pass(entry[2]).name for entry in executor.timeline}
        report["one_c_call"] = passes == {"FUSED_FORWARD_LOSS"}
        report["running_kept"] = bool(np.array_equal(read_store(executor.running[bn.id]), running))
        report["after"] = executor.train_batch(inputs, labels, LOSS).read()[0]
    return report


dp = named_strategy("dp", graph, machine)
print(
    json.dumps(
        {
            "dp": check(dp),  # one concurrent launch, its batch norm exchanging statistics
            "single": check(data_parallel_over(graph, 1)),
            # devices out of order: op by op, the batch norm alone with its statistics tasks
            "alone": check(
                Strategy(dp.ops, tuple(ParallelConfig(c.degrees, c.devices[::-1]) for c in dp))
            ),
        }
    )
)
