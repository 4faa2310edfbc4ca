"""Pooling by brute force, one window cell at a time with an explicit bounds check: the value
the numpy reference, the C kernels, the fused C step and the GPU tiles are checked against.

The functions take the C kernels' arguments (`flexflow.ops.native_windows.pool2d_forward/backward`):
an NCHW slice, its windows starting `pad_before` cells before it, every cell outside it
padding; a whole tensor is the slice with pad_before = the op's padding. Padding never
counts: a max is over the window's cells inside the slice, an average divides by their
number (FlexFlow's CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING).
"""

from __future__ import annotations

import numpy as np

from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.shapes import window_output_size


def _cells(shape, r, q, kernel, stride, pad_before) -> list[tuple[int, int]]:
    """The (row, column)s of output (r, q)'s window inside an (H, W) slice, row-major."""
    h, w = shape[2:]
    top, left = r * stride[0] - pad_before[0], q * stride[1] - pad_before[1]
    return [
        (i, j)
        for i in range(top, top + kernel[0])
        for j in range(left, left + kernel[1])
        if 0 <= i < h and 0 <= j < w
    ]


def loop_pool2d_forward(x, out_hw, kernel, stride, pad_before, is_max) -> np.ndarray:
    """y (N, C, H', W'): each output the max or mean of its window's cells inside x."""
    y = np.zeros(x.shape[:2] + tuple(out_hw), dtype=x.dtype)
    for r in range(out_hw[0]):
        for q in range(out_hw[1]):
            cells = np.stack(
                [x[:, :, i, j] for i, j in _cells(x.shape, r, q, kernel, stride, pad_before)]
            )  # (cells, N, C)
            y[:, :, r, q] = cells.max(axis=0) if is_max else cells.sum(axis=0) / len(cells)
    return y


def loop_pool2d_backward(x, dy, kernel, stride, pad_before, is_max) -> np.ndarray:
    """dx (N, C, H, W): a max's gradient to the first maximal cell (row-major), an average's
    spread over the window's cells inside x, 1/count each."""
    dx = np.zeros(x.shape, dtype=np.result_type(x.dtype, dy.dtype))
    for r in range(dy.shape[2]):
        for q in range(dy.shape[3]):
            where = _cells(x.shape, r, q, kernel, stride, pad_before)
            g = dy[:, :, r, q]  # (N, C)
            if is_max:
                first = np.stack([x[:, :, i, j] for i, j in where]).argmax(axis=0)  # (N, C)
                for k, (i, j) in enumerate(where):
                    dx[:, :, i, j] += np.where(first == k, g, 0)
            else:
                for i, j in where:
                    dx[:, :, i, j] += g / len(where)
    return dx.astype(x.dtype)


def whole_out_hw(x: np.ndarray, op: Pool2D) -> tuple[int, int]:
    """The (H', W') `op` gives over the whole tensor x."""
    return tuple(
        window_output_size(size, k, s, p)
        for size, k, s, p in zip(x.shape[2:], op._kernel, op._stride, op._padding, strict=True)
    )


def loop_pool2d(x: np.ndarray, op: Pool2D) -> np.ndarray:
    """`op`'s pre-activation output over the whole tensor x, by brute force."""
    is_max = op.pool_type is PoolType.POOL_MAX
    return loop_pool2d_forward(x, whole_out_hw(x, op), op._kernel, op._stride, op._padding, is_max)


def loop_pool2d_grad(x: np.ndarray, dy: np.ndarray, op: Pool2D) -> np.ndarray:
    """The input gradient of `loop_pool2d` (no activation), by brute force."""
    is_max = op.pool_type is PoolType.POOL_MAX
    return loop_pool2d_backward(x, dy, op._kernel, op._stride, op._padding, is_max)
