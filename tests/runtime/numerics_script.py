"""Run in a Legate process by test_numerics.py: train small models under random strategies and
print, as JSON, how far their losses and weights are from one device and from the numpy reference."""

from __future__ import annotations

import json
import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, DataType, FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.ops.init import initialize
from flexflow.ops.pool2d import PoolType
from flexflow.runtime import Executor
from flexflow.runtime.loss import LOSSES
from flexflow.strategies import named_strategy
from flexflow.strategy import ParallelConfig, Strategy

STEPS, LR, STRATEGIES = 3, 0.05, int(sys.argv[1]) if len(sys.argv) > 1 else 10


def mlp() -> FFModel:
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 6), name="x")
    model.dense(model.dense(x, 10, ActiMode.AC_MODE_RELU), 4)
    return model


def cnn() -> FFModel:
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 3, 8, 8), name="x")
    a = model.batch_norm(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1))  # batch statistics across tiles
    b = model.conv2d(x, 2, 1, 1, 1, 1, 0, 0)
    t = model.concat([a, b], axis=1)
    # Inception-v3's padded average (its divisor counts only the cells inside the input)
    t = model.pool2d(t, 3, 3, 1, 1, 1, 1, PoolType.POOL_AVG, ActiMode.AC_MODE_TANH)
    t = model.pool2d(t, 2, 2, 2, 2, 0, 0)
    model.dense(model.flat(t), 4)
    return model


def pools_split(graph, machine) -> list[tuple[str, Strategy]]:
    """Strategies splitting every pooling by height, width or both (the other ops on device
    0), as many tasks as the machine has devices at most: a border tile's padded average
    divides by its real cells as the whole tensor's does."""
    found = []
    for degrees in ((1, 1, 2, 1), (1, 1, 1, 2), (1, 1, 2, 2), (2, 1, 1, 2)):
        if np.prod(degrees) > machine.num_devices:
            continue
        tasks = tuple(range(int(np.prod(degrees))))
        configs = tuple(
            ParallelConfig(degrees, tasks)
            if node.op.kind == "pool2d"
            else ParallelConfig.single(len(node.sig.output_shape), 0)
            for node in graph.ops
        )
        found.append((f"pools {degrees}", Strategy(tuple(n.name for n in graph.ops), configs)))
    return found


def classifier() -> FFModel:
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 6), name="x")
    model.softmax(model.dense(model.dense(x, 10, ActiMode.AC_MODE_TANH), 5))
    return model


def relu_classifier() -> FFModel:
    """Dense relu layers into a softmax: its step tasks under data parallelism and on one
    device run as one C call each (flexflow.runtime.native_step)."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 6), name="x")
    model.softmax(model.dense(model.dense(x, 10, ActiMode.AC_MODE_RELU), 5))
    return model


def lstm() -> FFModel:
    model = FFModel(FFConfig(batch_size=8))
    tokens = model.create_tensor((8, 4), DataType.DT_INT32, name="x")
    hidden = model.lstm(model.embedding(tokens, 20, 6), 8, return_sequences=False)
    model.dense(hidden, 3)
    return model


def tagger() -> FFModel:
    """One class per token of a sequence: per-position softmax, per-token labels. Under data
    parallelism and on one device its steps run as one C call each."""
    model = FFModel(FFConfig(batch_size=8))
    tokens = model.create_tensor((8, 4), DataType.DT_INT32, name="x")
    states = model.lstm(model.embedding(tokens, 20, 6), 8, return_sequences=True)
    model.softmax(model.dense(states, 5))
    return model


def translator() -> FFModel:
    """An encoder-decoder (NMT's shape): a source and a target, attention of the decoder's
    states over the encoder's (keys and values one tensor, read twice), a class per target
    token. Under data parallelism and on one device the whole step is one task per device and
    one C call (two model inputs: a Python body calls it)."""
    model = FFModel(FFConfig(batch_size=8))
    source = model.create_tensor((8, 3), DataType.DT_INT32, name="source")
    target = model.create_tensor((8, 3), DataType.DT_INT32, name="target")
    encoded = model.lstm(model.embedding(source, 20, 6), 8)
    decoded = model.lstm(model.embedding(target, 20, 6), 8)
    context = model.multihead_attention(decoded, encoded, encoded, 8, 2)
    model.softmax(model.dense(context, 5))
    return model


def self_attention() -> FFModel:
    """A transformer's core: attention of a sequence over itself (one tensor read three
    times, which joins its fused group read whole each time), a residual add, a class per
    token."""
    model = FFModel(FFConfig(batch_size=8))
    tokens = model.create_tensor((8, 3), DataType.DT_INT32, name="x")
    x = model.embedding(tokens, 20, 8)
    x = model.add(model.multihead_attention(x, x, x, 8, 2), x)
    model.softmax(model.dense(x, 5))
    return model


def encoder() -> FFModel:
    """The zoo's transformer encoder at toy size (token and position embeddings added, layer
    norms, self-attention, a GELU feed-forward layer, residual adds, the first token split off
    and reshaped, a tanh pooler), without dropout, which the numpy reference here does not
    draw per step. Under data parallelism and on one device each step is one C call."""
    from flexflow.zoo import load_model

    sizes = dict(seq_length=4, vocab_size=20, hidden_size=8, num_layers=1, num_heads=2)
    return load_model(
        "transformer", FFConfig(batch_size=8), **sizes, ff_size=16, num_classes=5, dropout=0.0
    )


def residual() -> FFModel:
    """Tensors with several readers (flexflow.fusion): h's two readers fuse with it, its
    gradient summed in memory; c1's second reader comes after a batch norm, outside c1's group."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 3, 6, 6), name="x")
    c1 = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1)
    c2 = model.conv2d(c1, 4, 3, 3, 1, 1, 1, 1)
    t = model.add(model.batch_norm(c2), c1)
    h = model.dense(model.flat(t), 10, ActiMode.AC_MODE_RELU)
    model.dense(model.add(h, model.dense(h, 10)), 4)
    return model


