"""GPU tiles of the normalizing and reducing ops: batch_norm (with shared statistics), layer_norm,
softmax (cuDNN), mean and reduce_sum.

Batch norm mirrors the reference's two protocols: `forward_tile`/`backward_tile` normalize a
tile by its own statistics, and the `*_with_statistics` functions take the per-channel float64
sums the runtime adds over every tile of the batch (paper §4's sample split of batch norm).
"""

from __future__ import annotations

import math

from flexflow.gpu import prims
from flexflow.gpu.device import DeviceArray, Gpu, require_contiguous
from flexflow.gpu.nvrtc import Arg, grid_for, launch
from flexflow.gpu.sources_nn import NORMS

Arrays = tuple[DeviceArray, ...]


# ---- batch_norm ---------------------------------------------------------------------------------
def _ncs(x: DeviceArray) -> tuple[int, int, int]:
    """x (N, C, H, W) or (N, C) as (N, C, S)."""
    return x.shape[0], x.shape[1], math.prod(x.shape[2:])


def statistics_forward(gpu: Gpu, op, x: DeviceArray) -> DeviceArray:
    """(2, C_t) float64: this tile's per-channel sum and sum of squares."""
    require_contiguous("batch_norm statistics_forward", x)
    n, c, s = _ncs(x)
    stats = gpu.zeros((2, c), "float64")
    if x.size:
        launch(
            gpu, NORMS, "batch_norm_statistics", min(c, 65535),
            [Arg.ptr(stats.ptr), Arg.ptr(x.ptr), Arg.i64(n), Arg.i64(c), Arg.i64(s)],
        )  # fmt: skip
    return stats


def _normalize(gpu: Gpu, op, x, weights, stats, count: int) -> DeviceArray:
    require_contiguous("batch_norm forward", x, stats, *weights)
    n, c, s = _ncs(x)
    y = gpu.empty(x.shape)
    if x.size:
        launch(
            gpu, NORMS, "batch_norm_forward", grid_for(x.size),
            [Arg.ptr(y.ptr), Arg.ptr(x.ptr), Arg.ptr(weights[0].ptr), Arg.ptr(weights[1].ptr),
             Arg.ptr(stats.ptr), Arg.i64(n), Arg.i64(c), Arg.i64(s), Arg.f64(count),
             Arg.f64(op.eps), Arg.i64(int(op.relu))],
        )  # fmt: skip
    return y


def forward_tile_with_statistics(gpu: Gpu, op, sig, x, weights, stats) -> Arrays:
    return (_normalize(gpu, op, x, weights, stats, op.batch_count(sig)),)


def _backward_sums(gpu: Gpu, op, x, y, dy, stats, count: int) -> DeviceArray:
    require_contiguous("batch_norm backward", x, y, dy, stats)
    n, c, s = _ncs(x)
    sums = gpu.zeros((2, c), "float64")
    if x.size:
        launch(
            gpu, NORMS, "batch_norm_backward_statistics", min(c, 65535),
            [Arg.ptr(sums.ptr), Arg.ptr(x.ptr), Arg.ptr(y.ptr), Arg.ptr(dy.ptr),
             Arg.ptr(stats.ptr), Arg.i64(n), Arg.i64(c), Arg.i64(s), Arg.f64(count),
             Arg.f64(op.eps), Arg.i64(int(op.relu))],
        )  # fmt: skip
    return sums


def statistics_backward(gpu: Gpu, op, sig, x, weights, y, dy, stats) -> DeviceArray:
    """(2, C_t) float64: this tile's per-channel sums of dz and dz * x_hat."""
    return _backward_sums(gpu, op, x, y, dy, stats, op.batch_count(sig))


def _backward(gpu: Gpu, op, x, weights, y, dy, stats, grad_stats, count: int):
    n, c, s = _ncs(x)
    dx = gpu.empty(x.shape)
    if x.size:
        launch(
            gpu, NORMS, "batch_norm_backward", grid_for(x.size),
            [Arg.ptr(dx.ptr), Arg.ptr(x.ptr), Arg.ptr(y.ptr), Arg.ptr(dy.ptr),
             Arg.ptr(weights[0].ptr), Arg.ptr(stats.ptr), Arg.ptr(grad_stats.ptr), Arg.i64(n),
             Arg.i64(c), Arg.i64(s), Arg.f64(count), Arg.f64(op.eps), Arg.i64(int(op.relu))],
        )  # fmt: skip
    # this tile's gamma and beta gradients are its own sums of dz * x_hat and dz
    own = prims.cast_to_float32(gpu, _backward_sums(gpu, op, x, y, dy, stats, count))  # (2, C)
    grad_beta, grad_gamma = (own.view((c,), (1,), row * c) for row in (0, 1))
    return (dx,), (grad_gamma, grad_beta)


def backward_tile_with_statistics(gpu: Gpu, op, sig, x, weights, y, dy, stats, grad_stats):
    """This tile's dx and its partial gamma and beta gradients (summed over the tiles)."""
    return _backward(gpu, op, x, weights, y, dy, stats, grad_stats, op.batch_count(sig))


def batch_norm_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    """The reference's `forward` on the tile: statistics of this tile alone."""
    (x,) = inputs
    count = _ncs(x)[0] * _ncs(x)[2]
    return (_normalize(gpu, op, x, weights, statistics_forward(gpu, op, x), count),)


