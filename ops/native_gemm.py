"""Calls into the C kernels built on an sgemm: dense layers with their activations, LSTM steps, multi-head attention.

Their C files: native/dense.c (with activations.c), lstm.c and attention.c. Each takes `gemm`, the
address of MKL's cblas_sgemm (ops/blas.py `sgemm_address`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flexflow._kernels import ffi, lib

from .activations import ActiMode
from .native_args import f32, floats, sgemm

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


# ---- dense layers on float32 tiles, products through a CBLAS sgemm ----------------------------
def dense_forward(gemm: int, x, w, b, act: int, keep_pre: bool = False):
    """y (m, n) = act(x (m, k) w^T (+ b)), float32, through the sgemm at address `gemm`;
    `act` a FF_ACT_* code (`ACTIVATION_CODES`). With `keep_pre`, (y, (the pre-activation,
    GELU's inner tanh or None)): what `dense_backward` reads instead of computing it again."""
    x, w = f32(x), f32(w)
    y = np.empty((x.shape[0], w.shape[0]), dtype=np.float32)
    pre = np.empty_like(y) if keep_pre else None
    kept = np.empty_like(y) if keep_pre and act == lib.FF_ACT_GELU else None
    lib.ff_dense_forward_f32(
        sgemm(gemm), floats(x), floats(w), floats(None if b is None else f32(b)),
        floats(y), floats(pre), floats(kept), x.shape[0], w.shape[0], x.shape[1], act,
    )  # fmt: skip
    return (y, (pre, kept)) if keep_pre else y


def dense_backward(gemm: int, x, w, y, pre, dy, dw, db, act: int, need_dx: bool, kept=None):
    """The gradients of `dense_forward` from its output y (and its pre-activation `pre`, which
    GELU's gradient reads, with its `kept` inner tanh where the forward kept it; None for the
    others) and dy: dw (n, k) and db (n, or None without a bias) are written (C-contiguous
    float32 arrays); returns dx (m, k), or None without `need_dx`."""
    x, w, y, dy = f32(x), f32(w), f32(y), f32(dy)
    (m, k), n = x.shape, w.shape[0]
    dz = np.empty((m, n), dtype=np.float32) if act != lib.FF_ACT_NONE else None
    dx = np.empty((m, k), dtype=np.float32) if need_dx else None
    pre, kept = (None if a is None else f32(a) for a in (pre, kept))
    lib.ff_dense_backward_f32(
        sgemm(gemm), floats(x), floats(w), floats(y), floats(pre), floats(kept),
        floats(dy), floats(dz), floats(dw), floats(db), floats(dx), m, n, k, act,
    )  # fmt: skip
    return dx


def lstm_forward(gemm: int, x, h_prev, c_prev, w_ih, w_hh, bias) -> tuple[np.ndarray, ...]:
    """(h, c, gates) of one LSTM step (native/lstm.c): x (n, e); h_prev (n, hh) and c_prev
    (n, hid), or None on the first step; weights (4 * hid, e), (4 * hid, hh), (4 * hid,); the
    activated gates (n, 4 * hid), which `lstm_backward` may take instead of recomputing them."""
    x, w_ih, w_hh, bias = f32(x), f32(w_ih), f32(w_hh), f32(bias)
    h_prev = None if h_prev is None else f32(h_prev)
    c_prev = None if c_prev is None else f32(c_prev)
    (n, e), width, hh = x.shape, w_ih.shape[0], w_hh.shape[1]
    z = np.empty((n, width), dtype=np.float32)
    h, c = (np.empty((n, width // 4), dtype=np.float32) for _ in range(2))
    lib.ff_lstm_forward_f32(
        sgemm(gemm), floats(x), floats(h_prev), floats(c_prev), floats(w_ih),
        floats(w_hh), floats(bias), floats(z), floats(h), floats(c), n, e, hh, width // 4, e,
    )  # fmt: skip
    return h, c, z


def lstm_backward(gemm: int, x, h_prev, c_prev, w_ih, w_hh, bias, c, dh, dc, gates=None):
    """(dx, dh_prev, dc_prev, dw_ih, dw_hh, db) of `lstm_forward` from its output c and the
    gradients dh, dc, and its `gates` where kept (else recomputed); dh_prev and dc_prev are
    None on the first step."""
    x, w_ih, w_hh, bias = f32(x), f32(w_ih), f32(w_hh), f32(bias)
    c, dh, dc = f32(c), f32(dh), f32(dc)
    first = h_prev is None
    h_prev = None if first else f32(h_prev)
    c_prev = None if first else f32(c_prev)
    (n, e), width, hh = x.shape, w_ih.shape[0], w_hh.shape[1]
    kept = gates is not None
    z = f32(gates) if kept else np.empty((n, width), dtype=np.float32)
    dz = np.empty((n, width), dtype=np.float32)
    dx = np.empty((n, e), dtype=np.float32)
    dh_prev = None if first else np.empty((n, hh), dtype=np.float32)
    dc_prev = None if first else np.empty_like(c)
    dw_ih, dw_hh, db = np.empty_like(w_ih), np.empty_like(w_hh), np.empty_like(bias)
    lib.ff_lstm_backward_f32(
        sgemm(gemm), floats(x), floats(h_prev), floats(c_prev), floats(w_ih),
        floats(w_hh), floats(bias), floats(c), floats(dh), floats(dc), floats(z),
        floats(dz), floats(dx), floats(dh_prev), floats(dc_prev), floats(dw_ih),
        floats(dw_hh), floats(db), n, e, hh, width // 4, int(kept), e,
    )  # fmt: skip
    return dx, dh_prev, dc_prev, dw_ih, dw_hh, db


# ---- multi-head attention on float32 tiles ------------------------------------------------------
def _attention_dims(query, key, value, embed_dim: int, heads: int):
    dims = ffi.new("ff_attention_dims *")
    (dims.n, dims.lq, dims.eq), (_, dims.lk, dims.ek) = query.shape, key.shape
    dims.ev, dims.e, dims.heads = value.shape[2], embed_dim, heads
    return dims


def _weight_pointers(arrays: Sequence[np.ndarray | None], ctype: str):
    """The 8 weight (or gradient) pointers native/attention.c takes, NULL for absent biases."""
    listed = [floats(a) for a in arrays] + [ffi.NULL] * (8 - len(arrays))
    return ffi.new(f"{ctype}[8]", listed)


def attention_forward(gemm: int, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray],
                      heads: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """y (N, Lq, E) of multi-head attention (native/attention.c) over float32 query, key and
    value tiles with weights wq, wk, wv, wo (and their biases), and the scratch its backward
    reads (projections, probabilities, context)."""
    query, key, value = (f32(a) for a in inputs)
    weights = [f32(w) for w in weights]
    dims = _attention_dims(query, key, value, weights[3].shape[0], heads)
    scratch = np.empty(int(lib.ff_attention_scratch(dims)), dtype=np.float32)
    y = np.empty((dims.n, dims.lq, dims.e), dtype=np.float32)
    lib.ff_attention_forward_f32(
        sgemm(gemm), dims, floats(query), floats(key), floats(value),
        _weight_pointers(weights, "const float *"), floats(scratch), floats(y),
    )  # fmt: skip
    return y, scratch


def attention_backward(gemm: int, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray],
                       heads: int, scratch: np.ndarray, dy: np.ndarray, need_input_grads: bool):  # fmt: skip
    """The gradients of `attention_forward` from its scratch and dy: ((dquery, dkey, dvalue)
    or Nones without `need_input_grads`, the weights' gradients in their order)."""
    query, key, value = (f32(a) for a in inputs)
    weights = [f32(w) for w in weights]
    dims = _attention_dims(query, key, value, weights[3].shape[0], heads)
    grads = [np.empty_like(w) for w in weights]
    dx = [np.empty_like(a) if need_input_grads else None for a in (query, key, value)]
    lib.ff_attention_backward_f32(
        sgemm(gemm), dims, floats(query), floats(key), floats(value),
        _weight_pointers(weights, "const float *"), floats(scratch), floats(f32(dy)),
        *(floats(d) for d in dx), _weight_pointers(grads, "float *"),
    )  # fmt: skip
    return tuple(dx), tuple(grads)
