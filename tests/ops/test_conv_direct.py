"""The direct convolution kernels (native/conv.c): values against a float64 reference, the same
bits on every instruction set this CPU has and under every split of the batch, the rule that
picks them, and Conv2D's tiles through them against its im2col path."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow._kernels import lib
from flexflow.ops import ActiMode
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.native_windows import ConvWindow

from .test_conv2d import naive_conv2d


def _case(n, c, h, w, o, k, p, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    kernel = rng.standard_normal((o, c, k, k)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    out_hw = (h + 2 * p - k + 1, w + 2 * p - k + 1)
    dz = rng.standard_normal((n, o, *out_hw)).astype(np.float32)
    return x, kernel, bias, dz, out_hw


def _reference(x, kernel, bias, dz, p):
    """float64 forward, and the gradients as the adjoints of the naive convolution."""
    x64, k64, dz64 = x.astype(np.float64), kernel.astype(np.float64), dz.astype(np.float64)
    z = naive_conv2d(x64, k64, bias.astype(np.float64), (1, 1), (p, p), 1)
    conv = Conv2D(kernel.shape[0], *kernel.shape[2:], 1, 1, p, p, ActiMode.AC_MODE_NONE, 1, False)
    (dx,), (dw,) = conv.backward([x64], [k64], [z], [dz64])
    return z, dx, dw


def _close(actual, expected, terms):
    """Within float32 rounding of a sum of `terms` products of unit-scale values."""
    scale = np.abs(expected).max() + 1.0
    np.testing.assert_allclose(actual, expected, rtol=0, atol=4e-7 * np.sqrt(terms) * scale)


shapes = st.tuples(
    st.integers(1, 3),  # samples
    st.integers(1, 9),  # input channels
    st.integers(1, 12),  # rows
    st.integers(1, 40),  # columns
    st.integers(1, 19),  # output channels
    st.sampled_from([1, 2, 3, 5]),  # kernel
    st.integers(0, 2),  # padding
).filter(lambda s: s[6] < s[5] and s[2] + 2 * s[6] >= s[5] and s[3] + 2 * s[6] >= s[5])


@settings(max_examples=40, deadline=None)
@given(shapes)
def test_the_direct_kernels_compute_the_convolution_and_its_gradients(shape):
    n, c, h, w, o, k, p = shape
    x, kernel, bias, dz, out_hw = _case(*shape)
    window = ConvWindow(x.shape, o, out_hw, (k, k), (p, p))
    z_ref, dx_ref, dw_ref = _reference(x, kernel, bias, dz, p)
    _close(window.forward(x, kernel, bias), z_ref, c * k * k)
    _close(window.input_grad(dz, kernel), dx_ref, o * k * k)
    _close(window.kernel_grad(x, dz), dw_ref, n * out_hw[0] * out_hw[1])


@pytest.mark.parametrize("kh, kw, ph, pw", [(1, 7, 0, 3), (7, 1, 3, 0), (1, 3, 0, 1), (2, 5, 0, 2)])
def test_rectangular_kernels_and_paddings(kh, kw, ph, pw):
    """Inception-v3's 1x7 and 7x1 convolutions (padding 0 and 3) and other rectangles."""
    rng = np.random.default_rng(kh * 10 + kw)
    n, c, h, w, o = 2, 5, 9, 17, 6
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    kernel = rng.standard_normal((o, c, kh, kw)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    out_hw = (h + 2 * ph - kh + 1, w + 2 * pw - kw + 1)
    dz = rng.standard_normal((n, o, *out_hw)).astype(np.float32)
    x64, k64, dz64 = x.astype(np.float64), kernel.astype(np.float64), dz.astype(np.float64)
    z = naive_conv2d(x64, k64, bias.astype(np.float64), (1, 1), (ph, pw), 1)
    conv = Conv2D(o, kh, kw, 1, 1, ph, pw, ActiMode.AC_MODE_NONE, 1, False)
    (dx,), (dw,) = conv.backward([x64], [k64], [z], [dz64])
    window = ConvWindow(x.shape, o, out_hw, (kh, kw), (ph, pw))
    _close(window.forward(x, kernel, bias), z, c * kh * kw)
    _close(window.input_grad(dz, kernel), dx, o * kh * kw)
    _close(window.kernel_grad(x, dz), dw, n * out_hw[0] * out_hw[1])


@pytest.mark.parametrize("shape", [(3, 16, 28, 28, 16, 3, 1), (2, 5, 9, 37, 11, 5, 2)])
def test_every_instruction_set_and_every_split_of_the_batch_give_the_same_bits(shape):
    n, c, h, w, o, k, p = shape
    x, kernel, bias, dz, out_hw = _case(*shape)
    results = []
    for isa in ConvWindow.isas():
        window = ConvWindow(x.shape, o, out_hw, (k, k), (p, p), isa)
        results.append(
            (
                window.forward(x, kernel, bias),
                window.input_grad(dz, kernel),
                window.kernel_grad(x, dz),
            )
        )
    assert lib.FF_ISA_BASE in ConvWindow.isas()
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
    # a sample's output and input gradient do not depend on the samples beside it
    one = ConvWindow((1, c, h, w), o, out_hw, (k, k), (p, p))
    for s in range(n):
        np.testing.assert_array_equal(
            one.forward(x[s : s + 1], kernel, bias), results[0][0][s : s + 1]
        )
        np.testing.assert_array_equal(
            one.input_grad(dz[s : s + 1], kernel), results[0][1][s : s + 1]
        )


def test_the_rule_keeps_strided_grouped_narrow_and_wide_convolutions_on_im2col():
    def takes(channels, image, out=16, kernel=3, stride=(1, 1), groups=1):
        pad = kernel // 2
        hw = (image, image)
        shape = (8, channels, *hw)
        return ConvWindow.takes(shape, out, hw, (kernel, kernel), stride, (pad, pad), groups)

    assert takes(16, 28)
    assert not takes(16, 28, stride=(2, 2))
    assert not takes(16, 28, groups=2)
    assert takes(64, 8)  # 576 products, 8 of 10 values a row kept
    assert not takes(64, 4)  # 4 of 6
    assert not takes(16, 8, kernel=5)  # 8 of 12
    assert takes(128, 12)  # 1,152 products, 12 of 14
    assert takes(256, 16) and not takes(256, 8)  # 2,304 products: 16 of 18 kept, 8 of 10 not
    assert not takes(512, 16)  # 4,608 products
    assert not takes(16, 28, out=512)
    assert not takes(256, 8, kernel=1)  # pointwise: a GEMM needs no columns


@pytest.mark.parametrize("activation", [ActiMode.AC_MODE_NONE, ActiMode.AC_MODE_RELU])
@pytest.mark.parametrize("use_bias", [True, False])
def test_conv2d_runs_the_direct_kernels_as_its_im2col_path_computes(activation, use_bias):
    conv = Conv2D(12, 3, 3, 1, 1, 1, 1, activation, 1, use_bias)
    x, kernel, bias, _, out_hw = _case(4, 6, 14, 20, 12, 3, 1, seed=3)
    weights = [kernel, bias] if use_bias else [kernel]
    relu = activation == ActiMode.AC_MODE_RELU
    assert conv._direct(x) is not None
    (y,) = conv.forward([x], weights)
    z, cols = conv._im2col_pre_activation(x, weights)
    np.testing.assert_allclose(y, np.maximum(z, 0) if relu else z, rtol=1e-5, atol=1e-5)
    dy = np.random.default_rng(4).standard_normal(y.shape).astype(np.float32)
    into = [np.empty_like(w) for w in weights]
    (dx,), grads = conv.backward([x], weights, [y], [dy], True, into)
    assert grads[0] is into[0]  # written into the task's output
    dz = dy * (y > 0) if relu else dy
    (dx_ref,), grads_ref = conv._im2col_backward(x, kernel, dz, cols, True, [None, None])
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-5, atol=1e-4)
    for got, want in zip(grads, grads_ref, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
