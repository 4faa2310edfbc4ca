"""Concatenation along a non-sample axis: sample and attribute dims (paper Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, Dim, DimKind, Op, Region, Signature, TensorSpec
from .checks import normalize_axis
from .layouts import dim_names
from .registry import register


def joined_axis_dims(rank: int, axis: int) -> tuple[Dim, ...]:
    """Dims of an output joined or split along `axis`: sample, `axis` whole, others attributes."""
    names = dim_names(rank)
    return (Dim("sample", DimKind.SAMPLE),) + tuple(
        Dim(n, None if i == axis else DimKind.ATTRIBUTE) for i, n in enumerate(names) if i > 0
    )


@register
@dataclass(frozen=True, slots=True)
class Concat(Op):
    """Inputs equal on every axis but `axis` -> one tensor whose `axis` is the sum of theirs.

    The joined axis is not partitionable: a tile along it would read a data-dependent subset of
    the inputs. Every other dim splits every input the same way.
    """

    kind = "concat"
    axis: int

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        if not inputs:
            raise ShapeError(
                f"concat '{name}': expected at least 1 input tensor, got 0; "
                f"pass the tensors to join."
            )
        shapes = tuple(x.shape for x in inputs)
        rank = len(shapes[0])
        if any(len(s) != rank for s in shapes):
            raise ShapeError(
                f"concat '{name}': inputs must all have the same rank, got shapes {shapes}; "
                f"reshape them to one rank first."
            )
        if len({x.dtype for x in inputs}) != 1:
            raise ShapeError(
                f"concat '{name}': inputs must share one dtype, got "
                f"{tuple(x.dtype.value for x in inputs)} for shapes {shapes}; cast them first."
            )
        axis = normalize_axis(self.kind, name, self.axis, rank, shapes[0])
        if axis == 0:
            raise ShapeError(
                f"concat '{name}': cannot concatenate along axis {self.axis}, the sample "
                f"dimension (input shapes {shapes}); join along an axis >= 1."
            )
        rest = {s[:axis] + s[axis + 1 :] for s in shapes}
        if len(rest) != 1:
            raise ShapeError(
                f"concat '{name}': inputs must match on every axis but {axis}, got shapes "
                f"{shapes}; make the other dimensions equal."
            )
        joined = sum(s[axis] for s in shapes)
        out = TensorSpec(shapes[0][:axis] + (joined,) + shapes[0][axis + 1 :], inputs[0].dtype)
        return Signature(tuple(inputs), (out,), (), joined_axis_dims(rank, axis))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        axis = self.axis % len(region)
        return tuple(region[:axis] + ((0, x.shape[axis]),) + region[axis + 1 :] for x in sig.inputs)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        return 0.0, 0.0  # a copy: its cost is the bytes tile_cost counts

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        return (np.concatenate(inputs, axis=self.axis),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        axis = self.axis % inputs[0].ndim
        bounds = np.cumsum([x.shape[axis] for x in inputs])[:-1]
        grads = np.split(grad_outputs[0], bounds, axis=axis)
        return tuple(
            g if x.dtype.kind == "f" else None for g, x in zip(grads, inputs, strict=True)
        ), ()
