"""GPU tiles of the windowed ops, conv2d and pool2d (cuDNN), with the numpy tiles' halo padding.

A tile's input slice is padded only where the tile touches the tensor's border, by
`Window2D._tile_padding` (top, bottom) rows and (left, right) columns, exactly as the numpy tile
code pads it. cuDNN pads both sides of a dim by one amount p; running it with p = top gives the
same windows whenever 0 <= top - bottom < stride (the extra bottom rows are never reached).
Otherwise the slice is padded explicitly (zeros; -inf for max pooling), cuDNN runs unpadded,
and the input gradient is cropped back. An average leaves the padding out of its divisor, as
the numpy tile does (FlexFlow's CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING): cuDNN does so
for the padding it applies itself; over an explicitly padded slice, which cuDNN sees as all
cells, the tile divides by the fraction of each window that is real.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexflow.gpu import dnn, prims
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.ops.activations import ActiMode
from flexflow.ops.pool2d import PoolType

Arrays = tuple[DeviceArray, ...]


@dataclass(frozen=True, slots=True)
class TilePadding:
    """How a tile's input slice is padded: explicitly (`sides`) or by cuDNN (`symmetric`)."""

    rows: tuple[int, int]
    cols: tuple[int, int]
    stride: tuple[int, int]

    @property
    def explicit(self) -> bool:
        return not all(
            0 <= before - after < stride
            for (before, after), stride in zip((self.rows, self.cols), self.stride, strict=True)
        )

    @property
    def symmetric(self) -> tuple[int, int]:
        """The padding cuDNN applies: none when the slice is padded explicitly."""
        return (0, 0) if self.explicit else (self.rows[0], self.cols[0])

    def pad(self, gpu: Gpu, x: DeviceArray, value: float = 0.0) -> DeviceArray:
        return prims.pad_hw(gpu, x, self.rows, self.cols, value) if self.explicit else x

    def crop(self, gpu: Gpu, dx_padded: DeviceArray) -> DeviceArray:
        if not self.explicit:
            return dx_padded
        view = prims.crop_view(dx_padded, self.rows, self.cols)
        return prims.copy(gpu, gpu.empty(view.shape), view)


def _tile_padding(op, sig, region) -> TilePadding:
    rows, cols = op._tile_padding(sig, region)  # the numpy tile's own border padding
    return TilePadding(rows, cols, (op.stride_h, op.stride_w))


def _out_hw(region) -> tuple[int, int]:
    return region[2][1] - region[2][0], region[3][1] - region[3][0]


# ---- conv2d -------------------------------------------------------------------------------------
def _conv(
    op, sig, region, xp: DeviceArray, kernel: DeviceArray, padding: TilePadding
) -> dnn.ConvShape:
    group_in = sig.inputs[0].shape[1] // op.groups
    return dnn.ConvShape(
        x=xp.shape,
        w=kernel.shape,  # (O_t, C/G, kh, kw): the tile's output channels
        y=(xp.shape[0], kernel.shape[0]) + _out_hw(region),
        padding=padding.symmetric,
        stride=(op.stride_h, op.stride_w),
        groups=xp.shape[1] // group_in,  # the groups whose channels the tile reads
    )


def _conv_pre_activation(gpu: Gpu, op, conv: dnn.ConvShape, xp, weights) -> DeviceArray:
    z = gpu.empty(conv.y)
    if op.use_bias:
        prims.copy(gpu, z, prims.broadcast_view(weights[1], conv.y, (1,)))
    dnn.conv_forward(gpu, conv, xp, weights[0], z, beta=1.0 if op.use_bias else 0.0)
    return z


def conv2d_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    padding = _tile_padding(op, sig, region)
    xp = padding.pad(gpu, inputs[0])
    conv = _conv(op, sig, region, xp, weights[0], padding)
    z = _conv_pre_activation(gpu, op, conv, xp, weights)
    if op.activation is ActiMode.AC_MODE_NONE:
        return (z,)
    return (prims.activation_forward(gpu, op.activation, z),)


