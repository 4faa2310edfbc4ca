"""A numpy stand-in for the `flexflow.ops.native_*` modules (the C kernels the references call),
for checks without a build.

`scripts/gpu_check.py` runs from a bare checkout on a GPU machine, where the cffi extension
`flexflow._kernels` may not be built; it then loads this module as each
`flexflow.ops.native_*`. It holds what the references call unconditionally (the ops whose C
kernels are optional, dense and batch norm, fall back to numpy by themselves): pooling,
im2col/col2im, and the sparse cross-entropy. Same semantics (a tile's window starts `pad_before` cells before its slice;
cells outside the slice are padding: ignored by max, left out of the average, whose divisor
is the window's cells inside the slice, zeros for im2col). The tests check it against the C
kernels value by value.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _padded(
    x: np.ndarray,
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
    fill: float,
) -> tuple[np.ndarray, tuple[int, int]]:
    """x padded by `pad_before` and by whatever the last window reaches past the slice."""
    after = [
        max(0, (o - 1) * s + k - p - size)
        for o, s, k, p, size in zip(out_hw, stride, kernel, pad_before, x.shape[2:], strict=True)
    ]
    rows, cols = (pad_before[0], after[0]), (pad_before[1], after[1])
    padded = np.pad(x, ((0, 0), (0, 0), rows, cols), constant_values=fill)
    return padded, (rows[1], cols[1])


def _windows(xp: np.ndarray, out_hw, kernel, stride) -> np.ndarray:
    from numpy.lib.stride_tricks import sliding_window_view

    view = sliding_window_view(xp, kernel, axis=(2, 3))[:, :, :: stride[0], :: stride[1]]
    return view[:, :, : out_hw[0], : out_hw[1]].reshape(view.shape[:2] + tuple(out_hw) + (-1,))


def _cell_counts(x: np.ndarray, out_hw, kernel, stride, pad_before) -> np.ndarray:
    """(H', W'): each window's cells inside the slice (an average's divisor), in x's dtype,
    as the numpy reference counts them (`flexflow.ops.window.window_cell_counts`)."""
    from flexflow.ops.window import window_cell_counts  # (here: this module may stand in
    # for an ops module that flexflow.ops is still importing)

    rows, cols = (
        window_cell_counts(size, out, k, s, p)
        for size, out, k, s, p in zip(x.shape[2:], out_hw, kernel, stride, pad_before, strict=True)
    )
    return np.outer(rows, cols).astype(x.dtype)


def pool2d_forward(x, out_hw, kernel, stride, pad_before, is_max) -> np.ndarray:
    x = np.asarray(x)
    fill = -np.inf if is_max else 0.0
    xp, _ = _padded(x, out_hw, kernel, stride, pad_before, fill)
    win = _windows(xp, out_hw, kernel, stride)  # (N, C, H', W', kh*kw)
    if is_max:
        return win.max(axis=-1)
    return win.sum(axis=-1) / _cell_counts(x, out_hw, kernel, stride, pad_before)


def pool2d_backward(x, dy, kernel, stride, pad_before, is_max) -> np.ndarray:
    x = np.asarray(x)
    out_hw = dy.shape[2:]
    fill = -np.inf if is_max else 0.0
    xp, _ = _padded(x, out_hw, kernel, stride, pad_before, fill)
    kh, kw = kernel
    if is_max:
        first_max = _windows(xp, out_hw, kernel, stride).argmax(axis=-1)  # ties: first cell
        grads = (first_max[..., None] == np.arange(kh * kw)) * dy[..., None]
    else:
        share = dy / _cell_counts(x, out_hw, kernel, stride, pad_before)  # (N, C, H', W')
        grads = np.broadcast_to(share[..., None], dy.shape + (kh * kw,))
    grads = grads.reshape(dy.shape + (kh, kw))
    dxp = np.zeros(xp.shape, dtype=np.result_type(x.dtype, dy.dtype))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + stride[0] * (out_hw[0] - 1) + 1, stride[0])
            cols = slice(j, j + stride[1] * (out_hw[1] - 1) + 1, stride[1])
            dxp[:, :, rows, cols] += grads[:, :, :, :, i, j]
    h, w = x.shape[2:]
    return dxp[:, :, pad_before[0] : pad_before[0] + h, pad_before[1] : pad_before[1] + w].astype(
        x.dtype
    )


def im2col(x, out_hw, kernel, stride, pad_before) -> np.ndarray:
    """x (N, C, H, W) -> columns (N*H'*W', C*kh*kw); cells in the padding read as zeros."""
    x = np.asarray(x)
    xp, _ = _padded(x, out_hw, kernel, stride, pad_before, 0.0)
    win = _windows(xp, out_hw, kernel, stride)  # (N, C, H', W', kh*kw)
    n, c = x.shape[:2]
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4)).reshape(
        n * out_hw[0] * out_hw[1], c * kernel[0] * kernel[1]
    )


def col2im(cols, x_shape, out_hw, kernel, stride, pad_before) -> np.ndarray:
    """The adjoint of `im2col`: column gradients summed back onto an (N, C, H, W) input."""
    n, c, h, w = x_shape
    kh, kw = kernel
    cols = np.asarray(cols).reshape(n, out_hw[0], out_hw[1], c, kh, kw)
    _, (below, right) = _padded(np.empty((1, 1, h, w)), out_hw, kernel, stride, pad_before, 0.0)
    dxp = np.zeros((n, c, pad_before[0] + h + below, pad_before[1] + w + right), cols.dtype)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + stride[0] * (out_hw[0] - 1) + 1, stride[0])
            columns = slice(j, j + stride[1] * (out_hw[1] - 1) + 1, stride[1])
            dxp[:, :, rows, columns] += cols[..., i, j].transpose(0, 3, 1, 2)
    return np.ascontiguousarray(
        dxp[:, :, pad_before[0] : pad_before[0] + h, pad_before[1] : pad_before[1] + w]
    )


class ConvWindow:
    """No direct convolution kernels here: every convolution takes the im2col path."""

    @staticmethod
    def of(*args: Any) -> None:
        return None


def sparse_xent(probabilities, labels, total: int, valid_rows: int):
    """(loss, gradient, correct) of sparse categorical cross-entropy on float32 softmax rows and
    one label per row, over the first `valid_rows`: the C kernel's (native/losses.c) float32
    gradient -1/(total p) at each label, probabilities clipped at float32's smallest normal;
    None when a label lies outside [0, classes)."""
    p = np.ascontiguousarray(probabilities, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)[:valid_rows]
    if np.any((labels < 0) | (labels >= p.shape[1])):
        return None
    rows = np.arange(valid_rows)
    picked = np.maximum(p[rows, labels].astype(np.float64), float(np.finfo(np.float32).tiny))
    grad = np.zeros_like(p)
    grad[rows, labels] = (-1.0 / (total * picked)).astype(np.float32)
    loss = -float(np.sum(np.log(picked))) / total
    correct = int(np.sum(np.argmax(p[:valid_rows], axis=1) == labels)) if valid_rows else 0
    return loss, grad, correct