def batch_norm_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (x,), (y,), (dy,) = inputs, outputs, grad_outputs
    count = _ncs(x)[0] * _ncs(x)[2]
    stats = statistics_forward(gpu, op, x)
    grad_stats = _backward_sums(gpu, op, x, y, dy, stats, count)
    return _backward(gpu, op, x, weights, y, dy, stats, grad_stats, count)


# ---- layer_norm ---------------------------------------------------------------------------------
def _rows_cols(op, x: DeviceArray) -> tuple[int, int]:
    cols = math.prod(x.shape[x.ndim - len(op.axes) :])  # the normalized trailing axes
    return (x.size // cols if cols else 0), cols


def layer_norm_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    (x,) = inputs
    rows, cols = _rows_cols(op, x)
    y = gpu.empty(x.shape)
    gamma, beta = (w.ptr for w in weights) if op.elementwise_affine else (0, 0)
    if x.size:
        launch(
            gpu, NORMS, "layer_norm_forward", min(rows, 65535 * 8),
            [Arg.ptr(y.ptr), Arg.ptr(x.ptr), Arg.ptr(gamma), Arg.ptr(beta), Arg.i64(rows),
             Arg.i64(cols), Arg.f64(op.eps)],
        )  # fmt: skip
    return (y,)


def layer_norm_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (x,), (dy,) = inputs, grad_outputs
    rows, cols = _rows_cols(op, x)
    dx = gpu.empty(x.shape)
    dy_xhat = gpu.empty(x.shape) if op.elementwise_affine else None
    if x.size:
        launch(
            gpu, NORMS, "layer_norm_backward", min(rows, 65535 * 8),
            [Arg.ptr(dx.ptr), Arg.ptr(dy_xhat.ptr if dy_xhat else 0), Arg.ptr(x.ptr),
             Arg.ptr(weights[0].ptr if op.elementwise_affine else 0), Arg.ptr(dy.ptr),
             Arg.i64(rows), Arg.i64(cols), Arg.f64(op.eps)],
        )  # fmt: skip
    if not op.elementwise_affine:
        return (dx,), ()
    kept = tuple(range(x.ndim - len(op.axes)))  # sum over every sample and position
    return (dx,), (prims.reduce_sum(gpu, dy_xhat, kept), prims.reduce_sum(gpu, dy, kept))


# ---- softmax ------------------------------------------------------------------------------------
def softmax_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    from flexflow.gpu import dnn

    y = gpu.empty(inputs[0].shape)
    dnn.softmax_forward(gpu, inputs[0], op.axis, y)
    return (y,)


def softmax_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    dx = gpu.empty(outputs[0].shape)
    softmax_grad(gpu, outputs[0], grad_outputs[0], op.axis, dx)
    return (dx,), ()


def softmax_grad(
    gpu: Gpu, y: DeviceArray, dy: DeviceArray, axis: int, dx: DeviceArray, scale: float = 1.0
) -> None:
    """dx = scale * y * (dy - sum(dy * y)) along `axis`: a block per row for the last axis (a
    softmax over classes or keys), cuDNN's backward for another."""
    from flexflow.gpu import dnn

    if axis % y.ndim != y.ndim - 1:
        dnn.softmax_backward(gpu, y, dy, axis, dx, scale)
        return
    require_contiguous("softmax_grad", y, dy, dx)
    cols = y.shape[-1]
    rows = y.size // cols if cols else 0
    if rows:
        launch(
            gpu, NORMS, "softmax_backward_rows", min(rows, 65535 * 8),
            [Arg.ptr(dx.ptr), Arg.ptr(y.ptr), Arg.ptr(dy.ptr), Arg.i64(rows), Arg.i64(cols),
             Arg.f64(scale)],
        )  # fmt: skip


# ---- mean ---------------------------------------------------------------------------------------
def _reduced(op, x: DeviceArray, average: bool) -> tuple[tuple[int, ...], float]:
    """The axes `op` (mean or reduce_sum) reduces, and the scale of its sum: 1 / count or 1."""
    reduced = op.reduced_axes(x.shape)
    count = math.prod(x.shape[a] for a in reduced)
    return reduced, (1.0 / count if count else 0.0) if average else 1.0


def _reduce_forward(gpu: Gpu, op, x: DeviceArray, average: bool) -> Arrays:
    reduced, scale = _reduced(op, x, average)
    out_shape = tuple(
        1 if a in reduced else s for a, s in enumerate(x.shape) if op.keepdims or a not in reduced
    )
    return (prims.reduce_sum(gpu, x, reduced, scale=scale).reshape(out_shape),)


def _reduce_backward(gpu: Gpu, op, x: DeviceArray, dy: DeviceArray, average: bool):
    reduced, scale = _reduced(op, x, average)
    kept = [a for a in range(x.ndim) if a not in reduced]
    dy_kept = dy.reshape([x.shape[a] for a in kept])  # keepdims' size-1 dims dropped
    dx = gpu.empty(x.shape)
    prims.copy(gpu, dx, prims.broadcast_view(dy_kept, x.shape, kept), alpha=scale)
    return (dx,), ()


def mean_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    return _reduce_forward(gpu, op, inputs[0], average=True)


def mean_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    return _reduce_backward(gpu, op, inputs[0], grad_outputs[0], average=True)


def reduce_sum_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    return _reduce_forward(gpu, op, inputs[0], average=False)


def reduce_sum_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    return _reduce_backward(gpu, op, inputs[0], grad_outputs[0], average=False)
