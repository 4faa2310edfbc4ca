"""LSTM's C step (native/lstm.c through MKL's sgemm) against its numpy reference: the same
states and gradients to float32 rounding (its tanh is its own, within a few ulps of numpy's), on
first and later steps, step and sequence inputs, and tiles of a hidden-split weight; float64
tiles stay with the reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops import blas
from flexflow.ops.lstm import LSTM

needs_mkl = pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")


def _arrays(rng, n, e, hidden, tile, first, time, scale, dtype=np.float32):
    """Inputs, the weights of a tile of `tile` hidden units, and output gradients."""
    x = rng.standard_normal((n, time, e) if time else (n, e)) * scale
    inputs = [x]
    if not first:
        inputs += [rng.standard_normal((n, hidden)), rng.standard_normal((n, tile))]
    weights = [
        rng.standard_normal((4, tile, e)) * 0.5,
        rng.standard_normal((4, tile, hidden)) * 0.5,
        rng.standard_normal((4, tile)) * 0.5,
    ]
    grads = [rng.standard_normal((n, tile)), rng.standard_normal((n, tile))]
    cast = lambda arrays: [a.astype(dtype) for a in arrays]  # noqa: E731
    return cast(inputs), cast(weights), cast(grads)


def _close(got, want, rtol):
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


@needs_mkl
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 17),
    e=st.integers(1, 24),
    hidden=st.integers(1, 20),
    split=st.booleans(),
    first=st.booleans(),
    time=st.sampled_from([0, 1, 3]),
    scale=st.sampled_from([0.1, 1.0, 8.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_c_step_computes_the_reference(n, e, hidden, split, first, time, scale, seed):
    rng = np.random.default_rng(seed)
    tile = max(1, hidden // 2) if split else hidden
    inputs, weights, grads = _arrays(rng, n, e, hidden, tile, first, time, scale)
    op = LSTM(hidden, step=0 if time else None)
    sig = None  # the tile kernels do not read it
    want = op.forward(inputs, weights)
    got = op.forward_tile(sig, None, inputs, weights)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32 and g.shape == w.shape
        # the gate products summed in another order (MKL's against numpy's): at scale 8 the
        # pre-activations reach the hundreds, a few float32 ulps of which reach h and c
        _close(g, w, 2e-5)
    want_in, want_w = op.backward(inputs, weights, want, grads)
    got_in, got_w = op.backward_tile(sig, None, inputs, weights, got, grads)
    assert len(got_in) == len(want_in) == (1 if first else 3)
    for g, w in zip((*got_in, *got_w), (*want_in, *want_w), strict=True):
        assert g.shape == w.shape
        _close(g, w, 2e-5)  # and the products summed in another order


@needs_mkl
def test_saturated_gates_stay_finite_and_exact_at_the_limits():
    """Pre-activations far past the exponential's range: sigmoid gives 0 and 1, tanh -1 and 1."""
    rng = np.random.default_rng(0)
    inputs, weights, grads = _arrays(rng, 4, 3, 5, 5, False, 0, 1.0)
    weights[2] = np.full((4, 5), 400.0, np.float32)  # every gate saturates high
    h, c = LSTM(5).forward_tile(None, None, inputs, weights)
    np.testing.assert_array_equal(c, inputs[2] + 1.0)  # f = i = g = 1
    np.testing.assert_allclose(h, np.tanh(c), rtol=1e-6)
    weights[2] = np.full((4, 5), -400.0, np.float32)  # i = f = o = 0, g = -1
    h, c = LSTM(5).forward_tile(None, None, inputs, weights)
    assert np.all(np.isfinite(h)) and np.all(h == 0) and np.all(c == 0)


def test_float64_tiles_run_the_reference():
    rng = np.random.default_rng(1)
    inputs, weights, grads = _arrays(rng, 3, 4, 5, 5, False, 0, 1.0, np.float64)
    op = LSTM(5)
    got, want = op.forward_tile(None, None, inputs, weights), op.forward(inputs, weights)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@needs_mkl
@pytest.mark.parametrize("first", [True, False])
def test_a_backward_from_the_forwards_gates_is_the_one_that_recomputes_them(first):
    """In a training step the task keeps each step's gates for its backward
    (`Op.forward_tile_saving`): the same bits as recomputing them."""
    rng = np.random.default_rng(3)
    inputs, weights, grads = _arrays(rng, 6, 5, 7, 7, first, 0, 1.0)
    op = LSTM(7)
    outputs, gates = op.forward_tile_saving(None, None, inputs, weights)
    assert gates.shape == (6, 28) and gates.dtype == np.float32
    for got, want in zip(outputs, op.forward_tile(None, None, inputs, weights), strict=True):
        np.testing.assert_array_equal(got, want)
    kept = op.backward_tile_into(
        None, None, inputs, weights, outputs, grads, True, [None] * 3, gates
    )
    again = op.backward_tile(None, None, inputs, weights, outputs, grads)
    for got, want in zip((*kept[0], *kept[1]), (*again[0], *again[1]), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_reference_path_keeps_nothing():
    rng = np.random.default_rng(4)
    inputs, weights, _ = _arrays(rng, 3, 4, 5, 5, False, 0, 1.0, np.float64)
    assert LSTM(5).forward_tile_saving(None, None, inputs, weights)[1] is None
