"""The numpy pooling stand-in (used by gpu_check.py without a build) equals the C kernels."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.gpu import native_numpy
from flexflow.ops import native

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
    y = native.pool2d_forward(x, out, *args)
    np.testing.assert_allclose(native_numpy.pool2d_forward(x, out, *args), y, rtol=1e-6, atol=atol)
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = native.pool2d_backward(x, dy, *args)
    got = native_numpy.pool2d_backward(x, dy, *args)
    assert got.dtype == dx.dtype
    np.testing.assert_allclose(got, dx, rtol=1e-6, atol=atol)