def loss_and_gradients(graph, values: dict, weights: dict, loss_name: str, target):
    """One numpy forward and backward pass over whole tensors from the inputs in `values`
    (by tensor id): the loss and every weight's gradient (by parameter id)."""
    for node in graph.ops:
        outs = node.op.forward([values[i] for i in node.inputs], [weights[w] for w in node.weights])
        values.update(zip(node.outputs, outs, strict=True))
    out = graph.ops[-1].outputs[0]
    loss, grad = LOSSES[loss_name](values[out], target)
    grads = {out: grad.astype(np.float32)}
    wgrads = {p: np.zeros_like(w) for p, w in weights.items()}
    for node in reversed(graph.ops):
        ins = [values[i] for i in node.inputs]
        outs = [values[o] for o in node.outputs]
        ups = [grads.get(o, np.zeros_like(values[o])) for o in node.outputs]
        gx, gw = node.op.backward(ins, [weights[w] for w in node.weights], outs, ups)
        for tid, g in zip(node.inputs, gx, strict=True):
            if g is not None:
                grads[tid] = grads.get(tid, 0) + g
        for pid, g in zip(node.weights, gw, strict=True):
            wgrads[pid] = wgrads[pid] + g
    return loss, wgrads


def reference(graph, inputs, target, loss_name):
    """The same SGD steps with the numpy kernels on whole tensors."""
    rng = np.random.default_rng(0)
    weights = {p.id: initialize(p.spec, rng) for p in graph.parameters}
    losses = []
    for _ in range(STEPS):
        values = {t.id: inputs[t.name] for t in graph.input_tensors}
        loss, wgrads = loss_and_gradients(graph, values, weights, loss_name, target)
        losses.append(loss)
        weights = {p: (w - LR * wgrads[p]).astype(np.float32) for p, w in weights.items()}
    return losses, {graph.parameters[p].name: w for p, w in weights.items()}


RTOL, ATOL = 1e-5, 1e-6  # float32 sums in another order differ by rounding only


