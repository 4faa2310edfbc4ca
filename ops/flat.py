"""Flatten (N, ...) -> (N, prod(...)): only the sample dim is partitionable (paper Table 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, Dim, DimKind, Op, Region, Signature, TensorSpec
from .checks import expect_inputs
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Flat(Op):
    """x (N, d1, ..., dk) -> (N, d1*...*dk): a reshape, no FLOPs; a sample split reads its rows."""

    kind = "flat"

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        if len(x.shape) < 2:
            raise ShapeError(
                f"flat '{name}': input must have rank >= 2 (sample, ...), got shape {x.shape}; "
                f"add a batch dimension."
            )
        out = TensorSpec((x.shape[0], math.prod(x.shape[1:])), x.dtype)
        # a channel range of the flat output is a strided set of input boxes: not partitionable
        dims = (Dim("sample", DimKind.SAMPLE), Dim("channel"))
        return Signature((x,), (out,), (), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        return ((region[0],) + tuple((0, s) for s in sig.inputs[0].shape[1:]),)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        return 0.0, 0.0

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (x.reshape(x.shape[0], -1),)  # (N, d1*...*dk)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        grad = grad_outputs[0].reshape(x.shape)  # (N, d1, ..., dk)
        return (grad if x.dtype.kind == "f" else None,), ()
