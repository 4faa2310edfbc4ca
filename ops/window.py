"""Sliding-window arithmetic shared by conv2d and pool2d: validation, halos, im2col views and col2im."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from flexflow.errors import ShapeError

from .base import Op, Region, TensorSpec
from .checks import expect_non_negative, expect_positive
from .shapes import window_input_range, window_output_size


class Window2D(Op):
    """An op with a 2-D window over NCHW input: its hyperparameters as (height, width) pairs."""

    __slots__ = ()
    kernel_h: int
    kernel_w: int
    stride_h: int
    stride_w: int
    padding_h: int
    padding_w: int

    @property
    def _kernel(self) -> tuple[int, int]:
        return (self.kernel_h, self.kernel_w)

    @property
    def _stride(self) -> tuple[int, int]:
        return (self.stride_h, self.stride_w)

    @property
    def _padding(self) -> tuple[int, int]:
        return (self.padding_h, self.padding_w)

    def _tile_padding(self, sig, region: Region) -> tuple[tuple[int, int], tuple[int, int]]:
        """Zero rows/columns a tile's input slice needs on each side: the op's padding where the
        tile touches the tensor's border, none inside (the halo holds real data there)."""
        pads = []
        for (o0, o1), size, k, s, p in zip(
            region[2:4],
            sig.inputs[0].shape[2:4],
            self._kernel,
            self._stride,
            self._padding,
            strict=True,
        ):
            first, last = o0 * s - p, (o1 - 1) * s - p + k  # input rows read, halo included
            pads.append((max(0, -first), max(0, last - size)))
        return pads[0], pads[1]


def window_output_hw(
    kind: str,
    name: str,
    x: TensorSpec,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
) -> tuple[int, int]:
    """Validate an NCHW input and window hyperparameters; the output (height, width)."""
    if len(x.shape) != 4:
        raise ShapeError(
            f"{kind} '{name}': input must have rank 4 (sample, channel, height, width), got shape "
            f"{x.shape}; reshape it to NCHW first."
        )
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    expect_positive(kind, name, kernel_h=kh, kernel_w=kw, stride_h=sh, stride_w=sw)
    expect_non_negative(kind, name, padding_h=ph, padding_w=pw)
    out_h = window_output_size(x.shape[2], kh, sh, ph)
    out_w = window_output_size(x.shape[3], kw, sw, pw)
    if out_h <= 0 or out_w <= 0:
        raise ShapeError(
            f"{kind} '{name}': a {kh}x{kw} kernel with padding ({ph}, {pw}) does not fit input "
            f"shape {x.shape} (padded height {x.shape[2] + 2 * ph}, width {x.shape[3] + 2 * pw}); "
            f"use a smaller kernel or more padding."
        )
    return out_h, out_w


def windowed_input_region(
    region: Region,
    channels: tuple[int, int],
    in_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
) -> Region:
    """The NCHW input box an output tile reads: its samples, `channels`, rows/columns with halos."""
    (h0, h1), (w0, w1) = region[2], region[3]
    rows = window_input_range(h0, h1, kernel[0], stride[0], padding[0], in_hw[0])
    cols = window_input_range(w0, w1, kernel[1], stride[1], padding[1], in_hw[1])
    return (region[0], channels, rows, cols)


def window_cell_counts(
    size: int, out: int, kernel: int, stride: int, pad_before: int
) -> np.ndarray:
    """(out,): how many cells of each of `out` windows along one axis lie inside [0, size),
    window i starting at i * stride - pad_before: an average pooling's divisor along that
    axis, the padding left out of it (a 2-D window's count is the product of its row's and
    its column's)."""
    starts = np.arange(out) * stride - pad_before
    return np.minimum(starts + kernel, size) - np.maximum(starts, 0)


def pad_hw(x: np.ndarray, padding: tuple[int, int], value: float = 0.0) -> np.ndarray:
    """x (N, C, H, W) -> (N, C, H + 2*ph, W + 2*pw), borders filled with `value`."""
    ph, pw = padding
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def pad_hw_sides(
    x: np.ndarray, rows: tuple[int, int], cols: tuple[int, int], value: float = 0.0
) -> np.ndarray:
    """x (N, C, H, W) padded by (top, bottom) rows and (left, right) columns of `value`; `x`
    itself when there is nothing to pad (callers only read the result: the tiles of an
    unpadded convolution skip a copy, and np.pad's own overhead, on every call)."""
    if not any(rows) and not any(cols):
        return x
    n, c, h, w = x.shape
    padded = np.full((n, c, h + sum(rows), w + sum(cols)), value, dtype=x.dtype)
    padded[:, :, rows[0] : rows[0] + h, cols[0] : cols[0] + w] = x
    return padded


def crop_hw_sides(xp: np.ndarray, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    """Undo `pad_hw_sides`: drop (top, bottom) rows and (left, right) columns."""
    return xp[:, :, rows[0] : xp.shape[2] - rows[1], cols[0] : xp.shape[3] - cols[1]]


def windows(xp: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int]) -> np.ndarray:
    """A read-only view of every window of a padded input: (N, C, H', W', kh, kw)."""
    view = sliding_window_view(xp, kernel, axis=(2, 3))  # (N, C, Hp-kh+1, Wp-kw+1, kh, kw)
    return view[:, :, :: stride[0], :: stride[1]]


def accumulate_windows(
    grad_windows: np.ndarray, padded_hw: tuple[int, int], stride: tuple[int, int]
) -> np.ndarray:
    """col2im: add window gradients (N, C, H', W', kh, kw) onto the padded input (N, C, Hp, Wp)."""
    n, c, out_h, out_w, kh, kw = grad_windows.shape
    sh, sw = stride
    out = np.zeros((n, c) + padded_hw, dtype=grad_windows.dtype)
    # One strided add per kernel position: windows overlap when stride < kernel, so the
    # positions must be accumulated, never assigned.
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + sh * (out_h - 1) + 1, sh)
            cols = slice(j, j + sw * (out_w - 1) + 1, sw)
            out[:, :, rows, cols] += grad_windows[:, :, :, :, i, j]
    return out


def crop_hw(xp: np.ndarray, padding: tuple[int, int]) -> np.ndarray:
    """Drop the padding again: (N, C, Hp, Wp) -> (N, C, H, W)."""
    ph, pw = padding
    return xp[:, :, ph : xp.shape[2] - ph, pw : xp.shape[3] - pw]
