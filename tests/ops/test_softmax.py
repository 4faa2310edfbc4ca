"""Softmax: shapes, SOAP dims, FLOPs, gradients, regions, a naive loop and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.softmax import Softmax

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def test_shapes_and_dims():
    sig = Softmax().infer("sm", [TensorSpec((4, 10))])
    assert sig.output_shape == (4, 10)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [("sample", DimKind.SAMPLE), ("channel", None)]
    sig = Softmax(1).infer("sm", [TensorSpec((4, 5, 6))])
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", None),
        ("channel", DimKind.ATTRIBUTE),
    ]


def test_flops_and_regions():
    op = Softmax(1)
    sig = op.infer("sm", [TensorSpec((4, 5, 6))])
    assert op.flops(sig, full_region((4, 5, 6))) == (5 * 120, 4 * 120)
    region = ((0, 2), (0, 5), (3, 6))
    assert op.input_regions(sig, region) == (((0, 2), (0, 5), (3, 6)),)
    assert op.flops(sig, region) == (5 * 30, 4 * 30)


@pytest.mark.parametrize("shape, axis", [((3, 4), -1), ((2, 3, 4), 1), ((2, 3, 2, 2), 2)])
def test_gradients(shape, axis):
    op = Softmax(axis)
    sig = op.infer("sm", [TensorSpec(shape)])
    rng = np.random.default_rng(1)
    assert_gradients(op, random_inputs(sig, rng), random_weights(sig, rng))


@pytest.mark.parametrize("axis", [1, -1])
def test_regions_are_sufficient(axis):
    op = Softmax(axis)
    sig = op.infer("sm", [TensorSpec((4, 3, 4))])
    rng = np.random.default_rng(0)
    assert assert_regions_sufficient(op, sig, random_inputs(sig, rng), []) > 10


def test_forward_matches_naive_loop_and_is_stable():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 5))
    (out,) = Softmax(1).forward([x], [])
    for n, k in np.ndindex(3, 5):
        e = [np.exp(x[n, j, k]) for j in range(4)]
        np.testing.assert_allclose(out[n, :, k], [v / sum(e) for v in e], rtol=1e-12)
    (big,) = Softmax().forward([np.array([[1000.0, 1000.0], [-1000.0, 0.0]])], [])
    np.testing.assert_allclose(big, [[0.5, 0.5], [0.0, 1.0]])


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (Softmax(), [TensorSpec((4,))], r"input must have rank >= 2"),
        (Softmax(), [TensorSpec((4, 3), DType.INT32)], r"input must be float32"),
        (Softmax(), [TensorSpec((4, 3))] * 2, r"expected 1 input"),
        (Softmax(2), [TensorSpec((4, 3))], r"axis 2 is out of range for input shape \(4, 3\)"),
        (Softmax(0), [TensorSpec((4, 3))], r"axis 0 is the sample axis of input \(4, 3\)"),
        (Softmax(-2), [TensorSpec((4, 3))], r"axis -2 is the sample axis"),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=r"softmax 'sm': " + match):
        op.infer("sm", inputs)
