"""Inverted dropout whose mask any tiling reproduces: sample and attribute dims (paper Table 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from . import native_dropout
from .base import (
    Arrays,
    DimKind,
    Op,
    Region,
    Shape,
    Signature,
    TensorSpec,
    full_region,
    region_shape,
    region_volume,
)
from .checks import expect_float, expect_inputs
from .layouts import sample_dims
from .registry import register

# splitmix64 constants (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", 2014)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_UINT64_MASK = (1 << 64) - 1


def _mix64(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a uint64 bijection scattering nearby counters (wraps mod 2**64)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _global_indices(shape: Shape, region: Region) -> np.ndarray:
    """Row-major flat index into `shape` of each element of `region` (uint64, region-shaped)."""
    index = np.zeros((1,) * len(shape), dtype=np.uint64)
    stride = 1
    for axis in reversed(range(len(shape))):
        start, stop = region[axis]
        along = np.arange(start, stop, dtype=np.uint64) * np.uint64(stride)
        index = index + along.reshape((-1,) + (1,) * (len(shape) - 1 - axis))
        stride *= shape[axis]
    return np.broadcast_to(index, region_shape(region))


def dropout_mask(seed: int, rate: float, shape: Shape, region: Region | None = None) -> np.ndarray:
    """The keep mask (bool) of the elements of `region` (default: all) of a tensor of `shape`.

    Element i (row-major flat index in the whole tensor) is kept iff u_i >= rate, where u_i in
    [0, 1) comes from splitmix64 at counter i of the stream `seed`. The mask is a pure function of
    (seed, global index), so a device computing one tile gets exactly the slice of the mask a
    single device would compute for the whole tensor.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    shape = tuple(int(s) for s in shape)
    region = full_region(shape) if region is None else tuple(region)
    if len(region) != len(shape) or any(
        not 0 <= start <= stop <= size for (start, stop), size in zip(region, shape, strict=False)
    ):
        raise ValueError(f"region {region} is not inside shape {shape}")
    if rate == 0.0:
        return np.ones(region_shape(region), dtype=bool)
    # 1-d arrays throughout: numpy wraps uint64 arrays silently but warns on scalar overflow
    key = _mix64(np.array([seed & _UINT64_MASK], dtype=np.uint64))
    counters = _global_indices(shape, region).reshape(-1) + np.uint64(1)
    bits = _mix64(key + counters * _GOLDEN)
    uniform = (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53  # top 53 bits -> [0, 1)
    return (uniform >= rate).reshape(region_shape(region))


@register
@dataclass(frozen=True, slots=True)
class Dropout(Op):
    """Training-mode inverted dropout y = x * mask / (1 - rate), mask from (seed, element index)."""

    kind = "dropout"
    training_mode = True
    rate: float
    seed: int = 0

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        real = isinstance(self.rate, (int, float)) and not isinstance(self.rate, bool)
        if not (real and math.isfinite(self.rate) and 0.0 <= self.rate < 1.0):
            raise ShapeError(
                f"dropout '{name}': rate must be in [0, 1), got {self.rate!r} (input {x.shape}); "
                f"pass the fraction of elements to drop, e.g. 0.1."
            )
        if len(x.shape) < 1:
            raise ShapeError(
                f"dropout '{name}': input must have rank >= 1 (sample first), got shape "
                f"{x.shape}; add a batch dimension."
            )
        out = TensorSpec(x.shape)
        return Signature((x,), (out,), (), sample_dims(len(out.shape), DimKind.ATTRIBUTE))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        return (region,)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        # one multiply by mask / (1 - rate) each way; the integer hash is not counted as FLOPs
        outputs = float(region_volume(region))
        return outputs, outputs

    def _apply(self, x: np.ndarray, shape: Shape, region: Region) -> np.ndarray:
        """x (the `region` of a tensor of `shape`) times its mask / (1 - rate), in float64,
        rounded to x's type (as the C step does, and as a store of x's type would). A float32
        tile of whole samples goes through the C kernel (ops/native_dropout.py `dropout`), the same
        bits: numpy's uint64 hashing took 0.2-0.8 ms for a transformer's 32k-value tile."""
        if x.dtype == np.float32 and region_shape(region)[1:] == tuple(shape[1:]):
            base = region[0][0] * math.prod(shape[1:])
            return native_dropout.dropout(self.seed & _UINT64_MASK, self.rate, base, x)
        scale = dropout_mask(self.seed, self.rate, shape, region) / (1.0 - self.rate)
        return (x * scale).astype(x.dtype)

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        """A tile's mask comes from its global element indices: any tiling gives the same mask."""
        return (self._apply(inputs[0], sig.outputs[0].shape, region),)

    def backward_tile(self, sig, region, inputs, weights, outputs, grad_outputs):
        return (self._apply(grad_outputs[0], sig.outputs[0].shape, region),), ()

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (self._apply(x, x.shape, full_region(x.shape)),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        return (self._apply(grad_outputs[0], x.shape, full_region(x.shape)),), ()
