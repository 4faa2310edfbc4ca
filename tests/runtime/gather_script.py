"""Run in a Legate process by test_gather.py: a model gathering along a sequence by an int32
model input trained under several strategies against one device and the numpy reference
(numerics_script's comparison), and fit refusing an index out of range, as JSON."""

from __future__ import annotations

import json
import sys

import numerics_script  # (imports flexflow first, which prepares Legate)
import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import DataType, FFConfig, FFModel
from flexflow.errors import FlexFlowError

numerics_script.STRATEGIES = int(sys.argv[1]) if len(sys.argv) > 1 else 4

ROWS = 20
"""The gathered dim's size: numerics_script draws integer inputs from [0, 20), so every index
is valid and, 6 draws per sample and channel, some repeat (their gradients add up)."""


def gathering() -> FFModel:
    """dense -> reshape -> gather -> reshape -> dense, the index an int32 model input."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 6), name="x")
    index = model.create_tensor((8, 6, 2), DataType.DT_INT32, name="index")
    h = model.reshape(model.dense(x, ROWS * 2, name="d1"), (8, ROWS, 2), name="r1")  # (8, 20, 2)
    g = model.gather(h, index, 1, name="gather")  # (8, 6, 2)
    model.dense(model.reshape(g, (8, 12), name="r2"), 3, name="d2")  # (8, 12) -> (8, 3)
    return model


def gather_splits(graph, machine) -> list:
    """The gather split in two along the gather dim (each tile reads the input whole along it)
    and along the channel dim, the other ops whole on device 0; and every op split so."""
    from flexflow.strategy import ParallelConfig, Strategy

    found = []
    for label, degrees in (("gather dim", (1, 2, 1)), ("channel", (1, 1, 2))):
        configs = tuple(
            ParallelConfig(degrees, (0, 1))
            if node.op.kind == "gather"
            else ParallelConfig.single(len(node.sig.output_shape), 0)
            for node in graph.ops
        )
        found.append((label, Strategy(tuple(n.name for n in graph.ops), configs)))
    return found


def refused_index() -> str:
    """fit on an index out of range: the ShapeError naming the input and the layer."""
    model = gathering()
    model.compile("sgd", "mean_squared_error", progress=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 6)).astype(np.float32)
    index = rng.integers(0, ROWS + 1, (16, 6, 2)).astype(np.int32)
    index[3, 2, 1] = ROWS
    try:
        model.fit([x, index], rng.standard_normal((16, 3)).astype(np.float32), epochs=1)
    except FlexFlowError as error:
        return f"{type(error).__name__}: {error}"
    return "accepted"


def flexflow_op_flow() -> dict:
    """FlexFlow's examples/python/native/ops/gather.py flow (its `test_gather`: one gather
    layer, data loaders, forward, inline_map and get_array) on a valid index: the output read
    against numpy's take_along_axis. Its __main__ passes a (batch,) index for a rank-4 input,
    which FlexFlow's own gather asserts against: refused here with the shapes."""
    from flexflow.core import (
        DataType,
        FlexFlowConfig,
        LossType,
        MetricsType,
        SGDOptimizer,
        init_flexflow_runtime,
    )
    from flexflow.core import FFModel as CoreModel

    init_flexflow_runtime()
    config = FlexFlowConfig(batch_size=8)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 5, 10, 10)).astype(np.float32)
    index = rng.integers(0, 10, (8, 5, 4, 10)).astype(np.int32)  # 4 picks of 10 rows, dim 2

    def build(index_shape):
        model = CoreModel(config)
        first = model.create_tensor(x.shape, DataType.DT_FLOAT)
        second = model.create_tensor(index_shape, DataType.DT_INT32)
        out = model.gather(first, second, 2, name="gather_layer")
        return model, first, second, out

    model, first, second, out = build(index.shape)
    model.optimizer = SGDOptimizer(model, 0.001)
    model.compile(
        loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
        metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY],
    )
    loaders = [model.create_data_loader(first, x), model.create_data_loader(second, index)]
    model.init_layers()
    for loader in loaders:
        loader.reset()
        loader.next_batch(model)
    model.forward()
    out.inline_map(model, config)
    got = out.get_array(model, config)
    out.inline_unmap(model, config)
    want = np.take_along_axis(x, index, axis=2)
    try:
        build((8,))
        refusal = "accepted"
    except FlexFlowError as error:
        refusal = f"{type(error).__name__}: {error}"
    return {
        "shape": list(got.shape),
        "max_error": float(np.max(np.abs(got - want))),
        "refusal": refusal,
    }


if __name__ == "__main__":
    report = {"gather": numerics_script.run(gathering, more=gather_splits)}
    report["refused_index"] = refused_index()
    report["flexflow_op"] = flexflow_op_flow()
    print(json.dumps(report))
