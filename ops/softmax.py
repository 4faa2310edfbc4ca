"""Softmax along one axis: every other dim splits, the normalized axis does not (paper §4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, Dim, DimKind, Op, Region, Signature, TensorSpec, region_volume
from .checks import expect_float, expect_inputs, normalize_axis
from .layouts import dim_names
from .registry import register

FORWARD_FLOPS = 5
"""Per element: the max, subtract it, exp, sum, divide."""
BACKWARD_FLOPS = 4
"""Per element: dy * y, its sum, subtract, multiply by y."""


@register
@dataclass(frozen=True, slots=True)
class Softmax(Op):
    """x (N, ...) -> exp(x) / sum(exp(x)) along `axis`, which must not be the sample axis."""

    kind = "softmax"
    axis: int = -1

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        rank = len(x.shape)
        if rank < 2:
            raise ShapeError(
                f"softmax '{name}': input must have rank >= 2 (sample, ..., classes), got shape "
                f"{x.shape}; add a batch dimension."
            )
        axis = normalize_axis(self.kind, name, self.axis, rank, x.shape)
        if axis == 0:
            raise ShapeError(
                f"softmax '{name}': axis {self.axis} is the sample axis of input {x.shape}; "
                "softmax normalizes within a sample, pass an axis >= 1 (default -1)."
            )
        dims = tuple(
            Dim(n, None if i == axis else DimKind.SAMPLE if i == 0 else DimKind.ATTRIBUTE)
            for i, n in enumerate(dim_names(rank))
        )
        return Signature((x,), (x,), (), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        shape = sig.inputs[0].shape
        axis = self.axis % len(shape)
        return (region[:axis] + ((0, shape[axis]),) + region[axis + 1 :],)  # the whole axis

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        elements = region_volume(self.input_regions(sig, region)[0])
        return float(FORWARD_FLOPS * elements), float(BACKWARD_FLOPS * elements)

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        e = np.exp(x - x.max(axis=self.axis, keepdims=True))  # shifted: no overflow
        return (e / e.sum(axis=self.axis, keepdims=True),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (y,) = outputs
        (dy,) = grad_outputs
        return (y * (dy - (dy * y).sum(axis=self.axis, keepdims=True)),), ()
