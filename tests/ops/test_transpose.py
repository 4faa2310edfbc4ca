"""Transpose: shapes, SOAP dims, FLOPs, gradients, regions and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.transpose import Transpose

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs

PERMS = [(0,), (0, 1), (0, 2, 1), (0, 2, 3, 1), (0, 3, 1, 2), (0, 1, 3, 2)]


def _shape(rank):
    return (2, 3, 4, 5)[:rank]


def test_nchw_to_nhwc_shapes_and_dims():
    sig = Transpose((0, 2, 3, 1)).infer("t", [TensorSpec((8, 3, 32, 16))])
    assert sig.output_shape == (8, 32, 16, 3)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("height", DimKind.ATTRIBUTE),
        ("width", DimKind.ATTRIBUTE),
        ("channel", DimKind.ATTRIBUTE),
    ]


def test_integer_input_keeps_dtype():
    sig = Transpose((0, 2, 1)).infer("t", [TensorSpec((4, 2, 3), DType.INT32)])
    assert sig.outputs[0].dtype is DType.INT32
    x = np.arange(24, dtype=np.int32).reshape(4, 2, 3)
    (y,) = Transpose((0, 2, 1)).forward([x], [])
    assert Transpose((0, 2, 1)).backward([x], [], [y], [np.zeros(y.shape)])[0] == (None,)


def test_flops_are_zero_and_regions_permute_back():
    op = Transpose((0, 2, 3, 1))
    sig = op.infer("t", [TensorSpec((8, 3, 32, 16))])
    assert op.flops(sig, full_region(sig.output_shape)) == (0, 0)
    region = ((0, 4), (8, 16), (0, 16), (1, 2))  # (N, H, W, C) tile
    assert op.input_regions(sig, region) == (((0, 4), (1, 2), (8, 16), (0, 16)),)
    assert op.tile_cost(sig, region).forward_bytes_read == 4 * 4 * 8 * 16


@pytest.mark.parametrize("perm", PERMS)
def test_forward_matches_numpy(perm):
    x = np.random.default_rng(2).standard_normal(_shape(len(perm)))
    (y,) = Transpose(perm).forward([x], [])
    expected = np.empty(tuple(x.shape[p] for p in perm))
    for index in np.ndindex(*x.shape):  # out[index permuted] = x[index], element by element
        expected[tuple(index[p] for p in perm)] = x[index]
    np.testing.assert_array_equal(y, expected)
    assert y.shape == Transpose(perm).infer("t", [TensorSpec(x.shape)]).output_shape


@pytest.mark.parametrize("perm", PERMS)
def test_gradients(perm):
    op = Transpose(perm)
    sig = op.infer("t", [TensorSpec(_shape(len(perm)))])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(1)), [])


@pytest.mark.parametrize("perm", PERMS[1:])
def test_regions_are_sufficient(perm):
    op = Transpose(perm)
    sig = op.infer("t", [TensorSpec((4, 2, 3, 2)[: len(perm)])])
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 0


@pytest.mark.parametrize(
    "perm, inputs, match",
    [
        ((0, 1), [TensorSpec((4, 3))] * 2, r"transpose 't': expected 1 input"),
        ((), [TensorSpec(())], r"transpose 't': input must have rank >= 1 \(sample first\)"),
        (
            (0, 1),
            [TensorSpec((4, 3, 2))],
            r"transpose 't': perm \(0, 1\) is not a permutation of \(0, 1, 2\) for input "
            r"\(4, 3, 2\) \(rank 3\)",
        ),
        ((0, 1, 1), [TensorSpec((4, 3, 2))], r"perm \(0, 1, 1\) is not a permutation"),
        ((0, 1, 3), [TensorSpec((4, 3, 2))], r"perm \(0, 1, 3\) is not a permutation"),
        (
            (1, 0, 2),
            [TensorSpec((4, 3, 2))],
            r"transpose 't': perm \(1, 0, 2\) moves dimension 1 first for input \(4, 3, 2\), "
            r"but the sample dimension must stay first",
        ),
    ],
)
def test_shape_errors(perm, inputs, match):
    with pytest.raises(ShapeError, match=match):
        Transpose(perm).infer("t", inputs)
