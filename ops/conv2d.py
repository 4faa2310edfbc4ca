"""2-D convolution (NCHW, grouped): sample, attribute and parameter dims (paper Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from flexflow.errors import ShapeError

from . import blas, native_windows
from .activations import ACTIVATIONS, ActiMode
from .base import (
    Arrays,
    Dim,
    DimKind,
    GradientsInto,
    Region,
    Signature,
    TensorSpec,
    WeightSpec,
    region_volume,
    writable_into,
)
from .checks import expect_float, expect_inputs, expect_member, expect_positive
from .registry import register
from .shapes import window_output_size
from .window import (
    Window2D,
    crop_hw_sides,
    pad_hw_sides,
    window_output_hw,
    windowed_input_region,
)

# ---- the op --------------------------------------------------------------------------------------


def _to_channel_major(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (C, N*H*W), contiguous."""
    return np.ascontiguousarray(x.transpose(1, 0, 2, 3)).reshape(x.shape[1], -1)


def _from_channel_major(rows: np.ndarray, samples: int) -> np.ndarray:
    """(C, N*P) -> (N, C, P), contiguous: the inverse of `_to_channel_major`, flattened."""
    return np.ascontiguousarray(rows.reshape(rows.shape[0], samples, -1).transpose(1, 0, 2))


