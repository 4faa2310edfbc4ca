"""Split along a non-sample axis into parts of given sizes: sample and attribute dims (Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, Op, Region, Signature, TensorSpec
from .checks import expect_inputs, normalize_axis
from .concat import joined_axis_dims
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Split(Op):
    """x -> one output per entry of `sizes`, consecutive slices of x along `axis`.

    SOAP tiles output 0; every output shares its tiling of the dims other than `axis`, and each
    output's `axis` is taken whole (`output_regions`).
    """

    kind = "split"
    sizes: tuple[int, ...]
    axis: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(int(s) for s in self.sizes))

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        rank = len(x.shape)
        axis = normalize_axis(self.kind, name, self.axis, rank, x.shape)
        if axis == 0:
            raise ShapeError(
                f"split '{name}': cannot split along axis {self.axis}, the sample dimension "
                f"(input shape {x.shape}); split along an axis >= 1."
            )
        if not self.sizes or any(s <= 0 for s in self.sizes):
            raise ShapeError(
                f"split '{name}': sizes must be one or more positive lengths, got {self.sizes}; "
                f"drop empty parts."
            )
        if sum(self.sizes) != x.shape[axis]:
            raise ShapeError(
                f"split '{name}': sizes {self.sizes} sum to {sum(self.sizes)}, but axis {axis} of "
                f"input shape {x.shape} has length {x.shape[axis]}; pass sizes that sum to "
                f"{x.shape[axis]}."
            )
        outs = tuple(
            TensorSpec(x.shape[:axis] + (s,) + x.shape[axis + 1 :], x.dtype) for s in self.sizes
        )
        return Signature((x,), outs, (), joined_axis_dims(rank, axis))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        axis = self.axis % len(region)
        length = sig.inputs[0].shape[axis]
        return (region[:axis] + ((0, length),) + region[axis + 1 :],)  # all parts of the tile

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        return 0.0, 0.0  # a copy: its cost is the bytes tile_cost counts

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        bounds = np.cumsum(self.sizes)[:-1]
        return tuple(np.split(x, bounds, axis=self.axis))

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        grad = np.concatenate(grad_outputs, axis=self.axis)
        return (grad if x.dtype.kind == "f" else None,), ()
