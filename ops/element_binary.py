"""Element-wise add, subtract, multiply, divide, max, min, broadcasting dims of size 1: sample, attribute dims (Table 1).

As FlexFlow's `ElementBinary` (src/ops/element_binary.cc, `broadcastable`): the operands have
one rank, and each dimension is equal in both or 1 in one of them, which is repeated along it;
the output has the larger size of each. FlexFlow's cuDNN forward broadcasts the second input
for add, subtract, multiply, max and min and the first only for the first three
(element_binary_kernels.cu), its max/min backward indexes both inputs at the output's size and
its divide asserts; numpy's broadcasting gives the six their rules here alike, either input.
The sample dimension is never broadcast: every tensor of a model holds one row per sample of the
batch, which the data loader feeds and a sample split divides.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, DimKind, Op, Region, Shape, Signature, TensorSpec, region_volume
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


def broadcast_shape(name: str, op_type: BinaryOp, x: Shape, y: Shape) -> Shape:
    """The output shape of x (op) y: each dimension equal in both, or 1 in one of them (that
    operand is repeated along it); the rank and the sample dimension equal in both."""
    what = f"element_binary '{name}' ({op_type.value})"
    if len(x) != len(y):
        raise ShapeError(
            f"{what}: inputs must have the same rank, got {x} (rank {len(x)}) and {y} (rank "
            f"{len(y)}); broadcasting (as FlexFlow's) repeats dimensions of size 1 of operands of "
            f"one rank: reshape one input to the other's rank, with 1 where it repeats."
        )
    if x[:1] != y[:1]:
        raise ShapeError(
            f"{what}: inputs must have the same sample dimension (0), got {x} and {y}; the "
            "sample dimension is never broadcast (every tensor holds one row per sample of the "
            "batch): give both inputs the batch's samples."
        )
    for d, (a, b) in enumerate(zip(x, y, strict=True)):
        if a != b and 1 not in (a, b):
            raise ShapeError(
                f"{what}: inputs {x} and {y} cannot be broadcast: dimension {d} is {a} in one "
                f"and {b} in the other; each dimension must be equal in both or 1 in one of "
                "them (that input is repeated along it): reshape or repeat the inputs first."
            )
    return tuple(max(a, b) for a, b in zip(x, y, strict=True))


def broadcast_region(shape: Shape, region: Region) -> Region:
    """The region of an input of `shape` an output tile `region` reads: the tile's range in
    each dimension the input has whole, [0, 1) in those it is repeated along (size 1)."""
    return tuple(
        (0, 1) if size == 1 else bounds for size, bounds in zip(shape, region, strict=True)
    )


def unbroadcast(grad: np.ndarray, shape: Shape) -> np.ndarray:
    """The gradient of an input of `shape` repeated into `grad`'s shape: `grad` summed over the
    dimensions it was repeated along (kept, of size 1); `grad` itself where none was."""
    axes = tuple(
        d for d, (size, full) in enumerate(zip(shape, grad.shape, strict=True)) if size != full
    )
    return grad.sum(axis=axes, keepdims=True) if axes else grad


@register
@dataclass(frozen=True, slots=True)
class ElementBinary(Op):
    """z = x (op) y for x, y of one rank (sample, ...), each dimension equal or 1 in one of them
    (`broadcast_shape`). The output's dimensions are all partitionable; a tile reads the
    repeated input's single row along its broadcast dimensions (`broadcast_region`), so every
    tile along one reads the same row and their gradients of it are summed (as halos)."""

    kind = "element_binary"
    op_type: BinaryOp

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 2)
        x, y = inputs
        expect_float(self.kind, name, x, "first input")
        expect_float(self.kind, name, y, "second input")
        if len(x.shape) < 1 or len(y.shape) < 1:
            raise ShapeError(
                f"element_binary '{name}': inputs must have rank >= 1 (sample first), got shapes "
                f"{x.shape} and {y.shape}; add a batch dimension."
            )
        out = TensorSpec(broadcast_shape(name, self.op_type, x.shape, y.shape))
        return Signature((x, y), (out,), (), sample_dims(len(out.shape), DimKind.ATTRIBUTE))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        # element-wise: each output element reads the same element of x and y, or of the row
        # an input of size 1 along a dimension repeats
        return tuple(broadcast_region(spec.shape, region) for spec in sig.inputs)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        outputs = region_volume(region)
        # a repeated input's gradient sums the tile's into its region: one add per output left
        sums = sum(outputs - region_volume(r) for r in self.input_regions(sig, region))
        return float(outputs), float(
            BINARY_RULES[self.op_type].backward_flops_per_element * outputs + sums
        )

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        x, y = inputs
        return (BINARY_RULES[self.op_type].forward(x, y),)  # numpy broadcasts the size-1 dims

    def backward(self, inputs, weights, outputs, grad_outputs):
        # each rule on the repeated values gives the gradient of every output element; a
        # repeated input's is their sum over the dimensions it was repeated along
        x, y = inputs
        dx, dy = BINARY_RULES[self.op_type].grads(x, y, grad_outputs[0])
        return (unbroadcast(dx, x.shape), unbroadcast(dy, y.shape)), ()
