"""Run in a Legate process by test_modes.py: batch norm keeps running statistics while training
(under a sample split, from the whole batch's statistics; on one device, inside its fused
task), evaluates with them, and checkpoints them."""

from __future__ import annotations

import json
import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.runtime.stores import read_store
from flexflow.strategies import data_parallel_over, named_strategy
from flexflow.strategy import ParallelConfig, Strategy

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


machine = parse_machine("local")


def reversed_devices(strategy: Strategy) -> Strategy:
    return Strategy(
        strategy.ops, tuple(ParallelConfig(c.degrees, c.devices[::-1]) for c in strategy.configs)
    )


def check(strategy, folder: str) -> dict:
    """Three training batches, an evaluation and a checkpoint under `strategy`."""
    report = {}
    with Executor(graph, strategy) as executor:
        (group,) = (g for g in executor.groups if bn.id in g.ops)
        report["fused"] = len(group.ops) > 1 and not group.shared_statistics
        report["exchanges"] = group.exchanges
        report["described"] = executor.describe_kernels().split("; batch norms: ")[-1]
        report["losses"] = [executor.train_batch(inputs, target).read()[0] for _ in range(3)]
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
        # the loss of an evaluation (forward and loss in one task, or one launch per pass)
        report["eval_loss"] = executor.eval_batch(inputs, target).read()[0]

        executor.save_checkpoint(f"{folder}/bn.npz")
        # a training-mode forward alone (no step): the batch's statistics, folded once more
        executor.forward(inputs, read=False, training=True)
        twice = bn.op.running_update(bn.sig, bn.op.statistics_forward(images), running)
        after = read_store(executor.running[bn.id])
        report["training_forward_updates_running"] = bool(np.allclose(after, twice, rtol=1e-10))
    with Executor(graph, strategy) as restored:
        restored.load_checkpoint(f"{folder}/bn.npz")
        report["checkpoint_keeps_running"] = bool(
            np.array_equal(read_store(restored.running[bn.id]), got)
        )
    return report


# data parallelism shares the statistics between the points of one concurrent launch
# (flexflow.runtime.concurrent); on one device the batch norm computes its own inside the
# fused task (flexflow.fusion)
print(
    json.dumps(
        {
            "dp": check(named_strategy("dp", graph, machine), sys.argv[1]),
            "single": check(data_parallel_over(graph, 1), sys.argv[1]),
            # devices out of order: no concurrent launch, the batch norm alone with its
            # statistics tasks (flexflow.runtime.batch_statistics)
            "alone": check(reversed_devices(named_strategy("dp", graph, machine)), sys.argv[1]),
        }
    )
)
