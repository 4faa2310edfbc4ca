"""Sum over non-sample dims (FlexFlow's reduce_sum): sample, attribute dims (Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .base import Arrays, Region, Signature, region_volume
from .reduction import Reduction
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class ReduceSum(Reduction):
    """x -> sum of x over `dims` (never the sample); `keepdims` leaves reduced dims as size 1,
    as FlexFlow's keepdims (shapes and SOAP dims: `reduction.Reduction`)."""

    kind = "reduce_sum"
    dims_argument = "axes"

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        # forward: one add per input element read; backward copies dy to every element it summed
        (in_region,) = self.input_regions(sig, region)
        return float(region_volume(in_region)), 0.0

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (x.sum(axis=self.reduced_axes(x.shape), keepdims=self.keepdims),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        dy = grad_outputs[0]
        if not self.keepdims:
            dy = np.expand_dims(dy, self.reduced_axes(x.shape))  # reduced dims back as size 1
        return (np.broadcast_to(dy, x.shape).copy(),), ()  # (N, ...): each element's dy
