"""Dropout: tiling-invariant mask, rate, seeds, shapes, FLOPs, gradients, regions, errors."""

import itertools

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region, region_slices
from flexflow.ops.dropout import Dropout, dropout_mask
from flexflow.ops.shapes import tile_region

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs


def test_shapes_and_dims():
    sig = Dropout(0.5).infer("drop", [TensorSpec((4, 3, 5))])
    assert sig.output_shape == (4, 3, 5)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", DimKind.ATTRIBUTE),
        ("channel", DimKind.ATTRIBUTE),
    ]


def test_flops_one_multiply_each_way():
    op = Dropout(0.1)
    sig = op.infer("drop", [TensorSpec((4, 6))])
    assert op.flops(sig, full_region((4, 6))) == (24, 24)
    assert op.flops(sig, ((0, 2), (0, 3))) == (6, 6)


@pytest.mark.parametrize(
    "shape, degrees",
    [((8, 6), (2, 3)), ((4, 3, 10), (4, 1, 5)), ((12,), (3,)), ((2, 4, 6, 8), (2, 2, 3, 2))],
)
def test_tile_masks_are_slices_of_the_full_mask(shape, degrees):
    full = dropout_mask(7, 0.4, shape)
    for coords in itertools.product(*(range(d) for d in degrees)):
        region = tile_region(shape, degrees, coords)
        np.testing.assert_array_equal(
            dropout_mask(7, 0.4, shape, region), full[region_slices(region)]
        )


def test_uneven_and_empty_regions():
    full = dropout_mask(3, 0.5, (5, 7))
    np.testing.assert_array_equal(dropout_mask(3, 0.5, (5, 7), ((1, 4), (2, 7))), full[1:4, 2:7])
    assert dropout_mask(3, 0.5, (5, 7), ((2, 2), (0, 7))).shape == (0, 7)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_kept_fraction_is_close_to_one_minus_rate(rate):
    kept = dropout_mask(11, rate, (1000, 1000)).mean()
    assert abs(kept - (1 - rate)) < 0.003  # binomial std is at most 0.0005


def test_seeds_differ_and_repeat():
    a = dropout_mask(0, 0.5, (64, 64))
    assert np.array_equal(a, dropout_mask(0, 0.5, (64, 64)))
    for seed in (1, 2, -1, 2**40):
        agreement = (a == dropout_mask(seed, 0.5, (64, 64))).mean()
        assert 0.45 < agreement < 0.55  # independent masks agree on about half the elements


def test_mask_does_not_depend_on_layout_only_on_flat_index():
    # the same flat index gives the same decision whatever the shape
    np.testing.assert_array_equal(
        dropout_mask(5, 0.3, (6, 4)).reshape(-1), dropout_mask(5, 0.3, (24,))
    )


def test_forward_matches_inverted_dropout_formula():
    x = np.random.default_rng(0).standard_normal((8, 16))
    op = Dropout(0.25, seed=3)
    (y,) = op.forward([x], [])
    mask = dropout_mask(3, 0.25, (8, 16))
    np.testing.assert_allclose(y, np.where(mask, x / 0.75, 0.0), rtol=1e-15)
    assert 0 < mask.sum() < mask.size


def test_rate_zero_is_identity():
    x = np.random.default_rng(0).standard_normal((4, 5))
    (y,) = Dropout(0.0).forward([x], [])
    np.testing.assert_array_equal(y, x)
    assert y is not x


@pytest.mark.parametrize("rate, seed", [(0.0, 0), (0.3, 1), (0.7, 9)])
@pytest.mark.parametrize("shape", [(6,), (3, 4), (2, 3, 2)])
def test_gradients(rate, seed, shape):
    op = Dropout(rate, seed)
    sig = op.infer("drop", [TensorSpec(shape)])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(1)), [])


def test_regions_are_sufficient():
    op = Dropout(0.5, seed=2)
    sig = op.infer("drop", [TensorSpec((4, 2, 3))])
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 10


@pytest.mark.parametrize(
    "inputs, match",
    [
        ([TensorSpec(())], r"dropout 'drop': input must have rank >= 1 \(sample first\)"),
        ([TensorSpec((4, 3), DType.INT64)], r"dropout 'drop': input must be float32"),
        ([TensorSpec((4, 3))] * 2, r"dropout 'drop': expected 1 input"),
    ],
)
def test_shape_errors(inputs, match):
    with pytest.raises(ShapeError, match=match):
        Dropout(0.5).infer("drop", inputs)


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5, float("nan")])
def test_rate_out_of_range(rate):
    with pytest.raises(ShapeError, match=r"dropout 'drop': rate must be in \[0, 1\), got"):
        Dropout(rate).infer("drop", [TensorSpec((4, 3))])
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\)"):
        dropout_mask(0, rate, (4, 3))


def test_region_outside_shape():
    with pytest.raises(ValueError, match=r"region \(\(0, 5\), \(0, 3\)\) is not inside shape"):
        dropout_mask(0, 0.5, (4, 3), ((0, 5), (0, 3)))


@pytest.mark.parametrize("seed", [0, 7, 2**63 - 5, -3])
@pytest.mark.parametrize("samples", [(0, 4), (1, 3)])
def test_whole_sample_tiles_through_c_give_numpys_bits_in_the_input_type(seed, samples):
    """A float32 tile of whole samples goes through the C kernel: the bits numpy's path gives
    (mask / (1 - rate) in float64, the product rounded to float32); a tile splitting samples'
    other dims takes numpy's path, which rounds the same way."""
    op = Dropout(0.3, seed)
    shape = (4, 3, 5)
    sig = op.infer("drop", [TensorSpec(shape)])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    for region in (((*samples,), (0, 3), (0, 5)), ((*samples,), (1, 3), (0, 5))):
        tile = x[region_slices(region)]
        (got,) = op.forward_tile(sig, region, [tile], [])
        scale = dropout_mask(seed, 0.3, shape, region) / 0.7
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, (tile * scale).astype(np.float32))
        (dx,), _ = op.backward_tile(sig, region, [tile], [], [got], [tile])
        np.testing.assert_array_equal(dx, got)
