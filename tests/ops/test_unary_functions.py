"""ElementUnary with FlexFlow's functions (exp, sin, cos, pow, rsqrt, scalar_*): values, gradients,
FLOPs, regions and the errors naming the layer."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import ShapeError
from flexflow.graph import op_attributes, op_from_attributes
from flexflow.ops import ActiMode, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.element_unary import ElementUnary
from flexflow.ops.unary_functions import UNARY_FUNCTIONS, UnaryFunction

from .opcheck import assert_gradients, assert_regions_sufficient, numerical_gradient

F = UnaryFunction
SCALAR = 2.5
"""The scalar of the functions that take one (pow's exponent)."""

REFERENCE = {
    F.EXP: lambda x, s: np.e**x,
    F.SIN: lambda x, s: np.array([math.sin(v) for v in x.flat]).reshape(x.shape),
    F.COS: lambda x, s: np.array([math.cos(v) for v in x.flat]).reshape(x.shape),
    F.POW: lambda x, s: np.array([v**s for v in x.flat]).reshape(x.shape),
    F.RSQRT: lambda x, s: np.array([v**-0.5 for v in x.flat]).reshape(x.shape),
    F.SCALAR_MULTIPLY: lambda x, s: x * s,
    F.SCALAR_ADD: lambda x, s: x + s,
    F.SCALAR_SUB: lambda x, s: x - s,
    F.SCALAR_TRUE_DIVIDE: lambda x, s: x / s,
}


def op_of(function: UnaryFunction, scalar: float = SCALAR) -> ElementUnary:
    takes = UNARY_FUNCTIONS[function].scalar is not None
    return ElementUnary(function=function, scalar=scalar if takes else None)


def positive(shape, seed=1) -> np.ndarray:
    """Inputs inside every function's domain (pow's non-integer exponent, rsqrt): 0.5..2."""
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape)


def test_every_function_has_a_reference():
    assert set(REFERENCE) == set(UnaryFunction) == set(UNARY_FUNCTIONS)


@pytest.mark.parametrize("function", list(UnaryFunction))
def test_forward_matches_python(function):
    x = positive((3, 4, 5), seed=2)
    (y,) = op_of(function).forward([x], [])
    np.testing.assert_allclose(y, REFERENCE[function](x, SCALAR), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("function", list(UnaryFunction))
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2)])
def test_gradients(function, shape):
    op = op_of(function)
    assert_gradients(op, [positive(shape)], [])


@pytest.mark.parametrize("function", [F.EXP, F.SIN, F.COS, F.SCALAR_ADD, F.SCALAR_TRUE_DIVIDE])
def test_gradients_of_negative_inputs(function):
    x = np.random.default_rng(3).standard_normal((4, 5))
    assert_gradients(op_of(function, -1.5), [x], [])


@pytest.mark.parametrize("exponent", [0.0, 1.0, 2.0, 3.0, -1.0])
def test_pow_by_integer_exponents_takes_negative_inputs(exponent):
    x = np.random.default_rng(4).standard_normal((3, 4))
    op = op_of(F.POW, exponent)
    (y,) = op.forward([x], [])
    np.testing.assert_allclose(y, x**exponent, rtol=1e-12)
    assert_gradients(op, [x], [])


def test_pow_of_zero_exponent_has_a_zero_gradient_even_at_zero():
    x = np.array([[0.0, 1.0, -2.0]])
    op = op_of(F.POW, 0.0)
    (y,) = op.forward([x], [])
    (dx,), _ = op.backward([x], [], [y], [np.ones_like(x)])
    assert np.array_equal(y, np.ones_like(x)) and np.array_equal(dx, np.zeros_like(x))


def test_rsqrt_outside_its_domain_is_inf_and_nan_not_an_error():
    x = np.array([[4.0, 0.0, -1.0]])
    op = op_of(F.RSQRT)
    (y,) = op.forward([x], [])
    assert y[0, 0] == 0.5 and y[0, 1] == np.inf and np.isnan(y[0, 2])
    (dx,), _ = op.backward([x], [], [y], [np.ones_like(x)])
    assert dx[0, 0] == -0.5 * 0.5**3 and dx[0, 1] == -np.inf and np.isnan(dx[0, 2])


