"""Conv2D: shapes, dims, FLOPs, gradients, regions, a direct-loop reference and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, ActiMode, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.conv2d import Conv2D

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def naive_conv2d(x, kernel, bias, stride, padding, groups):
    """Direct convolution: one dot product per output element."""
    n, _, h, w = x.shape
    out_channels, group_in, kh, kw = kernel.shape
    (sh, sw), (ph, pw) = stride, padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out_h, out_w = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    y = np.zeros((n, out_channels, out_h, out_w))
    for s in range(n):
        for o in range(out_channels):
            g = o // (out_channels // groups)
            for i in range(out_h):
                for j in range(out_w):
                    patch = xp[
                        s,
                        g * group_in : (g + 1) * group_in,
                        i * sh : i * sh + kh,
                        j * sw : j * sw + kw,
                    ]
                    y[s, o, i, j] = np.sum(patch * kernel[o]) + bias[o]
    return y


def test_registered():
    assert OP_KINDS["conv2d"] is Conv2D


def test_shapes_and_dims():
    sig = Conv2D(8, 3, 3, 1, 1, 1, 1).infer("conv1", [TensorSpec((4, 3, 8, 8))])
    assert sig.output_shape == (4, 8, 8, 8)
    kernel, bias = sig.weights
    assert (kernel.shape, kernel.init, kernel.fan_in, kernel.fan_out) == (
        (8, 3, 3, 3),
        "glorot_uniform",
        3 * 9,
        8 * 9,
    )
    assert (bias.shape, bias.init) == ((8,), "zeros")
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.PARAMETER),
        ("height", DimKind.ATTRIBUTE),
        ("width", DimKind.ATTRIBUTE),
    ]


def test_strided_grouped_shapes_without_bias():
    op = Conv2D(6, 3, 2, 2, 1, 1, 0, groups=2, use_bias=False)
    sig = op.infer("conv1", [TensorSpec((2, 4, 7, 6))])
    # H' = (7 + 2 - 3) // 2 + 1 = 4, W' = (6 - 2) // 1 + 1 = 5
    assert sig.output_shape == (2, 6, 4, 5)
    assert [w.shape for w in sig.weights] == [(6, 2, 3, 2)]
    assert sig.weights[0].fan_in == 2 * 3 * 2


def test_flops_and_tile_bytes():
    op = Conv2D(4, 3, 3, 1, 1, 1, 1)
    sig = op.infer("conv1", [TensorSpec((2, 3, 5, 5))])
    outputs, per_output = 2 * 4 * 5 * 5, 3 * 3 * 3
    fwd, bwd = op.flops(sig, full_region(sig.output_shape))
    assert fwd == 2 * outputs * per_output + outputs  # 11000
    assert bwd == 2 * (2 * outputs * per_output) + outputs  # 21800
    relu = Conv2D(4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
    assert relu.flops(sig, full_region(sig.output_shape)) == (fwd + outputs, bwd + outputs)
    # a channel split reads the whole input, half the kernel and half the bias
    cost = op.tile_cost(sig, ((0, 2), (0, 2), (0, 5), (0, 5)))
    assert cost.forward_bytes_read == 4 * (2 * 3 * 5 * 5 + 2 * 27 + 2)
    # a height split of rows [0, 2) reads input rows [0, 3): one halo row, the other clipped
    cost = op.tile_cost(sig, ((0, 2), (0, 4), (0, 2), (0, 5)))
    assert cost.forward_bytes_read == 4 * (2 * 3 * 3 * 5 + 4 * 27 + 4)


def test_grouped_input_regions_read_only_touched_groups():
    op = Conv2D(6, 3, 3, 1, 1, 1, 1, groups=3)  # 2 input and 2 output channels per group
    sig = op.infer("conv1", [TensorSpec((2, 6, 5, 5))])
    ((_, channels, rows, cols),) = op.input_regions(sig, ((0, 2), (2, 4), (2, 4), (0, 5)))
    assert channels == (2, 4) and rows == (1, 5) and cols == (0, 5)
    ((_, channels, _, _),) = op.input_regions(sig, ((0, 2), (1, 3), (0, 5), (0, 5)))
    assert channels == (0, 4)  # output channels 1 and 2 straddle groups 0 and 1
    kernel_region, bias_region = op.weight_regions(sig, ((0, 2), (1, 3), (0, 5), (0, 5)))
    assert kernel_region == ((1, 3), (0, 2), (0, 3), (0, 3)) and bias_region == ((1, 3),)


CONFIGS = [
    # (input shape, out_channels, kernel, stride, padding, groups, activation, use_bias)
    ((2, 3, 5, 5), 4, (3, 3), (1, 1), (1, 1), 1, ActiMode.AC_MODE_NONE, True),
    ((2, 4, 7, 6), 6, (3, 2), (2, 1), (1, 0), 2, ActiMode.AC_MODE_TANH, True),
    ((1, 6, 6, 5), 6, (2, 3), (3, 2), (2, 1), 3, ActiMode.AC_MODE_SIGMOID, False),
    ((2, 2, 4, 4), 3, (1, 1), (1, 1), (0, 0), 1, ActiMode.AC_MODE_RELU, True),
    ((1, 2, 5, 6), 4, (3, 3), (2, 2), (0, 1), 2, ActiMode.AC_MODE_ELU, True),
    # pointwise (1x1, no padding, one group): BLAS on the pixels, no im2col; strided too
    ((2, 3, 5, 4), 4, (1, 1), (2, 2), (0, 0), 1, ActiMode.AC_MODE_TANH, False),
    ((1, 4, 3, 5), 2, (1, 1), (1, 2), (0, 0), 1, ActiMode.AC_MODE_NONE, True),
]


@pytest.mark.parametrize("shape, out, kernel, stride, padding, groups, activation, bias", CONFIGS)
def test_gradients(shape, out, kernel, stride, padding, groups, activation, bias):
    op = Conv2D(out, *kernel, *stride, *padding, activation, groups, bias)
    sig = op.infer("conv1", [TensorSpec(shape)])
    rng = np.random.default_rng(2)
    assert_gradients(op, random_inputs(sig, rng), random_weights(sig, rng))


@pytest.mark.parametrize("shape, out, kernel, stride, padding, groups, activation, bias", CONFIGS)
def test_forward_matches_direct_convolution(
    shape, out, kernel, stride, padding, groups, activation, bias
):
    op = Conv2D(out, *kernel, *stride, *padding, groups=groups)
    sig = op.infer("conv1", [TensorSpec(shape)])
    rng = np.random.default_rng(3)
    (x,), (w, b) = random_inputs(sig, rng), random_weights(sig, rng)
    np.testing.assert_allclose(
        op.forward([x], [w, b])[0],
        naive_conv2d(x, w, b, stride, padding, groups),
        rtol=1e-12,
        atol=1e-12,
    )


@pytest.mark.parametrize(
    "op, shape",
    [
        (Conv2D(4, 3, 3, 1, 1, 1, 1), (2, 3, 4, 4)),
        (Conv2D(4, 3, 3, 2, 2, 1, 1, ActiMode.AC_MODE_RELU, groups=2), (2, 4, 8, 8)),
        (Conv2D(6, 2, 3, 1, 2, 0, 1, groups=3, use_bias=False), (4, 6, 5, 8)),
    ],
)
def test_regions_are_sufficient(op, shape):
    sig = op.infer("conv1", [TensorSpec(shape)])
    rng = np.random.default_rng(0)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    assert assert_regions_sufficient(op, sig, inputs, weights) > 10


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (
            Conv2D(4, 3, 3, 1, 1, 1, 1),
            [TensorSpec((4, 3, 8))],
            r"conv2d 'conv1': input must have rank 4 \(sample, channel, height, width\), "
            r"got shape \(4, 3, 8\)",
        ),
        (
            Conv2D(4, 3, 3, 1, 1, 1, 1),
            [TensorSpec((4, 3, 8, 8), DType.INT32)],
            r"conv2d 'conv1': input must be float32",
        ),
        (
            Conv2D(4, 3, 3, 1, 1, 1, 1),
            [TensorSpec((4, 3, 8, 8))] * 2,
            r"conv2d 'conv1': expected 1 input",
        ),
        (
            Conv2D(4, 3, 3, 1, 1, 1, 1, groups=2),
            [TensorSpec((4, 3, 8, 8))],
            r"conv2d 'conv1': groups=2 must divide the input channels 3",
        ),
        (
            Conv2D(5, 3, 3, 1, 1, 1, 1, groups=2),
            [TensorSpec((4, 4, 8, 8))],
            r"conv2d 'conv1': groups=2 must divide out_channels=5",
        ),
        (
            Conv2D(0, 3, 3, 1, 1, 1, 1),
            [TensorSpec((4, 3, 8, 8))],
            r"conv2d 'conv1': out_channels must be a positive integer, got 0",
        ),
        (
            Conv2D(4, 3, 3, 1, 1, 1, 1, groups=0),
            [TensorSpec((4, 3, 8, 8))],
            r"conv2d 'conv1': groups must be a positive integer, got 0",
        ),
        (
            Conv2D(4, 0, 3, 1, 1, 1, 1),
            [TensorSpec((4, 3, 8, 8))],
            r"conv2d 'conv1': kernel_h must be a positive integer, got 0",
        ),
        (
            Conv2D(4, 3, 3, 1, 0, 1, 1),
            [TensorSpec((4, 3, 8, 8))],
            r"conv2d 'conv1': stride_w must be a positive integer, got 0",
        ),
        (
            Conv2D(4, 3, 3, 1, 1, -1, 1),
            [TensorSpec((4, 3, 8, 8))],
            r"conv2d 'conv1': padding_h must be an integer >= 0, got -1",
        ),
        (
            Conv2D(4, 5, 3, 1, 1, 0, 1),
            [TensorSpec((4, 3, 4, 8))],
            r"conv2d 'conv1': a 5x3 kernel with padding \(0, 1\) does not fit input shape "
            r"\(4, 3, 4, 8\) \(padded height 4, width 10\)",
        ),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=match):
        op.infer("conv1", inputs)


def test_a_channel_split_straddling_groups_unevenly_is_not_a_valid_configuration():
    """conv2d(x, 12, groups=3) split by channel into tiles of 6 computed output channel 3 from
    group 1's inputs (silently other numbers), and 6 channels in 3 groups split by 2 crashed."""
    from flexflow.machine import parse_machine
    from flexflow.space import enumerate_configs

    sig = Conv2D(12, 3, 3, 1, 1, 1, 1, groups=3).infer("g", [TensorSpec((8, 6, 5, 5))])
    channel = sig.dims[1]
    assert [d for d in (1, 2, 3, 4, 6, 12) if channel.fits(12, d)] == [1, 3, 6, 12]
    degrees = {c.degrees[1] for c in enumerate_configs(sig, parse_machine("p100:4"))}
    assert degrees == {1, 3, 6, 12}  # whole groups, or part of one
