"""Run in a Legate process by test_gradient_parts.py: strategies whose backward tasks add into
overlapping regions of one gradient (flexflow.gradient_parts). Prints, as JSON, the parts each
executor keeps, how far its losses and weights are from one device's, and, for a convolution
split by output channel over both CPUs, the times of its two backward tasks."""

from __future__ import annotations

import json

import numpy as np
from numerics_script import encoder, relative  # (this folder: the script runs from it)

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.runtime.passes import Pass
from flexflow.strategies import named_strategy
from flexflow.strategy import ParallelConfig, Strategy

LOSS = "sparse_categorical_crossentropy"


def one_device(graph) -> Strategy:
    return Strategy(
        tuple(n.name for n in graph.ops),
        tuple(ParallelConfig.single(len(n.sig.output_shape), 0) for n in graph.ops),
    )


def train(graph, strategy, inputs, target, steps: int, timeline: bool = False):
    with Executor(graph, strategy, seed=0, learning_rate=0.05, record_timeline=timeline) as ex:
        losses = [ex.step(inputs, target, LOSS) for _ in range(steps)]
        counts = {graph.tensor(t).name: n for t, n in ex.gradients.plan.counts.items()}
        return losses, ex.get_weights(), counts, ex.timeline


def distance(run, base) -> dict:
    return {
        "loss": relative(run[0], base[0]),
        "weights": max(relative(run[1][k], base[1][k]) for k in base[1]),
    }


def attention_by_sequence() -> dict:
    """The zoo's encoder under a random strategy whose attention, split by sequence, adds its
    queries' rows and the whole keys' and values' gradients into one tensor from each task
    (Legate lost one of two such reductions of one task), run first in this process."""
    graph = encoder().graph()
    rng = np.random.default_rng(1)
    inputs = {
        t.name: rng.integers(0, 20, t.spec.shape).astype(np.int32) for t in graph.input_tensors
    }
    output = graph.tensor(graph.ops[-1].outputs[0]).spec.shape
    target = rng.integers(0, output[-1], output[:-1])
    strategy = named_strategy("random", graph, parse_machine("local"), 9)
    run = train(graph, strategy, inputs, target, 3)
    base = train(graph, one_device(graph), inputs, target, 3)
    return {"parts": run[2], **distance(run, base)}


def conv_by_channel() -> dict:
    """A convolution split by output channel over both CPUs, whose input comes from another
    fused group: both tasks add into its whole gradient."""
    model = FFModel(FFConfig(batch_size=16))
    x = model.create_tensor((16, 8, 24, 24), name="x")
    a = model.conv2d(x, 16, 3, 3, 1, 1, 1, 1, name="first")
    b = model.conv2d(a, 64, 3, 3, 1, 1, 1, 1, name="split")
    model.softmax(model.dense(model.flat(b), 4, name="head"))
    graph = model.graph()
    single = one_device(graph)
    strategy = single.replace("split", ParallelConfig((1, 2, 1, 1), (0, 1)))
    rng = np.random.default_rng(2)
    inputs = {"x": rng.standard_normal((16, 8, 24, 24)).astype(np.float32)}
    target = rng.integers(0, 4, (16,))
    run = train(graph, strategy, inputs, target, 12, timeline=True)
    base = train(graph, single, inputs, target, 12)
    split = graph.ops.index(next(n for n in graph.ops if n.name == "split"))
    spans: dict[int, list] = {0: [], 1: []}
    for op, index, which, start, end, _ in run[3]:
        if op == split and which is Pass.BACKWARD:
            spans[index].append((start, end))
    return {"parts": run[2], "backward": spans, **distance(run, base)}


if __name__ == "__main__":
    print(json.dumps({"attention": attention_by_sequence(), "conv": conv_by_channel()}))