def conv2d_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    padding = _tile_padding(op, sig, region)
    xp = padding.pad(gpu, inputs[0])
    conv = _conv(op, sig, region, xp, weights[0], padding)
    (y,), (dy,) = outputs, grad_outputs
    if op.activation is ActiMode.AC_MODE_NONE:
        dz = dy
    else:
        z = (
            _conv_pre_activation(gpu, op, conv, xp, weights)
            if prims.grad_needs_input(op.activation)
            else y
        )
        dz = prims.activation_backward(gpu, op.activation, z, y, dy)
    grad_kernel = gpu.empty(weights[0].shape)
    dnn.conv_backward_filter(gpu, conv, xp, dz, grad_kernel)
    dxp = gpu.empty(xp.shape)
    dnn.conv_backward_data(gpu, conv, weights[0], dz, dxp)
    grads = [grad_kernel]
    if op.use_bias:
        grads.append(prims.reduce_sum(gpu, dz, (0, 2, 3)))
    return (padding.crop(gpu, dxp),), tuple(grads)


# ---- pool2d -------------------------------------------------------------------------------------
def _pool_setup(op, sig, region, inputs) -> tuple[TilePadding, int, float]:
    padding = _tile_padding(op, sig, region)
    if op.pool_type is PoolType.POOL_MAX:
        return padding, dnn.POOL_MAX, float("-inf")  # padded cells never win a max
    # cuDNN's own padding is left out of the divisor, as the numpy tile leaves it out; a slice
    # padded explicitly has zeros cuDNN takes for cells, which `_real_fraction` undoes
    return padding, dnn.POOL_AVG_EXCLUDE_PADDING, 0.0


def _real_fraction(
    gpu: Gpu, op, region, padding: TilePadding, x: DeviceArray
) -> DeviceArray | None:
    """(H', W'): the fraction of each window's cells inside the slice, where an average runs
    over an explicitly padded slice (cuDNN unpadded: its divisor is kh*kw, zeros included);
    None where cuDNN pads itself or the pooling is a max. cuDNN computes it, averaging a ones
    image padded as the slice is; the tile divides its output, and its output's gradient,
    by it, so its divisor is the window's real cells, as in the numpy tile."""
    if op.pool_type is PoolType.POOL_MAX or not padding.explicit:
        return None
    ones = prims.fill(gpu, gpu.empty((1, 1) + x.shape[2:]), 1.0)
    fraction = _pool(gpu, op, region, dnn.POOL_AVG_EXCLUDE_PADDING, padding, padding.pad(gpu, ones))
    return fraction.reshape(fraction.shape[2:])  # (H', W')


def _divide(gpu: Gpu, a: DeviceArray, fraction) -> DeviceArray:
    """a (N, C, H', W') divided by a (H', W') fraction of real cells, or `a` where None."""
    if fraction is None:
        return a
    return prims.binary(gpu, "divide", a, prims.broadcast_view(fraction, a.shape, (2, 3)))


def _pool(gpu: Gpu, op, region, mode: int, padding: TilePadding, xp: DeviceArray) -> DeviceArray:
    z = gpu.empty(xp.shape[:2] + _out_hw(region))
    kernel, stride = (op.kernel_h, op.kernel_w), (op.stride_h, op.stride_w)
    dnn.pool_forward(gpu, mode, kernel, padding.symmetric, stride, xp, z)
    return z


def pool2d_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    padding, mode, fill = _pool_setup(op, sig, region, inputs)
    fraction = _real_fraction(gpu, op, region, padding, inputs[0])
    z = _pool(gpu, op, region, mode, padding, padding.pad(gpu, inputs[0], fill))
    z = _divide(gpu, z, fraction)
    if op.activation is ActiMode.AC_MODE_NONE:
        return (z,)
    return (prims.activation_forward(gpu, op.activation, z),)


def pool2d_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    padding, mode, fill = _pool_setup(op, sig, region, inputs)
    fraction = _real_fraction(gpu, op, region, padding, inputs[0])
    xp = padding.pad(gpu, inputs[0], fill)
    (y,), (dy,) = outputs, grad_outputs
    if op.activation is ActiMode.AC_MODE_NONE:
        z, dz = y, dy
    else:
        z = _divide(gpu, _pool(gpu, op, region, mode, padding, xp), fraction)
        dz = prims.activation_backward(gpu, op.activation, z, y, dy)
    dxp = gpu.empty(xp.shape)
    kernel, stride = (op.kernel_h, op.kernel_w), (op.stride_h, op.stride_w)
    # cuDNN spreads an average's gradient as dz / (kh*kw) over the padded slice: dz / fraction
    # makes each real cell's share dz / (real cells); an average's backward reads no y
    dz = _divide(gpu, dz, fraction)
    dnn.pool_backward(gpu, mode, kernel, padding.symmetric, stride, xp, z, dz, dxp)
    return (padding.crop(gpu, dxp),), ()
