"""Pool2D: shapes, dims, FLOPs, gradients, padding, ties, regions, loop reference, tiles, errors."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, ActiMode, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region, region_slices
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.shapes import tile_region

from .opcheck import assert_gradients, assert_regions_sufficient, numerical_gradient, tilings
from .pool_loops import loop_pool2d, loop_pool2d_grad

MAX, AVG = PoolType.POOL_MAX, PoolType.POOL_AVG


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


def test_average_leaves_padding_out_of_its_divisor():
    """FlexFlow's average (cuDNN's COUNT_EXCLUDE_PADDING): each output is the mean of its
    window's real cells; counting the padding (dividing by kh*kw) gives 0.25 at the corners."""
    (y,) = Pool2D(2, 2, 1, 1, 1, 1, AVG).forward([np.ones((1, 1, 2, 2))], [])
    np.testing.assert_array_equal(y[0, 0], np.ones((3, 3)))
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    (y,) = Pool2D(2, 2, 1, 1, 1, 1, AVG).forward([x], [])
    np.testing.assert_array_equal(y[0, 0], [[1, 1.5, 2], [2, 2.5, 3], [3, 3.5, 4]])
    # Inception-v3's 3x3 stride-1 pad-1 average: a corner averages 4 cells, an edge 6
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    (y,) = Pool2D(3, 3, 1, 1, 1, 1, AVG).forward([x], [])
    assert y[0, 0, 0, 0] == (0 + 1 + 4 + 5) / 4
    assert y[0, 0, 0, 1] == (0 + 1 + 2 + 4 + 5 + 6) / 6
    assert y[0, 0, 1, 1] == x[0, 0, :3, :3].mean()


def test_average_gradient_spreads_over_the_real_cells_only():
    op = Pool2D(2, 2, 1, 1, 1, 1, AVG)
    x = np.zeros((1, 1, 2, 2))
    dy = np.zeros((1, 1, 3, 3))
    dy[0, 0, 0, 0] = 6.0  # the corner window holds one real cell, x[0, 0]: all of it goes there
    dy[0, 0, 1, 1] = 8.0  # the middle window holds all four: 2 each
    (dx,), _ = op.backward([x], [], op.forward([x], []), [dy])
    np.testing.assert_array_equal(dx[0, 0], [[8.0, 2.0], [2.0, 2.0]])


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
    op = Pool2D(*kernel, *stride, *padding, pool_type)
    (y,) = op.forward([x], [])
    np.testing.assert_allclose(y, loop_pool2d(x, op), rtol=1e-12)


@st.composite
def pools(draw, pool_types=(MAX, AVG)):
    """A pooling with any kernel, stride and padding (< kernel) over an image it fits, and
    the image: values 0.1 apart (no ties, no max flips under a finite-difference step)."""
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = tuple(draw(st.integers(0, k - 1)) for k in kernel)
    hw = tuple(
        draw(st.integers(max(1, k - 2 * p), 7)) for k, p in zip(kernel, padding, strict=True)
    )
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2)), *hw)
    op = Pool2D(*kernel, *stride, *padding, draw(st.sampled_from(pool_types)))
    op.infer("pool1", [TensorSpec(shape)])
    return op, distinct_input(shape, seed=draw(st.integers(0, 2**16)))


@settings(max_examples=60, deadline=None)
@given(case=pools())
def test_reference_equals_the_loop_with_in_bounds_counts(case):
    """Forward and input gradient against one-cell-at-a-time loops that count only the
    window's cells inside the image (an average of a padded window is not sum / (kh*kw))."""
    op, x = case
    (y,) = op.forward([x], [])
    np.testing.assert_allclose(y, loop_pool2d(x, op), rtol=1e-12, atol=1e-12)
    dy = np.random.default_rng(1).standard_normal(y.shape)
    (dx,), _ = op.backward([x], [], [y], [dy])
    np.testing.assert_allclose(dx, loop_pool2d_grad(x, dy, op), rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(case=pools(pool_types=(AVG,)))
def test_average_gradient_is_the_loops_finite_differences(case):
    """The reference's average gradient is the derivative of the loop's forward (where padding
    is not counted), by central differences."""
    op, x = case
    dy = np.random.default_rng(2).standard_normal(loop_pool2d(x, op).shape)
    (dx,), _ = op.backward([x], [], op.forward([x], []), [dy])
    expected = numerical_gradient(lambda: float(np.sum(loop_pool2d(x, op) * dy)), x)
    np.testing.assert_allclose(dx, expected, rtol=1e-6, atol=1e-8)


TILED = [
    # (op, input shape): border tiles padded on one side only, both sides, or at stride 2
    (Pool2D(3, 3, 1, 1, 1, 1, AVG), (2, 3, 8, 8)),  # Inception-v3's
    (Pool2D(3, 3, 2, 2, 1, 1, AVG), (1, 2, 8, 8)),
    (Pool2D(3, 2, 1, 2, 2, 1, AVG), (1, 2, 6, 8)),
    (Pool2D(4, 3, 2, 1, 3, 2, AVG), (2, 1, 7, 6)),
    (Pool2D(3, 3, 1, 1, 1, 1, MAX), (1, 2, 8, 8)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op, shape", TILED)
def test_c_tiles_of_height_and_width_splits_give_the_whole_tensors_values(op, shape, dtype):
    """Every height/width tile of the C kernel (its slice's halo from the neighbouring tiles,
    padding only at the tensor's border) pools and back-propagates exactly the loop's values
    over the whole tensor: a tile counts the same real cells as the whole tensor."""
    sig = op.infer("pool1", [TensorSpec(shape)])
    x = distinct_input(shape, seed=3).astype(dtype)
    y = loop_pool2d(x, op)
    dy = np.random.default_rng(4).standard_normal(y.shape).astype(dtype)
    dx = loop_pool2d_grad(x, dy, op)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}
    checked = 0
    for degrees in [(1, 1, 1, 1), *tilings(sig, max_tasks=8, skip=("sample", "channel"))]:
        summed = np.zeros_like(dx)
        for coords in itertools.product(*(range(d) for d in degrees)):
            region = tile_region(sig.output_shape, degrees, coords)
            (in_region,) = op.input_regions(sig, region)
            x_tile, out = x[region_slices(in_region)], region_slices(region)
            (y_tile,) = op.forward_tile(sig, region, [x_tile], [])
            assert y_tile.dtype == dtype
            np.testing.assert_allclose(y_tile, y[out], **tol, err_msg=f"tile {region}")
            (dx_tile,), _ = op.backward_tile(sig, region, [x_tile], [], [y_tile], [dy[out]])
            summed[region_slices(in_region)] += dx_tile
        np.testing.assert_allclose(summed, dx, **tol, err_msg=f"degrees {degrees}")
        checked += 1
    assert checked >= 4


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
