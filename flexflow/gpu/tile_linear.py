"""GPU tiles of the matrix-product ops: dense, batch_matmul, lstm and multihead_attention (cuBLAS).

Each function has the numpy reference's contract (`Op.forward_tile` / `Op.backward_tile`): the
same inputs, weights and outputs, in the same order and shapes, as row-major device arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flexflow.gpu import prims
from flexflow.gpu.blas import gemm
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.gpu.nvrtc import Arg, grid_for, launch
from flexflow.gpu.sources import ELEMENTWISE
from flexflow.ops.activations import ActiMode

Arrays = tuple[DeviceArray, ...]
Grads = tuple[tuple[DeviceArray | None, ...], Arrays]


def linear(gpu: Gpu, x2: DeviceArray, w: DeviceArray, b: DeviceArray | None) -> DeviceArray:
    """x2 (M, in) @ w (out, in)^T + b (out,): the bias is broadcast first, then accumulated onto."""
    out = gpu.empty((x2.shape[0], w.shape[0]))
    if b is None:
        return gemm(gpu, x2, w, trans_b=True, out=out)
    prims.copy(gpu, out, prims.broadcast_view(b, out.shape, (1,)))
    return gemm(gpu, x2, w, trans_b=True, out=out, beta=1.0)


def bias_grad(gpu: Gpu, dz2: DeviceArray) -> DeviceArray:
    """Column sums of dz2 (M, out): the bias gradient."""
    return prims.reduce_sum(gpu, dz2, (0,))


# ---- dense --------------------------------------------------------------------------------------
def _dense_pre_activation(
    gpu: Gpu, op, x: DeviceArray, weights: Sequence[DeviceArray]
) -> DeviceArray:
    x2 = x.reshape((-1, x.shape[-1]))  # (M, in)
    z = linear(gpu, x2, weights[0], weights[1] if op.use_bias else None)  # (M, out)
    return z.reshape(x.shape[:-1] + (weights[0].shape[0],))


def dense_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    z = _dense_pre_activation(gpu, op, inputs[0], weights)
    if op.activation is ActiMode.AC_MODE_NONE:
        return (z,)
    return (prims.activation_forward(gpu, op.activation, z),)


def dense_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs) -> Grads:
    (x,), (y,), (dy,) = inputs, outputs, grad_outputs
    kernel = weights[0]  # (out, in)
    if op.activation is ActiMode.AC_MODE_NONE:
        dz = dy
    else:
        z = (
            _dense_pre_activation(gpu, op, x, weights)
            if prims.grad_needs_input(op.activation)
            else y
        )
        dz = prims.activation_backward(gpu, op.activation, z, y, dy)
    dz2 = dz.reshape((-1, dz.shape[-1]))  # (M, out)
    x2 = x.reshape((-1, x.shape[-1]))  # (M, in)
    dx = gemm(gpu, dz2, kernel).reshape(x.shape)  # dz @ W
    grads = [gemm(gpu, dz2, x2, trans_a=True)]  # dz^T @ x: (out, in)
    if op.use_bias:
        grads.append(bias_grad(gpu, dz2))
    return (dx,), tuple(grads)


# ---- batch_matmul -------------------------------------------------------------------------------
def _stack(array: DeviceArray) -> DeviceArray:
    return array.reshape((-1,) + array.shape[-2:])  # (batch, rows, cols)


def batch_matmul_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    a, b = inputs
    c = gemm(gpu, _stack(a), _stack(b))
    return (c.reshape(a.shape[:-1] + b.shape[-1:]),)


def batch_matmul_backward(
    gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs
) -> Grads:
    a, b = inputs
    dc = _stack(grad_outputs[0])
    da = gemm(gpu, dc, _stack(b), trans_b=True).reshape(a.shape)  # dC @ B^T
    db = gemm(gpu, _stack(a), dc, trans_a=True).reshape(b.shape)  # A^T @ dC
    return (da, db), ()


# ---- lstm ---------------------------------------------------------------------------------------
def _lstm_step_input(op, x: DeviceArray) -> DeviceArray:
    """x (N, E), or time slice `step` of a sequence (N, T, E); a tile holds only that slice."""
    if op.step is None:
        return x
    step = 0 if x.shape[1] == 1 else op.step  # a tile's sequence is its one time step
    n, length, features = x.shape
    return x.view((n, features), (length * features, 1), step * features)


def _lstm_gates(gpu: Gpu, op, inputs, weights) -> tuple[DeviceArray, DeviceArray | None]:
    """The gate pre-activations z (N, 4, H_t) and h_prev (None on the first step)."""
    w_ih, w_hh, bias = weights  # (4, H_t, E), (4, H_t, H), (4, H_t)
    x = prims.contiguous(gpu, _lstm_step_input(op, inputs[0]))
    gates = w_ih.shape[0] * w_ih.shape[1]
    z = linear(gpu, x, w_ih.reshape((gates, -1)), bias.reshape((gates,)))  # (N, 4*H_t)
    h_prev = inputs[1] if len(inputs) == 3 else None
    if h_prev is not None:
        gemm(gpu, h_prev, w_hh.reshape((gates, -1)), trans_b=True, out=z, beta=1.0)
    return z.reshape((x.shape[0], w_ih.shape[0], w_ih.shape[1])), h_prev


def lstm_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    z, _ = _lstm_gates(gpu, op, inputs, weights)
    n, _, hidden = z.shape
    h, c = gpu.empty((n, hidden)), gpu.empty((n, hidden))
    c_prev = inputs[2] if len(inputs) == 3 else None
    if h.size:
        launch(
            gpu, ELEMENTWISE, "lstm_forward", grid_for(h.size),
            [Arg.ptr(h.ptr), Arg.ptr(c.ptr), Arg.ptr(z.ptr), Arg.ptr(c_prev.ptr if c_prev else 0),
             Arg.i64(n), Arg.i64(hidden)],
        )  # fmt: skip
    return h, c


def lstm_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs) -> Grads:
    w_ih, w_hh, _ = weights
    z, h_prev = _lstm_gates(gpu, op, inputs, weights)
    n, gates, hidden = z.shape
    c_prev = inputs[2] if len(inputs) == 3 else None
    dz = gpu.empty(z.shape)  # (N, 4, H_t)
    dc_prev = gpu.empty((n, hidden)) if c_prev is not None else None
    if dz.size:
        launch(
            gpu, ELEMENTWISE, "lstm_backward", grid_for(n * hidden),
            [Arg.ptr(dz.ptr), Arg.ptr(dc_prev.ptr if dc_prev else 0), Arg.ptr(z.ptr),
             Arg.ptr(c_prev.ptr if c_prev else 0), Arg.ptr(outputs[1].ptr),
             Arg.ptr(grad_outputs[0].ptr), Arg.ptr(grad_outputs[1].ptr), Arg.i64(n),
             Arg.i64(hidden)],
        )  # fmt: skip
    dz2 = dz.reshape((n, gates * hidden))
    x_step = prims.contiguous(gpu, _lstm_step_input(op, inputs[0]))
    dx_step = gemm(gpu, dz2, w_ih.reshape((gates * hidden, -1)))  # (N, E)
    grad_w_ih = gemm(gpu, dz2, x_step, trans_a=True).reshape(w_ih.shape)
    if h_prev is not None:
        grad_w_hh = gemm(gpu, dz2, h_prev, trans_a=True).reshape(w_hh.shape)
    else:  # the first step's h_prev is zero
        grad_w_hh = gpu.zeros(w_hh.shape)
    grad_weights = (grad_w_ih, grad_w_hh, bias_grad(gpu, dz2).reshape((gates, hidden)))
    dx = dx_step
    if op.step is not None:  # only slice `step` of the sequence was read
        x = inputs[0]
        dx = gpu.zeros(x.shape)
        prims.copy(gpu, _lstm_step_input(op, dx), dx_step)
    if len(inputs) == 1:
        return (dx,), grad_weights
    dh_prev = gemm(gpu, dz2, w_hh.reshape((gates * hidden, -1)))  # (N, H)
    return (dx, dh_prev, dc_prev), grad_weights


# ---- multihead_attention ------------------------------------------------------------------------
def _split_heads(gpu: Gpu, x2: DeviceArray, n: int, heads: int) -> DeviceArray:
    """(N*L, E) -> (N*heads, L, d), row-major."""
    length, d = x2.shape[0] // n, x2.shape[1] // heads
    split = prims.permute(gpu, x2.reshape((n, length, heads, d)), (0, 2, 1, 3))  # (N, h, L, d)
    return split.reshape((n * heads, length, d))


def _merge_heads(gpu: Gpu, x: DeviceArray, n: int) -> DeviceArray:
    """(N*heads, L, d) -> (N*L, E)."""
    heads = x.shape[0] // n
    merged = prims.permute(gpu, x.reshape((n, heads) + x.shape[1:]), (0, 2, 1, 3))  # (N, L, h, d)
    return merged.reshape((n * x.shape[1], heads * x.shape[2]))


def _flat(x: DeviceArray) -> DeviceArray:
    return x.reshape((-1, x.shape[-1]))  # (N*L, features)


def _attend(gpu: Gpu, op, inputs, weights):
    """Per-head q, k, v (N*h, L, d), the probabilities (N*h, Lq, Lk) and the context (N*Lq, E)."""
    from flexflow.gpu.dnn import softmax_forward  # cuDNN only where attention runs

    n = inputs[0].shape[0]
    biases = weights[4:8] if op.bias else (None,) * 4
    q, k, v = (
        _split_heads(gpu, linear(gpu, _flat(x), w, b), n, op.num_heads)
        for x, w, b in zip(inputs, weights[:3], biases[:3], strict=True)
    )
    scores = gemm(gpu, q, k, trans_b=True, alpha=1.0 / math.sqrt(op.head_dim))  # (N*h, Lq, Lk)
    probs = gpu.empty(scores.shape)
    softmax_forward(gpu, scores, -1, probs)
    context = _merge_heads(gpu, gemm(gpu, probs, v), n)  # (N*Lq, E)
    return q, k, v, probs, context


def attention_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    *_, context = _attend(gpu, op, inputs, weights)
    out = linear(gpu, context, weights[3], weights[7] if op.bias else None)
    return (out.reshape(inputs[0].shape[:2] + (op.embed_dim,)),)


def attention_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs) -> Grads:
    from flexflow.gpu.tile_norm import softmax_grad

    n = inputs[0].shape[0]
    wq, wk, wv, wo = weights[:4]
    q, k, v, probs, context = _attend(gpu, op, inputs, weights)
    dy = _flat(grad_outputs[0])  # (N*Lq, E)
    d_wo = gemm(gpu, dy, context, trans_a=True)  # (E, E)
    d_context = _split_heads(gpu, gemm(gpu, dy, wo), n, op.num_heads)  # (N*h, Lq, d)
    d_probs = gemm(gpu, d_context, v, trans_b=True)  # (N*h, Lq, Lk)
    d_v = gemm(gpu, probs, d_context, trans_a=True)  # (N*h, Lk, d)
    d_scores = gpu.empty(probs.shape)
    softmax_grad(gpu, probs, d_probs, -1, d_scores, scale=1.0 / math.sqrt(op.head_dim))
    d_q = _merge_heads(gpu, gemm(gpu, d_scores, k), n)  # (N*Lq, E)
    d_k = _merge_heads(gpu, gemm(gpu, d_scores, q, trans_a=True), n)  # (N*Lk, E)
    d_v = _merge_heads(gpu, d_v, n)  # (N*Lk, E)
    grad_inputs = tuple(
        gemm(gpu, d, w).reshape(x.shape)
        for d, w, x in zip((d_q, d_k, d_v), (wq, wk, wv), inputs, strict=True)
    )
    grad_weights = [
        gemm(gpu, d, _flat(x), trans_a=True) for d, x in zip((d_q, d_k, d_v), inputs, strict=True)
    ]
    grad_weights.append(d_wo)
    if op.bias:
        grad_weights += [bias_grad(gpu, d) for d in (d_q, d_k, d_v, dy)]
    return grad_inputs, tuple(grad_weights)
