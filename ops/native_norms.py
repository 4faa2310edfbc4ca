"""Calls into the C normalizations: batch norm's tiles (native/kernels.c) and training passes (native/exchange.c), layer norm's."""

from __future__ import annotations

import numpy as np

from flexflow._kernels import ffi, lib
from flexflow.errors import StrategyError

from .base import writable_into
from .native_args import SUFFIX, f32, f64, floats, pointer


# ---- batch norm on float32 NCHW (or NC) tiles, float64 statistics ------------------------------
def _bn_call(kernel, arrays: tuple[np.ndarray, ...], x: np.ndarray, *scalars):
    """kernel(pointers to `arrays` (an entry already a pointer, e.g. NULL, as it is), then x's
    (n, c, hw) as the C kernels walk it, then the scalars); what it returns."""
    pointers = (pointer(a, SUFFIX[a.dtype][1]) if isinstance(a, np.ndarray) else a for a in arrays)
    hw = int(np.prod(x.shape[2:], dtype=np.int64))
    return kernel(*pointers, x.shape[0], x.shape[1], hw, *scalars)


def bn_stats(x: np.ndarray) -> np.ndarray:
    """(2, C) float64: per channel, the tile's sum of x and of x^2."""
    x = f32(x)
    sums = np.empty((2, x.shape[1]), dtype=np.float64)
    _bn_call(lib.ff_bn_stats_f32, (x, sums), x)
    return sums


def bn_forward(x, stats, gamma, beta, count: float, eps: float, relu: bool) -> np.ndarray:
    """The tile normalized with the batch statistics `stats` ((2, C) sums), scaled, shifted and
    (with relu) rectified; float32."""
    x = f32(x)
    y = np.empty_like(x)
    arrays = (x, y, f64(stats), f32(gamma), f32(beta))
    _bn_call(lib.ff_bn_forward_f32, arrays, x, float(count), float(eps), int(relu))
    return y


def bn_stats_backward(x, y, dy, stats, count: float, eps: float, relu: bool) -> np.ndarray:
    """(2, C) float64: per channel, the tile's sum of dz and of dz * xhat."""
    x = f32(x)
    sums = np.empty((2, x.shape[1]), dtype=np.float64)
    arrays = (x, f32(y), f32(dy), f64(stats), sums)
    _bn_call(lib.ff_bn_stats_backward_f32, arrays, x, float(count), float(eps), int(relu))
    return sums


def bn_backward(
    x, y, dy, gamma, stats, grad_stats, count: float, eps: float, relu: bool, tile_sums=None
):
    """(dx, dgamma, dbeta) of the tile, float32: the gamma and beta gradients are its partial
    sums over its own samples, `tile_sums` (its `bn_stats_backward`, which `grad_stats` is
    where the tile holds the batch) or, when None, summed here."""
    x = f32(x)
    dx = np.empty_like(x)
    dgamma, dbeta = (np.empty(x.shape[1], dtype=np.float32) for _ in range(2))
    sums = ffi.NULL if tile_sums is None else f64(tile_sums)
    inputs = (x, f32(y), f32(dy), f32(gamma), f64(stats), f64(grad_stats), sums)
    scalars = (float(count), float(eps), int(relu))
    _bn_call(lib.ff_bn_backward_f32, (*inputs, dx, dgamma, dbeta), x, *scalars)
    return dx, dgamma, dbeta


EXCHANGE_TIMEOUT_S = 600.0
"""How long a point waits for the others at an exchange before giving up (a point that failed
aborts the exchange at once; this only bounds a launch whose points were not all started)."""


def exchange_failed(status: int) -> Exception:
    """The error of an exchange call (native/exchange.c) that returned `status` below 0."""
    if status == lib.FF_EXCHANGE_NO_MEMORY:
        return MemoryError("a batch norm's statistics exchange could not allocate its scratch")
    if status == lib.FF_EXCHANGE_TIMEOUT:
        return StrategyError(
            f"a batch-statistics exchange waited {EXCHANGE_TIMEOUT_S:.0f} s for the other points "
            "of its concurrent launch; some point never started"
        )
    return StrategyError(
        "a batch-statistics exchange was abandoned: another point of the concurrent launch "
        "failed (its error comes first) or never started"
    )


