"""Layer norm: shapes, SOAP dims, FLOPs, gradients, regions, a naive loop and shape errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.layer_norm import LayerNorm

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def test_shapes_weights_and_dims():
    sig = LayerNorm().infer("ln", [TensorSpec((4, 5, 6))])
    assert sig.output_shape == (4, 5, 6)
    assert [(w.name, w.shape, w.init) for w in sig.weights] == [
        ("gamma", (6,), "ones"),
        ("beta", (6,), "zeros"),
    ]
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", DimKind.ATTRIBUTE),
        ("channel", None),
    ]
    sig = LayerNorm((-2, -1), elementwise_affine=False).infer("ln", [TensorSpec((4, 5, 6))])
    assert sig.weights == ()
    assert [d.kind for d in sig.dims] == [DimKind.SAMPLE, None, None]
    sig = LayerNorm((2, 1)).infer("ln", [TensorSpec((4, 5, 6))])
    assert [w.shape for w in sig.weights] == [(5, 6), (5, 6)]


def test_axes_are_stored_as_a_tuple():
    op = LayerNorm([-1])
    assert op.axes == (-1,) and hash(op) == hash(LayerNorm((-1,)))


def test_flops_and_regions():
    op = LayerNorm()
    sig = op.infer("ln", [TensorSpec((4, 5, 6))])
    assert op.flops(sig, full_region((4, 5, 6))) == (8 * 120, 10 * 120)
    region = ((0, 2), (1, 2), (0, 6))
    assert op.input_regions(sig, region) == (region,)
    assert op.weight_regions(sig, region) == (((0, 6),), ((0, 6),))


@pytest.mark.parametrize(
    "op, shape",
    [
        (LayerNorm(), (3, 4)),
        (LayerNorm((-2, -1)), (2, 3, 4)),
        (LayerNorm(elementwise_affine=False), (2, 3, 4)),
        (LayerNorm((-1,), eps=1e-3), (2, 2, 2, 3)),
    ],
)
def test_gradients(op, shape):
    sig = op.infer("ln", [TensorSpec(shape)])
    rng = np.random.default_rng(1)
    assert_gradients(op, random_inputs(sig, rng), random_weights(sig, rng))


def test_regions_are_sufficient():
    op = LayerNorm()
    sig = op.infer("ln", [TensorSpec((4, 6, 3))])
    rng = np.random.default_rng(0)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    assert assert_regions_sufficient(op, sig, inputs, weights) > 10


def test_forward_matches_naive_loop():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 4, 5))
    gamma, beta = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    (out,) = LayerNorm((-2, -1), eps=1e-5).forward([x], [gamma, beta])
    for n, t in np.ndindex(3, 2):
        values = x[n, t].reshape(-1).tolist()
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / len(values)
        expected = (x[n, t] - mean) / np.sqrt(var + 1e-5) * gamma + beta
        np.testing.assert_allclose(out[n, t], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (LayerNorm(), [TensorSpec((4, 3), DType.INT32)], r"input must be float32"),
        (LayerNorm(), [TensorSpec((4, 3))] * 2, r"expected 1 input"),
        (
            LayerNorm(eps=0.0),
            [TensorSpec((4, 3))],
            r"eps must be a positive finite number, got 0.0",
        ),
        (LayerNorm((3,)), [TensorSpec((4, 3))], r"axis 3 is out of range for input shape \(4, 3\)"),
        (LayerNorm((1,)), [TensorSpec((4, 3, 2))], r"axes \(1,\) must be distinct and be the last"),
        (LayerNorm((-1, -1)), [TensorSpec((4, 3, 2))], r"axes \(-1, -1\) must be distinct"),
        (LayerNorm(()), [TensorSpec((4, 3))], r"axes \(\) must be distinct"),
        (LayerNorm((0, 1)), [TensorSpec((4, 3))], r"axes \(0, 1\) include the sample axis 0"),
        (LayerNorm((-1,)), [TensorSpec((4,))], r"axes \(-1,\) include the sample axis 0"),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=r"layer_norm 'ln': " + match):
        op.infer("ln", inputs)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 6),
    length=st.integers(1, 4),
    width=st.integers(1, 9),
    two_axes=st.booleans(),
    affine=st.booleans(),
    saving=st.booleans(),
    need_input_grads=st.booleans(),
)
def test_float32_tiles_through_c_compute_the_reference(
    rows, length, width, two_axes, affine, saving, need_input_grads
):
    """native/layer_norm.c (the C step's kernels) on float32 tiles, with or without the
    forward's kept x_hat and 1 / std: the reference's values to float32 rounding."""
    op = LayerNorm((-2, -1) if two_axes else (-1,), affine)
    shape = (rows, length, width)
    sig = op.infer("norm", [TensorSpec(shape)])
    rng = np.random.default_rng(rows * 100 + length * 10 + width)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    weights = [rng.standard_normal(w.shape).astype(np.float32) for w in sig.weights]
    region = full_region(shape)
    (y,), saved = op.forward_tile_saving(sig, region, [x], weights)
    (want,) = op.forward([x], weights)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    dy = rng.standard_normal(shape).astype(np.float32)
    (dx,), grads = op.backward_tile_into(
        sig, region, [x], weights, [y], [dy], need_input_grads, (), saved if saving else None
    )
    (want_dx,), want_grads = op.backward([x], weights, [want], [dy])
    for got, expected in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if need_input_grads:
        np.testing.assert_allclose(dx, want_dx, rtol=1e-4, atol=1e-5)
    else:
        assert dx is None
