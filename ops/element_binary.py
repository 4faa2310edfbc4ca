"""Element-wise add, subtract, multiply, divide, max, min of same-shaped tensors: sample, attribute dims (Table 1)."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, DimKind, Op, Region, Signature, TensorSpec, region_volume
from .checks import expect_float, expect_inputs
from .layouts import sample_dims
from .registry import register


class BinaryOp(enum.Enum):
    """The element-wise binary operations FFModel exposes, by its method names."""

    ADD = "add"
    SUBTRACT = "subtract"
    MULTIPLY = "multiply"
    DIVIDE = "divide"
    MAX = "max"
    MIN = "min"


@dataclass(frozen=True, slots=True)
class BinaryRule:
    forward: Callable[[np.ndarray, np.ndarray], np.ndarray]
    grads: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    """grads(x, y, dz) -> (dx, dy) for z = forward(x, y)."""
    backward_flops_per_element: int
    """Forward is 1 FLOP per element; backward: add copies, subtract negates, multiply: 2,
    divide: 4 (dz / y, then -dx x / y), max and min: a compare and a select."""


def _divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # a zero y gives inf or NaN there, as FlexFlow's: data, not an error (nor a warning)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.divide(x, y)


def _divide_grads(x: np.ndarray, y: np.ndarray, dz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # z = x / y: dz/dx = 1 / y, dz/dy = -x / y^2 (a zero y gives inf or NaN, as the forward)
    with np.errstate(divide="ignore", invalid="ignore"):
        dx = dz / y
        return dx, -dx * x / y


def _select_grads(first: np.ndarray, dz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """dz to x where `first` (x was chosen), to y elsewhere. Ties go to x alone, so the two
    gradients sum to dz (FlexFlow gives each tied input all of dz, counting it twice)."""
    zero = np.zeros((), dz.dtype)
    return np.where(first, dz, zero), np.where(first, zero, dz)


def _x_chosen(x: np.ndarray, y: np.ndarray, x_wins: np.ndarray) -> np.ndarray:
    """Where max or min outputs x: where `x_wins` (ties included) or x is NaN, which numpy's
    maximum and minimum pass on (a NaN y is output where x is not NaN)."""
    return x_wins | np.isnan(x)


BINARY_RULES: dict[BinaryOp, BinaryRule] = {
    BinaryOp.ADD: BinaryRule(np.add, lambda x, y, dz: (dz.copy(), dz.copy()), 0),
    BinaryOp.SUBTRACT: BinaryRule(np.subtract, lambda x, y, dz: (dz.copy(), -dz), 1),
    BinaryOp.MULTIPLY: BinaryRule(np.multiply, lambda x, y, dz: (dz * y, dz * x), 2),
    BinaryOp.DIVIDE: BinaryRule(_divide, _divide_grads, 4),
    # np.maximum and np.minimum propagate NaN from either input; the gradient follows it
    BinaryOp.MAX: BinaryRule(
        np.maximum, lambda x, y, dz: _select_grads(_x_chosen(x, y, x >= y), dz), 2
    ),
    BinaryOp.MIN: BinaryRule(
        np.minimum, lambda x, y, dz: _select_grads(_x_chosen(x, y, x <= y), dz), 2
    ),
}


@register
@dataclass(frozen=True, slots=True)
class ElementBinary(Op):
    """z = x (op) y for x, y of identical shape (sample, ...); no broadcasting."""

    kind = "element_binary"
    op_type: BinaryOp

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 2)
        x, y = inputs
        expect_float(self.kind, name, x, "first input")
        expect_float(self.kind, name, y, "second input")
        if x.shape != y.shape:
            larger = max((x.shape, y.shape), key=math.prod)  # repeat the smaller to the larger
            raise ShapeError(
                f"element_binary '{name}' ({self.op_type.value}): inputs must have identical "
                f"shapes, got {x.shape} and {y.shape}; broadcasting is not supported, reshape "
                f"or repeat the smaller input to {larger} first."
            )
        if len(x.shape) < 1:
            raise ShapeError(
                f"element_binary '{name}': inputs must have rank >= 1 (sample first), got shape "
                f"{x.shape}; add a batch dimension."
            )
        out = TensorSpec(x.shape)
        return Signature((x, y), (out,), (), sample_dims(len(out.shape), DimKind.ATTRIBUTE))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        return (region, region)  # element-wise: each output element reads the same element of x, y

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        outputs = region_volume(region)
        return float(outputs), float(
            BINARY_RULES[self.op_type].backward_flops_per_element * outputs
        )

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        x, y = inputs
        return (BINARY_RULES[self.op_type].forward(x, y),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        x, y = inputs
        return BINARY_RULES[self.op_type].grads(x, y, grad_outputs[0]), ()
