"""Concat: shapes, dims, FLOPs, gradients, regions, a slicing reference and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.concat import Concat

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs


def test_registered():
    assert OP_KINDS["concat"] is Concat


def test_shapes_and_dims():
    specs = [TensorSpec((4, 3, 8, 8)), TensorSpec((4, 5, 8, 8))]
    sig = Concat(1).infer("cat1", specs)
    assert sig.output_shape == (4, 8, 8, 8)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", None),
        ("height", DimKind.ATTRIBUTE),
        ("width", DimKind.ATTRIBUTE),
    ]
    sig = Concat(-1).infer(
        "cat1", [TensorSpec((2, 5, 3)), TensorSpec((2, 5, 4)), TensorSpec((2, 5, 1))]
    )
    assert sig.output_shape == (2, 5, 8)
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", DimKind.ATTRIBUTE),
        ("channel", None),
    ]


def test_flops_and_regions():
    op = Concat(2)
    sig = op.infer("cat1", [TensorSpec((4, 2, 3, 6)), TensorSpec((4, 2, 5, 6))])
    assert op.flops(sig, full_region(sig.output_shape)) == (0.0, 0.0)
    tile = ((2, 4), (0, 1), (0, 8), (3, 6))
    assert op.input_regions(sig, tile) == (
        ((2, 4), (0, 1), (0, 3), (3, 6)),
        ((2, 4), (0, 1), (0, 5), (3, 6)),
    )


@pytest.mark.parametrize("axis", [1, 2, -1])
def test_forward_matches_slice_assignment(axis):
    rng = np.random.default_rng(0)
    shapes = {
        1: [(2, 1, 3, 4), (2, 2, 3, 4)],
        2: [(2, 3, 1, 4), (2, 3, 3, 4)],
        -1: [(2, 3, 3, 2), (2, 3, 3, 5)],
    }[axis]
    xs = [rng.standard_normal(s) for s in shapes]
    (y,) = Concat(axis).forward(xs, [])
    a = axis % 4
    first = xs[0].shape[a]
    np.testing.assert_array_equal(np.take(y, range(first), axis=a), xs[0])
    np.testing.assert_array_equal(np.take(y, range(first, y.shape[a]), axis=a), xs[1])


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(2, 3, 2, 2), (2, 1, 2, 2), (2, 2, 2, 2)], 1),
        ([(2, 3, 4)], -1),
        ([(3, 2), (3, 4)], 1),
    ],
)
def test_gradients(shapes, axis):
    op = Concat(axis)
    sig = op.infer("cat1", [TensorSpec(s) for s in shapes])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(0)), [])


def test_integer_inputs_have_no_gradient():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    (y,) = Concat(1).forward([x, x], [])
    grads, _ = Concat(1).backward([x, x], [], (y,), [np.ones(y.shape)])
    assert grads == (None, None)


def test_regions_are_sufficient():
    op = Concat(1)
    sig = op.infer("cat1", [TensorSpec((4, 2, 4, 2)), TensorSpec((4, 3, 4, 2))])
    assert assert_regions_sufficient(op, sig, random_inputs(sig, np.random.default_rng(0)), []) > 10


@pytest.mark.parametrize(
    "axis, inputs, match",
    [
        (1, [], r"concat 'cat1': expected at least 1 input tensor, got 0"),
        (
            1,
            [TensorSpec((4, 3)), TensorSpec((4, 3, 2))],
            r"concat 'cat1': inputs must all have the same rank, "
            r"got shapes \(\(4, 3\), \(4, 3, 2\)\)",
        ),
        (
            1,
            [TensorSpec((4, 3)), TensorSpec((4, 3), DType.INT32)],
            r"concat 'cat1': inputs must share one dtype, got \('float32', 'int32'\)",
        ),
        (
            0,
            [TensorSpec((4, 3)), TensorSpec((2, 3))],
            r"concat 'cat1': cannot concatenate along axis 0, the sample dimension",
        ),
        (
            -2,
            [TensorSpec((4, 3)), TensorSpec((2, 3))],
            r"concat 'cat1': cannot concatenate along axis -2, the sample dimension",
        ),
        (
            2,
            [TensorSpec((4, 3)), TensorSpec((4, 3))],
            r"concat 'cat1': axis 2 is out of range for input shape \(4, 3\)",
        ),
        (
            1,
            [TensorSpec((4, 3, 5)), TensorSpec((4, 2, 6))],
            r"concat 'cat1': inputs must match on every axis but 1, "
            r"got shapes \(\(4, 3, 5\), \(4, 2, 6\)\)",
        ),
    ],
)
def test_shape_errors(axis, inputs, match):
    with pytest.raises(ShapeError, match=match):
        Concat(axis).infer("cat1", inputs)
