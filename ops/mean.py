"""Mean over non-sample dims (e.g. global average pooling): sample, attribute dims (Table 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import (
    Arrays,
    Dim,
    DimKind,
    Op,
    Region,
    Signature,
    TensorSpec,
    dim_names,
    expect_float,
    expect_inputs,
    normalize_axis,
    region_volume,
)
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Mean(Op):
    """x -> mean of x over `dims` (never the sample); `keepdims` leaves reduced dims as size 1."""

    kind = "mean"
    dims: tuple[int, ...]
    keepdims: bool = False

    def reduced_axes(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """`dims` normalized to non-negative axes of an input of `shape` (validated by `infer`)."""
        return tuple(sorted(d % len(shape) for d in self.dims))

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        rank = len(x.shape)
        if not self.dims:
            raise ShapeError(
                f"mean '{name}': dims is empty for input {x.shape}; name at least one "
                f"non-sample dimension to average over, e.g. dims=({rank - 1},)."
            )
        axes = [normalize_axis(self.kind, name, d, rank, x.shape) for d in self.dims]
        if 0 in axes:
            raise ShapeError(
                f"mean '{name}': dims {self.dims} include dimension 0, the sample dimension of "
                f"input {x.shape}; averaging over samples is not supported, reduce only "
                f"dimensions 1..{rank - 1}."
            )
        if len(set(axes)) != len(axes):
            raise ShapeError(
                f"mean '{name}': dims {self.dims} name the same dimension twice for input "
                f"{x.shape} (normalized {tuple(axes)}); list each dimension once."
            )
        reduced = set(axes)
        names = dim_names(rank)
        shape: list[int] = []
        dims: list[Dim] = []
        for axis, size in enumerate(x.shape):
            if axis not in reduced:
                shape.append(size)
                dims.append(Dim(names[axis], DimKind.SAMPLE if axis == 0 else DimKind.ATTRIBUTE))
            elif self.keepdims:
                shape.append(1)
                dims.append(Dim(names[axis], None))  # size 1 left by the reduction: not split
        return Signature((x,), (TensorSpec(tuple(shape)),), (), tuple(dims))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        shape = sig.inputs[0].shape
        reduced = self.reduced_axes(shape)
        out_ranges = iter(region)
        in_region = []
        for axis, size in enumerate(shape):
            if axis in reduced:
                in_region.append((0, size))  # every tile averages its reduced dims whole
                if self.keepdims:
                    next(out_ranges)
            else:
                in_region.append(next(out_ranges))
        return (tuple(in_region),)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        # forward: one add per input element read (n - 1 adds and 1 divide per output);
        # backward: one multiply by 1/n per input element
        (in_region,) = self.input_regions(sig, region)
        reads = float(region_volume(in_region))
        return reads, reads

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (x.mean(axis=self.reduced_axes(x.shape), keepdims=self.keepdims),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        reduced = self.reduced_axes(x.shape)
        count = math.prod(x.shape[a] for a in reduced)
        dy = grad_outputs[0]
        if not self.keepdims:
            dy = np.expand_dims(dy, reduced)  # (N, ..., 1, ...): reduced dims back as size 1
        return (np.broadcast_to(dy, x.shape) / count,), ()
