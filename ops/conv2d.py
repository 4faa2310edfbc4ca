"""2-D convolution (NCHW, grouped): sample, attribute and parameter dims (paper Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from flexflow.errors import ShapeError

from .activations import ACTIVATIONS, ActiMode
from .base import (
    Arrays,
    Dim,
    DimKind,
    Region,
    Signature,
    TensorSpec,
    WeightSpec,
    expect_float,
    expect_inputs,
    expect_positive,
    region_volume,
)
from .registry import register
from .shapes import window_output_size
from .window import (
    Window2D,
    accumulate_windows,
    crop_hw,
    crop_hw_sides,
    pad_hw,
    pad_hw_sides,
    window_output_hw,
    windowed_input_region,
    windows,
)

# ---- the op --------------------------------------------------------------------------------------


@register
@dataclass(frozen=True, slots=True)
class Conv2D(Window2D):
    """x (N, C, H, W) -> (N, out_channels, H', W'), kernel (out_channels, C/groups, kh, kw).

    An output-channel (parameter) split reads only its kernel rows and the input channels of the
    groups it touches; a height/width (attribute) split reads its rows/columns plus a halo of
    kernel - stride on each side.
    """

    kind = "conv2d"
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    padding_h: int
    padding_w: int
    activation: ActiMode = ActiMode.AC_MODE_NONE
    groups: int = 1
    use_bias: bool = True

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        expect_positive(self.kind, name, out_channels=self.out_channels, groups=self.groups)
        out_h, out_w = window_output_hw(
            self.kind, name, x, self._kernel, self._stride, self._padding
        )
        channels = x.shape[1]
        if channels % self.groups:
            raise ShapeError(
                f"conv2d '{name}': groups={self.groups} must divide the input channels "
                f"{channels} (input shape {x.shape}); choose groups that divide {channels}."
            )
        if self.out_channels % self.groups:
            raise ShapeError(
                f"conv2d '{name}': groups={self.groups} must divide out_channels="
                f"{self.out_channels}; choose out_channels a multiple of {self.groups}."
            )
        group_in = channels // self.groups
        window = self.kernel_h * self.kernel_w
        out = TensorSpec((x.shape[0], self.out_channels, out_h, out_w))
        weights = [
            WeightSpec(
                "kernel",
                (self.out_channels, group_in, self.kernel_h, self.kernel_w),
                "glorot_uniform",
                group_in * window,
                self.out_channels * window,
            )
        ]
        if self.use_bias:
            weights.append(WeightSpec("bias", (self.out_channels,), "zeros"))
        dims = (
            Dim("sample", DimKind.SAMPLE),
            Dim("channel", DimKind.PARAMETER),
            Dim("height", DimKind.ATTRIBUTE),
            Dim("width", DimKind.ATTRIBUTE),
        )
        return Signature((x,), (out,), tuple(weights), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        x = sig.inputs[0].shape
        group_in = x[1] // self.groups
        group_out = self.out_channels // self.groups
        o0, o1 = region[1]
        # output channel o belongs to group o // group_out, which reads that group's input channels
        channels = (
            (0, 0)
            if o1 <= o0
            else ((o0 // group_out) * group_in, ((o1 - 1) // group_out + 1) * group_in)
        )
        return (
            windowed_input_region(
                region, channels, x[2:], self._kernel, self._stride, self._padding
            ),
        )

    def weight_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        rows = region[1]  # a parameter split reads only its output channels' kernels (and biases)
        kernel = sig.weights[0].shape
        regions: tuple[Region, ...] = ((rows, (0, kernel[1]), (0, kernel[2]), (0, kernel[3])),)
        return regions + ((rows,),) if self.use_bias else regions

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        outputs = region_volume(region)
        per_output = sig.inputs[0].shape[1] // self.groups * self.kernel_h * self.kernel_w
        conv = 2.0 * outputs * per_output  # one multiply-add per (input channel, kernel cell)
        act = ACTIVATIONS[self.activation].flops_per_element * outputs
        bias = outputs if self.use_bias else 0
        # backward: grad input (dy * kernel, col2im) and grad kernel (dy^T x) each cost one conv
        return conv + bias + act, 2 * conv + bias + act

    # ---- numpy reference ------------------------------------------------------------------------
    def _columns(self, x: np.ndarray) -> np.ndarray:
        """im2col: x (N, C, H, W) -> (G, N*H'*W', C/G*kh*kw), one row per output and group."""
        n, c = x.shape[:2]
        win = windows(
            pad_hw(x, self._padding), self._kernel, self._stride
        )  # (N, C, H', W', kh, kw)
        out_h, out_w = win.shape[2:4]
        g = self.groups
        win = win.reshape(n, g, c // g, out_h, out_w, self.kernel_h, self.kernel_w)
        win = win.transpose(1, 0, 3, 4, 2, 5, 6)  # (G, N, H', W', C/G, kh, kw)
        return win.reshape(g, n * out_h * out_w, -1)

    def _grouped_kernel(self, kernel: np.ndarray) -> np.ndarray:
        return kernel.reshape(
            self.groups, self.out_channels // self.groups, -1
        )  # (G, O/G, C/G*kh*kw)

    def _pre_activation(
        self, x: np.ndarray, weights: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """z = conv(x) + b (N, O, H', W'), and the im2col columns it was computed from."""
        n = x.shape[0]
        out_h = window_output_size(x.shape[2], self.kernel_h, self.stride_h, self.padding_h)
        out_w = window_output_size(x.shape[3], self.kernel_w, self.stride_w, self.padding_w)
        cols = self._columns(x)
        z = cols @ self._grouped_kernel(weights[0]).transpose(0, 2, 1)  # (G, N*H'*W', O/G)
        z = z.reshape(self.groups, n, out_h, out_w, -1).transpose(
            1, 0, 4, 2, 3
        )  # (N, G, O/G, H', W')
        z = z.reshape(n, self.out_channels, out_h, out_w)  # (N, O, H', W')
        if self.use_bias:
            z = z + weights[1][:, None, None]
        return z, cols

    def _tile_op(self, sig, x: np.ndarray, weights) -> Conv2D:
        """This convolution restricted to a tile: its output channels and groups, no padding."""
        group_in = sig.inputs[0].shape[1] // self.groups
        return replace(
            self,
            out_channels=weights[0].shape[0],
            groups=x.shape[1] // group_in,
            padding_h=0,
            padding_w=0,
        )

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        """A tile: pad its input slice only at the tensor's borders, then convolve unpadded."""
        rows, cols = self._tile_padding(sig, region)
        (x,) = inputs  # (N_t, C_t, H_t, W_t): the tile's samples, its groups' channels, halos
        return self._tile_op(sig, x, weights).forward([pad_hw_sides(x, rows, cols)], weights)

    def backward_tile(self, sig, region, inputs, weights, outputs, grad_outputs):
        rows, cols = self._tile_padding(sig, region)
        (x,) = inputs
        padded = pad_hw_sides(x, rows, cols)
        tile = self._tile_op(sig, x, weights)
        (dx,), grads = tile.backward([padded], weights, outputs, grad_outputs)
        return (crop_hw_sides(dx, rows, cols),), grads

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        z, _ = self._pre_activation(x, weights)
        return (ACTIVATIONS[self.activation].forward(z),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        (y,) = outputs
        kernel = weights[0]
        n, c, h, w = x.shape
        if self.activation is ActiMode.AC_MODE_NONE:  # z is not needed: skip recomputing it
            z, cols = y, self._columns(x)
        else:
            z, cols = self._pre_activation(x, weights)
        dz = ACTIVATIONS[self.activation].grad(z, y, grad_outputs[0])  # (N, O, H', W')
        out_h, out_w = dz.shape[2:]
        g = self.groups
        dz_g = dz.reshape(n, g, -1, out_h, out_w).transpose(1, 0, 3, 4, 2)  # (G, N, H', W', O/G)
        dz_g = dz_g.reshape(g, n * out_h * out_w, -1)  # (G, N*H'*W', O/G)
        grad_kernel = (dz_g.transpose(0, 2, 1) @ cols).reshape(kernel.shape)  # (O, C/G, kh, kw)
        dcols = dz_g @ self._grouped_kernel(kernel)  # (G, N*H'*W', C/G*kh*kw)
        dcols = dcols.reshape(g, n, out_h, out_w, c // g, self.kernel_h, self.kernel_w)
        dcols = dcols.transpose(1, 0, 4, 2, 3, 5, 6)  # (N, G, C/G, H', W', kh, kw)
        dcols = dcols.reshape(n, c, out_h, out_w, self.kernel_h, self.kernel_w)
        padded_hw = (h + 2 * self.padding_h, w + 2 * self.padding_w)
        dx = crop_hw(accumulate_windows(dcols, padded_hw, self._stride), self._padding)
        grads = [grad_kernel]
        if self.use_bias:
            grads.append(dz.sum(axis=(0, 2, 3)))
        return (np.ascontiguousarray(dx),), tuple(grads)