@register
@dataclass(frozen=True, slots=True)
class Conv2D(GradientsInto, Window2D):
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
        expect_member(self.kind, name, activation=(self.activation, ActiMode))
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
            Dim(
                "channel",
                DimKind.PARAMETER,
                self.out_channels // self.groups if self.groups > 1 else 1,
            ),
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

    # ---- CPU kernel: im2col in C, one GEMM per group (ops.blas) ------------------------------
    def _out_hw(self, x: np.ndarray) -> tuple[int, int]:
        return (
            window_output_size(x.shape[2], self.kernel_h, self.stride_h, self.padding_h),
            window_output_size(x.shape[3], self.kernel_w, self.stride_w, self.padding_w),
        )

    def _columns(self, x: np.ndarray) -> np.ndarray:
        """im2col: x (N, C, H, W) -> (N*H'*W', C*kh*kw); group g owns the g-th column block."""
        return native_windows.im2col(x, self._out_hw(x), self._kernel, self._stride, self._padding)

    def _by_group(self, rows: np.ndarray) -> np.ndarray:
        """(R, G*k) -> a (G, R, k) view: each group's columns as one matrix."""
        return rows.reshape(rows.shape[0], self.groups, -1).transpose(1, 0, 2)

    def _from_groups(self, grouped: np.ndarray) -> np.ndarray:
        """(G, R, k) -> (R, G*k), the inverse of `_by_group` (a copy only when G > 1)."""
        return grouped.transpose(1, 0, 2).reshape(grouped.shape[1], -1)

    def _grouped_kernel(self, kernel: np.ndarray) -> np.ndarray:
        return kernel.reshape(
            self.groups, self.out_channels // self.groups, -1
        )  # (G, O/G, C/G*kh*kw)

    @property
    def _pointwise(self) -> bool:
        """A 1x1 kernel with no padding and one group: each output pixel is the kernel times one
        input pixel, so the channel-major pixels multiply in one GEMM, without im2col (two
        thirds of ResNet-101's convolutions)."""
        shape = (self.kernel_h, self.kernel_w, self.padding_h, self.padding_w, self.groups)
        return shape == (1, 1, 0, 0, 1)

    def _pixels(self, x: np.ndarray) -> np.ndarray:
        """A pointwise convolution's input pixels (every stride-th) channel-major: (C, N*P),
        so each product is one GEMM over every sample and pixel (per-sample GEMMs were 2-3x
        slower on ResNet-101's 2x2 maps)."""
        if self.stride_h > 1 or self.stride_w > 1:
            x = x[:, :, :: self.stride_h, :: self.stride_w]
        return _to_channel_major(x)

    def _direct(self, x: np.ndarray) -> native_windows.ConvWindow | None:
        """native/conv.c's direct kernels for this convolution of x, where they run it: float32,
        stride 1, one group, small products (`native_windows.ConvWindow.of`); None for im2col."""
        if x.dtype != np.float32 or self._pointwise:
            return None
        return native_windows.ConvWindow.of(
            x.shape, self.out_channels, self._out_hw(x), self._kernel, self._stride,
            self._padding, self.groups,
        )  # fmt: skip

    def _pre_activation(
        self, x: np.ndarray, weights: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """z = conv(x) + b (N, O, H', W'), and the im2col columns (pointwise: the input pixels)
        it was computed from (None from the direct kernels, whose backward reads x)."""
        if self._pointwise:
            return self._pointwise_pre_activation(x, weights)
        direct = self._direct(x)
        if direct is not None:
            return direct.forward(x, weights[0], weights[1] if self.use_bias else None), None
        return self._im2col_pre_activation(x, weights)

    def _pointwise_pre_activation(
        self, x: np.ndarray, weights: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        out_h, out_w = self._out_hw(x)
        pixels = self._pixels(x)  # (C, N*P)
        z = blas.matmul(weights[0].reshape(self.out_channels, -1), pixels)  # (O, C) @ (C, N*P)
        if self.use_bias:
            z += weights[1][:, None]
        z = _from_channel_major(z, x.shape[0]).reshape(x.shape[0], -1, out_h, out_w)
        return z, pixels

    def _im2col_pre_activation(
        self, x: np.ndarray, weights: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        out_h, out_w = self._out_hw(x)
        cols = self._columns(x)
        kernel = self._grouped_kernel(weights[0])
        z_g = blas.grouped_matmul(self._by_group(cols), kernel.transpose(0, 2, 1))
        z = self._from_groups(z_g)  # (N*H'*W', O)
        if self.use_bias:
            z += weights[1]
        z = z.reshape(x.shape[0], out_h, out_w, self.out_channels).transpose(0, 3, 1, 2)
        return np.ascontiguousarray(z), cols  # (N, O, H', W')

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
        return self.forward_tile_saving(sig, region, inputs, weights)[0]

    def forward_tile_saving(self, sig, region, inputs, weights) -> tuple[Arrays, object]:
        """`forward_tile`, keeping what its backward in the same task reads again: the im2col
        columns (a pointwise convolution's input pixels), and the pre-activation where the
        activation's gradient needs it. The backward's own im2col was a quarter of LeNet's
        step task; the columns of one tile are a few MB at most."""
        rows, cols = self._tile_padding(sig, region)
        (x,) = inputs  # (N_t, C_t, H_t, W_t): the tile's samples, its groups' channels, halos
        tile = self._tile_op(sig, x, weights)
        z, columns = tile._pre_activation(pad_hw_sides(x, rows, cols), weights)
        activation = ACTIVATIONS[self.activation]
        y = activation.forward(z)
        return (y,), (z if activation.grad_needs_input else None, columns)

    skips_input_grads = True

    def backward_tile_into(
        self, sig, region, inputs, weights, outputs, grad_outputs, need_input_grads,
        weight_grads_into, saved=None,
    ):  # fmt: skip
        """`backward_tile`, the kernel's (and bias's) gradient computed straight into the arrays
        of `weight_grads_into` where they fit: the kernel gradient's product writes the task's
        output instead of a new array copied into it (ResNet-101's 44.5M gradients per device
        were 7% of its data-parallel step task's time in that copy, and their fresh pages)."""
        rows, cols = self._tile_padding(sig, region)
        (x,) = inputs
        padded = pad_hw_sides(x, rows, cols)
        tile = self._tile_op(sig, x, weights)
        (dx,), grads = tile.backward(
            [padded], weights, outputs, grad_outputs, need_input_grads, weight_grads_into, saved
        )
        return (None if dx is None else crop_hw_sides(dx, rows, cols),), grads

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        z, _ = self._pre_activation(x, weights)
        return (ACTIVATIONS[self.activation].forward(z),)

    def backward(
        self, inputs, weights, outputs, grad_outputs, need_input_grads=True, into=(), saved=None
    ):
        """`into`: see `backward_tile_into` (the kernel's and the bias's gradients); `saved`:
        what `forward_tile_saving` kept, or None to compute it again."""
        (x,) = inputs
        (y,) = outputs
        kernel = weights[0]
        into = list(into) + [None] * (2 - len(into))
        activation = ACTIVATIONS[self.activation]
        if saved is not None:
            z, cols = saved
            z = y if z is None else z
        elif activation.grad_needs_input:
            z, cols = self._pre_activation(x, weights)
        elif self._pointwise:  # the gradient reads y alone: skip recomputing the convolution
            z, cols = y, self._pixels(x)
        else:
            z, cols = y, None
        dz = activation.grad(z, y, grad_outputs[0])  # (N, O, H', W')
        if self._pointwise:
            return self._pointwise_backward(x, kernel, dz, cols, need_input_grads, into)
        direct = self._direct(x)
        if direct is not None:
            return self._direct_backward(direct, x, kernel, dz, need_input_grads, into)
        if cols is None:
            cols = self._columns(x)
        return self._im2col_backward(x, kernel, dz, cols, need_input_grads, into)

    def _im2col_backward(self, x, kernel, dz, cols, need_input_grads, into):
        """`backward` through im2col columns from dz (N, O, H', W'); `into` of length 2."""
        dz_rows = dz.transpose(0, 2, 3, 1).reshape(-1, self.out_channels)  # (N*H'*W', O)
        dz_g = self._by_group(dz_rows)  # (G, N*H'*W', O/G)
        by_group = self._by_group(cols)
        grad_kernel = writable_into(into[0], kernel.shape, dz_g, by_group)
        products = blas.grouped_matmul(
            dz_g.transpose(0, 2, 1),
            by_group,
            None if grad_kernel is None else self._grouped_kernel(grad_kernel),
        )
        if grad_kernel is None:
            grad_kernel = products.reshape(kernel.shape)
        dx = None
        if need_input_grads:
            dcols_g = blas.grouped_matmul(dz_g, self._grouped_kernel(kernel))
            dcols = self._from_groups(dcols_g)  # (N*H'*W', C*kh*kw)
            dx = native_windows.col2im(
                dcols, x.shape, dz.shape[2:], self._kernel, self._stride, self._padding
            )  # fmt: skip
        grads = [grad_kernel]
        if self.use_bias:  # a matrix-vector product: 7x faster than numpy's sum down axis 0
            ones = np.ones(dz_rows.shape[0], dz_rows.dtype)
            out = writable_into(into[1], (self.out_channels,), dz_rows)
            grads.append(np.matmul(ones, dz_rows, out=out))
        return (dx,), tuple(grads)

    def _direct_backward(self, direct, x, kernel, dz, need_input_grads, into):
        """`backward` through the direct kernels from dz (N, O, H', W')."""
        grad_kernel = writable_into(into[0], kernel.shape, dz, x)
        grads = [direct.kernel_grad(x, dz, grad_kernel)]
        if self.use_bias:  # the sum over samples and pixels of each output channel
            out = writable_into(into[1], (self.out_channels,), dz)
            rows = np.ascontiguousarray(dz, dtype=np.float32).reshape(dz.shape[0], dz.shape[1], -1)
            grads.append(np.sum(rows.sum(axis=2), axis=0, out=out))
        dx = direct.input_grad(dz, kernel) if need_input_grads else None
        return (dx,), tuple(grads)

    def _pointwise_backward(self, x, kernel, dz, pixels, need_input_grads, into):
        """`backward` of a pointwise convolution from dz (N, O, H', W') and its input pixels."""
        dz_pixels = _to_channel_major(dz)  # (O, N*P)
        grad_kernel = writable_into(into[0], kernel.shape, dz_pixels, pixels)
        out = None if grad_kernel is None else grad_kernel.reshape(self.out_channels, -1)
        product = blas.matmul(dz_pixels, pixels.T, out)  # (O, N*P) @ (N*P, C)
        grads = [product.reshape(kernel.shape) if grad_kernel is None else grad_kernel]
        if self.use_bias:  # a matrix-vector product, as in `backward`
            ones = np.ones(dz_pixels.shape[1], dz_pixels.dtype)
            out = writable_into(into[1], (self.out_channels,), dz_pixels)
            grads.append(np.matmul(dz_pixels, ones, out=out))
        dx = None
        if need_input_grads:
            d_pixels = blas.matmul(kernel.reshape(self.out_channels, -1).T, dz_pixels)  # (C, N*P)
            d_pixels = _from_channel_major(d_pixels, x.shape[0]).reshape(
                x.shape[0], x.shape[1], *dz.shape[2:]
            )
            if self.stride_h == 1 and self.stride_w == 1:
                dx = d_pixels
            else:  # the skipped pixels get no gradient
                dx = np.zeros(x.shape, dtype=d_pixels.dtype)
                dx[:, :, :: self.stride_h, :: self.stride_w] = d_pixels
        return (dx,), tuple(grads)
