"""FlexFlow's element-wise functions other than activations, as a table: forward, gradient, FLOPs.

These are FlexFlow's `exp`, `sin`, `cos`, `pow`, `rsqrt` and `scalar_*` layers, which its
ElementUnary op computes beside the activations. They are not `ActiMode`s: an ActiMode is also
what conv2d and dense fuse, and FlexFlow fuses only none/relu/sigmoid/tanh/gelu/elu there.
(`identity` is `ActiMode.AC_MODE_NONE`, which copies.) Some take one scalar: pow's exponent, or
the operand of the scalar arithmetic.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class UnaryFunction(enum.Enum):
    """FlexFlow's element-wise functions by their FFModel method names."""

    EXP = "exp"
    SIN = "sin"
    COS = "cos"
    POW = "pow"
    RSQRT = "rsqrt"
    SCALAR_MULTIPLY = "scalar_multiply"
    SCALAR_ADD = "scalar_add"
    SCALAR_SUB = "scalar_sub"
    SCALAR_TRUE_DIVIDE = "scalar_true_divide"


@dataclass(frozen=True, slots=True)
class UnaryRule:
    forward: Callable[[np.ndarray, float], np.ndarray]
    """forward(x, s) -> y; `s` is the scalar (0.0 for a function that takes none)."""
    grad: Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]
    """grad(x, y, dy, s) -> dx for y = forward(x, s)."""
    flops_per_element: int
    """Of the forward; the gradient costs about as much. A transcendental counts 4 (as
    sigmoid and tanh in `activations.ACTIVATIONS`)."""
    scalar: str | None = None
    """The scalar's name in FlexFlow's signature, or None for a function that takes none."""


def _pow(x: np.ndarray, e: float) -> np.ndarray:
    # a negative x with a non-integer e gives NaN, 0 with a negative e inf, as FlexFlow's
    # powf: data, not an error (nor a warning)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.power(x, e)


def _pow_grad(x: np.ndarray, y: np.ndarray, dy: np.ndarray, e: float) -> np.ndarray:
    # d/dx x^e = e x^(e-1); for e == 0 the output is constant, and 0 * 0^-1 would be NaN
    if e == 0:
        return np.zeros_like(dy)
    with np.errstate(divide="ignore", invalid="ignore"):
        return dy * (e * np.power(x, e - 1))


def _rsqrt(x: np.ndarray, s: float) -> np.ndarray:
    # x = 0 gives inf and x < 0 NaN, as FlexFlow's 1 / sqrt(x): data, not an error
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(x)


UNARY_FUNCTIONS: dict[UnaryFunction, UnaryRule] = {
    UnaryFunction.EXP: UnaryRule(lambda x, s: np.exp(x), lambda x, y, dy, s: dy * y, 4),
    UnaryFunction.SIN: UnaryRule(lambda x, s: np.sin(x), lambda x, y, dy, s: dy * np.cos(x), 4),
    UnaryFunction.COS: UnaryRule(lambda x, s: np.cos(x), lambda x, y, dy, s: -dy * np.sin(x), 4),
    # negative x with a non-integer exponent gives NaN, as FlexFlow's powf
    UnaryFunction.POW: UnaryRule(_pow, _pow_grad, 4, "exponent"),
    # d/dx x^(-1/2) = -x^(-3/2) / 2 = -y^3 / 2 (FlexFlow's rule too)
    UnaryFunction.RSQRT: UnaryRule(_rsqrt, lambda x, y, dy, s: -0.5 * dy * y * y * y, 2),
    UnaryFunction.SCALAR_MULTIPLY: UnaryRule(
        lambda x, s: x * s, lambda x, y, dy, s: dy * s, 1, "scalar"
    ),
    UnaryFunction.SCALAR_ADD: UnaryRule(
        lambda x, s: x + s, lambda x, y, dy, s: dy.copy(), 1, "scalar"
    ),
    UnaryFunction.SCALAR_SUB: UnaryRule(
        lambda x, s: x - s, lambda x, y, dy, s: dy.copy(), 1, "scalar"
    ),
    UnaryFunction.SCALAR_TRUE_DIVIDE: UnaryRule(
        lambda x, s: x / s, lambda x, y, dy, s: dy / s, 1, "scalar"
    ),
}
