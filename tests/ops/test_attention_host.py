"""Multi-head attention's C tile kernels (native/attention.c, which the C training step also
runs) against its numpy reference: outputs and gradients to float32 rounding, with and without
the forward's kept scratch, biases or none, a query tile of some positions, self-attention on
one array, and float64 tiles left to the reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops import TensorSpec, blas
from flexflow.ops.base import full_region
from flexflow.ops.multihead_attention import MultiHeadAttention

pytestmark = pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 4),
    lq=st.integers(1, 5),
    lk=st.integers(1, 5),
    heads=st.sampled_from([1, 2, 3]),
    bias=st.booleans(),
    same=st.booleans(),
    saving=st.booleans(),
    need_input_grads=st.booleans(),
)
def test_the_c_kernels_compute_the_reference(
    n, lq, lk, heads, bias, same, saving, need_input_grads
):
    embed = 2 * heads
    rng = np.random.default_rng(n * 100 + lq * 10 + lk)
    if same:  # self-attention: one tensor read three times
        op = MultiHeadAttention(embed, heads, bias=bias)
        x = rng.standard_normal((n, lq, embed)).astype(np.float32)
        inputs = [x, x, x]
    else:
        op = MultiHeadAttention(embed, heads, kdim=4, vdim=3, bias=bias)
        inputs = [
            rng.standard_normal(shape).astype(np.float32)
            for shape in ((n, lq, embed), (n, lk, 4), (n, lk, 3))
        ]
    sig = op.infer("attention", [TensorSpec(a.shape) for a in inputs])
    weights = [rng.standard_normal(w.shape).astype(np.float32) for w in sig.weights]
    region = full_region(sig.output_shape)
    if saving:
        (y,), saved = op.forward_tile_saving(sig, region, inputs, weights)
        assert saved is not None
    else:
        (y,), saved = op.forward_tile(sig, region, inputs, weights), None
    (want_y,) = op.forward(inputs, weights)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-4)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx, grads = op.backward_tile_into(
        sig, region, inputs, weights, [y], [dy], need_input_grads, (), saved
    )
    want_dx, want_grads = op.backward(inputs, weights, [want_y], [dy])
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if need_input_grads:
        for got, want in zip(dx, want_dx, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        assert dx == (None, None, None)


def test_float64_tiles_run_the_reference():
    op = MultiHeadAttention(4, 2)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((2, 3, 4)) for _ in range(3)]
    sig = op.infer("attention", [TensorSpec(a.shape) for a in inputs])
    weights = [rng.standard_normal(w.shape) for w in sig.weights]
    region = full_region(sig.output_shape)
    (y,), saved = op.forward_tile_saving(sig, region, inputs, weights)
    assert saved is None and y.dtype == np.float64
    np.testing.assert_array_equal(y, op.forward(inputs, weights)[0])
