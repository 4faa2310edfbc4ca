"""Gather: shapes, SOAP dims, tile cost, values against explicit loops, gradients, tiles and errors."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region, region_slices
from flexflow.ops.gather import Gather
from flexflow.ops.shapes import tile_region

from .opcheck import assert_gradients, assert_regions_sufficient, tilings

X, INDEX = TensorSpec((4, 16, 5)), TensorSpec((4, 6, 5), DType.INT32)


def loop_gather(x: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    """out[p] = x[p with its `axis` coordinate replaced by index[p]], entry by entry."""
    out = np.empty(index.shape, x.dtype)
    for p in itertools.product(*(range(s) for s in index.shape)):
        q = list(p)
        q[axis] = index[p]
        out[p] = x[tuple(q)]
    return out


def loop_scatter_add(shape, index: np.ndarray, dy: np.ndarray, axis: int) -> np.ndarray:
    grad = np.zeros(shape)
    for p in itertools.product(*(range(s) for s in index.shape)):
        q = list(p)
        q[axis] = index[p]
        grad[tuple(q)] += dy[p]
    return grad


def test_registered():
    assert OP_KINDS["gather"] is Gather


def test_flexflows_demo_shape_and_dims():
    """demo_gather.py: (bs, 16, 5) gathered along dim 1 by a (bs, 6, 5) index."""
    sig = Gather(1).infer("g", [X, INDEX])
    assert sig.output_shape == (4, 6, 5) and sig.outputs[0].dtype is DType.FLOAT32
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", DimKind.ATTRIBUTE),
        ("channel", DimKind.ATTRIBUTE),
    ]
    assert sig.weights == ()
    assert Gather(-2).infer("g", [X, INDEX]).output_shape == (4, 6, 5)


def test_regions_read_the_input_whole_along_the_gather_dim():
    op = Gather(1)
    sig = op.infer("g", [X, INDEX])
    tile = ((0, 2), (3, 6), (1, 4))
    assert op.input_regions(sig, tile) == (((0, 2), (0, 16), (1, 4)), tile)
    assert op.index_limit(sig, 1) == 16 and op.index_limit(sig, 0) is None


def test_tile_cost_is_bytes_moved():
    op = Gather(1)
    sig = op.infer("g", [X, INDEX])
    tile = ((0, 2), (0, 6), (0, 5))  # 60 outputs, input region 2 * 16 * 5 = 160 floats
    cost = op.tile_cost(sig, tile)
    assert (cost.forward_flops, cost.backward_flops) == (0.0, 60.0)
    assert cost.forward_bytes_read == 60 * 4 + 60 * 4  # the index, one input entry per output
    assert cost.forward_bytes_written == 60 * 4
    assert cost.backward_bytes_read == 60 * 4 + 60 * 4  # dy and the index
    assert cost.backward_bytes_written == 160 * 4  # the input's gradient region


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_forward_and_backward_match_loops(axis):
    rng = np.random.default_rng(axis % 3)
    x = rng.standard_normal((3, 4, 5))
    shape = list(x.shape)
    shape[axis] = 7  # more picks than rows: repeated indices
    index = rng.integers(0, x.shape[axis], shape).astype(np.int32)
    op = Gather(axis)
    (y,) = op.forward([x, index], [])
    np.testing.assert_array_equal(y, loop_gather(x, index, axis % 3))
    dy = rng.standard_normal(y.shape)
    (dx, di), dw = op.backward([x, index], [], [y], [dy])
    assert di is None and dw == ()
    np.testing.assert_allclose(dx, loop_scatter_add(x.shape, index, dy, axis % 3), rtol=1e-12)


def test_repeated_indices_add_up():
    x = np.arange(6.0).reshape(1, 3, 2)
    index = np.array([[[2, 0], [2, 0], [2, 2]]], np.int64)
    (y,) = Gather(1).forward([x, index], [])
    np.testing.assert_array_equal(y, [[[4, 1], [4, 1], [4, 5]]])
    (dx, _), _ = Gather(1).backward([x, index], [], [y], [np.ones((1, 3, 2))])
    np.testing.assert_array_equal(dx, [[[0, 2], [0, 0], [3, 1]]])


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=2, max_size=4), data=st.data())
def test_gradients_are_finite_differences(shape, data):
    rank = len(shape)
    axis = data.draw(st.integers(1, rank - 1))
    picks = data.draw(st.integers(1, 4))
    rng = np.random.default_rng(data.draw(st.integers(0, 100)))
    index_shape = list(shape)
    index_shape[axis] = picks
    x = rng.standard_normal(shape)
    index = rng.integers(0, shape[axis], index_shape).astype(np.int32)
    assert_gradients(Gather(axis), [x, index], [])


@pytest.mark.parametrize("axis", [1, 2])
def test_regions_are_sufficient(axis):
    op = Gather(axis)
    x, index = TensorSpec((4, 6, 4)), TensorSpec((4, 6, 4), DType.INT32)
    sig = op.infer("g", [x, index])
    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal(x.shape),
        rng.integers(0, x.shape[axis], index.shape).astype(np.int32),
    ]
    assert assert_regions_sufficient(op, sig, arrays, []) > 0


@pytest.mark.parametrize("axis", [1, 2])
def test_tiles_of_every_split_reproduce_forward_and_backward(axis):
    """Each tiling's tasks, on their regions' slices, give the whole output, and their input
    gradient contributions (overlapping along the gather dim) sum to the whole gradient;
    every index repeats some value, so tiles add into the same input entries."""
    op = Gather(axis)
    x_spec = TensorSpec((4, 3, 4))
    index_shape = (4, 6, 4) if axis == 1 else (4, 3, 6)
    sig = op.infer("g", [x_spec, TensorSpec(index_shape, DType.INT32)])
    rng = np.random.default_rng(axis)
    x = rng.standard_normal(x_spec.shape)
    index = rng.integers(0, 3, index_shape).astype(np.int32)
    (y,) = op.forward([x, index], [])
    dy = rng.standard_normal(y.shape)
    (dx, _), _ = op.backward([x, index], [], [y], [dy])
    splits = list(tilings(sig))
    assert {d for degrees in splits for d in degrees[1:]} > {1}  # non-sample dims split too
    for degrees in splits:
        got_y, got_dx = np.zeros_like(y), np.zeros_like(x)
        for coords in itertools.product(*(range(d) for d in degrees)):
            region = tile_region(sig.output_shape, degrees, coords)
            x_region, i_region = op.input_regions(sig, region)
            tile_in = [x[region_slices(x_region)], index[region_slices(i_region)]]
            (tile_y,) = op.forward_tile(sig, region, tile_in, [])
            got_y[region_slices(region)] = tile_y
            (tile_dx, tile_di), _ = op.backward_tile(
                sig, region, tile_in, [], [tile_y], [dy[region_slices(region)]]
            )
            assert tile_di is None
            got_dx[region_slices(x_region)] += tile_dx
        np.testing.assert_array_equal(got_y, y, err_msg=f"degrees {degrees}")
        np.testing.assert_allclose(got_dx, dx, rtol=1e-12, atol=1e-12, err_msg=f"{degrees}")


def test_float32_stays_float32():
    x = np.ones((2, 3, 2), np.float32)
    index = np.zeros((2, 4, 2), np.int32)
    (y,) = Gather(1).forward([x, index], [])
    (dx, _), _ = Gather(1).backward([x, index], [], [y], [np.ones_like(y)])
    assert y.dtype == dx.dtype == np.float32
    np.testing.assert_array_equal(dx[:, 0], 4.0)


@pytest.mark.parametrize(
    "dim, inputs, match",
    [
        (0, [X, INDEX], r"gather 'g': cannot gather along dim 0, the sample dimension \(input "
                        r"\(4, 16, 5\), index \(4, 6, 5\)\): it would mix samples; gather along a dim >= 1"),
        (2, [X, INDEX], r"gather 'g': index must match the input on every dim but dim 2, got input "
                        r"\(4, 16, 5\) and index \(4, 6, 5\); make the index's other sizes equal"),
        (3, [X, INDEX], r"gather 'g': axis 3 is out of range for input shape \(4, 16, 5\)"),
        (1, [X, TensorSpec((4, 6, 5))], r"gather 'g': index \(the second tensor\) must be an "
                                        r"integer \(int32/int64\) tensor, got float32"),
        (1, [INDEX, INDEX], r"gather 'g': input \(the first tensor\) must be float32, got int32"),
        (1, [X, TensorSpec((4, 30), DType.INT32)], r"gather 'g': index must have the input's "
                                                    r"rank, got input \(4, 16, 5\) \(rank 3\) and index \(4, 30\)"),
        (1, [X], r"gather 'g': expected 2 input tensor\(s\), got 1"),
    ],
)  # fmt: skip
def test_shape_errors(dim, inputs, match):
    with pytest.raises(ShapeError, match=match):
        Gather(dim).infer("g", inputs)


@pytest.mark.parametrize("bad", [-1, 16])
def test_an_index_out_of_range_is_refused_by_forward_and_backward(bad):
    op = Gather(1)
    x = np.zeros((2, 16, 5), np.float32)
    index = np.zeros((2, 6, 5), np.int32)
    index[1, 2, 3] = bad
    match = rf"gather along dim 1: index values must lie in \[0, 16\) \(input \(2, 16, 5\)\), got values in \[{min(bad, 0)}, {max(bad, 0)}\]; map"  # noqa: E501
    with pytest.raises(ShapeError, match=match):
        op.forward([x, index], [])
    with pytest.raises(ShapeError, match=match):
        op.backward([x, index], [], [index.astype(np.float32)], [np.zeros((2, 6, 5), np.float32)])


def test_whole_region_cost_matches_flops():
    op = Gather(2)
    sig = op.infer("g", [TensorSpec((2, 3, 4)), TensorSpec((2, 3, 8), DType.INT64)])
    assert op.flops(sig, full_region((2, 3, 8))) == (0.0, 48.0)
    assert op.tile_cost(sig, full_region((2, 3, 8))).forward_bytes_read == 48 * 8 + 24 * 4
