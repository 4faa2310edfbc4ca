"""Flat: shapes, SOAP dims, FLOPs, gradients, regions and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.flat import Flat

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs


def test_registered():
    assert OP_KINDS["flat"] is Flat


def test_shapes_and_dims():
    sig = Flat().infer("flat1", [TensorSpec((4, 3, 2, 5))])
    assert sig.output_shape == (4, 30)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [("sample", DimKind.SAMPLE), ("channel", None)]
    assert Flat().infer("flat1", [TensorSpec((4, 7))]).output_shape == (4, 7)
    assert Flat().infer("flat1", [TensorSpec((4, 7), DType.INT32)]).outputs[0].dtype is DType.INT32


def test_flops_and_regions():
    op = Flat()
    sig = op.infer("flat1", [TensorSpec((4, 3, 2, 5))])
    assert op.flops(sig, full_region(sig.output_shape)) == (0.0, 0.0)
    assert op.input_regions(sig, ((2, 4), (0, 30))) == (((2, 4), (0, 3), (0, 2), (0, 5)),)


def test_forward_keeps_row_major_order():
    x = np.arange(24.0).reshape(2, 3, 2, 2)
    (y,) = Flat().forward([x], [])
    for n in range(2):
        np.testing.assert_array_equal(
            y[n], [x[n, c, h, w] for c in range(3) for h in range(2) for w in range(2)]
        )


@pytest.mark.parametrize("shape", [(2, 3, 2, 2), (3, 4), (2, 3, 4)])
def test_gradients(shape):
    op = Flat()
    sig = op.infer("flat1", [TensorSpec(shape)])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(0)), [])


def test_regions_are_sufficient():
    op = Flat()
    sig = op.infer("flat1", [TensorSpec((8, 3, 2, 2))])
    assert assert_regions_sufficient(op, sig, random_inputs(sig, np.random.default_rng(0)), []) > 10


@pytest.mark.parametrize(
    "inputs, match",
    [
        (
            [TensorSpec((4,))],
            r"flat 'flat1': input must have rank >= 2 \(sample, ...\), got shape \(4,\)",
        ),
        ([TensorSpec((4, 3))] * 2, r"flat 'flat1': expected 1 input"),
    ],
)
def test_shape_errors(inputs, match):
    with pytest.raises(ShapeError, match=match):
        Flat().infer("flat1", inputs)
