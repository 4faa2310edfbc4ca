"""Pool2D: shapes, dims, FLOPs, gradients, padding, ties, regions, loop reference, errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, ActiMode, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.pool2d import Pool2D, PoolType

from .opcheck import assert_gradients, assert_regions_sufficient

MAX, AVG = PoolType.POOL_MAX, PoolType.POOL_AVG


def naive_pool2d(x, kernel, stride, padding, pool_type):
    """Direct pooling: max over the real cells of each window, or the window sum over kh*kw."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    out_h, out_w = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    y = np.zeros((n, c, out_h, out_w))
    for i in range(out_h):
        for j in range(out_w):
            r0, c0 = i * sh - ph, j * sw - pw
            cells = x[:, :, max(r0, 0) : r0 + kh, max(c0, 0) : c0 + kw]
            if pool_type is MAX:
                y[:, :, i, j] = cells.max(axis=(2, 3))
            else:
                y[:, :, i, j] = cells.sum(axis=(2, 3)) / (kh * kw)
    return y


def distinct_input(shape, seed=0):
    """Values 0.1 apart in random order: no ties, no max flips under a finite-difference step."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    return (rng.permutation(size).reshape(shape) - size / 2) * 0.1


def test_registered():
    assert OP_KINDS["pool2d"] is Pool2D


def test_shapes_and_dims():
    sig = Pool2D(2, 2, 2, 2, 0, 0).infer("pool1", [TensorSpec((4, 3, 8, 8))])
    assert sig.output_shape == (4, 3, 4, 4)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.ATTRIBUTE),
        ("height", DimKind.ATTRIBUTE),
        ("width", DimKind.ATTRIBUTE),
    ]
    sig = Pool2D(3, 2, 2, 1, 1, 0, AVG).infer("pool1", [TensorSpec((1, 2, 7, 5))])
    assert sig.output_shape == (1, 2, 4, 4)  # (7 + 2 - 3) // 2 + 1, (5 - 2) // 1 + 1


def test_flops_and_tile_bytes():
    op = Pool2D(3, 3, 1, 1, 1, 1)
    sig = op.infer("pool1", [TensorSpec((2, 3, 4, 4))])
    outputs = 2 * 3 * 4 * 4
    assert op.flops(sig, full_region(sig.output_shape)) == (outputs * 9, outputs * 9)
    tanh = Pool2D(3, 3, 1, 1, 1, 1, AVG, ActiMode.AC_MODE_TANH)
    assert tanh.flops(sig, full_region(sig.output_shape)) == (outputs * 13, outputs * 13)
    # a channel-and-height tile reads its channel and its rows plus a one-row halo
    cost = op.tile_cost(sig, ((0, 2), (1, 2), (0, 2), (0, 4)))
    assert cost.forward_bytes_read == 4 * (2 * 1 * 3 * 4)
    assert cost.forward_bytes_written == 4 * (2 * 1 * 2 * 4)


def test_max_ignores_padding():
    x = -1.0 - np.arange(4.0).reshape(1, 1, 2, 2)  # all negative: a zero pad would win
    (y,) = Pool2D(2, 2, 1, 1, 1, 1).forward([x], [])
    np.testing.assert_array_equal(y[0, 0], [[-1, -1, -2], [-1, -1, -2], [-3, -3, -4]])


def test_average_counts_padding():
    (y,) = Pool2D(2, 2, 1, 1, 1, 1, AVG).forward([np.ones((1, 1, 2, 2))], [])
    np.testing.assert_array_equal(y[0, 0], [[0.25, 0.5, 0.25], [0.5, 1.0, 0.5], [0.25, 0.5, 0.25]])


def test_max_ties_route_to_first_cell_in_row_major_order():
    op = Pool2D(2, 2, 2, 2, 0, 0)
    x = np.array([[[[1.0, 3.0, 5.0, 5.0], [3.0, 3.0, 5.0, 5.0]]]])  # (1, 1, 2, 4)
    outputs = op.forward([x], [])
    (dx,), weight_grads = op.backward([x], [], outputs, [np.array([[[[10.0, 20.0]]]])])
    assert weight_grads == ()
    np.testing.assert_array_equal(dx[0, 0], [[0, 10, 20, 0], [0, 0, 0, 0]])


CONFIGS = [
    # (input shape, kernel, stride, padding)
    ((2, 2, 4, 4), (2, 2), (2, 2), (0, 0)),
    ((1, 2, 5, 6), (3, 3), (1, 1), (1, 1)),
    ((2, 1, 7, 5), (3, 2), (2, 1), (1, 0)),
    ((1, 3, 6, 6), (2, 3), (3, 2), (1, 2)),
]


@pytest.mark.parametrize("pool_type", [MAX, AVG])
@pytest.mark.parametrize("shape, kernel, stride, padding", CONFIGS)
def test_gradients(shape, kernel, stride, padding, pool_type):
    op = Pool2D(*kernel, *stride, *padding, pool_type)
    op.infer("pool1", [TensorSpec(shape)])
    assert_gradients(op, [distinct_input(shape)], [])


@pytest.mark.parametrize("activation", [ActiMode.AC_MODE_SIGMOID, ActiMode.AC_MODE_GELU])
@pytest.mark.parametrize("pool_type", [MAX, AVG])
def test_gradients_with_fused_activation(pool_type, activation):
    op = Pool2D(3, 3, 2, 2, 1, 1, pool_type, activation)
    assert_gradients(op, [distinct_input((2, 2, 5, 5), seed=1)], [])


@pytest.mark.parametrize("pool_type", [MAX, AVG])
@pytest.mark.parametrize("shape, kernel, stride, padding", CONFIGS)
def test_forward_matches_direct_pooling(shape, kernel, stride, padding, pool_type):
    x = np.random.default_rng(4).standard_normal(shape)
    (y,) = Pool2D(*kernel, *stride, *padding, pool_type).forward([x], [])
    np.testing.assert_allclose(y, naive_pool2d(x, kernel, stride, padding, pool_type), rtol=1e-12)


@pytest.mark.parametrize(
    "op, shape",
    [
        (Pool2D(3, 3, 1, 1, 1, 1), (2, 2, 4, 4)),
        (Pool2D(3, 2, 2, 2, 1, 0, AVG, ActiMode.AC_MODE_RELU), (2, 4, 8, 8)),
    ],
)
def test_regions_are_sufficient(op, shape):
    sig = op.infer("pool1", [TensorSpec(shape)])
    x = np.random.default_rng(0).standard_normal(shape)
    assert assert_regions_sufficient(op, sig, [x], []) > 10


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (
            Pool2D(2, 2, 2, 2, 0, 0),
            [TensorSpec((4, 3, 8))],
            r"pool2d 'pool1': input must have rank 4 \(sample, channel, height, width\), "
            r"got shape \(4, 3, 8\)",
        ),
        (
            Pool2D(2, 2, 2, 2, 0, 0),
            [TensorSpec((4, 3, 8, 8), DType.INT64)],
            r"pool2d 'pool1': input must be float32",
        ),
        (Pool2D(2, 2, 2, 2, 0, 0), [], r"pool2d 'pool1': expected 1 input"),
        (
            Pool2D(2, 0, 2, 2, 0, 0),
            [TensorSpec((4, 3, 8, 8))],
            r"pool2d 'pool1': kernel_w must be a positive integer, got 0",
        ),
        (
            Pool2D(2, 2, -1, 2, 0, 0),
            [TensorSpec((4, 3, 8, 8))],
            r"pool2d 'pool1': stride_h must be a positive integer, got -1",
        ),
        (
            Pool2D(2, 2, 2, 2, 0, -2),
            [TensorSpec((4, 3, 8, 8))],
            r"pool2d 'pool1': padding_w must be an integer >= 0, got -2",
        ),
        (
            Pool2D(2, 2, 2, 2, 2, 0, AVG),
            [TensorSpec((4, 3, 8, 8))],
            r"pool2d 'pool1': padding_h=2 must be smaller than kernel_h=2",
        ),
        (
            Pool2D(3, 9, 1, 1, 1, 0),
            [TensorSpec((4, 3, 8, 8))],
            r"pool2d 'pool1': a 3x9 kernel with padding \(1, 0\) does not fit "
            r"input shape \(4, 3, 8, 8\)",
        ),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=match):
        op.infer("pool1", inputs)
