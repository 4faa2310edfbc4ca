"""Element-wise activation as its own op: sample and attribute dims (paper Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .activations import ACTIVATIONS, ActiMode
from .base import (
    Arrays,
    DimKind,
    Op,
    Region,
    Signature,
    TensorSpec,
    expect_float,
    expect_inputs,
    region_volume,
    sample_dims,
)
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class ElementUnary(Op):
    """y = act(x) element by element, for x of any rank >= 1 with the sample first."""

    kind = "element_unary"
    activation: ActiMode

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        if len(x.shape) < 1:
            raise ShapeError(
                f"element_unary '{name}': input must have rank >= 1 (sample first), got shape "
                f"{x.shape}; add a batch dimension."
            )
        out = TensorSpec(x.shape)
        return Signature((x,), (out,), (), sample_dims(len(out.shape), DimKind.ATTRIBUTE))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        return (region,)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        # the gradient costs about as much as the activation itself (see ACTIVATIONS)
        work = float(ACTIVATIONS[self.activation].flops_per_element * region_volume(region))
        return work, work

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        y = ACTIVATIONS[self.activation].forward(x)
        return (y.copy() if y is x else y,)  # AC_MODE_NONE must not alias its input

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        (y,) = outputs
        dy = grad_outputs[0]
        dx = ACTIVATIONS[self.activation].grad(x, y, dy)
        return (dx.copy() if dx is dy else dx,), ()
