"""flexflow.fused_run: a step task's weight gradients go straight into its output arrays where
an op can write them (`Op.backward_tile_into`), also when an output is a device's row of a
store with a row per device, and come out the same bits as when the task copies them."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.fused_run import run_fused_task
from flexflow.fusion import fuse, fused_task, sole_gradients
from flexflow.machine import parse_machine
from flexflow.runtime.cpu_tiles import CpuTiles
from flexflow.runtime.loss import loss_tile
from flexflow.runtime.native_step import SPARSE_CROSSENTROPY
from flexflow.runtime.passes import Pass
from flexflow.strategies import named_strategy


class _Counted(np.ndarray):
    """An output array that counts the copies assigned into it (`target[...] = value`)."""

    def __array_finalize__(self, obj) -> None:
        self.copies = getattr(obj, "copies", None) or [0]

    def __setitem__(self, key, value) -> None:
        self.copies[0] += 1
        super().__setitem__(key, value)


def _conv_task(index: int):
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16, 6, 6), name="x")
    x = model.conv2d(x, 32, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU, use_bias=False)
    x = model.conv2d(x, 24, 1, 1, 1, 1, 0, 0)  # pointwise, with a bias
    x = model.dense(model.flat(x), 5)
    model.softmax(x)
    graph = model.graph()
    strategy = named_strategy("dp", graph, parse_machine("p100:1"))
    regions = [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]
    (group,) = fuse(graph, strategy, regions)
    sole = sole_gradients(graph, strategy, regions, (group,))
    return fused_task(graph, group, index, [regions[op][index] for op in group.ops], sole)


def _step(task, outputs_of):
    """Run the step with each overwritten gradient's output made by `outputs_of(shape)`."""
    rng = np.random.default_rng(task.index)
    inputs = [
        (rng.standard_normal(tuple(b - a for a, b in s.region)) * 0.5).astype(np.float32)
        for s in task.forward.inputs
    ]
    samples = task.tiles[-1][0][1] - task.tiles[-1][0][0]
    labels = rng.integers(0, 5, samples)
    grads = [outputs_of(tuple(b - a for a, b in s.region)) for s in task.backward.overwrites]

    def loss_into(op, index, loss_args, prediction, stored, grad, row):
        value, gradient, correct = loss_tile(loss_args[0], prediction, stored, 8, samples)
        row[...] = (value, correct)
        return np.asarray(gradient, dtype=np.float32)

    extra = (1, 1, SPARSE_CROSSENTROPY, 8, samples, -1)
    passes = (Pass.FORWARD, Pass.LOSS, Pass.BACKWARD)
    arguments = ([*inputs, labels], [np.zeros(2), *grads], [])
    run_fused_task(task, CpuTiles, "step", arguments, extra, None, passes, lambda a: a, loss_into)
    return grads


@pytest.mark.parametrize("index", [0, 3])
def test_weight_gradients_are_written_in_place_into_a_devices_row(index):
    task = _conv_task(index)
    assert len(task.backward.overwrites) == 5  # every weight: data parallelism, one task each
    want = _step(task, lambda shape: np.full(shape, np.nan, np.float32))
    rows = _step(task, lambda shape: np.full((1, *shape), np.nan, np.float32).view(_Counted))
    for slot, got, expected in zip(task.backward.overwrites, rows, want, strict=True):
        np.testing.assert_array_equal(got[0], expected)  # the same bits
        # the convolutions' and the dense layer's products write the row itself, no copy
        assert got.copies[0] == 0, f"parameter {slot.id}'s gradient was copied in"
