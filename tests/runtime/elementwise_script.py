"""Run in a Legate process by test_elementwise.py: a small model of FlexFlow's element-wise and
reduce_sum layers trained under several strategies against one device and the numpy reference
(numerics_script's comparison), and FlexFlow's per-op script flow through flexflow.core
(forward, then inline_map and get_array of the output), as JSON."""

from __future__ import annotations

import json
import sys

import numerics_script  # (imports flexflow first, which prepares Legate)
import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import FFConfig, FFModel
from flexflow.errors import FlexFlowError

numerics_script.STRATEGIES = int(sys.argv[1]) if len(sys.argv) > 1 else 4


def elementwise() -> FFModel:
    """Every new layer between two dense layers, on a (sample, length, features) sequence
    whose attribute dims the random strategies split."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 3, 6), name="x")
    h = model.scalar_multiply(model.dense(x, 8), 0.5)  # (8, 3, 8)
    positive = model.scalar_add(model.pow(model.sin(h), 2.0), 1.0)  # sin^2 + 1 >= 1
    a = model.max(model.rsqrt(positive), model.cos(h))
    b = model.min(model.exp(model.scalar_true_divide(h, 2.0)), model.identity(a))
    c = model.divide(model.scalar_sub(b, 0.25), positive)
    total = model.reduce_sum(c, axes=[1])  # (8, 8)
    model.dense(total, 4)
    return model


def kept(model: FFModel) -> FFModel:
    """reduce_sum with keepdims into a dense layer over the kept size-1 dim's neighbours."""
    x = model.create_tensor((8, 4, 6), name="x")
    s = model.reduce_sum(model.exp(model.scalar_multiply(model.dense(x, 6), 0.1)), [1], True)
    model.dense(model.flat(s), 3)  # (8, 1, 6) -> (8, 6) -> (8, 3)
    return model


def broadcasting(model: FFModel) -> FFModel:
    """The six binary ops broadcasting dims of size 1 (FlexFlow's elementwise_mul_broadcast:
    (B, 4, 1) times (B, 4, 8)), one input repeated along the last dim, the middle one, or each
    input along one: split along a repeated dim, every tile reads the small input's one row
    and their gradients of it are summed."""
    x = model.create_tensor((8, 4, 6), name="x")
    h = model.dense(x, 8)  # (8, 4, 8)
    col = model.dense(x, 1)  # (8, 4, 1): repeated along the last dim
    row = model.reduce_sum(model.scalar_multiply(h, 0.5), [1], True)  # (8, 1, 8): the middle
    a = model.multiply(col, h)
    b = model.subtract(row, a)
    c = model.add(col, row)  # both repeated
    positive = model.scalar_add(model.pow(col, 2.0), 1.0)  # (8, 4, 1), >= 1
    d = model.divide(model.max(b, col), positive)
    e = model.min(row, model.add(c, d))
    model.dense(model.reduce_sum(e, axes=[1]), 4)  # (8, 8) -> (8, 4)
    return model


def broadcast_split(graph, machine) -> list:
    """`attribute_split`, and every binary op split in two along the first dim one of its
    inputs is repeated along (the other ops on device 0 whole): the simulator's transfers of
    the small input to each tile, the runtime's sum of its gradient over them."""
    from flexflow.strategy import ParallelConfig, Strategy

    configs = []
    for node in graph.ops:
        shape = node.sig.output_shape
        repeated = [
            i
            for i in range(1, len(shape))
            if any(spec.shape[i] == 1 < shape[i] for spec in node.sig.inputs)
        ]
        if node.op.kind == "element_binary" and repeated and shape[repeated[0]] % 2 == 0:
            degrees = tuple(2 if i == repeated[0] else 1 for i in range(len(shape)))
            configs.append(ParallelConfig(degrees, (0, 1)))
        else:
            configs.append(ParallelConfig.single(len(shape), 0))
    split = Strategy(tuple(n.name for n in graph.ops), tuple(configs))
    return attribute_split(graph, machine) + [("broadcast", split)]


