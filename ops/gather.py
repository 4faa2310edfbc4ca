"""Gather along one axis by an integer index tensor (FlexFlow's gather, torch.gather): sample and attribute dims (Table 1).

out[..., i, ...] = x[..., index[..., i, ...], ...] along `dim`. The index has the input's rank
and its sizes on every other dim (FlexFlow asks that much, more than torch.gather); the output
has the index's shape and the input's dtype. The gradient flows to the input alone, as a
scatter-add of the output's gradient (repeated indices add up); the index gets none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from .base import (
    Arrays,
    DimKind,
    Op,
    Region,
    Signature,
    TensorSpec,
    TileCost,
    region_volume,
)
from .checks import expect_inputs, normalize_axis
from .layouts import sample_dims
from .registry import register


@register
@dataclass(frozen=True, slots=True)
class Gather(Op):
    """(x, index) -> x's entries picked along `dim` by index; the output has index's shape.

    Every output dim splits: a tile reads the index's same tile and the input's rows of the
    tile on every dim but `dim`, where it reads the input whole (any index may occur). The
    gather dim may not be the sample: that would mix samples.
    """

    kind = "gather"
    dim: int

    def axis(self, rank: int) -> int:
        """`dim` from 0 (a negative dim counts from the end)."""
        return self.dim % rank

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 2)
        x, index = inputs
        if not x.dtype.is_float:
            raise ShapeError(
                f"gather '{name}': input (the first tensor) must be float32, got "
                f"{x.dtype.value} tensor of shape {x.shape}; gather from a float tensor."
            )
        if index.dtype.is_float:
            raise ShapeError(
                f"gather '{name}': index (the second tensor) must be an integer (int32/int64) "
                f"tensor, got {index.dtype.value} tensor of shape {index.shape}; create it with "
                "DataType.DT_INT32 (keras: Input(..., dtype='int32'))."
            )
        if len(index.shape) != len(x.shape):
            raise ShapeError(
                f"gather '{name}': index must have the input's rank, got input {x.shape} "
                f"(rank {len(x.shape)}) and index {index.shape} (rank {len(index.shape)}); "
                "give the index one entry per input position on every dim but the gather dim."
            )
        axis = normalize_axis(self.kind, name, self.dim, len(x.shape), x.shape)
        if axis == 0:
            raise ShapeError(
                f"gather '{name}': cannot gather along dim {self.dim}, the sample dimension "
                f"(input {x.shape}, index {index.shape}): it would mix samples; gather along "
                "a dim >= 1."
            )
        others = [i for i in range(len(x.shape)) if i != axis]
        if any(index.shape[i] != x.shape[i] for i in others):
            raise ShapeError(
                f"gather '{name}': index must match the input on every dim but dim {axis}, got "
                f"input {x.shape} and index {index.shape}; make the index's other sizes equal "
                "the input's (repeat it along them, as torch.gather's callers do)."
            )
        out = TensorSpec(index.shape, x.dtype)
        return Signature((x, index), (out,), (), sample_dims(len(out.shape), DimKind.ATTRIBUTE))

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        axis = self.axis(len(region))
        whole = (0, sig.inputs[0].shape[axis])  # any index may occur: the input whole along dim
        return (region[:axis] + (whole,) + region[axis + 1 :], region)

    def index_limit(self, sig: Signature, which: int) -> int | None:
        x = sig.inputs[0].shape
        return x[self.axis(len(x))] if which == 1 else None

    def index_terms(self, sig: Signature, limit: int, bad: int, high: int) -> tuple[str, str, str]:
        x = sig.inputs[0].shape
        where = f"input {x}, gathering along dim {self.axis(len(x))}"
        return "index", where, f"indices count from 0: map them into [0, {limit})"

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        # forward copies; backward adds each output gradient into its input entry
        return 0.0, float(region_volume(region))

    def tile_cost(self, sig: Signature, region: Region) -> TileCost:
        """Memory bound: forward reads the index tile and one input entry per output entry and
        writes the output tile; backward reads the output gradient and the index tile and
        writes the input's gradient region (zeroed, then added into)."""
        fwd_flops, bwd_flops = self.flops(sig, region)
        x, index = sig.inputs
        x_region, _ = self.input_regions(sig, region)
        outputs = region_volume(region)
        index_bytes = outputs * index.dtype.itemsize
        out_bytes = outputs * sig.outputs[0].dtype.itemsize
        picked_bytes = min(outputs, region_volume(x_region)) * x.dtype.itemsize
        return TileCost(
            forward_flops=fwd_flops,
            backward_flops=bwd_flops,
            forward_bytes_read=index_bytes + picked_bytes,
            forward_bytes_written=out_bytes,
            backward_bytes_read=out_bytes + index_bytes,
            backward_bytes_written=region_volume(x_region) * x.dtype.itemsize,
        )

    def check_index(self, x_shape: tuple[int, ...], index: np.ndarray) -> None:
        """Refuse index values outside the input's range along `dim`, naming them and the fix."""
        axis = self.axis(len(x_shape))
        size = x_shape[axis]
        if index.size and (index.min() < 0 or index.max() >= size):
            raise ShapeError(
                f"gather along dim {axis}: index values must lie in [0, {size}) (input "
                f"{x_shape}), got values in [{index.min()}, {index.max()}]; map the index into "
                "that range."
            )

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        x, index = inputs
        self.check_index(x.shape, index)
        return (np.take_along_axis(x, index, axis=self.axis(x.ndim)),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        x, index = inputs
        (dy,) = grad_outputs
        self.check_index(x.shape, index)
        return (scatter_add(x.shape, self.axis(x.ndim), index, dy), None), ()


def scatter_add(shape: tuple[int, ...], axis: int, index: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """The gradient of x (of `shape`) from gather's output gradient `dy`: each entry of dy
    added into x's entry its index names along `axis`, repeated indices adding up."""
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    picked = index.reshape(outer, index.shape[axis], inner).astype(np.int64)  # (outer, I, inner)
    flat = (np.arange(outer)[:, None, None] * shape[axis] + picked) * inner
    flat = flat + np.arange(inner)[None, None, :]  # x's flat position of each dy entry
    sums = np.bincount(flat.reshape(-1), weights=dy.reshape(-1), minlength=math.prod(shape))
    return sums.astype(dy.dtype).reshape(shape)
