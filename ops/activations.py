"""Activation functions as a table: forward, gradient and FLOPs per element, shared by fused layers and element-wise ops."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


class ActiMode(enum.Enum):
    """FlexFlow's activation modes (`AC_MODE_*`), fused into conv2d/dense or applied as their own op."""

    AC_MODE_NONE = "none"
    AC_MODE_RELU = "relu"
    AC_MODE_SIGMOID = "sigmoid"
    AC_MODE_TANH = "tanh"
    AC_MODE_GELU = "gelu"
    AC_MODE_ELU = "elu"


@dataclass(frozen=True, slots=True)
class Activation:
    forward: Callable[[np.ndarray], np.ndarray]
    grad: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
    """grad(x, y, dy) -> dx, given the input x, the output y = forward(x) and dy."""
    flops_per_element: int
    grad_needs_input: bool = False
    """False when `grad` reads only y and dy (x may then be passed as y): fused layers skip
    recomputing their pre-activation in the backward pass, a whole conv or matmul."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free form of 1 / (1 + exp(-x))


_GELU_C = math.sqrt(2.0 / math.pi)


_GELU_A = 0.044715


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """tanh(C (x + A x^3)), in one new array. The cube is x * x * x: numpy's float32 `x**3`
    calls powf per element, 240x slower (7 ms against 0.03 ms for a transformer's 512 x 256
    feed-forward tile), which made GELU 97% of a dense layer's time."""
    t = x * x
    t *= _GELU_A
    t += 1.0
    t *= x
    t *= _GELU_C
    return np.tanh(t, out=t)


def _gelu(x: np.ndarray) -> np.ndarray:
    # tanh approximation of GELU (Hendrycks & Gimpel 2016), as in BERT and GPT-2.
    y = _gelu_tanh(x)
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _gelu_grad(x: np.ndarray, y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    t = _gelu_tanh(x)
    # d/dx: 0.5 (1 + t) + 0.5 x (1 - t^2) C (1 + 3 A x^2)
    slope = x * x
    slope *= 3 * _GELU_A
    slope += 1.0
    slope *= x
    slope *= 0.5 * _GELU_C
    slope *= 1.0 - t * t
    t += 1.0
    t *= 0.5
    t += slope
    t *= dy
    return t


ACTIVATIONS: dict[ActiMode, Activation] = {
    ActiMode.AC_MODE_NONE: Activation(lambda x: x, lambda x, y, dy: dy, 0),
    # relu and elu: x > 0 exactly when y > 0, so their gradients read y alone
    ActiMode.AC_MODE_RELU: Activation(lambda x: np.maximum(x, 0), lambda x, y, dy: dy * (y > 0), 1),
    ActiMode.AC_MODE_SIGMOID: Activation(_sigmoid, lambda x, y, dy: dy * y * (1 - y), 4),
    ActiMode.AC_MODE_TANH: Activation(np.tanh, lambda x, y, dy: dy * (1 - y * y), 4),
    ActiMode.AC_MODE_GELU: Activation(_gelu, _gelu_grad, 8, grad_needs_input=True),
    # ELU with alpha = 1: x for x > 0, exp(x) - 1 otherwise.
    ActiMode.AC_MODE_ELU: Activation(
        lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
        lambda x, y, dy: dy * np.where(y > 0, 1.0, y + 1.0),
        3,
    ),
}
