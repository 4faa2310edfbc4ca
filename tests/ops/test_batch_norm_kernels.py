"""Batch norm's C tile kernels against its numpy reference on the same float32 tiles."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops import TensorSpec
from flexflow.ops.batch_norm import BatchNorm

shapes = st.one_of(
    st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4)),
    st.tuples(st.integers(1, 6), st.integers(1, 5)),
)


def _close(a, b, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol, atol)


@settings(max_examples=60, deadline=None)
@given(shapes, st.booleans(), st.integers(0, 2**16))
def test_c_tiles_compute_what_the_numpy_reference_does(shape, relu, seed):
    rng = np.random.default_rng(seed)
    op = BatchNorm(relu)
    sig = op.infer("bn", [TensorSpec(shape)])
    # a channel slice of a wider tensor: the kernels must not assume contiguous arguments
    wide = rng.standard_normal((shape[0], shape[1] + 2, *shape[2:])).astype(np.float32)
    x = wide[:, 1 : 1 + shape[1]]
    weights = [rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2)]
    stats = op.statistics_forward(x)
    assert stats.dtype == np.float64
    _close(stats, op.numpy_statistics_forward(x), rtol=1e-12, atol=1e-9)
    (y,) = op.forward_tile_with_statistics(sig, x, weights, stats)
    assert y.dtype == np.float32
    _close(y, op.numpy_forward_tile_with_statistics(sig, x, weights, stats)[0])
    dy = rng.standard_normal(shape).astype(np.float32)
    grad_stats = op.statistics_backward(sig, x, weights, y, dy, stats)
    ref = op.numpy_statistics_backward(sig, x, weights, y, dy, stats)
    _close(grad_stats, ref, rtol=1e-12, atol=1e-9)
    (dx,), grads = op.backward_tile_with_statistics(sig, x, weights, y, dy, stats, grad_stats)
    (ref_dx,), ref_grads = op.numpy_backward_tile_with_statistics(
        sig, x, weights, y, dy, stats, grad_stats
    )
    assert dx.dtype == np.float32 and all(g.dtype == np.float32 for g in grads)
    _close(dx, ref_dx)
    for g, ref_g in zip(grads, ref_grads, strict=True):
        _close(g, ref_g)
