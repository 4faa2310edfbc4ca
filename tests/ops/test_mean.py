"""Mean: shapes, SOAP dims, FLOPs, gradients, regions and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.mean import Mean

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs

CONFIGS = [
    ((1,), False),
    ((-1,), True),
    ((2, 3), False),
    ((2, 3), True),
    ((3, 1), False),
    ((1, 2, 3), True),
]


def test_global_average_pool_shapes_and_dims():
    sig = Mean((2, 3)).infer("gap", [TensorSpec((8, 16, 5, 5))])
    assert sig.output_shape == (8, 16)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.ATTRIBUTE),
    ]


def test_keepdims_leaves_reduced_dims_unpartitionable():
    sig = Mean((-2, -1), keepdims=True).infer("gap", [TensorSpec((8, 16, 5, 5))])
    assert sig.output_shape == (8, 16, 1, 1)
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.ATTRIBUTE),
        ("height", None),
        ("width", None),
    ]


def test_reduce_middle_dim():
    sig = Mean((1,)).infer("m", [TensorSpec((2, 7, 3))])
    assert sig.output_shape == (2, 3)
    assert [d.name for d in sig.dims] == ["sample", "channel"]


def test_flops_and_tile_bytes():
    op = Mean((2, 3))
    sig = op.infer("gap", [TensorSpec((8, 16, 5, 5))])
    assert op.flops(sig, full_region((8, 16))) == (8 * 16 * 25, 8 * 16 * 25)
    # a (4, 8) tile reads its 4 x 8 planes of 5 x 5
    assert op.flops(sig, ((0, 4), (8, 16))) == (4 * 8 * 25, 4 * 8 * 25)
    cost = op.tile_cost(sig, ((0, 4), (8, 16)))
    assert cost.forward_bytes_read == 4 * 4 * 8 * 25
    assert cost.forward_bytes_written == 4 * 4 * 8


@pytest.mark.parametrize("dims, keepdims", CONFIGS)
def test_forward_matches_numpy(dims, keepdims):
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5))
    (y,) = Mean(dims, keepdims).forward([x], [])
    axes = tuple(d % 4 for d in dims)
    expected = np.sum(x, axis=axes, keepdims=keepdims) / np.prod([x.shape[a] for a in axes])
    np.testing.assert_allclose(y, expected, rtol=1e-12)


@pytest.mark.parametrize("dims, keepdims", CONFIGS)
def test_gradients(dims, keepdims):
    op = Mean(dims, keepdims)
    sig = op.infer("m", [TensorSpec((2, 3, 2, 3))])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(1)), [])


@pytest.mark.parametrize("dims, keepdims", CONFIGS)
def test_regions_are_sufficient(dims, keepdims):
    op = Mean(dims, keepdims)
    sig = op.infer("m", [TensorSpec((4, 2, 3, 2))])
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 0


@pytest.mark.parametrize(
    "dims, inputs, match",
    [
        ((1,), [TensorSpec((4, 3))] * 2, r"mean 'm': expected 1 input"),
        ((1,), [TensorSpec((4, 3), DType.INT32)], r"mean 'm': input must be float32"),
        ((), [TensorSpec((4, 3))], r"mean 'm': dims is empty for input \(4, 3\)"),
        ((2,), [TensorSpec((4, 3))], r"mean 'm': axis 2 is out of range for input shape \(4, 3\)"),
        ((-3,), [TensorSpec((4, 3))], r"mean 'm': axis -3 is out of range"),
        (
            (0, 1),
            [TensorSpec((4, 3))],
            r"mean 'm': dims \(0, 1\) include dimension 0, the sample dimension of input "
            r"\(4, 3\); .* reduce only dimensions 1..1",
        ),
        ((-2,), [TensorSpec((4, 3))], r"mean 'm': dims \(-2,\) include dimension 0"),
        (
            (1, -2),
            [TensorSpec((4, 3, 2))],
            r"mean 'm': dims \(1, -2\) name the same dimension twice for input \(4, 3, 2\)",
        ),
    ],
)
def test_shape_errors(dims, inputs, match):
    with pytest.raises(ShapeError, match=match):
        Mean(dims).infer("m", inputs)
