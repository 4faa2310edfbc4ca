"""Calls into the C op kernels (native/kernels.c through cffi): numpy arrays in, numpy arrays out."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from flexflow._kernels import ffi, lib
from flexflow.errors import StrategyError

from .activations import ActiMode
from .base import writable_into

ACTIVATION_CODES: dict[ActiMode, int] = {
    ActiMode.AC_MODE_NONE: lib.FF_ACT_NONE,
    ActiMode.AC_MODE_RELU: lib.FF_ACT_RELU,
    ActiMode.AC_MODE_GELU: lib.FF_ACT_GELU,
    ActiMode.AC_MODE_TANH: lib.FF_ACT_TANH,
    ActiMode.AC_MODE_SIGMOID: lib.FF_ACT_SIGMOID,
    ActiMode.AC_MODE_ELU: lib.FF_ACT_ELU,
}
"""Each activation's code in the C kernels (native/activations.c), which compute
flexflow.ops.activations' formulas in float32."""

_SUFFIX = {np.dtype(np.float32): ("f32", "float[]"), np.dtype(np.float64): ("f64", "double[]")}


def _pointer(array: np.ndarray, ctype: str):
    """A C-contiguous array as a pointer argument of `ctype` ("float[]"): one cffi call (these
    run for every op of every task)."""
    return ffi.from_buffer(ctype, array)


def pool2d_forward(
    x: np.ndarray,
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
    is_max: bool,
) -> np.ndarray:
    """Pool an NCHW slice whose first output row/column start `pad_before` cells before it."""
    x = np.ascontiguousarray(x)
    suffix, ctype = _SUFFIX[x.dtype]
    n, c, h, w = x.shape
    y = np.empty((n, c) + tuple(out_hw), dtype=x.dtype)
    getattr(lib, f"ff_pool2d_forward_{suffix}")(
        _pointer(x, ctype), _pointer(y, ctype), n, c, h, w, out_hw[0], out_hw[1],
        kernel[0], kernel[1], stride[0], stride[1], pad_before[0], pad_before[1], int(is_max),
    )  # fmt: skip
    return y


def pool2d_backward(
    x: np.ndarray,
    dy: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
    is_max: bool,
) -> np.ndarray:
    """The gradient of `pool2d_forward` with respect to its input slice."""
    x = np.ascontiguousarray(x)
    dy = np.ascontiguousarray(dy, dtype=x.dtype)
    suffix, ctype = _SUFFIX[x.dtype]
    n, c, h, w = x.shape
    dx = np.empty_like(x)
    getattr(lib, f"ff_pool2d_backward_{suffix}")(
        _pointer(x, ctype), _pointer(dy, ctype), _pointer(dx, ctype), n, c, h, w,
        dy.shape[2], dy.shape[3], kernel[0], kernel[1], stride[0], stride[1],
        pad_before[0], pad_before[1], int(is_max),
    )  # fmt: skip
    return dx


def im2col(
    x: np.ndarray,
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
) -> np.ndarray:
    """x (N, C, H, W) -> columns (N*H'*W', C*kh*kw); cells in the padding read as zeros."""
    x = np.ascontiguousarray(x)
    suffix, ctype = _SUFFIX[x.dtype]
    n, c, h, w = x.shape
    cols = np.empty((n * out_hw[0] * out_hw[1], c * kernel[0] * kernel[1]), dtype=x.dtype)
    getattr(lib, f"ff_im2col_{suffix}")(
        _pointer(x, ctype), _pointer(cols, ctype), n, c, h, w, out_hw[0], out_hw[1],
        kernel[0], kernel[1], stride[0], stride[1], pad_before[0], pad_before[1],
    )  # fmt: skip
    return cols


