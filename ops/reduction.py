"""Reductions over non-sample dims, mean and reduce_sum: their shapes and SOAP dims (Table 1).

A reduction's output keeps the sample and every dim it does not reduce, each splittable
(sample, attribute); with `keepdims` the reduced dims stay as size 1, which no tile splits.
Every tile reads its reduced dims whole, so no task sums partial results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flexflow.errors import ShapeError

from .base import Dim, DimKind, Op, Region, Signature, TensorSpec
from .checks import expect_float, expect_inputs, normalize_axis
from .layouts import dim_names


@dataclass(frozen=True, slots=True)
class Reduction(Op):
    """x -> x reduced over `dims` (never the sample); `keepdims` leaves reduced dims as size 1.
    Subclasses give the reduction itself (forward, backward, FLOPs)."""

    dims: tuple[int, ...]
    keepdims: bool = False
    dims_argument: ClassVar[str] = "dims"
    """What the layer calls `dims` (FlexFlow's mean: dims, reduce_sum: axes), for errors."""

    def reduced_axes(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """`dims` normalized to non-negative axes of an input of `shape` (validated by `infer`)."""
        return tuple(sorted(d % len(shape) for d in self.dims))

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        if not isinstance(self.keepdims, (bool, np.bool_)):
            raise ShapeError(
                f"{self.kind} '{name}': keepdims must be True or False, got "
                f"{self.keepdims!r} (input {x.shape}); pass a bool."
            )
        rank = len(x.shape)
        if rank < 2:
            raise ShapeError(
                f"{self.kind} '{name}': input {x.shape} has no dimension but the sample's, and "
                "reducing over samples is not supported; reduce an input of rank 2 or more."
            )
        if not self.dims:
            raise ShapeError(
                f"{self.kind} '{name}': {self.dims_argument} is empty for input {x.shape}; name "
                f"at least one non-sample dimension to reduce, e.g. "
                f"{self.dims_argument}=({rank - 1},)."
            )
        axes = [normalize_axis(self.kind, name, d, rank, x.shape) for d in self.dims]
        if 0 in axes:
            raise ShapeError(
                f"{self.kind} '{name}': {self.dims_argument} {self.dims} include dimension 0, "
                f"the sample dimension of input {x.shape}; reducing over samples is not "
                f"supported, reduce only dimensions 1..{rank - 1}."
            )
        if len(set(axes)) != len(axes):
            raise ShapeError(
                f"{self.kind} '{name}': {self.dims_argument} {self.dims} name the same dimension "
                f"twice for input {x.shape} (normalized {tuple(axes)}); list each dimension once."
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
                in_region.append((0, size))  # every tile reduces its reduced dims whole
                if self.keepdims:
                    next(out_ranges)
            else:
                in_region.append(next(out_ranges))
        return (tuple(in_region),)
