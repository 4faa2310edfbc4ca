"""Mean over non-sample dims (e.g. global average pooling): sample, attribute dims (Table 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .base import Arrays, Region, Signature, region_volume
from .reduction import Reduction
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Mean(Reduction):
    """x -> mean of x over `dims` (never the sample); `keepdims` leaves reduced dims as size 1
    (shapes and SOAP dims: `reduction.Reduction`)."""

    kind = "mean"

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
