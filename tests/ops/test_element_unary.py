"""ElementUnary: shapes, SOAP dims, FLOPs, gradients, regions and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import ActiMode, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.element_unary import ElementUnary

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs

REFERENCE = {
    ActiMode.AC_MODE_NONE: lambda x: x,
    ActiMode.AC_MODE_RELU: lambda x: np.where(x > 0, x, 0.0),
    ActiMode.AC_MODE_SIGMOID: lambda x: 1.0 / (1.0 + np.exp(-x)),
    ActiMode.AC_MODE_TANH: lambda x: (np.exp(x) - np.exp(-x)) / (np.exp(x) + np.exp(-x)),
    ActiMode.AC_MODE_GELU: lambda x: (
        0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    ),
    ActiMode.AC_MODE_ELU: lambda x: np.where(x > 0, x, np.exp(x) - 1),
}


def test_shapes_and_dims():
    sig = ElementUnary(ActiMode.AC_MODE_RELU).infer("relu", [TensorSpec((4, 3, 5, 6))])
    assert sig.output_shape == (4, 3, 5, 6)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.ATTRIBUTE),
        ("height", DimKind.ATTRIBUTE),
        ("width", DimKind.ATTRIBUTE),
    ]


def test_rank_five_names_attributes():
    sig = ElementUnary(ActiMode.AC_MODE_TANH).infer("t", [TensorSpec((2, 1, 1, 1, 3))])
    assert [d.name for d in sig.dims] == ["sample"] + [f"attribute{i}" for i in range(1, 5)]
    assert {d.kind for d in sig.dims[1:]} == {DimKind.ATTRIBUTE}


@pytest.mark.parametrize(
    "activation, per_element",
    [
        (ActiMode.AC_MODE_NONE, 0),
        (ActiMode.AC_MODE_RELU, 1),
        (ActiMode.AC_MODE_SIGMOID, 4),
        (ActiMode.AC_MODE_TANH, 4),
        (ActiMode.AC_MODE_GELU, 8),
        (ActiMode.AC_MODE_ELU, 3),
    ],
)
def test_flops(activation, per_element):
    op = ElementUnary(activation)
    sig = op.infer("a", [TensorSpec((4, 6))])
    assert op.flops(sig, full_region((4, 6))) == (per_element * 24, per_element * 24)
    assert op.flops(sig, ((2, 4), (0, 3))) == (per_element * 6, per_element * 6)


@pytest.mark.parametrize("activation", list(ActiMode))
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2)])
def test_gradients(activation, shape):
    op = ElementUnary(activation)
    sig = op.infer("a", [TensorSpec(shape)])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(1)), [])


@pytest.mark.parametrize("activation", list(ActiMode))
def test_forward_matches_numpy(activation):
    x = np.random.default_rng(2).standard_normal((3, 4, 5))
    (y,) = ElementUnary(activation).forward([x], [])
    np.testing.assert_allclose(y, REFERENCE[activation](x), rtol=1e-12, atol=1e-12)


def test_identity_does_not_alias():
    x = np.ones((2, 3))
    (y,) = ElementUnary(ActiMode.AC_MODE_NONE).forward([x], [])
    (dx,), _ = ElementUnary(ActiMode.AC_MODE_NONE).backward([x], [], [y], [x])
    assert y is not x and dx is not x


@pytest.mark.parametrize("activation", [ActiMode.AC_MODE_RELU, ActiMode.AC_MODE_GELU])
def test_regions_are_sufficient(activation):
    op = ElementUnary(activation)
    sig = op.infer("a", [TensorSpec((4, 2, 3))])
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 10


@pytest.mark.parametrize(
    "inputs, match",
    [
        (
            [TensorSpec(())],
            r"element_unary 'a': input must have rank >= 1 \(sample first\), got shape \(\)",
        ),
        ([TensorSpec((4, 3), DType.INT32)], r"element_unary 'a': input must be float32"),
        ([TensorSpec((4, 3))] * 2, r"element_unary 'a': expected 1 input"),
    ],
)
def test_shape_errors(inputs, match):
    with pytest.raises(ShapeError, match=match):
        ElementUnary(ActiMode.AC_MODE_RELU).infer("a", inputs)


@pytest.mark.parametrize("mode", list(ActiMode))
def test_a_gradient_that_claims_not_to_need_x_is_the_same_given_y(mode):
    """Fused conv/dense/pool skip recomputing x when `grad_needs_input` is False: exact then."""
    from flexflow.ops.activations import ACTIVATIONS

    activation = ACTIVATIONS[mode]
    x = np.concatenate([np.linspace(-3, 3, 101), [0.0, -0.0, 1e-30, -1e-30]])
    y, dy = activation.forward(x), np.random.default_rng(0).standard_normal(x.shape)
    same = np.array_equal(activation.grad(x, y, dy), activation.grad(y, y, dy))
    assert same or activation.grad_needs_input
    if mode is ActiMode.AC_MODE_GELU:
        assert not same  # the flag is needed where the gradient really reads x
