"""`Op.backward_tile_into`: weight gradients written straight into the task's output arrays are
the same bits as computed anew, and arrays that cannot take them exactly are left alone."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.ops import ActiMode, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.dense import Dense
from flexflow.ops.init import initialize
from flexflow.ops.layer_norm import LayerNorm

from .opcheck import random_inputs


def _tile(op, shape, dtype=np.float32):
    sig = op.infer("op", [TensorSpec(shape)])
    rng = np.random.default_rng(0)
    inputs = [a.astype(dtype) for a in random_inputs(sig, rng)]
    weights = [initialize(w, rng).astype(dtype) for w in sig.weights]
    region = full_region(sig.output_shape)
    outputs = op.forward_tile(sig, region, inputs, weights)
    grads = [rng.standard_normal(o.shape).astype(dtype) for o in outputs]
    return sig, region, inputs, weights, outputs, grads


@pytest.mark.parametrize("need_input_grads", [True, False])
@pytest.mark.parametrize(
    "op, shape",
    [
        (Dense(5, ActiMode.AC_MODE_RELU), (6, 4)),
        (Dense(3, use_bias=False), (2, 3, 4)),
        (Conv2D(4, 3, 3, 1, 1, 1, 1), (2, 3, 5, 5)),  # im2col, with a bias
        (Conv2D(64, 3, 3, 1, 1, 1, 1, use_bias=False), (4, 64, 8, 8)),  # a product MKL runs
        (Conv2D(6, 3, 3, 2, 2, 1, 1, ActiMode.AC_MODE_RELU, groups=3), (2, 6, 7, 7)),
        (Conv2D(96, 1, 1, 1, 1, 0, 0), (4, 128, 6, 6)),  # pointwise: one product
        (Conv2D(8, 1, 1, 2, 2, 0, 0, use_bias=False), (2, 5, 6, 6)),  # pointwise, strided
    ],
)
def test_weight_gradients_are_written_into_the_given_arrays(op, shape, need_input_grads):
    sig, region, inputs, weights, outputs, grads = _tile(op, shape)
    (dx,), want = op.backward_tile(sig, region, inputs, weights, outputs, grads)
    into = [np.full(w.shape, np.nan, np.float32) for w in weights]
    (dx_into,), got = op.backward_tile_into(
        sig, region, inputs, weights, outputs, grads, need_input_grads, into
    )
    assert all(g is a for g, a in zip(got, into, strict=True))  # no new arrays, no copy
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert (dx_into is None) == (not need_input_grads)
    if need_input_grads:
        np.testing.assert_array_equal(dx_into, dx)


@pytest.mark.parametrize(
    "bad",
    [
        lambda w: np.zeros(w.shape, np.float64),  # another type: the result would be cast
        lambda w: np.zeros(w.shape[::-1], np.float32).T,  # not C-contiguous
        lambda w: np.zeros((w.size + 1,), np.float32),  # another shape
        lambda w: None,  # nothing to write into
    ],
)
@pytest.mark.parametrize(
    "op, shape",
    [
        (Dense(5, ActiMode.AC_MODE_TANH, use_bias=False), (3, 4)),
        (Conv2D(4, 3, 3, 1, 1, 1, 1, use_bias=False), (2, 3, 5, 5)),
        (Conv2D(4, 1, 1, 1, 1, 0, 0, use_bias=False), (2, 3, 5, 5)),
    ],
)
def test_arrays_that_cannot_take_a_gradient_exactly_are_left_alone(bad, op, shape):
    sig, region, inputs, weights, outputs, grads = _tile(op, shape)
    _, want = op.backward_tile(sig, region, inputs, weights, outputs, grads)
    into = [bad(weights[0])]
    before = None if into[0] is None else into[0].copy()
    _, got = op.backward_tile_into(sig, region, inputs, weights, outputs, grads, True, into)
    assert got[0] is not into[0]
    np.testing.assert_array_equal(got[0], want[0])
    if before is not None:
        np.testing.assert_array_equal(into[0], before)


def test_other_ops_compute_their_gradients_anew():
    op = LayerNorm()
    sig, region, inputs, weights, outputs, grads = _tile(op, (2, 3, 5))
    _, want = op.backward_tile(sig, region, inputs, weights, outputs, grads)
    into = [np.zeros(w.shape, np.float32) for w in weights]
    _, got = op.backward_tile_into(sig, region, inputs, weights, outputs, grads, True, into)
    for g, a, w in zip(got, into, want, strict=True):
        assert g is not a and not a.any()
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "op, shape, region",
    [
        (Conv2D(6, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU), (2, 3, 6, 6), None),
        (Conv2D(64, 3, 3, 1, 1, 1, 1, use_bias=False), (4, 64, 8, 8), None),  # MKL's products
        (Conv2D(6, 3, 3, 2, 2, 1, 1, ActiMode.AC_MODE_GELU, groups=3), (2, 6, 7, 7), None),
        (Conv2D(8, 1, 1, 2, 2, 0, 0, ActiMode.AC_MODE_RELU), (2, 5, 6, 6), None),  # pointwise
        # a tile of rows 2..5 and output channels 2..6 of a padded convolution: halos, borders
        (
            Conv2D(6, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_TANH),
            (2, 3, 6, 6),
            ((0, 2), (2, 6), (2, 6), (0, 6)),
        ),
    ],
)
def test_a_convolution_reuses_its_forward_columns_for_the_same_bits(op, shape, region):
    sig, full, inputs, weights, _, _ = _tile(op, shape)
    region = region or full
    (x,) = inputs
    tile_inputs = [x[tuple(slice(a, b) for a, b in op.input_regions(sig, region)[0])]]
    tile_weights = [
        w[tuple(slice(a, b) for a, b in r)]
        for w, r in zip(weights, op.weight_regions(sig, region), strict=True)
    ]
    outputs = op.forward_tile(sig, region, tile_inputs, tile_weights)
    saved_outputs, saved = op.forward_tile_saving(sig, region, tile_inputs, tile_weights)
    np.testing.assert_array_equal(saved_outputs[0], outputs[0])
    grads = [np.random.default_rng(1).standard_normal(outputs[0].shape).astype(np.float32)]
    (want_dx,), want = op.backward_tile(sig, region, tile_inputs, tile_weights, outputs, grads)
    (dx,), got = op.backward_tile_into(
        sig, region, tile_inputs, tile_weights, saved_outputs, grads, True, (), saved
    )
    np.testing.assert_array_equal(dx, want_dx)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
