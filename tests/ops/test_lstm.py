"""LSTM step: shapes, SOAP dims, FLOPs, gradients, regions, a naive cell and shape errors."""

import math

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.lstm import LSTM

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def _specs(x_shape, hidden, state=True):
    specs = [TensorSpec(x_shape)]
    return specs + [TensorSpec((x_shape[0], hidden))] * 2 if state else specs


def test_shapes_weights_and_dims():
    sig = LSTM(6).infer("lstm_t1", _specs((4, 3), 6))
    assert [o.shape for o in sig.outputs] == [(4, 6), (4, 6)]
    assert [(w.name, w.shape, w.init) for w in sig.weights] == [
        ("w_ih", (4, 6, 3), "glorot_uniform"),
        ("w_hh", (4, 6, 6), "glorot_uniform"),
        ("bias", (4, 6), "zeros"),
    ]
    assert [(w.fan_in, w.fan_out) for w in sig.weights[:2]] == [(3, 24), (6, 24)]
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.PARAMETER),
    ]


def test_first_step_of_a_sequence_has_the_same_weights():
    first = LSTM(6, step=0).infer("lstm_t0", _specs((4, 5, 3), 6, state=False))
    later = LSTM(6, step=4).infer("lstm_t4", _specs((4, 5, 3), 6))
    assert first.weights == later.weights
    assert [o.shape for o in first.outputs] == [(4, 6), (4, 6)]


def test_flops_of_full_op():
    op = LSTM(6)
    sig = op.infer("lstm", _specs((4, 3), 6))
    n, h, e = 4, 6, 3
    fwd, bwd = op.flops(sig, full_region((n, h)))
    elementwise = 4 + 5 * 4 + 3 + 1  # bias adds, 5 activations, c and h updates
    assert fwd == 2 * n * 4 * h * (e + h) + elementwise * n * h
    assert bwd == 2 * (2 * n * 4 * h * (e + h)) + 23 * n * h
    # the first step has no recurrent matmul
    first = op.infer("lstm", _specs((4, 3), 6, state=False))
    assert op.flops(first, full_region((n, h)))[0] == 2 * n * 4 * h * e + elementwise * n * h


def test_regions_of_a_hidden_split_tile():
    op = LSTM(6, step=2)
    sig = op.infer("lstm", _specs((4, 5, 3), 6))
    region = ((0, 2), (3, 6))
    assert op.input_regions(sig, region) == (
        ((0, 2), (2, 3), (0, 3)),  # x at time 2, all features
        ((0, 2), (0, 6)),  # all of h_prev: w_hh mixes hidden units
        ((0, 2), (3, 6)),  # c_prev element-wise
    )
    assert op.weight_regions(sig, region) == (
        ((0, 4), (3, 6), (0, 3)),
        ((0, 4), (3, 6), (0, 6)),
        ((0, 4), (3, 6)),
    )


@pytest.mark.parametrize(
    "op, x_shape, state",
    [
        (LSTM(3), (2, 4), False),
        (LSTM(3), (2, 4), True),
        (LSTM(2, step=1), (2, 3, 4), False),
        (LSTM(2, step=2), (3, 3, 2), True),
    ],
)
def test_gradients(op, x_shape, state):
    sig = op.infer("lstm", _specs(x_shape, op.hidden_size, state))
    rng = np.random.default_rng(1)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    assert_gradients(op, inputs, weights)


@pytest.mark.parametrize(
    "op, x_shape, state",
    [
        (LSTM(4), (4, 3), True),
        (LSTM(4, step=1), (4, 3, 2), True),
        (LSTM(4, step=0), (2, 3, 2), False),
    ],
)
def test_regions_are_sufficient(op, x_shape, state):
    sig = op.infer("lstm", _specs(x_shape, op.hidden_size, state))
    rng = np.random.default_rng(0)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    assert assert_regions_sufficient(op, sig, inputs, weights) > 5


def _naive_cell(x, h_prev, c_prev, w_ih, w_hh, bias):
    """One sample and one hidden unit at a time, PyTorch's (4H, E) weight layout."""
    hidden = bias.shape[1]
    w_ih, w_hh, bias = w_ih.reshape(4 * hidden, -1), w_hh.reshape(4 * hidden, -1), bias.reshape(-1)
    h, c = np.zeros_like(c_prev), np.zeros_like(c_prev)
    sigmoid = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    for n in range(x.shape[0]):
        for j in range(hidden):
            rows = [k * hidden + j for k in range(4)]  # gate k of hidden unit j
            z = [w_ih[r] @ x[n] + w_hh[r] @ h_prev[n] + bias[r] for r in rows]
            c[n, j] = sigmoid(z[1]) * c_prev[n, j] + sigmoid(z[0]) * math.tanh(z[2])
            h[n, j] = sigmoid(z[3]) * math.tanh(c[n, j])
    return h, c


def test_forward_matches_naive_cell_over_a_sequence():
    rng = np.random.default_rng(3)
    seq = rng.standard_normal((2, 3, 4))  # (N, T, E)
    sig = LSTM(5, step=0).infer("lstm", _specs((2, 3, 4), 5, state=False))
    weights = random_weights(sig, rng)
    h = c = naive_h = naive_c = np.zeros((2, 5))
    for t in range(3):
        inputs = [seq] if t == 0 else [seq, h, c]
        h, c = LSTM(5, step=t).forward(inputs, weights)
        naive_h, naive_c = _naive_cell(seq[:, t], naive_h, naive_c, *weights)
        np.testing.assert_allclose(h, naive_h, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(c, naive_c, rtol=1e-12, atol=1e-15)


def test_step_input_equals_sequence_slice():
    rng = np.random.default_rng(4)
    seq = rng.standard_normal((2, 3, 4))
    h, c = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    sig = LSTM(5).infer("lstm", _specs((2, 4), 5))
    weights = random_weights(sig, rng)
    for a, b in zip(
        LSTM(5).forward([seq[:, 1], h, c], weights),
        LSTM(5, step=1).forward([seq, h, c], weights),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (LSTM(4), [TensorSpec((2, 3))] * 2, r"lstm 'l': expected 1 input \(x\) or 3 inputs"),
        (LSTM(0), _specs((2, 3), 0), r"lstm 'l': hidden_size must be a positive integer, got 0"),
        (LSTM(4), [TensorSpec((2, 3), DType.INT32)], r"lstm 'l': x must be float32"),
        (LSTM(4), [TensorSpec((2, 5, 3))], r"lstm 'l': step input x must be \(sample, features\)"),
        (LSTM(4, step=0), [TensorSpec((2, 3))], r"lstm 'l': with step=0, x must be a \(sample"),
        (LSTM(4, step=5), [TensorSpec((2, 5, 3))], r"lstm 'l': step 5 is out of range"),
        (LSTM(4, step=-1), [TensorSpec((2, 5, 3))], r"lstm 'l': step -1 is out of range"),
        (
            LSTM(4),
            [TensorSpec((2, 3)), TensorSpec((2, 5)), TensorSpec((2, 4))],
            r"lstm 'l': h_prev must have shape \(2, 4\)",
        ),
        (
            LSTM(4),
            [TensorSpec((2, 3)), TensorSpec((2, 4)), TensorSpec((3, 4))],
            r"lstm 'l': c_prev must have shape \(2, 4\)",
        ),
        (
            LSTM(4),
            [TensorSpec((2, 3)), TensorSpec((2, 4), DType.INT32), TensorSpec((2, 4))],
            r"lstm 'l': h_prev must be float32",
        ),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=match):
        op.infer("l", inputs)