def col2im(
    cols: np.ndarray,
    x_shape: tuple[int, int, int, int],
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
) -> np.ndarray:
    """The adjoint of `im2col`: column gradients summed back onto an (N, C, H, W) input."""
    cols = np.ascontiguousarray(cols)
    suffix, ctype = _SUFFIX[cols.dtype]
    n, c, h, w = x_shape
    dx = np.empty(x_shape, dtype=cols.dtype)
    getattr(lib, f"ff_col2im_{suffix}")(
        _pointer(cols, ctype), _pointer(dx, ctype), n, c, h, w, out_hw[0], out_hw[1],
        kernel[0], kernel[1], stride[0], stride[1], pad_before[0], pad_before[1],
    )  # fmt: skip
    return dx


# ---- direct convolutions of float32 tiles (native/conv.c) --------------------------------------
def _conv_dims(x_shape, out_channels: int, out_hw, kernel, stride, padding):
    """A convolution's ff_window_dims (native/kernels.h)."""
    n, c, h, w = x_shape
    return ffi.new(
        "ff_window_dims *",
        dict(n=n, c=c, h=h, w=w, o=out_channels, oh=out_hw[0], ow=out_hw[1], kh=kernel[0],
             kw=kernel[1], sh=stride[0], sw=stride[1], ph=padding[0], pw=padding[1], is_max=0),
    )  # fmt: skip


