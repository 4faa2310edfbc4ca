"""Batch matmul: shapes, SOAP dims, FLOPs, gradients, regions, a naive loop and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.batch_matmul import BatchMatmul

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def test_shapes_and_dims():
    sig = BatchMatmul().infer("bmm", [TensorSpec((4, 3, 5)), TensorSpec((4, 5, 2))])
    assert sig.output_shape == (4, 3, 2)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("row", DimKind.ATTRIBUTE),
        ("column", DimKind.ATTRIBUTE),
    ]
    sig = BatchMatmul().infer("bmm", [TensorSpec((4, 2, 3, 5)), TensorSpec((4, 2, 5, 6))])
    assert sig.output_shape == (4, 2, 3, 6)
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("attribute1", DimKind.ATTRIBUTE),
        ("row", DimKind.ATTRIBUTE),
        ("column", DimKind.ATTRIBUTE),
    ]


def test_flops_and_regions_of_a_tile():
    op = BatchMatmul()
    sig = op.infer("bmm", [TensorSpec((4, 3, 5)), TensorSpec((4, 5, 2))])
    assert op.flops(sig, full_region((4, 3, 2))) == (2 * 4 * 3 * 2 * 5, 2 * (2 * 4 * 3 * 2 * 5))
    region = ((2, 4), (1, 2), (0, 1))
    assert op.input_regions(sig, region) == (
        ((2, 4), (1, 2), (0, 5)),  # A: the tile's rows, all of K
        ((2, 4), (0, 5), (0, 1)),  # B: all of K, the tile's columns
    )
    assert op.tile_cost(sig, region).forward_bytes_read == 4 * (2 * 1 * 5 + 2 * 5 * 1)


@pytest.mark.parametrize("a, b", [((2, 3, 4), (2, 4, 5)), ((2, 2, 3, 2), (2, 2, 2, 3))])
def test_gradients(a, b):
    op = BatchMatmul()
    sig = op.infer("bmm", [TensorSpec(a), TensorSpec(b)])
    rng = np.random.default_rng(1)
    assert_gradients(op, random_inputs(sig, rng), random_weights(sig, rng))


def test_regions_are_sufficient():
    op = BatchMatmul()
    sig = op.infer("bmm", [TensorSpec((2, 2, 4, 3)), TensorSpec((2, 2, 3, 4))])
    rng = np.random.default_rng(0)
    assert assert_regions_sufficient(op, sig, random_inputs(sig, rng), []) > 10


def test_forward_matches_naive_loop():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 5, 2))
    (out,) = BatchMatmul().forward([a, b], [])
    expected = np.zeros((2, 3, 4, 2))
    for n, h, i, j in np.ndindex(expected.shape):
        expected[n, h, i, j] = sum(a[n, h, i, k] * b[n, h, k, j] for k in range(5))
    np.testing.assert_allclose(out, expected, rtol=1e-12)


@pytest.mark.parametrize(
    "inputs, match",
    [
        ([TensorSpec((4, 3, 5))], r"expected 2 input"),
        ([TensorSpec((4, 3, 5), DType.INT32), TensorSpec((4, 5, 2))], r"A must be float32"),
        ([TensorSpec((4, 3, 5)), TensorSpec((4, 5, 2), DType.INT64)], r"B must be float32"),
        ([TensorSpec((3, 5)), TensorSpec((5, 2))], r"A and B must have the same rank >= 3"),
        ([TensorSpec((4, 3, 5)), TensorSpec((4, 1, 5, 2))], r"A and B must have the same rank"),
        (
            [TensorSpec((4, 3, 5)), TensorSpec((4, 4, 2))],
            r"A \(4, 3, 5\) and B \(4, 4, 2\) do not multiply; expected B of shape \(4, 5, 2\)",
        ),
        ([TensorSpec((4, 3, 5)), TensorSpec((2, 5, 2))], r"A .* and B \(2, 5, 2\) do not multiply"),
    ],
)
def test_shape_errors(inputs, match):
    with pytest.raises(ShapeError, match=r"batch_matmul 'bmm': " + match):
        BatchMatmul().infer("bmm", inputs)
