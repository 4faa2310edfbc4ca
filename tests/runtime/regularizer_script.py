"""Run in a Legate process by test_regularizer.py: a classifier whose dense kernels carry L2
regularizers (flexflow.regularizers) trained on one device, under data parallelism (C++ step
bodies, Python step bodies, several steps per launch), with its dense layers split by channel,
on different devices and under random strategies, against the numpy reference; and the same
model without the regularizers. Prints, as JSON, how far each run is from one device and one
device from numpy (numerics_script.relative: <= 1 is equal up to rounding)."""

from __future__ import annotations

import json

import numpy as np
from numerics_script import loss_and_gradients, relative  # (imports flexflow first)

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.ops.init import initialize
from flexflow.optimizers import AdamOptimizer, SGDOptimizer
from flexflow.regularizers import L2
from flexflow.runtime import Executor
from flexflow.strategies import data_parallel_over, named_strategy
from flexflow.strategy import ParallelConfig, Strategy

BATCH, FEATURES, HIDDEN, CLASSES, STEPS = 8, 6, 10, 6, 4
LOSS = "sparse_categorical_crossentropy"
LAMBDAS = (0.3, 0.05)
"""The kernels' lambdas, large enough to move the weights well past rounding in 4 steps."""


def classifier(first=None, second=None):
    model = FFModel(FFConfig(batch_size=BATCH))
    x = model.create_tensor((BATCH, FEATURES), name="x")
    h = model.dense(x, HIDDEN, ActiMode.AC_MODE_RELU, kernel_regularizer=first, name="d1")
    model.softmax(model.dense(h, CLASSES, kernel_regularizer=second, name="d2"), name="out")
    return model.graph()


def reference(graph, x, labels, optimizer):
    """The same steps with numpy on whole tensors, each parameter updated with its own L2
    lambda (Optimizer.update's l2); the data loss of each step."""
    rng = np.random.default_rng(0)  # the executor's draw (seed 0), parameter by parameter
    weights = {p.id: initialize(p.spec, rng) for p in graph.parameters}
    states = {p.id: tuple(np.zeros_like(weights[p.id]) for _ in optimizer.state_names)
              for p in graph.parameters}  # fmt: skip
    losses = []
    for step in range(1, STEPS + 1):
        values = {graph.input_tensors[0].id: x}
        loss, wgrads = loss_and_gradients(graph, values, weights, LOSS, labels)
        losses.append(loss)
        for p in graph.parameters:
            weights[p.id], states[p.id] = optimizer.update(
                weights[p.id], wgrads[p.id], states[p.id], step, p.l2
            )
    return losses, {p.name: weights[p.id] for p in graph.parameters}


def channel_split(graph) -> Strategy:
    """Both dense layers split by output channel over devices 0 and 1 (each device updates
    its rows of each kernel: the update tasks, no flat buffers), the softmax on device 1."""
    configs = []
    for node in graph.ops:
        if node.kind == "dense":
            configs.append(ParallelConfig((1, 2), (0, 1)))
        else:
            configs.append(ParallelConfig.single(2, 1))
    return Strategy(tuple(n.name for n in graph.ops), tuple(configs))


def train(graph, strategy, optimizer, x, labels, **options) -> dict:
    """STEPS steps (all through train_batches where `steps_per_execution` is given); the
    losses, weights and which update path ran."""
    per_launch = options.get("steps_per_execution", 1)
    with Executor(graph, strategy, seed=0, optimizer=optimizer, **options) as executor:
        if per_launch > 1:
            stats = executor.train_batches([({"x": x}, labels, None)] * STEPS, LOSS)
            losses = [s.loss for s in stats]
        else:
            losses = [executor.step({"x": x}, labels, LOSS) for _ in range(STEPS)]
        weights = executor.get_weights()  # applies a pending update
        return {
            "losses": losses,
            "weights": weights,
            "flat": executor.params.flat is not None,
            "cpp_steps": executor.cpp_steps_issued,
            "native_steps": len(executor.native_steps),
            "per_launch": executor.steps_per_launch,
        }


def main() -> None:
    graph = classifier(L2(LAMBDAS[0]), L2(LAMBDAS[1]))
    machine = parse_machine("local")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    labels = rng.integers(0, CLASSES, BATCH)
    dp = named_strategy("dp", graph, machine)
    runs = {
        "single": (data_parallel_over(graph, 1), {}),
        "dp": (dp, {}),
        "dp_python_bodies": (dp, {"cpp_steps": False}),
        "dp_launches": (dp, {"steps_per_execution": 2}),
        "channels": (channel_split(graph), {}),
        "model": (named_strategy("model", graph, machine), {}),
    }
    for seed in range(3):
        runs[f"random{seed}"] = (named_strategy("random", graph, machine, seed), {})
    optimizers = {
        "sgd": SGDOptimizer(0.1, momentum=0.9, weight_decay=1e-2),
        "adam": AdamOptimizer(0.02),
    }
    report: dict = {}
    for kind, optimizer in optimizers.items():
        done = {name: train(graph, s, optimizer, x, labels, **o) for name, (s, o) in runs.items()}
        single = done["single"]
        ref_losses, ref_weights = reference(graph, x, labels, optimizer)
        plain = train(classifier(), runs["single"][0], optimizer, x, labels)
        report[kind] = {
            "lambdas": {p.name: p.l2 for p in graph.parameters},
            "single_vs_numpy_loss": relative(single["losses"], ref_losses),
            "single_vs_numpy_weights": max(
                relative(single["weights"][k], w) for k, w in ref_weights.items()
            ),
            "strategies": {
                name: {
                    "loss": relative(run["losses"], single["losses"]),
                    "weights": max(
                        relative(run["weights"][k], w) for k, w in single["weights"].items()
                    ),
                    "flat": run["flat"],
                    "cpp_steps": run["cpp_steps"],
                    "native_steps": run["native_steps"],
                    "per_launch": run["per_launch"],
                }
                for name, run in done.items()
            },
            # the same model without regularizers: the same first loss, other weights
            "unregularized_first_loss": relative(plain["losses"][:1], single["losses"][:1]),
            "unregularized_kernels": {
                k: relative(plain["weights"][k], single["weights"][k])
                for k in ("d1.kernel", "d2.kernel")
            },
            "unregularized_biases": {
                k: relative(plain["weights"][k], single["weights"][k])
                for k in ("d1.bias", "d2.bias")
            },
        }
    report["checkpoint"] = checkpoint_notes(graph, x, labels)
    print(json.dumps(report))


def checkpoint_notes(graph, x, labels) -> dict:
    """A checkpoint of the regularized model records its lambdas: loaded by the same model
    it says nothing, by the model without regularizers it warns (FlexFlowWarning)."""
    import tempfile
    import warnings

    strategy, optimizer = data_parallel_over(graph, 1), SGDOptimizer(0.1)
    notes = {}
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/ckpt.npz"
        with Executor(graph, strategy, seed=0, optimizer=optimizer) as executor:
            executor.step({"x": x}, labels, LOSS)
            executor.save_checkpoint(path)
        for name, other in (("same", graph), ("unregularized", classifier())):
            with Executor(other, strategy, seed=1, optimizer=optimizer) as executor:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    executor.load_checkpoint(path)
                notes[name] = [str(w.message) for w in caught]
    return notes


if __name__ == "__main__":
    main()
