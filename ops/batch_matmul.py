"""Batched matrix product A @ B (attention's Q K^T and P V): every output dim splits (paper §4)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import Arrays, Dim, DimKind, Op, Region, Signature, TensorSpec, region_volume
from .checks import expect_float, expect_inputs
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class BatchMatmul(Op):
    """A (N, ..., M, K) @ B (N, ..., K, P) -> (N, ..., M, P).

    No weights, so no parameter dims: the leading dims, the rows M and the columns P are all
    attributes. A tile reads its rows of A and its columns of B, each with all of K.
    """

    kind = "batch_matmul"

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 2)
        a, b = inputs
        expect_float(self.kind, name, a, "A")
        expect_float(self.kind, name, b, "B")
        if len(a.shape) < 3 or len(a.shape) != len(b.shape):
            raise ShapeError(
                f"batch_matmul '{name}': A and B must have the same rank >= 3 (sample, ..., rows, "
                f"cols), got A {a.shape} and B {b.shape}; reshape both to (N, ..., M, K) and "
                "(N, ..., K, P)."
            )
        if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
            raise ShapeError(
                f"batch_matmul '{name}': A {a.shape} and B {b.shape} do not multiply; expected "
                f"B of shape {a.shape[:-2] + (a.shape[-1], b.shape[-1])} (equal leading dims and "
                "B's rows equal to A's columns); transpose or reshape an operand."
            )
        out = TensorSpec(a.shape[:-1] + b.shape[-1:])
        leading = len(a.shape) - 3
        dims = (
            (Dim("sample", DimKind.SAMPLE),)
            + tuple(Dim(f"attribute{i}", DimKind.ATTRIBUTE) for i in range(1, leading + 1))
            + (Dim("row", DimKind.ATTRIBUTE), Dim("column", DimKind.ATTRIBUTE))
        )
        return Signature((a, b), (out,), (), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        inner = (0, sig.inputs[0].shape[-1])  # the contracted dim K, read whole
        *batch, rows, cols = region
        return tuple(batch) + (rows, inner), tuple(batch) + (inner, cols)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        inner = sig.inputs[0].shape[-1]
        forward = 2.0 * region_volume(region) * inner
        return forward, 2 * forward  # dA = dC B^T and dB = A^T dC

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        a, b = inputs
        return (a @ b,)

    def backward(self, inputs, weights, outputs, grad_outputs):
        a, b = inputs
        (dc,) = grad_outputs  # (N, ..., M, P)
        return (dc @ np.swapaxes(b, -1, -2), np.swapaxes(a, -1, -2) @ dc), ()