def _exchanged(status: int) -> None:
    if status < 0:
        raise exchange_failed(status)


def bn_train_forward(
    x, gamma, beta, running, running_out, count: float, eps: float, relu: bool,
    momentum: float, exchange=None, point: int = 0,
):  # fmt: skip
    """A training tile normalized in one call: its statistics (summed over the points of
    `exchange`, a cffi ff_exchange pointer, as point `point`; None: the tile's own), the
    running (2, C) statistics `running` folded into `running_out` (written), and the output.
    Returns (y, the (2, C) statistics it normalized with)."""
    x = f32(x)
    y = np.empty_like(x)
    stats = np.empty((2, x.shape[1]), dtype=np.float64)
    out = writable_into(running_out, stats.shape, stats)
    out = np.empty_like(stats) if out is None else out
    arrays = (x, y, f32(gamma), f32(beta), f64(running), out, stats)
    scalars = (float(count), float(eps), int(relu), float(momentum))
    where = (ffi.NULL if exchange is None else exchange, point, EXCHANGE_TIMEOUT_S)
    _exchanged(_bn_call(lib.ff_bn_train_forward_f32, arrays, x, *scalars, *where))
    if out is not running_out:
        running_out[...] = out
    return y, stats


def bn_train_backward(
    x, y, dy, gamma, stats, count: float, eps: float, relu: bool, exchange=None, point: int = 0
):
    """A training tile's backward in one call: its sums of dz and dz * xhat summed over the
    points of `exchange` (as `bn_train_forward`), then (dx, dgamma, dbeta), float32."""
    x = f32(x)
    dx = np.empty_like(x)
    dgamma, dbeta = (np.empty(x.shape[1], dtype=np.float32) for _ in range(2))
    arrays = (x, f32(y), f32(dy), f32(gamma), f64(stats), dx, dgamma, dbeta)
    scalars = (float(count), float(eps), int(relu))
    where = (ffi.NULL if exchange is None else exchange, point, EXCHANGE_TIMEOUT_S)
    _exchanged(_bn_call(lib.ff_bn_train_backward_f32, arrays, x, *scalars, *where))
    return dx, dgamma, dbeta


# ---- layer norm on float32 tiles -----------------------------------------------------------------
def layer_norm_forward(x: np.ndarray, gamma, beta, width: int, eps: float):
    """y of layer norm over the last `width` values of each row of x (native/layer_norm.c),
    float32, and what its backward reads: (x_hat, rstd per row)."""
    x = f32(x)
    rows = x.size // width
    y, x_hat = np.empty_like(x), np.empty_like(x)
    rstd = np.empty(rows, dtype=np.float32)
    gamma = None if gamma is None else f32(gamma)
    beta = None if beta is None else f32(beta)
    lib.ff_layer_norm_forward_f32(
        floats(x), floats(gamma), floats(beta), floats(y), floats(x_hat), floats(rstd),
        rows, width, eps,
    )  # fmt: skip
    return y, (x_hat, rstd)


def layer_norm_backward(saved, gamma, dy: np.ndarray, need_dx: bool):
    """(dx or None, dgamma, dbeta (None without gamma)) from `layer_norm_forward`'s saved
    (x_hat, rstd) and dy."""
    x_hat, rstd = saved
    dy = f32(dy)
    rows, width = rstd.size, x_hat.size // rstd.size
    dx = np.empty_like(dy) if need_dx else None
    affine = gamma is not None
    dgamma, dbeta = (np.empty(width, np.float32) if affine else None for _ in range(2))
    sums = np.empty(2 * width, dtype=np.float64)
    lib.ff_layer_norm_backward_f32(
        floats(x_hat), floats(rstd), floats(None if gamma is None else f32(gamma)),
        floats(dy), floats(dx), floats(dgamma), floats(dbeta),
        ffi.from_buffer("double[]", sums), rows, width,
    )  # fmt: skip
    return dx, dgamma, dbeta