def excitation() -> FFModel:
    """A squeeze-and-excitation block: batch norm's output times a per-channel gate
    (B, C, 1, 1) made from the convolution's sums, plus its sum over channels (B, 1, H, W)
    repeated along them: broadcast inputs produced by ops split otherwise."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 3, 4, 4), name="x")
    c = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="conv")
    b = model.batch_norm(c, name="bn")
    squeezed = model.reduce_sum(c, [2, 3], True, name="squeeze")  # (8, 4, 1, 1)
    gate = model.sigmoid(model.scalar_multiply(squeezed, 0.1, name="scale"), name="gate")
    y = model.multiply(b, gate, name="excite")  # (8, 4, 4, 4) x (8, 4, 1, 1)
    z = model.add(y, model.reduce_sum(y, [1], True, name="csum"), name="plus")  # x (8, 1, 4, 4)
    model.dense(model.flat(z, name="fl"), 3, name="out")
    return model


EXCITATION_SPLITS = (
    ("sample", (2, 1, 1, 1), {"bn", "excite", "plus", "csum"}),
    ("height", (1, 1, 2, 1), {"excite", "plus"}),
    ("channel", (1, 2, 1, 1), {"bn", "excite", "plus"}),
    ("height and width", (1, 1, 2, 2), {"conv", "excite", "plus"}),
    ("sample and height", (2, 1, 2, 1), {"excite", "plus"}),
)
"""Splits of the excitation block's ops (the others on device 0 whole): the gate and the
channel sum, each produced whole or split by sample, read by tiles split along the dims they
are repeated along, across them, or both."""


def excitation_splits(graph, machine) -> list:
    """`EXCITATION_SPLITS` that fit the machine's devices."""
    from flexflow.strategy import ParallelConfig, Strategy

    found = []
    for label, degrees, ops in EXCITATION_SPLITS:
        tasks = int(np.prod(degrees))
        if tasks > machine.num_devices:
            continue
        configs = tuple(
            ParallelConfig(degrees, tuple(range(tasks)))
            if node.name in ops
            else ParallelConfig.single(len(node.sig.output_shape), 0)
            for node in graph.ops
        )
        found.append((label, Strategy(tuple(n.name for n in graph.ops), configs)))
    return found


def broadcast_degrees(graph) -> dict:
    """Each binary op's degrees under `broadcast_split`'s "broadcast" strategy."""
    strategy = dict(broadcast_split(graph, None))["broadcast"]
    return {
        n.name: list(c.degrees)
        for n, c in zip(graph.ops, strategy.configs, strict=True)
        if n.op.kind == "element_binary"
    }


def attribute_split(graph, machine) -> list:
    """Every op split in two along its first splittable non-sample dim of even size (the
    random strategies may split the new ops by sample only), on the two CPUs."""
    from flexflow.strategy import ParallelConfig, Strategy

    configs = []
    for node in graph.ops:
        shape, dims = node.sig.output_shape, node.sig.dims
        split = next(
            (i for i in range(1, len(shape)) if dims[i].partitionable and shape[i] % 2 == 0),
            None,
        )
        if split is None:
            configs.append(ParallelConfig.single(len(shape), 0))
        else:
            degrees = tuple(2 if i == split else 1 for i in range(len(shape)))
            configs.append(ParallelConfig(degrees, (0, 1)))
    return [("attribute", Strategy(tuple(n.name for n in graph.ops), tuple(configs)))]


def attribute_degrees(graph) -> dict:
    """Each op's degrees under `attribute_split`, by kind and name."""
    ((_, strategy),) = attribute_split(graph, None)
    return {
        f"{n.op.kind} {n.name}": list(c.degrees)
        for n, c in zip(graph.ops, strategy.configs, strict=True)
    }