def relative(a, b) -> float:
    """The largest |a - b| beyond the tolerance, in units of RTOL * |b| + ATOL (<= 1 passes)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / (RTOL * np.abs(b) + ATOL)))


class _RecordingTask:
    """A Legate task whose inputs' ids are recorded as they are added (ids, not the stores:
    holding views would free them later, perhaps inside a task, which Legion refuses)."""

    def __init__(self, task, read: list[int]) -> None:
        self._task, self._read = task, read

    def add_input(self, store, *args) -> None:
        self._read.append(id(store))
        self._task.add_input(store, *args)

    def __getattr__(self, name: str):
        return getattr(self._task, name)


def record_task_inputs(executor: Executor) -> list[int]:
    """The ids of the stores every task the executor creates reads, until `stop_recording`."""
    read, created_task = [], executor.created_task
    executor.created_task = lambda *args: _RecordingTask(created_task(*args), read)
    return read


def stop_recording(executor: Executor) -> None:
    del executor.created_task  # the recorder refers to the executor: no cycle left behind


def partial_gradients_read_whole(executor: Executor, read: list[int]) -> int:
    """How many task inputs were a whole store of partial gradients rather than one device's
    rows of it (a whole read of rows written by several processors made Legion's analysis of
    each data-parallel step cost about 2 ms). The stores live as long as the executor, so an
    id among them is one of them."""
    params = executor.params
    stores = [*params.partials.values(), *(params.pending or {}).values()]
    if params.flat is not None:
        stores += [params.flat_partials, params.flat_pending]
    ids = {id(s) for s in stores}
    return sum(r in ids for r in read)


def run(build, loss: str = "mean_squared_error", more=None) -> dict:
    """`more(graph, machine)`: named strategies to train beside the usual ones."""
    graph = build().graph()
    machine = parse_machine("local")
    rng = np.random.default_rng(1)
    inputs = {
        t.name: rng.standard_normal(t.spec.shape).astype(np.float32)
        if t.spec.dtype.is_float
        else rng.integers(0, 20, t.spec.shape).astype(np.int32)
        for t in graph.input_tensors
    }
    output_shape = graph.tensor(graph.ops[-1].outputs[0]).spec.shape
    if loss == "mean_squared_error":
        target = rng.standard_normal(output_shape)
    elif loss == "identity":  # ignored: one per sample
        target = np.zeros(output_shape[:1], np.float32)
    else:
        target = rng.integers(0, output_shape[-1], output_shape[:-1])  # one per prediction
    single = Strategy(
        tuple(n.name for n in graph.ops),
        tuple(ParallelConfig.single(len(n.sig.output_shape), 0) for n in graph.ops),
    )
    dp = named_strategy("dp", graph, machine)
    # the first op on one device, the rest data parallel: a later group exchanging batch
    # statistics adds into gradients of the tensors it reads (flexflow.runtime.concurrent)
    mixed = Strategy(dp.ops, (single.configs[0],) + dp.configs[1:])
    strategies = [("single", single), ("dp", dp), ("mixed", mixed)]
    strategies += [
        (f"random{s}", named_strategy("random", graph, machine, s)) for s in range(STRATEGIES)
    ]
    added = list(more(graph, machine)) if more is not None else []
    strategies += added
    results, task_counts, whole_reads, native, own = {}, {}, {}, {}, {}
    for name, strategy in strategies:
        with Executor(graph, strategy, seed=0, learning_rate=LR) as executor:
            read = record_task_inputs(executor)
            native[name] = len(executor.native_steps)
            # batch norms computing their own statistics inside a fused task (flexflow.fusion)
            # [own, exchanged in a concurrent launch] (flexflow.runtime.concurrent)
            steps = [step for tasks in executor.fused_tasks for step in tasks[0].steps]
            own[name] = [
                sum(step.running is not None and step.exchange is exchanging for step in steps)
                for exchanging in (False, True)
            ] + [len(executor.groups), sum(g.exchanges for g in executor.groups)]
            losses, issued = [], []
            for _ in range(STEPS):
                before = executor.tasks_issued
                losses.append(executor.step(inputs, target, loss))
                issued.append(executor.tasks_issued - before)
            # what the simulator charges the runtime's per-task cost on (flexflow.launches)
            task_counts[name] = (issued, executor.tasks_per_iteration())
            results[name] = (losses, executor.get_weights(), strategy)  # applies a pending update
            stop_recording(executor)
            whole_reads[name] = partial_gradients_read_whole(executor, read)
    ref_losses, ref_weights = reference(graph, inputs, target, loss)
    base_losses, base_weights, _ = results["single"]
    report = {
        "single_vs_numpy_loss": relative(base_losses, ref_losses),
        "single_vs_numpy_weights": max(
            relative(base_weights[k], ref_weights[k]) for k in ref_weights
        ),
        "strategies": {},
        "added_strategies": [name for name, _ in added],
        "task_counts": task_counts,
        "whole_partial_gradient_reads": whole_reads,
        "native_steps": native,
        "own_statistics": own,
        "splits": sorted({str(c.degrees) for _, (_, _, s) in results.items() for c in s.configs}),
        # strategies splitting an op whose tiles share batch statistics in that dimension
        "statistics_splits": sum(
            any(
                node.op.statistics_dims and config.degrees[0] > 1
                for node, config in zip(graph.ops, s.configs, strict=True)
            )
            for _, (_, _, s) in results.items()
        ),
    }
    for name, (losses, weights, _) in results.items():
        report["strategies"][name] = {
            "loss": relative(losses, base_losses),
            "weights": max(relative(weights[k], base_weights[k]) for k in base_weights),
        }
    return report


if __name__ == "__main__":
    report = {"mlp": run(mlp), "cnn": run(cnn, more=pools_split), "lstm": run(lstm)}
    report["residual"] = run(residual)
    report["classifier"] = run(classifier, "sparse_categorical_crossentropy")
    report["tagger"] = run(tagger, "sparse_categorical_crossentropy")
    report["relu_classifier"] = run(relu_classifier, "sparse_categorical_crossentropy")
    report["translator"] = run(translator, "sparse_categorical_crossentropy")
    report["self_attention"] = run(self_attention, "sparse_categorical_crossentropy")
    report["encoder"] = run(encoder, "sparse_categorical_crossentropy")
    print(json.dumps(report))