class ConvWindow:
    """A convolution of (N, C, H, W) float32 tiles by an (O, C, kh, kw) kernel at stride 1, one
    group, as native/conv.c's direct kernels take it (`ff_window_dims`)."""

    __slots__ = ("dims", "scratch_floats", "isa")

    def __init__(
        self, x_shape, out_channels: int, out_hw, kernel, padding, isa: int = -1, stride=(1, 1)
    ) -> None:
        self.dims = _conv_dims(x_shape, out_channels, out_hw, kernel, stride, padding)
        self.scratch_floats = int(lib.ff_conv_direct_scratch(self.dims))
        self.isa = isa
        """The instruction set the kernels run (lib.FF_ISA_*; -1: this CPU's best): each gives
        the same bits, which tests check on every one this CPU has (`isas`)."""

    @staticmethod
    def isas() -> list[int]:
        """The instruction sets (lib.FF_ISA_*) this CPU runs the direct kernels with."""
        mask = lib.ff_conv_direct_isas()
        return [isa for isa in range(3) if mask >> isa & 1]

    @classmethod
    def of(
        cls, x_shape, out_channels: int, out_hw, kernel, stride, padding, groups: int
    ) -> ConvWindow | None:
        """The direct kernels' window of this convolution, or None where native
        ff_conv_direct's rule leaves it to im2col + GEMM."""
        if groups != 1:
            return None
        window = cls(x_shape, out_channels, out_hw, kernel, padding, stride=stride)
        return window if lib.ff_conv_direct(window.dims) else None

    @staticmethod
    def takes(x_shape, out_channels: int, out_hw, kernel, stride, padding, groups: int) -> bool:
        """Whether the direct kernels run this convolution (`of`)."""
        args = (x_shape, out_channels, out_hw, kernel, stride, padding, groups)
        return ConvWindow.of(*args) is not None

    def _scratch(self) -> np.ndarray:
        return np.empty(self.scratch_floats, dtype=np.float32)

    def forward(self, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """z (N, O, H', W') = the convolution of x by the kernel, plus the bias."""
        d = self.dims
        z = np.empty((d.n, d.o, d.oh, d.ow), dtype=np.float32)
        lib.ff_conv_direct_forward_f32(
            _floats(_f32(x)), _floats(_f32(kernel)), _floats(None if bias is None else _f32(bias)),
            _floats(z), d, _floats(self._scratch()), self.isa,
        )  # fmt: skip
        return z

    def input_grad(self, dz: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        """dx (N, C, H, W) from dz (N, O, H', W')."""
        d = self.dims
        dx = np.empty((d.n, d.c, d.h, d.w), dtype=np.float32)
        lib.ff_conv_direct_input_grad_f32(
            _floats(_f32(dz)), _floats(_f32(kernel)), _floats(dx), d, _floats(self._scratch()),
            self.isa,
        )  # fmt: skip
        return dx

    def kernel_grad(self, x: np.ndarray, dz: np.ndarray, out: np.ndarray | None = None):
        """The kernel's gradient (O, C, kh, kw) from x and dz, written into `out` (C-contiguous
        float32) when given."""
        d = self.dims
        if out is None:
            out = np.empty((d.o, d.c, d.kh, d.kw), dtype=np.float32)
        lib.ff_conv_direct_kernel_grad_f32(
            _floats(_f32(x)), _floats(_f32(dz)), _floats(out), d, _floats(self._scratch()),
            self.isa,
        )  # fmt: skip
        return out


# ---- batch norm on float32 NCHW (or NC) tiles, float64 statistics ------------------------------
def _f32(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32)


def _f64(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float64)


def _bn_call(kernel, arrays: tuple[np.ndarray, ...], x: np.ndarray, *scalars):
    """kernel(pointers to `arrays` (an entry already a pointer, e.g. NULL, as it is), then x's
    (n, c, hw) as the C kernels walk it, then the scalars); what it returns."""
    pointers = (
        _pointer(a, _SUFFIX[a.dtype][1]) if isinstance(a, np.ndarray) else a for a in arrays
    )
    hw = int(np.prod(x.shape[2:], dtype=np.int64))
    return kernel(*pointers, x.shape[0], x.shape[1], hw, *scalars)


def bn_stats(x: np.ndarray) -> np.ndarray:
    """(2, C) float64: per channel, the tile's sum of x and of x^2."""
    x = _f32(x)
    sums = np.empty((2, x.shape[1]), dtype=np.float64)
    _bn_call(lib.ff_bn_stats_f32, (x, sums), x)
    return sums


def bn_forward(x, stats, gamma, beta, count: float, eps: float, relu: bool) -> np.ndarray:
    """The tile normalized with the batch statistics `stats` ((2, C) sums), scaled, shifted and
    (with relu) rectified; float32."""
    x = _f32(x)
    y = np.empty_like(x)
    arrays = (x, y, _f64(stats), _f32(gamma), _f32(beta))
    _bn_call(lib.ff_bn_forward_f32, arrays, x, float(count), float(eps), int(relu))
    return y


def bn_stats_backward(x, y, dy, stats, count: float, eps: float, relu: bool) -> np.ndarray:
    """(2, C) float64: per channel, the tile's sum of dz and of dz * xhat."""
    x = _f32(x)
    sums = np.empty((2, x.shape[1]), dtype=np.float64)
    arrays = (x, _f32(y), _f32(dy), _f64(stats), sums)
    _bn_call(lib.ff_bn_stats_backward_f32, arrays, x, float(count), float(eps), int(relu))
    return sums


def bn_backward(
    x, y, dy, gamma, stats, grad_stats, count: float, eps: float, relu: bool, tile_sums=None
):
    """(dx, dgamma, dbeta) of the tile, float32: the gamma and beta gradients are its partial
    sums over its own samples, `tile_sums` (its `bn_stats_backward`, which `grad_stats` is
    where the tile holds the batch) or, when None, summed here."""
    x = _f32(x)
    dx = np.empty_like(x)
    dgamma, dbeta = (np.empty(x.shape[1], dtype=np.float32) for _ in range(2))
    sums = ffi.NULL if tile_sums is None else _f64(tile_sums)
    inputs = (x, _f32(y), _f32(dy), _f32(gamma), _f64(stats), _f64(grad_stats), sums)
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
    x = _f32(x)
    y = np.empty_like(x)
    stats = np.empty((2, x.shape[1]), dtype=np.float64)
    out = writable_into(running_out, stats.shape, stats)
    out = np.empty_like(stats) if out is None else out
    arrays = (x, y, _f32(gamma), _f32(beta), _f64(running), out, stats)
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
    x = _f32(x)
    dx = np.empty_like(x)
    dgamma, dbeta = (np.empty(x.shape[1], dtype=np.float32) for _ in range(2))
    arrays = (x, _f32(y), _f32(dy), _f32(gamma), _f64(stats), dx, dgamma, dbeta)
    scalars = (float(count), float(eps), int(relu))
    where = (ffi.NULL if exchange is None else exchange, point, EXCHANGE_TIMEOUT_S)
    _exchanged(_bn_call(lib.ff_bn_train_backward_f32, arrays, x, *scalars, *where))
    return dx, dgamma, dbeta


# ---- optimizer updates, in place on float32 weights -------------------------------------------
def updatable_in_place(weight: np.ndarray, partials: Sequence[np.ndarray], *states) -> bool:
    """Whether the C updates take these arrays: float32, C-contiguous, every partial gradient
    and state shaped like the weight. Other layouts (a strided tile of a weight) go through
    numpy."""
    arrays = (weight, *partials, *states)
    return (
        len(partials) > 0
        and all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)
        and all(a.shape == weight.shape for a in arrays)
        and weight.flags.writeable
    )


_F32_POINTER = _SUFFIX[np.dtype(np.float32)][1]


def _pointers(arrays: Sequence[np.ndarray]):
    """A C array of float pointers to `arrays` (keep the result alive during the call)."""
    return ffi.new("float *[]", [_pointer(a, _F32_POINTER) for a in arrays])


UPDATE_SGD, UPDATE_ADAM = lib.FF_UPDATE_SGD, lib.FF_UPDATE_ADAM
"""The kinds of C update (ff_update.kind): SGD's hyperparameters (lr, momentum, weight decay,
nesterov), Adam's (lr, beta1, beta2, epsilon, weight decay, correction1, correction2)."""


def apply_update(
    kind: int, hyper: Sequence[float], weight, partials, states, l2: float = 0.0
) -> None:
    """Update `weight` in place from the partial gradients' sum and its `states` (SGD: the
    velocity, if any; Adam: m and v), the gradient first gaining `l2` * weight (its L2
    regularizer), in one pass of native/optimizers.c: the bits of flexflow.optimizers' numpy
    `apply`. Arrays as `updatable_in_place` accepts them."""
    update = ffi.new("ff_update *")
    update.kind, update.n, update.copies = kind, weight.size, len(partials)
    update.weight = _pointer(weight, _F32_POINTER)
    keep = _pointers(partials)  # alive until the call returns
    update.partials = keep
    if len(states) > 0:
        update.state0 = _pointer(states[0], _F32_POINTER)
    if len(states) > 1:
        update.state1 = _pointer(states[1], _F32_POINTER)
    update.h = [float(value) for value in hyper] + [0.0] * (7 - len(hyper))
    runs = L2Runs(((weight.size, l2),)) if l2 else None
    lib.ff_apply_update_runs_f32(update, ffi.NULL if runs is None else runs.struct)


class L2Runs:
    """An `ff_l2_runs` (native/kernels.h: the L2 regularizers of a flat buffer) of (stop,
    lambda) runs, and the arrays it points at, alive as long as this object."""

    def __init__(self, runs: Sequence[tuple[int, float]]) -> None:
        self._stops = ffi.new("long[]", [int(stop) for stop, _ in runs])
        self._lambdas = ffi.new("float[]", [float(np.float32(lam)) for _, lam in runs])
        self.struct = ffi.new("ff_l2_runs *")
        self.struct.count, self.struct.stop, self.struct.l2 = len(runs), self._stops, self._lambdas


# ---- dense layers on float32 tiles, products through a CBLAS sgemm ----------------------------
def _floats(array: np.ndarray | None):
    """A C-contiguous float32 array as a `float *` argument, NULL for None."""
    return ffi.NULL if array is None else _pointer(array, _F32_POINTER)


def dense_forward(gemm: int, x, w, b, act: int, keep_pre: bool = False):
    """y (m, n) = act(x (m, k) w^T (+ b)), float32, through the sgemm at address `gemm`;
    `act` a FF_ACT_* code (`ACTIVATION_CODES`). With `keep_pre`, (y, (the pre-activation,
    GELU's inner tanh or None)): what `dense_backward` reads instead of computing it again."""
    x, w = _f32(x), _f32(w)
    y = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)
    pre = np.empty_like(y) if keep_pre else None
    kept = np.empty_like(y) if keep_pre and act == lib.FF_ACT_GELU else None
    lib.ff_dense_forward_f32(
        _sgemm(gemm), _floats(x), _floats(w), _floats(None if b is None else _f32(b)),
        _floats(y), _floats(pre), _floats(kept), x.shape[0], w.shape[0], x.shape[1], act,
    )  # fmt: skip
    return (y, (pre, kept)) if keep_pre else y


