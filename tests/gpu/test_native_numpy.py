"""The numpy stand-in for the C kernels (used by gpu_check.py without a build) equals them."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.gpu import native_numpy
from flexflow.ops import native_sparse, native_windows
from tests.ops.pool_loops import loop_pool2d_backward, loop_pool2d_forward

SHAPES = [  # (H, W), kernel, stride, pad_before, output (H', W'): border tiles and interior ones
    ((8, 8), 3, 2, (1, 1), (4, 4)),
    ((5, 7), 3, 1, (0, 1), (3, 6)),
    ((6, 6), 2, 2, (0, 0), (3, 3)),
    ((7, 5), 3, 2, (1, 0), (3, 2)),
]


@pytest.mark.parametrize("dtype, atol", [(np.float32, 1e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("hw, k, s, pad, out", SHAPES)
def test_stand_in_matches_the_c_kernels(hw, k, s, pad, out, is_max, dtype, atol):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3) + hw).astype(dtype)
    args = ((k, k), (s, s), pad, is_max)
    y = native_windows.pool2d_forward(x, out, *args)
    np.testing.assert_allclose(native_numpy.pool2d_forward(x, out, *args), y, rtol=1e-6, atol=atol)
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = native_windows.pool2d_backward(x, dy, *args)
    got = native_numpy.pool2d_backward(x, dy, *args)
    assert got.dtype == dx.dtype
    np.testing.assert_allclose(got, dx, rtol=1e-6, atol=atol)


@pytest.mark.parametrize("is_max", [True, False])
@pytest.mark.parametrize("hw, k, s, pad, out", SHAPES)
def test_stand_in_pools_as_the_loops_do(hw, k, s, pad, out, is_max):
    """Padding left out: a max ignores it, an average divides by the window's cells inside
    the slice (the border tiles' windows hang over the slice before and after it)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3) + hw)
    args = ((k, k), (s, s), pad, is_max)
    y = native_numpy.pool2d_forward(x, out, *args)
    np.testing.assert_allclose(y, loop_pool2d_forward(x, out, *args), rtol=1e-12)
    dy = rng.standard_normal(y.shape)
    dx = native_numpy.pool2d_backward(x, dy, *args)
    np.testing.assert_allclose(dx, loop_pool2d_backward(x, dy, *args), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("hw, k, s, pad, out", SHAPES)
def test_im2col_and_col2im_match_the_c_kernels(hw, k, s, pad, out, dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3) + hw).astype(dtype)
    args = (out, (k, k), (s, s), pad)
    cols = native_windows.im2col(x, *args)
    got = native_numpy.im2col(x, *args)
    assert got.dtype == cols.dtype and got.shape == cols.shape
    np.testing.assert_array_equal(got, cols)
    dcols = rng.standard_normal(cols.shape).astype(dtype)
    dx = native_windows.col2im(dcols, x.shape, *args)
    got = native_numpy.col2im(dcols, x.shape, *args)
    assert got.dtype == dx.dtype and got.shape == dx.shape
    np.testing.assert_allclose(got, dx, rtol=1e-6, atol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("valid", [6, 4, 0])
def test_sparse_cross_entropy_matches_the_c_kernel(valid):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((6, 5))
    logits[1] = [-100.0, 0.0, 0.0, 0.0, 0.0]  # the label's probability below the clip
    p = (np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)).astype(np.float32)
    labels = np.array([0, 0, 2, 3, 4, 1])
    loss, grad, correct = native_sparse.sparse_xent(p, labels, 12, valid)
    got_loss, got_grad, got_correct = native_numpy.sparse_xent(p, labels, 12, valid)
    assert got_correct == correct
    np.testing.assert_allclose(got_loss, loss, rtol=1e-12)
    np.testing.assert_array_equal(got_grad, grad)


def test_sparse_cross_entropy_refuses_a_label_out_of_range_as_the_c_kernel_does():
    p = np.full((2, 3), 1 / 3, np.float32)
    for labels in ([0, 3], [-1, 0]):
        assert native_sparse.sparse_xent(p, np.array(labels), 2, 2) is None
        assert native_numpy.sparse_xent(p, np.array(labels), 2, 2) is None
