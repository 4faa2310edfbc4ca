"""Reshape: shapes, SOAP dims, FLOPs, gradients, regions and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.reshape import Reshape

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs

CONFIGS = [
    ((2, 3, 4), (2, 12)),
    ((2, 3, 4), (2, -1)),
    ((2, 12), (2, 3, 2, 2)),
    ((2, 12), (-1, 4, 3)),
    ((3,), (3, 1)),
    ((2, 6, 1), (2, 2, -1)),
]


def test_flatten_shapes_and_dims():
    sig = Reshape((8, -1)).infer("r", [TensorSpec((8, 3, 4, 5))])
    assert sig.output_shape == (8, 60)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [("sample", DimKind.SAMPLE), ("channel", None)]


def test_unflatten_dims_are_not_partitionable():
    sig = Reshape((8, 3, -1, 5)).infer("r", [TensorSpec((8, 60))])
    assert sig.output_shape == (8, 3, 4, 5)
    assert [d.kind for d in sig.dims] == [DimKind.SAMPLE, None, None, None]


def test_integer_input_keeps_dtype():
    sig = Reshape((4, 6)).infer("r", [TensorSpec((4, 2, 3), DType.INT64)])
    assert sig.outputs[0].dtype is DType.INT64
    x = np.arange(24).reshape(4, 2, 3)
    (y,) = Reshape((4, 6)).forward([x], [])
    (dx,), _ = Reshape((4, 6)).backward([x], [], [y], [np.zeros((4, 6))])
    assert dx is None


def test_flops_are_zero_and_tile_reads_its_samples():
    op = Reshape((8, -1))
    sig = op.infer("r", [TensorSpec((8, 3, 4))])
    assert op.flops(sig, full_region((8, 12))) == (0, 0)
    assert op.input_regions(sig, ((2, 6), (0, 12))) == (((2, 6), (0, 3), (0, 4)),)
    assert op.tile_cost(sig, ((2, 6), (0, 12))).forward_bytes_read == 4 * 4 * 12


@pytest.mark.parametrize("in_shape, shape", CONFIGS)
def test_forward_matches_numpy(in_shape, shape):
    x = np.random.default_rng(2).standard_normal(in_shape)
    (y,) = Reshape(shape).forward([x], [])
    np.testing.assert_array_equal(y, np.reshape(x, shape))
    assert y.shape == Reshape(shape).infer("r", [TensorSpec(in_shape)]).output_shape


@pytest.mark.parametrize("in_shape, shape", CONFIGS)
def test_gradients(in_shape, shape):
    op = Reshape(shape)
    sig = op.infer("r", [TensorSpec(in_shape)])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(1)), [])


@pytest.mark.parametrize("in_shape, shape", [((4, 3, 2), (4, 6)), ((6, 4), (6, 2, 2))])
def test_regions_are_sufficient(in_shape, shape):
    op = Reshape(shape)
    sig = op.infer("r", [TensorSpec(in_shape)])
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 0


@pytest.mark.parametrize(
    "shape, inputs, match",
    [
        ((4, 3), [TensorSpec((4, 3))] * 2, r"reshape 'r': expected 1 input"),
        ((1,), [TensorSpec(())], r"reshape 'r': input must have rank >= 1 \(sample first\)"),
        ((), [TensorSpec((4, 3))], r"reshape 'r': target shape \(\) for input \(4, 3\) must be"),
        ((4, 0), [TensorSpec((4, 3))], r"reshape 'r': target shape \(4, 0\) .* positive sizes"),
        ((4, -2), [TensorSpec((4, 3))], r"reshape 'r': target shape \(4, -2\)"),
        (
            (4, -1, -1),
            [TensorSpec((4, 3))],
            r"reshape 'r': target shape \(4, -1, -1\) has 2 entries of -1 for input \(4, 3\); "
            r"at most one",
        ),
        (
            (4, 5),
            [TensorSpec((4, 3))],
            r"reshape 'r': cannot reshape input \(4, 3\) \(12 elements\) to \(4, 5\); "
            r"the target must hold exactly 12 elements",
        ),
        ((4, 5, -1), [TensorSpec((4, 3))], r"reshape 'r': cannot reshape input \(4, 3\)"),
        (
            (2, 6),
            [TensorSpec((4, 3))],
            r"reshape 'r': the first dimension is the sample and must stay 4, got target "
            r"\(2, 6\) -> \(2, 6\) for input \(4, 3\)",
        ),
        (
            (-1, 6),
            [TensorSpec((4, 3))],
            r"sample and must stay 4, got target \(-1, 6\) -> \(2, 6\)",
        ),
    ],
)
def test_shape_errors(shape, inputs, match):
    with pytest.raises(ShapeError, match=match):
        Reshape(shape).infer("r", inputs)
