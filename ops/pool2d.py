"""2-D max/average pooling (NCHW): sample and attribute dims only, no parameters (paper Table 1)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from . import native_windows
from .activations import ACTIVATIONS, ActiMode
from .base import Arrays, Dim, DimKind, Region, Signature, TensorSpec, region_volume
from .checks import expect_float, expect_inputs, expect_member
from .registry import register
from .window import (
    Window2D,
    accumulate_windows,
    crop_hw,
    pad_hw,
    window_cell_counts,
    window_output_hw,
    windowed_input_region,
    windows,
)


class PoolType(enum.Enum):
    """FlexFlow's pooling modes (`POOL_*`)."""

    POOL_MAX = "max"
    POOL_AVG = "avg"


@register
@dataclass(frozen=True, slots=True)
class Pool2D(Window2D):
    """x (N, C, H, W) -> (N, C, H', W'), each output the max or mean of one kh x kw window.

    Padded cells never count: max pooling ignores them (they hold -inf), and average pooling
    divides each window's sum by the number of its cells inside the input, as FlexFlow's
    kernel does (cuDNN's CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, src/ops/kernels/
    pool_2d_kernels.cu) and as Keras' AveragePooling2D(padding='same'): a 3x3 stride-1 pad-1
    average (Inception-v3's) of an all-ones image is all ones, corners included. Every window
    holds a real cell (`infer` refuses padding >= kernel), so no divisor is zero. Channels are
    independent, so a channel split is an attribute split: pooling has no parameters.
    """

    kind = "pool2d"
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    padding_h: int
    padding_w: int
    pool_type: PoolType = PoolType.POOL_MAX
    activation: ActiMode = ActiMode.AC_MODE_NONE

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        expect_member(
            self.kind,
            name,
            pool_type=(self.pool_type, PoolType),
            activation=(self.activation, ActiMode),
        )
        out_h, out_w = window_output_hw(
            self.kind, name, x, self._kernel, self._stride, self._padding
        )
        # With padding >= kernel some windows hold padding only: no maximum, no cell to average.
        for axis, pad, kernel in (
            ("h", self.padding_h, self.kernel_h),
            ("w", self.padding_w, self.kernel_w),
        ):
            if pad >= kernel:
                raise ShapeError(
                    f"pool2d '{name}': padding_{axis}={pad} must be smaller than kernel_{axis}="
                    f"{kernel} (input shape {x.shape}), or some windows see only padding; "
                    f"use padding_{axis} <= {kernel - 1}."
                )
        out = TensorSpec((x.shape[0], x.shape[1], out_h, out_w))
        dims = (
            Dim("sample", DimKind.SAMPLE),
            Dim("channel", DimKind.ATTRIBUTE),
            Dim("height", DimKind.ATTRIBUTE),
            Dim("width", DimKind.ATTRIBUTE),
        )
        return Signature((x,), (out,), (), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        in_hw = sig.inputs[0].shape[2:]
        return (
            windowed_input_region(
                region, region[1], in_hw, self._kernel, self._stride, self._padding
            ),
        )

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        outputs = region_volume(region)
        window = self.kernel_h * self.kernel_w
        act = ACTIVATIONS[self.activation].flops_per_element * outputs
        # forward: one compare (max) or add (avg) per window cell; backward: one routed or
        # scaled add per window cell back onto the input gradient
        return float(outputs * window + act), float(outputs * window + act)

    # ---- numpy reference ------------------------------------------------------------------------
    def _windows(self, x: np.ndarray) -> np.ndarray:
        """x (N, C, H, W) -> (N, C, H', W', kh*kw), padded with -inf (max) or 0 (avg)."""
        fill = -np.inf if self.pool_type is PoolType.POOL_MAX else 0.0
        win = windows(pad_hw(x, self._padding, fill), self._kernel, self._stride)
        return win.reshape(win.shape[:4] + (-1,))  # (N, C, H', W', kh*kw)

    def _cell_counts(self, x: np.ndarray, out_hw: tuple[int, ...]) -> np.ndarray:
        """(H', W'): how many of each window's cells lie inside x, the average's divisors (in
        x's type: a float32 average stays float32)."""
        rows, cols = (
            window_cell_counts(size, out, k, s, p)
            for size, out, k, s, p in zip(
                x.shape[2:], out_hw, self._kernel, self._stride, self._padding, strict=True
            )
        )
        return np.outer(rows, cols).astype(x.dtype)  # (H', W')

    def _pre_activation(self, x: np.ndarray) -> np.ndarray:
        win = self._windows(x)
        if self.pool_type is PoolType.POOL_MAX:
            return win.max(axis=-1)
        # the padded zeros add nothing to a sum, and are not counted in its divisor
        return win.sum(axis=-1) / self._cell_counts(x, win.shape[2:4])

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        """A tile with the C kernel: padding only where the tile meets the tensor's border. The
        slice holds its halo (the neighbouring tiles' rows), so the cells outside it are exactly
        the tensor's padding, and the kernel's divisor, the window's cells inside the slice,
        is the whole tensor's: any height or width split gives the same values."""
        return (
            ACTIVATIONS[self.activation].forward(self._tile_pre_activation(sig, region, inputs[0])),
        )

    def backward_tile(self, sig, region, inputs, weights, outputs, grad_outputs):
        (x,), (y,) = inputs, outputs
        activation = ACTIVATIONS[self.activation]
        z = self._tile_pre_activation(sig, region, x) if activation.grad_needs_input else y
        dz = activation.grad(z, y, grad_outputs[0])
        rows, cols = self._tile_padding(sig, region)
        dx = native_windows.pool2d_backward(
            x, dz, self._kernel, self._stride, (rows[0], cols[0]),
            self.pool_type is PoolType.POOL_MAX,
        )  # fmt: skip
        return (dx,), ()

    def _tile_pre_activation(self, sig, region, x: np.ndarray) -> np.ndarray:
        rows, cols = self._tile_padding(sig, region)
        out_hw = (region[2][1] - region[2][0], region[3][1] - region[3][0])
        return native_windows.pool2d_forward(
            x, out_hw, self._kernel, self._stride, (rows[0], cols[0]),
            self.pool_type is PoolType.POOL_MAX,
        )  # fmt: skip

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (ACTIVATIONS[self.activation].forward(self._pre_activation(x)),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        (y,) = outputs
        activation = ACTIVATIONS[self.activation]
        z = self._pre_activation(x) if activation.grad_needs_input else y
        dz = activation.grad(z, y, grad_outputs[0])  # (N, C, H', W')
        window = self.kernel_h * self.kernel_w
        if self.pool_type is PoolType.POOL_MAX:
            # a window's gradient all goes to its first maximal cell (ties: row-major first)
            first_max = self._windows(x).argmax(axis=-1)  # (N, C, H', W')
            route = first_max[..., None] == np.arange(window)  # (N, C, H', W', kh*kw)
            grad_windows = route * dz[..., None]
        else:
            # each real cell gets its share; the padded cells' shares are cropped away below
            share = dz / self._cell_counts(x, dz.shape[2:])  # (N, C, H', W')
            grad_windows = np.broadcast_to(share[..., None], dz.shape + (window,))
        grad_windows = grad_windows.reshape(dz.shape + self._kernel)  # (N, C, H', W', kh, kw)
        padded_hw = (x.shape[2] + 2 * self.padding_h, x.shape[3] + 2 * self.padding_w)
        dx = crop_hw(accumulate_windows(grad_windows, padded_hw, self._stride), self._padding)
        return (np.ascontiguousarray(dx),), ()