def flexflow_op_flow() -> dict:
    """FlexFlow's examples/python/native/ops scripts' flow (pow.py, reduce_sum.py, divide.py,
    scalar_add.py, ...): build one layer, compile with their loss and metrics, feed the inputs
    by data loaders, forward(), then read the output by inline_map and get_array."""
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
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 5, 10, 10)).astype(np.float32)
    y = rng.standard_normal((8, 5, 10, 10)).astype(np.float32)
    y = np.where(np.abs(y) < 1e-3, 1.0, y).astype(np.float32)
    y_row = y[:, :, :1, :]  # (8, 5, 1, 10): repeated along the third dim
    seconds = {"divide": y, "max": y, "min": y, "multiply_broadcast": y_row}
    layers = {
        "pow": (lambda m, a, b: m.pow(a, 2.0, name="pow_layer"), lambda: x**2),
        "reduce_sum": (lambda m, a, b: m.reduce_sum(a, axes=[1, 2], keepdims=False,
                                                    name="reduce_sum_layer"),
                       lambda: x.sum(axis=(1, 2))),
        "reduce_sum_keepdims": (lambda m, a, b: m.reduce_sum(a, [3], True), lambda: x.sum(axis=3, keepdims=True)),
        "divide": (lambda m, a, b: m.divide(a, b), lambda: x / y),
        "multiply_broadcast": (lambda m, a, b: m.multiply(a, b), lambda: x * y_row),
        "max": (lambda m, a, b: m.max(a, b), lambda: np.maximum(x, y)),
        "min": (lambda m, a, b: m.min(a, b), lambda: np.minimum(x, y)),
        "exp": (lambda m, a, b: m.exp(a), lambda: np.exp(x)),
        "sin": (lambda m, a, b: m.sin(a), lambda: np.sin(x)),
        "cos": (lambda m, a, b: m.cos(a), lambda: np.cos(x)),
        "rsqrt": (lambda m, a, b: m.rsqrt(m.scalar_add(m.pow(a, 2.0), 1.0)),
                  lambda: 1 / np.sqrt(x**2 + 1)),
        "identity": (lambda m, a, b: m.identity(a), lambda: x),
        "scalar_multiply": (lambda m, a, b: m.scalar_multiply(a, 2.0, inplace=True, name="sm"), lambda: x * 2),
        "scalar_add": (lambda m, a, b: m.scalar_add(a, 2.0, inplace=True, name="sa"), lambda: x + 2),
        "scalar_sub": (lambda m, a, b: m.scalar_sub(a, 2.0, inplace=True, name="ss"), lambda: x - 2),
        "scalar_true_divide": (lambda m, a, b: m.scalar_true_divide(a, 2.0, inplace=True, name="sd"), lambda: x / 2),
    }  # fmt: skip
    errors = {}
    for name, (build, expected) in layers.items():
        model = CoreModel(config)
        first = model.create_tensor(x.shape, DataType.DT_FLOAT)
        second = (
            model.create_tensor(seconds[name].shape, DataType.DT_FLOAT) if name in seconds else None
        )
        out = build(model, first, second)
        model.optimizer = SGDOptimizer(model, 0.001)
        model.compile(
            loss_type=LossType.LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
            metrics=[MetricsType.METRICS_ACCURACY, MetricsType.METRICS_SPARSE_CATEGORICAL_CROSSENTROPY],
        )  # fmt: skip
        loaders = [model.create_data_loader(first, x)]
        if second is not None:
            loaders.append(model.create_data_loader(second, seconds[name]))
        model.init_layers()
        for loader in loaders:
            loader.reset()
            loader.next_batch(model)
        model.forward()
        out.inline_map(model, config)
        got = out.get_array(model, config)
        out.inline_unmap(model, config)
        want = expected()
        errors[name] = {
            "shape": list(got.shape),
            "want_shape": list(want.shape),
            "max_error": float(np.max(np.abs(got - want) / (1e-5 * np.abs(want) + 1e-5))),
        }
    return errors


def refusals() -> dict:
    """Bad arguments from a FlexFlow script: errors naming the layer (no Legate run needed,
    but the messages are what a script under Legate prints)."""
    from flexflow.core import DataType, FlexFlowConfig
    from flexflow.core import FFModel as CoreModel

    model = CoreModel(FlexFlowConfig(batch_size=8))
    x = model.create_tensor([8, 5, 10, 10], DataType.DT_FLOAT)
    said = {}
    for name, call in {
        "pow": lambda: model.pow(x, "2", name="pow_layer"),
        "reduce_sum": lambda: model.reduce_sum(x, axes=[1, 4], name="reduce_sum_layer"),
        "divide": lambda: model.divide(x, model.create_tensor([8, 5], DataType.DT_FLOAT)),
    }.items():
        try:
            call()
            said[name] = ""
        except FlexFlowError as error:
            said[name] = f"{type(error).__name__}: {error}"
    return said


if __name__ == "__main__":
    report = {
        "elementwise": numerics_script.run(elementwise, more=attribute_split),
        "kept": numerics_script.run(
            lambda: kept(FFModel(FFConfig(batch_size=8))), more=attribute_split
        ),
        "broadcast": numerics_script.run(
            lambda: broadcasting(FFModel(FFConfig(batch_size=8))), more=broadcast_split
        ),
        "excitation": numerics_script.run(excitation, more=excitation_splits),
        "broadcast_degrees": broadcast_degrees(
            broadcasting(FFModel(FFConfig(batch_size=8))).graph()
        ),
        "attribute_degrees": {
            "elementwise": attribute_degrees(elementwise().graph()),
            "kept": attribute_degrees(kept(FFModel(FFConfig(batch_size=8))).graph()),
        },
        "flexflow_ops": flexflow_op_flow(),
        "refusals": refusals(),
    }
    print(json.dumps(report))
