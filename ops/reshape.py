"""Reshape that keeps the sample dim first and unchanged: only the sample is split (Table 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, Dim, DimKind, Op, Region, Shape, Signature, TensorSpec
from .checks import expect_inputs
from .layouts import dim_names
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Reshape(Op):
    """x (N, ...) -> (N, ...), same element count; `shape` includes N and may hold one -1."""

    kind = "reshape"
    shape: tuple[int, ...]

    def _target(self, name: str, x: TensorSpec) -> Shape:
        """`shape` with its -1 inferred, checked against the input `x`."""
        if not self.shape or any(s == 0 or s < -1 for s in self.shape):
            raise ShapeError(
                f"reshape '{name}': target shape {self.shape} for input {x.shape} must be "
                f"non-empty with positive sizes or a single -1; e.g. ({x.shape[0]}, -1)."
            )
        unknown = [i for i, s in enumerate(self.shape) if s == -1]
        if len(unknown) > 1:
            raise ShapeError(
                f"reshape '{name}': target shape {self.shape} has {len(unknown)} entries of -1 "
                f"for input {x.shape}; at most one size can be inferred, give the others."
            )
        total = math.prod(x.shape)
        known = math.prod(s for s in self.shape if s != -1)
        if unknown and total % known == 0:
            target = tuple(total // known if s == -1 else s for s in self.shape)
        elif not unknown and known == total:
            target = tuple(self.shape)
        else:
            raise ShapeError(
                f"reshape '{name}': cannot reshape input {x.shape} ({total} elements) to "
                f"{self.shape}; the target must hold exactly {total} elements."
            )
        if target[0] != x.shape[0]:
            raise ShapeError(
                f"reshape '{name}': the first dimension is the sample and must stay "
                f"{x.shape[0]}, got target {self.shape} -> {target} for input {x.shape}; keep "
                f"the batch first, e.g. ({x.shape[0]}, -1)."
            )
        return target

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        if len(x.shape) < 1:
            raise ShapeError(
                f"reshape '{name}': input must have rank >= 1 (sample first), got shape "
                f"{x.shape}; add a batch dimension."
            )
        out = TensorSpec(self._target(name, x), x.dtype)  # any dtype: token ids reshape too
        names = dim_names(len(out.shape))
        # other dims are not split: a tile of them would read a non-rectangular input region
        dims = (Dim("sample", DimKind.SAMPLE),) + tuple(Dim(n) for n in names[1:])
        return Signature((x,), (out,), (), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        rest = tuple((0, size) for size in sig.inputs[0].shape[1:])
        return ((region[0],) + rest,)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        return 0.0, 0.0  # a copy at most: bytes, no arithmetic

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        """A sample tile reshapes to the output's shape with the tile's sample count."""
        (x,) = inputs
        return (x.reshape((x.shape[0],) + sig.outputs[0].shape[1:]).copy(),)

    def backward_tile(self, sig, region, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        grad = None if not np.issubdtype(x.dtype, np.floating) else grad_outputs[0].reshape(x.shape)
        return (grad,), ()

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (x.reshape(self.shape).copy(),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        if not np.issubdtype(x.dtype, np.floating):
            return (None,), ()
        return (grad_outputs[0].reshape(x.shape).copy(),), ()