@settings(max_examples=60, deadline=None)
@given(
    function=st.sampled_from(list(UnaryFunction)),
    scalar=st.floats(-4, 4, allow_nan=False).filter(lambda s: abs(s) > 0.1),
    values=st.lists(st.floats(0.25, 4.0), min_size=1, max_size=6),
)
def test_backward_is_the_derivative_anywhere_in_the_domain(function, scalar, values):
    """dx == dy * f'(x) by central differences, for any scalar and any input in (0.25, 4)."""
    x = np.array([values])  # (1, n): one sample
    op = op_of(function, scalar)
    dy = np.linspace(-1.0, 1.0, x.size).reshape(x.shape)
    (y,) = op.forward([x], [])
    (dx,), _ = op.backward([x], [], [y], [dy])
    expected = numerical_gradient(lambda: float(np.sum(op.forward([x], [])[0] * dy)), x)
    np.testing.assert_allclose(dx, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("function", list(UnaryFunction))
def test_float32_stays_float32(function):
    x = positive((2, 3)).astype(np.float32)
    op = op_of(function)
    (y,) = op.forward([x], [])
    (dx,), _ = op.backward([x], [], [y], [np.ones_like(y)])
    assert y.dtype == np.float32 and dx.dtype == np.float32


@pytest.mark.parametrize("function, per_element", [(F.EXP, 4), (F.POW, 4), (F.RSQRT, 2),
                                                   (F.SCALAR_ADD, 1)])  # fmt: skip
def test_flops(function, per_element):
    op = op_of(function)
    sig = op.infer("f", [TensorSpec((4, 6))])
    assert op.flops(sig, full_region((4, 6))) == (per_element * 24, per_element * 24)


@pytest.mark.parametrize("function", [F.SIN, F.POW])
def test_regions_are_sufficient(function):
    op = op_of(function, 3.0)
    sig = op.infer("f", [TensorSpec((4, 2, 3))])
    x = np.random.default_rng(0).standard_normal((4, 2, 3))
    assert assert_regions_sufficient(op, sig, [x], []) > 10


def test_the_op_round_trips_through_a_graph_file():
    op = op_of(F.POW, 3.0)
    assert op_from_attributes("element_unary", op_attributes(op)) == op
    assert op_attributes(op) == {"activation": "none", "function": "pow", "scalar": 3.0}
    relu = ElementUnary(ActiMode.AC_MODE_RELU)
    # an activation's attributes are what graph files and measured profiles written before
    # functions existed hold (a profile's element_unary entries were all missed otherwise)
    assert op_attributes(relu) == {"activation": "relu"}
    assert op_from_attributes("element_unary", {"activation": "relu"}) == relu
    assert op_attributes(op_of(F.EXP)) == {"activation": "none", "function": "exp"}


@pytest.mark.parametrize(
    "op, match",
    [
        (ElementUnary(function=F.POW, scalar="two"),
         r"pow 'f' \(input \(4, 3\)\): exponent must be a finite number, got 'two'; pass a float"),
        (ElementUnary(function=F.POW), r"pow 'f' .*: exponent must be a finite number, got None"),
        (ElementUnary(function=F.SCALAR_ADD, scalar=math.inf),
         r"scalar_add 'f' .*: scalar must be a finite number, got inf"),
        (ElementUnary(function=F.SCALAR_MULTIPLY, scalar=True),
         r"scalar_multiply 'f' .*: scalar must be a finite number, got True"),
        (ElementUnary(function=F.SCALAR_TRUE_DIVIDE, scalar=0.0),
         r"scalar_true_divide 'f' .*: divides by scalar 0, .* pass a non-zero scalar"),
        (ElementUnary(function=F.EXP, scalar=2.0), r"exp 'f' .*: takes no scalar, got 2.0"),
        (ElementUnary(ActiMode.AC_MODE_RELU, F.EXP), r"exp 'f' .*: applies exp or activation relu"),
        (ElementUnary(ActiMode.AC_MODE_RELU, scalar=1.0),
         r"element_unary 'f': activation relu takes no scalar"),
    ],
)  # fmt: skip
def test_errors_name_the_layer_the_shape_and_the_fix(op, match):
    with pytest.raises(ShapeError, match=match):
        op.infer("f", [TensorSpec((4, 3))])


def test_pow_outside_its_domain_is_nan_and_inf_without_a_warning():
    """A negative input to a non-integer exponent, or 0 to a negative one: data (FlexFlow's
    powf gives the same), not a RuntimeWarning from every task."""
    x = np.array([[-1.0, 0.0, 4.0]], dtype=np.float32)
    for exponent, expected in ((0.5, [np.nan, 0.0, 2.0]), (-1.0, [-1.0, np.inf, 0.25])):
        op = ElementUnary(function=UnaryFunction.POW, scalar=exponent)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            (y,) = op.forward([x], [])
            (dx,), _ = op.backward([x], [], [y], [np.ones_like(x)])
        np.testing.assert_array_equal(y, np.array([expected], dtype=np.float32))
        assert dx.dtype == np.float32
