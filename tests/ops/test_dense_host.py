"""Dense's C tile kernels (native/dense.c through MKL's sgemm) against its numpy reference:
the same outputs and gradients to float32 rounding for every activation (native/
activations.c), gradients written into the arrays given, GELU's pre-activation kept by the
forward for the backward, and float64 tiles left to the reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops import ActiMode, TensorSpec, blas
from flexflow.ops.base import full_region
from flexflow.ops.dense import Dense


def _case(op: Dense, shape: tuple[int, ...], dtype, seed: int):
    sig = op.infer("dense", [TensorSpec(shape)])
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    weights = [rng.standard_normal(w.shape).astype(dtype) for w in sig.weights]
    return sig, full_region(sig.output_shape), x, weights, rng


@pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")
@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 33),
    time=st.sampled_from([(), (3,)]),
    features=st.integers(1, 40),
    out_dim=st.integers(1, 40),
    activation=st.sampled_from(list(ActiMode)),
    use_bias=st.booleans(),
    need_input_grads=st.booleans(),
    saving=st.booleans(),
)
def test_the_c_kernels_compute_the_reference(
    rows, time, features, out_dim, activation, use_bias, need_input_grads, saving
):
    op = Dense(out_dim, activation, use_bias)
    shape = (rows, *time, features)
    sig, region, x, weights, rng = _case(op, shape, np.float32, rows * 1000 + features)
    if saving:  # a step task: the backward reuses what the forward kept
        (y,), saved = op.forward_tile_saving(sig, region, [x], weights)
        assert (saved is not None) == (activation is ActiMode.AC_MODE_GELU)
    else:
        (y,), saved = op.forward_tile(sig, region, [x], weights), None
    (want_y,) = op.forward([x], weights)
    assert y.shape == want_y.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5 * features)

    dy = rng.standard_normal(y.shape).astype(np.float32)
    into = [np.full(w.shape, np.nan, np.float32) for w in weights]
    (dx,), grads = op.backward_tile_into(
        sig, region, [x], weights, [y], [dy], need_input_grads, into, saved
    )
    (want_dx,), want_grads = op.backward([x], weights, [y], [dy], need_input_grads)
    assert all(g is a for g, a in zip(grads, into, strict=True))
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * rows * max(time, default=1))
    assert (dx is None) == (not need_input_grads)
    if need_input_grads:
        assert dx.shape == x.shape
        np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-5 * out_dim)


@pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")
def test_the_relu_gradient_passes_only_where_the_output_is_positive():
    op = Dense(64, ActiMode.AC_MODE_RELU)
    sig, region, x, weights, rng = _case(op, (32, 48), np.float32, 7)
    (y,) = op.forward_tile(sig, region, [x], weights)
    assert (y >= 0).all() and (y == 0).any() and (y > 0).any()
    dy = rng.standard_normal(y.shape).astype(np.float32)
    _, (_, db) = op.backward_tile(sig, region, [x], weights, [y], [dy])
    np.testing.assert_allclose(db, np.where(y > 0, dy, 0).sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", [ActiMode.AC_MODE_GELU, ActiMode.AC_MODE_RELU])
def test_float64_tiles_run_the_reference(activation):
    op = Dense(6, activation)
    dtype = np.float64
    sig, region, x, weights, rng = _case(op, (5, 4), dtype, 3)
    (y,) = op.forward_tile(sig, region, [x], weights)
    np.testing.assert_array_equal(y, op.forward([x], weights)[0])
    dy = rng.standard_normal(y.shape).astype(dtype)
    (dx,), grads = op.backward_tile(sig, region, [x], weights, [y], [dy])
    (want_dx,), want = op.backward([x], weights, [y], [dy])
    np.testing.assert_array_equal(dx, want_dx)
    for got, expected in zip(grads, want, strict=True):
        np.testing.assert_array_equal(got, expected)
