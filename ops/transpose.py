"""Permutation of non-sample dims (e.g. NCHW -> NHWC): sample and attribute dims (Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, Dim, DimKind, Op, Region, Signature, TensorSpec
from .checks import expect_inputs, is_int
from .layouts import dim_names
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Transpose(Op):
    """out = x.transpose(perm) (numpy: output dim i is input dim perm[i]); perm[0] == 0."""

    kind = "transpose"
    perm: tuple[int, ...]

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        rank = len(x.shape)
        if rank < 1:
            raise ShapeError(
                f"transpose '{name}': input must have rank >= 1 (sample first), got shape "
                f"{x.shape}; add a batch dimension."
            )
        if not all(map(is_int, self.perm)) or sorted(self.perm) != list(range(rank)):
            raise ShapeError(
                f"transpose '{name}': perm {self.perm} is not a permutation of "
                f"{tuple(range(rank))} for input {x.shape} (rank {rank}); list each "
                f"dimension exactly once."
            )
        if self.perm[0] != 0:
            raise ShapeError(
                f"transpose '{name}': perm {self.perm} moves dimension {self.perm[0]} first for "
                f"input {x.shape}, but the sample dimension must stay first; use perm[0] == 0."
            )
        out = TensorSpec(tuple(x.shape[p] for p in self.perm), x.dtype)
        names = dim_names(rank)
        dims = (Dim("sample", DimKind.SAMPLE),) + tuple(
            Dim(names[p], DimKind.ATTRIBUTE) for p in self.perm[1:]
        )
        return Signature((x,), (out,), (), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        in_region: list[tuple[int, int]] = [(0, 0)] * len(region)
        for out_axis, in_axis in enumerate(self.perm):
            in_region[in_axis] = region[out_axis]  # output axis i is input axis perm[i]
        return (tuple(in_region),)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        return 0.0, 0.0  # data movement only

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (np.ascontiguousarray(x.transpose(self.perm)),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        if not np.issubdtype(x.dtype, np.floating):
            return (None,), ()
        inverse = tuple(int(a) for a in np.argsort(self.perm))
        return (np.ascontiguousarray(grad_outputs[0].transpose(inverse)),), ()
