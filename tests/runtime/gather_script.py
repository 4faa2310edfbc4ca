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


if __name__ == "__main__":
    report = {"gather": numerics_script.run(gathering, more=gather_splits)}
    report["refused_index"] = refused_index()
    print(json.dumps(report))