def dense_backward(gemm: int, x, w, y, pre, dy, dw, db, act: int, need_dx: bool, kept=None):
    """The gradients of `dense_forward` from its output y (and its pre-activation `pre`, which
    GELU's gradient reads, with its `kept` inner tanh where the forward kept it; None for the
    others) and dy: dw (n, k) and db (n, or None without a bias) are written (C-contiguous
    float32 arrays); returns dx (m, k), or None without `need_dx`."""
    x, w, y, dy = _f32(x), _f32(w), _f32(y), _f32(dy)
    (m, k), n = x.shape, w.shape[0]
    dz = np.empty((m, n), dtype=np.float32) if act != lib.FF_ACT_NONE else None
    dx = np.empty((m, k), dtype=np.float32) if need_dx else None
    pre, kept = (None if a is None else _f32(a) for a in (pre, kept))
    lib.ff_dense_backward_f32(
        _sgemm(gemm), _floats(x), _floats(w), _floats(y), _floats(pre), _floats(kept),
        _floats(dy), _floats(dz), _floats(dw), _floats(db), _floats(dx), m, n, k, act,
    )  # fmt: skip
    return dx


def lstm_forward(gemm: int, x, h_prev, c_prev, w_ih, w_hh, bias) -> tuple[np.ndarray, ...]:
    """(h, c, gates) of one LSTM step (native/lstm.c): x (n, e); h_prev (n, hh) and c_prev
    (n, hid), or None on the first step; weights (4 * hid, e), (4 * hid, hh), (4 * hid,); the
    activated gates (n, 4 * hid), which `lstm_backward` may take instead of recomputing them."""
    x, w_ih, w_hh, bias = _f32(x), _f32(w_ih), _f32(w_hh), _f32(bias)
    h_prev = None if h_prev is None else _f32(h_prev)
    c_prev = None if c_prev is None else _f32(c_prev)
    (n, e), width, hh = x.shape, w_ih.shape[0], w_hh.shape[1]
    z = np.empty((n, width), dtype=np.float32)
    h, c = (np.empty((n, width // 4), dtype=np.float32) for _ in range(2))
    lib.ff_lstm_forward_f32(
        _sgemm(gemm), _floats(x), _floats(h_prev), _floats(c_prev), _floats(w_ih),
        _floats(w_hh), _floats(bias), _floats(z), _floats(h), _floats(c), n, e, hh, width // 4, e,
    )  # fmt: skip
    return h, c, z


def lstm_backward(gemm: int, x, h_prev, c_prev, w_ih, w_hh, bias, c, dh, dc, gates=None):
    """(dx, dh_prev, dc_prev, dw_ih, dw_hh, db) of `lstm_forward` from its output c and the
    gradients dh, dc, and its `gates` where kept (else recomputed); dh_prev and dc_prev are
    None on the first step."""
    x, w_ih, w_hh, bias = _f32(x), _f32(w_ih), _f32(w_hh), _f32(bias)
    c, dh, dc = _f32(c), _f32(dh), _f32(dc)
    first = h_prev is None
    h_prev = None if first else _f32(h_prev)
    c_prev = None if first else _f32(c_prev)
    (n, e), width, hh = x.shape, w_ih.shape[0], w_hh.shape[1]
    kept = gates is not None
    z = _f32(gates) if kept else np.empty((n, width), dtype=np.float32)
    dz = np.empty((n, width), dtype=np.float32)
    dx = np.empty((n, e), dtype=np.float32)
    dh_prev = None if first else np.empty((n, hh), dtype=np.float32)
    dc_prev = None if first else np.empty_like(c)
    dw_ih, dw_hh, db = np.empty_like(w_ih), np.empty_like(w_hh), np.empty_like(bias)
    lib.ff_lstm_backward_f32(
        _sgemm(gemm), _floats(x), _floats(h_prev), _floats(c_prev), _floats(w_ih),
        _floats(w_hh), _floats(bias), _floats(c), _floats(dh), _floats(dc), _floats(z),
        _floats(dz), _floats(dx), _floats(dh_prev), _floats(dc_prev), _floats(dw_ih),
        _floats(dw_hh), _floats(db), n, e, hh, width // 4, int(kept), e,
    )  # fmt: skip
    return dx, dh_prev, dc_prev, dw_ih, dw_hh, db


@functools.cache
def _sgemm(address: int):
    return ffi.cast("ff_sgemm_fn", address)


# ---- losses -------------------------------------------------------------------------------------
def sparse_xent(probabilities: np.ndarray, labels: np.ndarray, total: int, valid_rows: int):
    """(loss, gradient, correct) of sparse categorical cross-entropy on float32 softmax rows
    (rows, classes) and one label per row, over the first `valid_rows` (the gradient is zero
    past them); None when a label lies outside [0, classes)."""
    p = _f32(probabilities)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    grad = np.empty_like(p)
    loss, correct = ffi.new("double *"), ffi.new("long *")
    status = lib.ff_sparse_xent_f32(
        _floats(p), _pointer(labels, "long long[]"), _floats(grad), p.shape[0],
        p.shape[1], valid_rows, float(total), loss, correct,
    )  # fmt: skip
    return None if status else (loss[0], grad, int(correct[0]))


# ---- dropout and embedding gradients on float32 tiles ------------------------------------------
def dropout(stream: int, rate: float, base: int, x: np.ndarray) -> np.ndarray:
    """x through flexflow.ops.dropout's mask for the stream keyed by `stream` (the op's seed),
    x's values following on from index `base` of the whole tensor (a tile of whole samples):
    float32, rounded from the float64 products as numpy's path rounds them when stored."""
    x = _f32(x)
    y = np.empty_like(x)
    lib.ff_dropout_f32(stream, rate, base, _floats(x), _floats(y), x.size)
    return y


def embedding_backward(ids: np.ndarray, dy: np.ndarray, table_rows: int) -> np.ndarray | None:
    """The table's gradient (table_rows, E): each row of dy (ids.size, E) added into its id's
    row in order, as numpy's add.at (ids: int32); None when an id lies outside the table."""
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    dy = _f32(dy.reshape(ids.size, -1))
    grad = np.empty((table_rows, dy.shape[1]), dtype=np.float32)
    status = lib.ff_embedding_backward_f32(
        ffi.from_buffer("int[]", ids), _floats(dy), _floats(grad), ids.size, dy.shape[1], table_rows
    )
    return None if status else grad


# ---- multi-head attention on float32 tiles ------------------------------------------------------
def _attention_dims(query, key, value, embed_dim: int, heads: int):
    dims = ffi.new("ff_attention_dims *")
    (dims.n, dims.lq, dims.eq), (_, dims.lk, dims.ek) = query.shape, key.shape
    dims.ev, dims.e, dims.heads = value.shape[2], embed_dim, heads
    return dims


def _weight_pointers(arrays: Sequence[np.ndarray | None], ctype: str):
    """The 8 weight (or gradient) pointers native/attention.c takes, NULL for absent biases."""
    listed = [_floats(a) for a in arrays] + [ffi.NULL] * (8 - len(arrays))
    return ffi.new(f"{ctype}[8]", listed)


def attention_forward(gemm: int, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray],
                      heads: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """y (N, Lq, E) of multi-head attention (native/attention.c) over float32 query, key and
    value tiles with weights wq, wk, wv, wo (and their biases), and the scratch its backward
    reads (projections, probabilities, context)."""
    query, key, value = (_f32(a) for a in inputs)
    weights = [_f32(w) for w in weights]
    dims = _attention_dims(query, key, value, weights[3].shape[0], heads)
    scratch = np.empty(int(lib.ff_attention_scratch(dims)), dtype=np.float32)
    y = np.empty((dims.n, dims.lq, dims.e), dtype=np.float32)
    lib.ff_attention_forward_f32(
        _sgemm(gemm), dims, _floats(query), _floats(key), _floats(value),
        _weight_pointers(weights, "const float *"), _floats(scratch), _floats(y),
    )  # fmt: skip
    return y, scratch


def attention_backward(gemm: int, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray],
                       heads: int, scratch: np.ndarray, dy: np.ndarray, need_input_grads: bool):  # fmt: skip
    """The gradients of `attention_forward` from its scratch and dy: ((dquery, dkey, dvalue)
    or Nones without `need_input_grads`, the weights' gradients in their order)."""
    query, key, value = (_f32(a) for a in inputs)
    weights = [_f32(w) for w in weights]
    dims = _attention_dims(query, key, value, weights[3].shape[0], heads)
    grads = [np.empty_like(w) for w in weights]
    dx = [np.empty_like(a) if need_input_grads else None for a in (query, key, value)]
    lib.ff_attention_backward_f32(
        _sgemm(gemm), dims, _floats(query), _floats(key), _floats(value),
        _weight_pointers(weights, "const float *"), _floats(scratch), _floats(_f32(dy)),
        *(_floats(d) for d in dx), _weight_pointers(grads, "float *"),
    )  # fmt: skip
    return tuple(dx), tuple(grads)


# ---- layer norm on float32 tiles -----------------------------------------------------------------
def layer_norm_forward(x: np.ndarray, gamma, beta, width: int, eps: float):
    """y of layer norm over the last `width` values of each row of x (native/layer_norm.c),
    float32, and what its backward reads: (x_hat, rstd per row)."""
    x = _f32(x)
    rows = x.size // width
    y, x_hat = np.empty_like(x), np.empty_like(x)
    rstd = np.empty(rows, dtype=np.float32)
    gamma = None if gamma is None else _f32(gamma)
    beta = None if beta is None else _f32(beta)
    lib.ff_layer_norm_forward_f32(
        _floats(x), _floats(gamma), _floats(beta), _floats(y), _floats(x_hat), _floats(rstd),
        rows, width, eps,
    )  # fmt: skip
    return y, (x_hat, rstd)


def layer_norm_backward(saved, gamma, dy: np.ndarray, need_dx: bool):
    """(dx or None, dgamma, dbeta (None without gamma)) from `layer_norm_forward`'s saved
    (x_hat, rstd) and dy."""
    x_hat, rstd = saved
    dy = _f32(dy)
    rows, width = rstd.size, x_hat.size // rstd.size
    dx = np.empty_like(dy) if need_dx else None
    affine = gamma is not None
    dgamma, dbeta = (np.empty(width, np.float32) if affine else None for _ in range(2))
    sums = np.empty(2 * width, dtype=np.float64)
    lib.ff_layer_norm_backward_f32(
        _floats(x_hat), _floats(rstd), _floats(None if gamma is None else _f32(gamma)),
        _floats(dy), _floats(dx), _floats(dgamma), _floats(dbeta),
        ffi.from_buffer("double[]", sums), rows, width,
    )  # fmt: skip
    return dx, dgamma, dbeta
