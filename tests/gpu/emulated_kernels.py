"""numpy stand-ins for the NVRTC kernels, one per kernel name (suffixes stripped), for `emulator.py`.

Each reads and writes the host "device" memory of a `HostGpu` through the pointers the launch
passed, following the CUDA source line by line.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flexflow.ops.activations import ACTIVATIONS, ActiMode
from flexflow.ops.dropout import _mix64
from flexflow.ops.element_binary import BINARY_RULES, BinaryOp
from flexflow.ops.unary_functions import UNARY_FUNCTIONS, UnaryFunction


# ---- kernel emulations --------------------------------------------------------------------------
def _offsets(count: int, rank: int, shape, strides) -> np.ndarray:
    index = np.arange(count)
    offset = np.zeros(count, dtype=np.int64)
    for d in reversed(range(rank)):
        offset += (index % shape[d]) * strides[d]
        index //= shape[d]
    return offset


def _dtype(name: str, default: str = "float32") -> str:
    suffix = name.rpartition("_")[2]
    return {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64"}.get(suffix, default)


def copy_strided(gpu, name, dst, src, n, rank, shape, dst_strides, src_strides, alpha, add):
    dtype = _dtype(name)
    values = gpu.memory(src, dtype)[_offsets(n, rank, shape, src_strides)]
    if alpha != 1.0:
        values = (alpha * values.astype(np.float64)).astype(dtype)
    target, where = gpu.memory(dst, dtype), _offsets(n, rank, shape, dst_strides)
    assert len(np.unique(where)) == n, "a copy writes one element twice"
    target[where] = target[where] + values if add else values


def join_parts(gpu, name, whole, parts, ends, count, outer, inner, whole_len, start, join):
    dtype = _dtype(name)
    target = gpu.memory(whole, dtype)[: outer * whole_len * inner].reshape(outer, whole_len, inner)
    begin = start
    for k in range(count):
        length = ends[k] - (ends[k - 1] if k else 0)
        if length == 0:
            continue
        part = gpu.memory(parts[k], dtype)[: outer * length * inner].reshape(outer, length, inner)
        if join:
            target[:, begin : begin + length] = part
        else:
            part[...] = target[:, begin : begin + length]
        begin += length


def fill(gpu, name, dst, n, value):
    gpu.memory(dst, _dtype(name))[:n] = value


def reduce_sum(gpu, name, out, src, outputs, kept_rank, kept_shape, kept_strides, reduced,
               reduced_rank, reduced_shape, reduced_strides, scale, add):  # fmt: skip
    data = gpu.memory(src, "float32").astype(np.float64)
    base = _offsets(outputs, kept_rank, kept_shape, kept_strides)
    inner = _offsets(reduced, reduced_rank, reduced_shape, reduced_strides)
    sums = scale * data[base[:, None] + inner[None, :]].sum(axis=1)
    target = gpu.memory(out, "float32")
    target[:outputs] = target[:outputs] + sums if add else sums


def cast(gpu, name, dst, src, n):
    gpu.memory(dst, "float32")[:n] = gpu.memory(src, "float64")[:n]


_MODES = list(ActiMode)  # in ACT_* order (checked by a test against prims.ACTIVATION_CODES)


def activation_forward(gpu, name, y, x, n, mode):
    gpu.memory(y, "float32")[:n] = ACTIVATIONS[_MODES[mode]].forward(gpu.memory(x, "float32")[:n])


def activation_backward(gpu, name, dx, x, y, dy, n, mode):
    f = [gpu.memory(a, "float32")[:n] for a in (x, y, dy)]
    gpu.memory(dx, "float32")[:n] = ACTIVATIONS[_MODES[mode]].grad(*f)


_FUNCTIONS = list(UnaryFunction)  # in FN_* order (checked by a test against prims.FUNCTION_CODES)


def function_forward(gpu, name, y, x, n, fn, s):
    rule = UNARY_FUNCTIONS[_FUNCTIONS[fn]]
    gpu.memory(y, "float32")[:n] = rule.forward(gpu.memory(x, "float32")[:n], np.float32(s))


def function_backward(gpu, name, dx, x, y, dy, n, fn, s):
    f = [gpu.memory(a, "float32")[:n] for a in (x, y, dy)]
    gpu.memory(dx, "float32")[:n] = UNARY_FUNCTIONS[_FUNCTIONS[fn]].grad(*f, np.float32(s))


_BINARY = list(BinaryOp)  # in BINARY_* order (checked by a test against prims.BINARY_CODES)


def binary(gpu, name, out, a, b, n, rank, shape, a_strides, b_strides, op):
    x = gpu.memory(a, "float32")[_offsets(n, rank, shape, a_strides)]
    y = gpu.memory(b, "float32")[_offsets(n, rank, shape, b_strides)]
    gpu.memory(out, "float32")[:n] = BINARY_RULES[_BINARY[op]].forward(x, y)


def binary_backward(gpu, name, da, db, a, b, dz, n, op):
    x, y, g = (gpu.memory(p, "float32")[:n] for p in (a, b, dz))
    gx, gy = BINARY_RULES[_BINARY[op]].grads(x, y, g)
    gpu.memory(da, "float32")[:n], gpu.memory(db, "float32")[:n] = gx, gy


def dropout_apply(gpu, name, y, x, n, rank, tile, start, full, key, rate, scale):
    index = np.zeros(n, dtype=np.uint64)
    rest, stride = np.arange(n), 1
    for d in reversed(range(rank)):
        index += ((rest % tile[d] + start[d]) * stride).astype(np.uint64)
        rest //= tile[d]
        stride *= full[d]
    bits = _mix64(np.uint64(key) + (index + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15))
    keep = (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53 >= rate
    gpu.memory(y, "float32")[:n] = np.where(keep, gpu.memory(x, "float32")[:n] * scale, 0.0)


def _sigmoid(v):
    return 0.5 * (1 + np.tanh(0.5 * v))


def _gates(gpu, z, n, hidden):
    g = gpu.memory(z, "float32")[: n * 4 * hidden].reshape(n, 4, hidden)
    return _sigmoid(g[:, 0]), _sigmoid(g[:, 1]), np.tanh(g[:, 2]), _sigmoid(g[:, 3])


def lstm_forward(gpu, name, h, c, z, c_prev, n, hidden):
    i, f, g, o = _gates(gpu, z, n, hidden)
    cp = gpu.memory(c_prev, "float32")[: n * hidden].reshape(n, hidden) if c_prev else 0.0
    cc = f * cp + i * g
    gpu.memory(c, "float32")[: n * hidden] = cc.reshape(-1)
    gpu.memory(h, "float32")[: n * hidden] = (o * np.tanh(cc)).reshape(-1)


def lstm_backward(gpu, name, dz, dc_prev, z, c_prev, c, dh, dc, n, hidden):
    i, f, g, o = _gates(gpu, z, n, hidden)
    read = lambda p: gpu.memory(p, "float32")[: n * hidden].reshape(n, hidden)  # noqa: E731
    cp = read(c_prev) if c_prev else 0.0
    tanh_c = np.tanh(read(c))
    dct = read(dc) + read(dh) * o * (1 - tanh_c**2)
    grads = np.stack(
        [
            dct * g * i * (1 - i),
            dct * cp * f * (1 - f),
            dct * i * (1 - g * g),
            read(dh) * tanh_c * o * (1 - o),
        ],
        axis=1,
    )
    gpu.memory(dz, "float32")[: grads.size] = grads.reshape(-1)
    if dc_prev:
        gpu.memory(dc_prev, "float32")[: n * hidden] = (dct * f).reshape(-1)


def _rows(gpu, pointer, rows, cols):
    return gpu.memory(pointer, "float32")[: rows * cols].reshape(rows, cols).astype(np.float64)


def layer_norm_forward(gpu, name, y, x, gamma, beta, rows, cols, eps):
    v = _rows(gpu, x, rows, cols)
    xhat = (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + eps)
    if gamma:
        xhat = xhat * _rows(gpu, gamma, 1, cols) + _rows(gpu, beta, 1, cols)
    gpu.memory(y, "float32")[: rows * cols] = xhat.reshape(-1)


def layer_norm_backward(gpu, name, dx, dy_xhat, x, gamma, dy, rows, cols, eps):
    v, d = _rows(gpu, x, rows, cols), _rows(gpu, dy, rows, cols)
    rstd = 1 / np.sqrt(v.var(1, keepdims=True) + eps)
    xhat = (v - v.mean(1, keepdims=True)) * rstd
    dhat = d * _rows(gpu, gamma, 1, cols) if gamma else d
    grad = rstd * (dhat - dhat.mean(1, keepdims=True) - xhat * (dhat * xhat).mean(1, keepdims=True))
    gpu.memory(dx, "float32")[: rows * cols] = grad.reshape(-1)
    if dy_xhat:
        gpu.memory(dy_xhat, "float32")[: rows * cols] = (d * xhat).reshape(-1)


def softmax_backward_rows(gpu, name, dx, y, dy, rows, cols, scale):
    v, d = _rows(gpu, y, rows, cols), _rows(gpu, dy, rows, cols)
    grad = scale * v * (d - (d * v).sum(1, keepdims=True))
    gpu.memory(dx, "float32")[: rows * cols] = grad.reshape(-1)


def _ncs(gpu, pointer, n, channels, spatial):
    return (
        gpu.memory(pointer, "float32")[: n * channels * spatial]
        .reshape(n, channels, spatial)
        .astype(np.float64)
    )


def _norm(gpu, stats, channels, count, eps):
    s = gpu.memory(stats, "float64")[: 2 * channels].reshape(2, channels)
    mean = s[0] / count
    inv_std = 1 / np.sqrt(np.maximum(s[1] / count - mean**2, 0) + eps)
    return mean[None, :, None], inv_std[None, :, None]


def batch_norm_statistics(gpu, name, out, x, n, channels, spatial):
    v = _ncs(gpu, x, n, channels, spatial)
    gpu.memory(out, "float64")[: 2 * channels] = np.concatenate(
        [v.sum((0, 2)), (v * v).sum((0, 2))]
    )


def batch_norm_forward(gpu, name, y, x, gamma, beta, stats, n, channels, spatial, count, eps, relu):
    mean, inv_std = _norm(gpu, stats, channels, count, eps)
    g, b = (
        gpu.memory(p, "float32")[:channels].astype(np.float64)[None, :, None] for p in (gamma, beta)
    )
    z = g * (_ncs(gpu, x, n, channels, spatial) - mean) * inv_std + b
    gpu.memory(y, "float32")[: z.size] = (np.maximum(z, 0) if relu else z).reshape(-1)


def _dz(gpu, y, dy, n, channels, spatial, relu):
    d = _ncs(gpu, dy, n, channels, spatial)
    return d * (_ncs(gpu, y, n, channels, spatial) > 0) if relu else d


def batch_norm_backward_statistics(
    gpu, name, out, x, y, dy, stats, n, channels, spatial, count, eps, relu
):
    mean, inv_std = _norm(gpu, stats, channels, count, eps)
    dz = _dz(gpu, y, dy, n, channels, spatial, relu)
    xhat = (_ncs(gpu, x, n, channels, spatial) - mean) * inv_std
    gpu.memory(out, "float64")[: 2 * channels] = np.concatenate(
        [dz.sum((0, 2)), (dz * xhat).sum((0, 2))]
    )


def batch_norm_backward(
    gpu, name, dx, x, y, dy, gamma, stats, grad_stats, n, channels, spatial, count, eps, relu
):
    mean, inv_std = _norm(gpu, stats, channels, count, eps)
    dz = _dz(gpu, y, dy, n, channels, spatial, relu)
    xhat = (_ncs(gpu, x, n, channels, spatial) - mean) * inv_std
    g = gpu.memory(gamma, "float32")[:channels].astype(np.float64)[None, :, None]
    gs = gpu.memory(grad_stats, "float64")[: 2 * channels].reshape(2, channels)
    grad = (count * dz * g - g * gs[0][None, :, None] - xhat * g * gs[1][None, :, None]) * (
        inv_std / count
    )
    gpu.memory(dx, "float32")[: grad.size] = grad.reshape(-1)


def embedding_forward(gpu, name, out, ids, table, bad, rows, bag, dim, entries, scale):
    index = gpu.memory(ids, _dtype(name))[: rows * bag].reshape(rows, bag)
    if index.min() < 0 or index.max() >= entries:
        gpu.memory(bad, "int32")[0] = 1
        index = np.clip(index, 0, entries - 1)
    t = gpu.memory(table, "float32")[: entries * dim].reshape(entries, dim).astype(np.float64)
    gpu.memory(out, "float32")[: rows * dim] = (scale * t[index].sum(axis=1)).reshape(-1)


def embedding_backward(gpu, name, grad_table, ids, dy, rows, bag, dim, entries, scale):
    index = gpu.memory(ids, _dtype(name))[: rows * bag].reshape(rows, bag)
    d = gpu.memory(dy, "float32")[: rows * dim].reshape(rows, 1, dim)
    target = gpu.memory(grad_table, "float32")[: entries * dim].reshape(entries, dim)
    np.add.at(
        target, index.reshape(-1), np.broadcast_to(scale * d, (rows, bag, dim)).reshape(-1, dim)
    )


def gather_forward(gpu, name, out, x, index, bad, outer, picks, rows, inner):
    picked = gpu.memory(index, _dtype(name))[: outer * picks * inner].reshape(outer, picks, inner)
    if picked.size and (picked.min() < 0 or picked.max() >= rows):
        gpu.memory(bad, "int32")[0] = 1
    valid = (picked >= 0) & (picked < rows)
    source = gpu.memory(x, "float32")[: outer * rows * inner].reshape(outer, rows, inner)
    a, _, b = np.indices(picked.shape, sparse=True)
    values = np.where(valid, source[a, np.clip(picked, 0, rows - 1), b], np.float32(0))
    gpu.memory(out, "float32")[: outer * picks * inner] = values.reshape(-1)


def gather_backward(gpu, name, grad_x, index, dy, outer, picks, rows, inner):
    picked = gpu.memory(index, _dtype(name))[: outer * picks * inner].reshape(outer, picks, inner)
    d = gpu.memory(dy, "float32")[: outer * picks * inner].reshape(outer, picks, inner)
    target = gpu.memory(grad_x, "float32")[: outer * rows * inner].reshape(outer, rows, inner)
    a, _, b = np.indices(picked.shape, sparse=True)
    valid = (picked >= 0) & (picked < rows)
    a, b = np.broadcast_to(a, picked.shape)[valid], np.broadcast_to(b, picked.shape)[valid]
    np.add.at(target, (a, picked[valid], b), d[valid])  # atomicAdd: repeated indices add up


def sgd_update(gpu, name, w_out, v_out, w, g, v, n, lr, momentum, weight_decay, nesterov, l2):
    f32 = np.float32
    weight, grad = gpu.memory(w, "float32")[:n], gpu.memory(g, "float32")[:n]
    if l2:
        grad = grad + f32(l2) * weight
    if weight_decay:
        grad = grad + f32(weight_decay) * weight
    direction = grad
    if v:
        velocity = f32(momentum) * gpu.memory(v, "float32")[:n] + grad
        gpu.memory(v_out, "float32")[:n] = velocity
        direction = grad + f32(momentum) * velocity if nesterov else velocity
    gpu.memory(w_out, "float32")[:n] = weight - f32(lr) * direction


def adam_update(gpu, name, w_out, m_out, v_out, w, g, m, v, n, lr, beta1, beta2, one_minus_beta1,
                one_minus_beta2, bias1, bias2, eps, weight_decay, l2):  # fmt: skip
    f32 = np.float32
    weight, grad = gpu.memory(w, "float32")[:n], gpu.memory(g, "float32")[:n]
    if l2:
        grad = grad + f32(l2) * weight
    if weight_decay:
        grad = grad + f32(weight_decay) * weight
    mi = f32(beta1) * gpu.memory(m, "float32")[:n] + f32(one_minus_beta1) * grad
    vi = f32(beta2) * gpu.memory(v, "float32")[:n] + f32(one_minus_beta2) * grad * grad
    step = f32(lr) * (mi / f32(bias1)) / (np.sqrt(vi / f32(bias2)) + f32(eps))
    gpu.memory(w_out, "float32")[:n] = weight - step
    gpu.memory(m_out, "float32")[:n], gpu.memory(v_out, "float32")[:n] = mi, vi


def _loss_arrays(gpu, name, grad, p, t, rows, classes):
    prediction = (
        gpu.memory(p, "float32")[: rows * classes].reshape(rows, classes).astype(np.float64)
    )
    target = gpu.memory(t, _dtype(name))[: rows * classes].reshape(rows, classes).astype(np.float64)
    return prediction, target, gpu.memory(grad, "float32")[: rows * classes].reshape(rows, classes)


def _add_sums(gpu, sums, loss, total, correct):
    gpu.memory(sums, "float64")[:2] += (loss / total, correct)


def mse(gpu, name, sums, grad, p, t, rows, classes, valid, total, count_correct):
    prediction, target, g = _loss_arrays(gpu, name, grad, p, t, rows, classes)
    diff = (prediction - target)[:valid]
    g[:valid], g[valid:] = 2 * diff / total, 0
    correct = (
        (prediction[:valid].argmax(1) == target[:valid].argmax(1)).sum() if count_correct else 0
    )
    _add_sums(gpu, sums, (diff**2).sum(), total, correct)


def cce(gpu, name, sums, grad, p, t, rows, classes, valid, total):
    prediction, target, g = _loss_arrays(gpu, name, grad, p, t, rows, classes)
    pk = np.maximum(prediction[:valid], 1e-12)
    g[:valid], g[valid:] = -target[:valid] / (total * pk), 0
    correct = (prediction[:valid].argmax(1) == target[:valid].argmax(1)).sum()
    _add_sums(gpu, sums, -(target[:valid] * np.log(pk)).sum(), total, correct)


def sparse_cce(gpu, name, sums, grad, bad, p, labels, rows, classes, valid, total):
    prediction = (
        gpu.memory(p, "float32")[: rows * classes].reshape(rows, classes).astype(np.float64)
    )
    label = gpu.memory(labels, _dtype(name))[:valid]
    if valid and (label.min() < 0 or label.max() >= classes):
        gpu.memory(bad, "int32")[0] = 1
        return
    picked = np.maximum(prediction[np.arange(valid), label], 1e-12)
    g = gpu.memory(grad, "float32")[: rows * classes].reshape(rows, classes)
    g[np.arange(valid), label] = -1 / (total * picked)
    _add_sums(
        gpu, sums, -np.log(picked).sum(), total, (prediction[:valid].argmax(1) == label).sum()
    )


def identity_loss(gpu, name, sums, grad, p, rows, per_row, valid, total):
    prediction = gpu.memory(p, "float32")[: rows * per_row].reshape(rows, per_row)
    g = gpu.memory(grad, "float32")[: rows * per_row].reshape(rows, per_row)
    g[:valid], g[valid:] = 1 / total, 0
    _add_sums(gpu, sums, prediction[:valid].astype(np.float64).sum(), total, 0)


KERNELS: dict[str, Callable] = {
    "copy_strided": copy_strided,
    "fill": fill,
    "join_parts": join_parts,
    "reduce_sum": reduce_sum,
    "cast_f64": cast,  # cast_f64_f32: the suffix rule strips its "_f32"
    "activation_forward": activation_forward,
    "activation_backward": activation_backward,
    "function_forward": function_forward,
    "function_backward": function_backward,
    "binary": binary,
    "binary_backward": binary_backward,
    "dropout_apply": dropout_apply,
    "lstm_forward": lstm_forward,
    "lstm_backward": lstm_backward,
    "layer_norm_forward": layer_norm_forward,
    "layer_norm_backward": layer_norm_backward,
    "softmax_backward_rows": softmax_backward_rows,
    "batch_norm_statistics": batch_norm_statistics,
    "batch_norm_forward": batch_norm_forward,
    "batch_norm_backward_statistics": batch_norm_backward_statistics,
    "batch_norm_backward": batch_norm_backward,
    "embedding_forward": embedding_forward,
    "embedding_backward": embedding_backward,
    "gather_forward": gather_forward,
    "gather_backward": gather_backward,
    "sgd_update": sgd_update,
    "adam_update": adam_update,
    "mse": mse,
    "cce": cce,
    "sparse_cce": sparse_cce,
    "identity_loss": identity_loss,
}
