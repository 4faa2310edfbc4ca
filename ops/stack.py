"""Stack equal tensors on a new axis (LSTM steps -> (N, T, H)): sample, attribute dims (Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import (
    Arrays,
    Op,
    Region,
    Signature,
    TensorSpec,
)
from .concat import joined_axis_dims
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Stack(Op):
    """T inputs of shape (N, ...) -> one output with a new axis of length T at `axis` (>= 1).

    The new axis is not partitionable (each input is one slice of it); the other dims split
    every input alike.
    """

    kind = "stack"
    axis: int = 1

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        if not inputs:
            raise ShapeError(
                f"stack '{name}': expected at least 1 input tensor, got 0; "
                f"pass the tensors to stack."
            )
        shapes = tuple(x.shape for x in inputs)
        if len(set(shapes)) != 1 or len({x.dtype for x in inputs}) != 1:
            raise ShapeError(
                f"stack '{name}': inputs must have one shape and dtype, got shapes {shapes} "
                f"({tuple(x.dtype.value for x in inputs)}); make them equal first."
            )
        shape = shapes[0]
        if not shape:
            raise ShapeError(
                f"stack '{name}': inputs must have rank >= 1 (sample, ...), got shape {shape}; "
                f"add a batch dimension."
            )
        rank = len(shape) + 1  # the output's rank: the inputs' plus the new axis
        if not -rank <= self.axis < rank:
            raise ShapeError(
                f"stack '{name}': axis {self.axis} is out of range for the rank-{rank} output "
                f"(inputs of shape {shape} plus the new axis); use an axis in [1, {rank - 1}]."
            )
        axis = self.axis % rank
        if axis == 0:
            raise ShapeError(
                f"stack '{name}': cannot stack along axis {self.axis}, the sample dimension of "
                f"the output (input shape {shape}); stack along an axis in [1, {rank - 1}]."
            )
        out = TensorSpec(shape[:axis] + (len(inputs),) + shape[axis:], inputs[0].dtype)
        return Signature(tuple(inputs), (out,), (), joined_axis_dims(rank, axis))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        axis = self.axis % len(region)
        per_input = region[:axis] + region[axis + 1 :]  # the tile without the new axis
        return tuple(per_input for _ in sig.inputs)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        return 0.0, 0.0  # a copy: its cost is the bytes tile_cost counts

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        return (np.stack(inputs, axis=self.axis),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        axis = self.axis % grad_outputs[0].ndim
        grads = np.moveaxis(grad_outputs[0], axis, 0)  # (T, N, ...)
        return tuple(
            g if x.dtype.kind == "f" else None for g, x in zip(grads, inputs, strict=True)
        ), ()
