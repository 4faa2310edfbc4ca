"""Run in a Legate process by test_checkpoint.py: a run resumed from a checkpoint continues
exactly like the uninterrupted run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.errors import FlexFlowError
from flexflow.machine import parse_machine
from flexflow.optimizers import SGDOptimizer
from flexflow.runtime import Executor
from flexflow.strategies import named_strategy

directory = sys.argv[1]
model = FFModel(FFConfig(batch_size=8))
x = model.create_tensor((8, 6), name="x")
model.dense(model.dense(x, 10, ActiMode.AC_MODE_RELU), 4)
graph = model.graph()
rng = np.random.default_rng(0)
inputs = {"x": rng.standard_normal((8, 6)).astype(np.float32)}
target = rng.standard_normal((8, 4))


def resume(strategy, optimizer) -> dict:
    """4 steps straight vs 2, a checkpoint, and 2 more from it in a fresh executor."""
    with Executor(graph, strategy, optimizer=optimizer) as straight:
        losses = [straight.step(inputs, target) for _ in range(4)]
        final = straight.get_weights()
        in_step = straight.updates_in_step
    with Executor(graph, strategy, optimizer=optimizer) as first:
        resumed_losses = [first.step(inputs, target) for _ in range(2)]
        first.save_checkpoint(f"{directory}/ckpt.npz")
    with Executor(graph, strategy, seed=99, optimizer=optimizer) as second:  # other weights
        second.load_checkpoint(f"{directory}/ckpt.npz")
        resumed_losses += [second.step(inputs, target) for _ in range(2)]
        resumed = second.get_weights()
    return {
        "losses": losses,
        "resumed_losses": resumed_losses,
        "identical_weights": all(np.array_equal(final[k], resumed[k]) for k in final),
        "updates_in_step": in_step,
    }


local = parse_machine("local")
runs = {
    # tasks on several devices, each op split its own way: separate update tasks
    "random": resume(named_strategy("random", graph, local, 3), SGDOptimizer(0.05)),
    # data parallelism: each device updates its weight copies in its next step (momentum too)
    "dp": resume(named_strategy("dp", graph, local), SGDOptimizer(0.05, momentum=0.9)),
}

try:
    other = FFModel(FFConfig(batch_size=8))
    other.dense(other.create_tensor((8, 6), name="x"), 3, name="head")
    with Executor(other.graph(), named_strategy("dp", other.graph(), parse_machine("local"))) as e:
        e.load_checkpoint(f"{directory}/ckpt.npz")
    refused = ""
except FlexFlowError as exc:
    refused = str(exc)

bad_weights = []  # set_weights with a name this model lacks, then with a wrong shape
with Executor(graph, named_strategy("dp", graph, local)) as executor:
    for values in ({"nope.kernel": np.zeros(3)}, {graph.parameters[0].name: np.zeros(3)}):
        try:
            executor.set_weights(values)
            bad_weights.append("")
        except FlexFlowError as exc:
            bad_weights.append(str(exc))


def set_one_weight(strategy) -> dict:
    """set_weights of one weight changes that one and keeps every other (flat parameters keep
    all weights in one buffer: replacing one rewrites the buffer)."""
    with Executor(graph, strategy) as executor:
        executor.step(inputs, target)  # a pending update, applied before the weights change
        before = executor.get_weights()
        name = graph.parameters[1].name
        executor.set_weights({name: np.full(before[name].shape, 0.5, np.float32)})
        after = executor.get_weights()
        return {
            "flat": executor.params.flat is not None,
            "changed": bool(np.all(after[name] == 0.5)),
            "kept": all(np.array_equal(after[k], before[k]) for k in before if k != name),
        }


def reads_only_copies() -> dict:
    """Reading weights, a checkpoint or the output never maps a store that later tasks use
    (`flexflow.runtime.stores.read_store`: Legate would remap it around every one of them);
    on a model with batch norm, whose running statistics a checkpoint reads too."""
    import flexflow.runtime.batches as batches_module
    import flexflow.runtime.iteration as iteration_module
    import flexflow.runtime.trained_state as trained_state_module
    import flexflow.runtime.weights as weights_module

    modules = (batches_module, iteration_module, trained_state_module, weights_module)
    bn_model = FFModel(FFConfig(batch_size=8))
    images = bn_model.create_tensor((8, 2, 4, 4), name="images")
    normalized = bn_model.batch_norm(bn_model.conv2d(images, 3, 3, 3, 1, 1, 1, 1))
    bn_model.dense(bn_model.flat(normalized), 4)
    bn_graph = bn_model.graph()
    bn_inputs = {"images": rng.standard_normal((8, 2, 4, 4)).astype(np.float32)}
    read = []
    original = iteration_module.read_store

    def recording(store):
        read.append(store)
        return original(store)

    for module in modules:
        module.read_store = recording
    try:
        with Executor(bn_graph, named_strategy("dp", bn_graph, local)) as executor:
            executor.step(bn_inputs, target)
            executor.get_weights()
            executor.save_checkpoint(f"{directory}/reads.npz")
            executor.forward(bn_inputs)
            params = executor.params
            used = [
                *params.weights.values(),
                *(s for states in params.states.values() for s in states),
                *params.partials.values(),
                *params.pending.values(),
                params.flat_weights,
                *params.flat_states,
                *executor.tensors.values(),
                *executor.grads.values(),
                *executor.running.values(),
            ]
    finally:
        for module in modules:
            module.read_store = original
    (Path(directory) / "reads.npz").unlink()
    running = len(executor.running)
    return {"reads": len(read), "of_used": sum(any(r is u for u in used) for r in read),
            "running": running}  # fmt: skip


partial = {
    "dp": set_one_weight(named_strategy("dp", graph, local)),
    "random": set_one_weight(named_strategy("random", graph, local, 3)),
}
report = {"runs": runs, "refused": refused, "bad_weights": bad_weights, "partial": partial}
print(json.dumps({**report, "reads": reads_only_copies()}))
