"""A host emulation of the GPU under the kernels' Python side, to test it on a machine without one.

`HostGpu` keeps "device" arrays in host memory (a pointer is a numpy buffer's address). Kernel
launches are decoded with the C signature NVRTC compiles (parsed from the source, each argument's
cffi type checked against its C type) and run by numpy stand-ins; cuBLAS's column-major SGEMM
and the cuDNN calls are emulated from their documented semantics. This checks what runs on the
host: argument order and types, shapes, strides, transposes, padding and cropping. The CUDA
arithmetic itself is only checked on a GPU (`test_gpu_kernels.py`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np

from flexflow.gpu import nvrtc
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.gpu.libraries import ffi
from flexflow.ops.activations import ACTIVATIONS, ActiMode
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.dropout import _mix64
from flexflow.ops.pool2d import Pool2D, PoolType

# ---- memory -------------------------------------------------------------------------------------


class HostGpu(Gpu):
    """A `Gpu` whose memory is host memory and whose kernels are the emulations below."""

    def __init__(self) -> None:  # no CUDA runtime: nothing to open
        self.device = 0
        self.stream = ffi.NULL
        self.buffers: dict[int, np.ndarray] = {}

    @property
    def arch(self) -> str:
        return "sm_90"

    def handle(self, key: str) -> str:
        return key

    def empty(self, shape, dtype="float32") -> DeviceArray:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        # NaN-filled, so a kernel that forgets to write an element shows up in the comparison
        buffer = np.full(max(nbytes, 8), 0xFF, dtype=np.uint8)
        self.buffers[buffer.ctypes.data] = buffer
        return DeviceArray(buffer.ctypes.data, tuple(shape), dtype)

    def memory(self, address: int, dtype: str) -> np.ndarray:
        """A flat view of `dtype` from `address` to the end of the buffer holding it."""
        for base, buffer in self.buffers.items():
            if base <= address < base + buffer.size:
                return (
                    buffer[address - base :]
                    .view(np.uint8)[
                        : (buffer.size - (address - base))
                        // np.dtype(dtype).itemsize
                        * np.dtype(dtype).itemsize
                    ]
                    .view(dtype)
                )
        raise AssertionError(f"address {address:#x} is not in any allocation")

    def memset_zero(self, array: DeviceArray) -> None:
        if array.nbytes:
            self.memory(array.ptr, "uint8")[: array.nbytes] = 0

    def copy(self, dst: DeviceArray, src: DeviceArray) -> None:
        assert dst.is_contiguous and src.is_contiguous and dst.nbytes == src.nbytes
        if dst.nbytes:
            self.memory(dst.ptr, "uint8")[: dst.nbytes] = self.memory(src.ptr, "uint8")[
                : src.nbytes
            ]

    def to_device(self, array: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(array)
        device = self.empty(host.shape, host.dtype.name)
        if host.nbytes:
            self.memory(device.ptr, "uint8")[: host.nbytes] = host.reshape(-1).view(np.uint8)
        return device

    def to_host(self, array: DeviceArray) -> np.ndarray:
        assert array.is_contiguous, array
        if array.size == 0:
            return np.empty(array.shape, array.dtype)
        return self.memory(array.ptr, array.dtype)[: array.size].reshape(array.shape).copy()

    def synchronize(self) -> None:
        pass

    def close(self) -> None:
        pass

    def strided(self, address: int, dtype: str, shape, strides) -> np.ndarray:
        """A numpy view of `shape` with element `strides` at `address` (broadcast strides allowed)."""
        flat = self.memory(address, dtype)
        return np.lib.stride_tricks.as_strided(
            flat, shape=tuple(shape), strides=tuple(s * flat.itemsize for s in strides)
        )


# ---- kernel signatures --------------------------------------------------------------------------
_TYPES = {"f32": "float", "f64": "double", "i32": "int", "i64": "long long"}
_CFFI_KIND = {  # C parameter kind -> the cffi type nvrtc.Arg must have built for it
    "pointer": "unsigned long long *",
    "long long": "long long *",
    "unsigned long long": "unsigned long long *",
    "double": "double *",
    "float": "float *",
    "int": "int *",
    "Dims": "long long[8]",
}


def kernel_signature(source: str, name: str) -> list[tuple[str, str]]:
    """(kind, parameter name) of kernel `name` as `source` declares it (macros expanded by hand)."""
    match = re.search(rf'extern "C" __global__ void {name}\(([^)]*)\)', source)
    suffix_type = None
    if match is None:  # declared by a macro: NAME_##SUFFIX with T or I the suffix's type
        prefix, _, suffix = name.rpartition("_")
        match = re.search(rf"void {prefix}_##SUFFIX\(([^)]*)\)", source)
        suffix_type = _TYPES[suffix]
    assert match, f"kernel {name} is not declared in its source"
    params = []
    for raw in match.group(1).replace("\\", " ").split(","):
        declaration = " ".join(raw.split())
        pname = re.findall(r"\w+", declaration)[-1]
        ctype = declaration[: declaration.rfind(pname)].replace("const ", "").strip()
        if suffix_type:
            ctype = re.sub(r"\b[TI]\b", suffix_type, ctype)
        kind = "pointer" if ctype.endswith("*") else ctype
        params.append((kind, pname))
    return params


_SYMBOLS: dict[str, bytes] = {}


def _decode(kind: str, arg) -> object:
    expected = _CFFI_KIND[kind]
    got = ffi.typeof(arg).cname
    assert got == expected, f"argument of C type {kind} passed as cffi {got}"
    if kind == "Dims":
        return [int(v) for v in arg]
    return arg[0]


LAUNCHED: set[tuple[str, str]] = set()


def make_launch(gpu_kernels: dict[str, Callable]) -> Callable:
    def launch(gpu: HostGpu, source: str, name: str, grid: int, args, block: int = nvrtc.BLOCK):
        cubin = _SYMBOLS.get(source) or _SYMBOLS.setdefault(
            source, nvrtc.compile_cubin(source, "sm_90")
        )
        assert b"\x00" + name.encode() + b"\x00" in cubin, f"{name} is not in the compiled cubin"
        assert grid >= 1 and block == nvrtc.BLOCK
        signature = kernel_signature(source, name)
        assert len(signature) == len(args), (
            f"{name}: {len(args)} arguments for {len(signature)} parameters"
        )
        params = {
            pname: _decode(kind, arg) for (kind, pname), arg in zip(signature, args, strict=True)
        }
        base = re.sub(r"_(f32|f64|i32|i64)$", "", name)
        LAUNCHED.add((base, name))
        gpu_kernels[base](gpu, name, **params)

    return launch


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


def binary(gpu, name, out, a, b, n, rank, shape, a_strides, b_strides, op):
    x = gpu.memory(a, "float32")[_offsets(n, rank, shape, a_strides)]
    y = gpu.memory(b, "float32")[_offsets(n, rank, shape, b_strides)]
    gpu.memory(out, "float32")[:n] = (x + y, x - y, x * y)[op]


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


def sgd_update(gpu, name, w_out, v_out, w, g, v, n, lr, momentum, weight_decay, nesterov):
    f32 = np.float32
    weight, grad = gpu.memory(w, "float32")[:n], gpu.memory(g, "float32")[:n]
    if weight_decay:
        grad = grad + f32(weight_decay) * weight
    direction = grad
    if v:
        velocity = f32(momentum) * gpu.memory(v, "float32")[:n] + grad
        gpu.memory(v_out, "float32")[:n] = velocity
        direction = grad + f32(momentum) * velocity if nesterov else velocity
    gpu.memory(w_out, "float32")[:n] = weight - f32(lr) * direction


def adam_update(gpu, name, w_out, m_out, v_out, w, g, m, v, n, lr, beta1, beta2, one_minus_beta1,
                one_minus_beta2, bias1, bias2, eps, weight_decay):  # fmt: skip
    f32 = np.float32
    weight, grad = gpu.memory(w, "float32")[:n], gpu.memory(g, "float32")[:n]
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


KERNELS: dict[str, Callable] = {
    "copy_strided": copy_strided,
    "fill": fill,
    "reduce_sum": reduce_sum,
    "cast_f64": cast,  # cast_f64_f32: the suffix rule strips its "_f32"
    "activation_forward": activation_forward,
    "activation_backward": activation_backward,
    "binary": binary,
    "dropout_apply": dropout_apply,
    "lstm_forward": lstm_forward,
    "lstm_backward": lstm_backward,
    "layer_norm_forward": layer_norm_forward,
    "layer_norm_backward": layer_norm_backward,
    "batch_norm_statistics": batch_norm_statistics,
    "batch_norm_forward": batch_norm_forward,
    "batch_norm_backward_statistics": batch_norm_backward_statistics,
    "batch_norm_backward": batch_norm_backward,
    "embedding_forward": embedding_forward,
    "embedding_backward": embedding_backward,
    "sgd_update": sgd_update,
    "adam_update": adam_update,
    "mse": mse,
    "cce": cce,
    "sparse_cce": sparse_cce,
}


# ---- cuBLAS -------------------------------------------------------------------------------------
def _address(pointer) -> int:
    return int(ffi.cast("uintptr_t", pointer))


class HostCublas:
    """cublasSgemmStridedBatched as the cuBLAS docs define it: column-major, leading dimensions."""

    def __init__(self, gpu: HostGpu) -> None:
        self.gpu = gpu

    def _matrix(self, pointer, rows, cols, ld, batch_stride, batch, transposed):
        # column-major (rows x cols) with leading dimension ld: element (i, j) at i + j * ld;
        # a transposed operand is stored (cols x rows), so op(X)(i, j) = X[j + i * ld]
        strides = (ld, 1) if transposed else (1, ld)
        return self.gpu.strided(
            _address(pointer), "float32", (batch, rows, cols), (batch_stride,) + strides
        )

    def cublasSgemmStridedBatched(self, handle, transa, transb, m, n, k, alpha, a, lda, stride_a,
                                  b, ldb, stride_b, beta, c, ldc, stride_c, batch):  # fmt: skip
        op_a = self._matrix(a, m, k, lda, stride_a, batch, transa == 1).astype(np.float64)
        op_b = self._matrix(b, k, n, ldb, stride_b, batch, transb == 1).astype(np.float64)
        out = self._matrix(c, m, n, ldc, stride_c, batch, False)
        product = alpha[0] * (op_a @ op_b)
        out[...] = product if beta[0] == 0 else product + beta[0] * out  # beta 0: C not read
        return 0


# ---- cuDNN --------------------------------------------------------------------------------------
class HostCudnn:
    """The legacy cuDNN calls of `dnn.py`, emulated with the numpy reference ops."""

    def __init__(self, gpu: HostGpu) -> None:
        self.gpu = gpu
        self.state: dict[int, dict] = {}

    def _new(self, out, ctype):
        handle = len(self.state) + 1
        self.state[handle] = {}
        out[0] = ffi.cast(ctype, handle)
        return 0

    def _get(self, desc) -> dict:
        return self.state[_address(desc)]

    def cudnnCreateTensorDescriptor(self, out):
        return self._new(out, "cudnnTensorDescriptor_t")

    def cudnnCreateFilterDescriptor(self, out):
        return self._new(out, "cudnnFilterDescriptor_t")

    def cudnnCreateConvolutionDescriptor(self, out):
        return self._new(out, "cudnnConvolutionDescriptor_t")

    def cudnnCreatePoolingDescriptor(self, out):
        return self._new(out, "cudnnPoolingDescriptor_t")

    def cudnnSetTensor4dDescriptor(self, desc, layout, dtype, n, c, h, w):
        assert (layout, dtype) == (0, 0), "NCHW float32 only"
        self._get(desc)["shape"] = (n, c, h, w)
        return 0

    def cudnnSetFilter4dDescriptor(self, desc, dtype, layout, k, c, h, w):
        assert (layout, dtype) == (0, 0)
        self._get(desc)["shape"] = (k, c, h, w)
        return 0

    def cudnnSetConvolution2dDescriptor(self, desc, ph, pw, sh, sw, dh, dw, mode, dtype):
        assert (dh, dw, mode, dtype) == (1, 1, 1, 0), "cross-correlation, no dilation, float32"
        self._get(desc).update(padding=(ph, pw), stride=(sh, sw), groups=1)
        return 0

    def cudnnSetConvolutionGroupCount(self, desc, groups):
        self._get(desc)["groups"] = groups
        return 0

    def cudnnSetConvolutionMathType(self, desc, math_type):
        assert math_type == 3, "FMA math only"
        return 0

    def cudnnGetConvolution2dForwardOutputDim(self, conv, x, w, n, c, h, w_out):
        cs, xs, ws = self._get(conv), self._get(x)["shape"], self._get(w)["shape"]
        assert xs[1] == ws[1] * cs["groups"] and ws[0] % cs["groups"] == 0
        n[0], c[0] = xs[0], ws[0]
        h[0] = (xs[2] + 2 * cs["padding"][0] - ws[2]) // cs["stride"][0] + 1
        w_out[0] = (xs[3] + 2 * cs["padding"][1] - ws[3]) // cs["stride"][1] + 1
        return 0

    def _algorithm(self, *args):
        returned, results = args[-2], args[-1]
        returned[0], results[0].algo, results[0].status = 1, 0, 0
        return 0

    cudnnGetConvolutionForwardAlgorithm_v7 = _algorithm
    cudnnGetConvolutionBackwardDataAlgorithm_v7 = _algorithm
    cudnnGetConvolutionBackwardFilterAlgorithm_v7 = _algorithm

    def _no_workspace(self, *args):
        args[-1][0] = 0
        return 0

    cudnnGetConvolutionForwardWorkspaceSize = _no_workspace
    cudnnGetConvolutionBackwardDataWorkspaceSize = _no_workspace
    cudnnGetConvolutionBackwardFilterWorkspaceSize = _no_workspace

    def _array(self, desc, pointer) -> np.ndarray:
        shape = self._get(desc)["shape"]
        return self.gpu.memory(_address(pointer), "float32")[: math.prod(shape)].reshape(shape)

    def _conv(self, conv, w_desc) -> Conv2D:
        cs, ws = self._get(conv), self._get(w_desc)["shape"]
        return Conv2D(
            ws[0], ws[2], ws[3], *cs["stride"], *cs["padding"], groups=cs["groups"], use_bias=False
        )

    def cudnnConvolutionForward(
        self, handle, alpha, x_desc, x, w_desc, w, conv, algo, work, size, beta, y_desc, y
    ):
        (z,) = self._conv(conv, w_desc).forward([self._array(x_desc, x)], [self._array(w_desc, w)])
        out = self._array(y_desc, y)
        out[...] = alpha[0] * z + (beta[0] * out if beta[0] else 0)
        return 0

    def cudnnConvolutionBackwardData(
        self, handle, alpha, w_desc, w, dy_desc, dy, conv, algo, work, size, beta, dx_desc, dx
    ):
        op, dys = self._conv(conv, w_desc), self._array(dy_desc, dy)
        x = np.zeros(self._get(dx_desc)["shape"])
        (grad,), _ = op.backward([x], [self._array(w_desc, w)], [dys], [dys])
        self._array(dx_desc, dx)[...] = alpha[0] * grad
        return 0

    def cudnnConvolutionBackwardFilter(
        self, handle, alpha, x_desc, x, dy_desc, dy, conv, algo, work, size, beta, dw_desc, dw
    ):
        op, dys = self._conv(conv, dw_desc), self._array(dy_desc, dy)
        w = np.zeros(self._get(dw_desc)["shape"])
        _, (grad,) = op.backward([self._array(x_desc, x)], [w], [dys], [dys])
        self._array(dw_desc, dw)[...] = alpha[0] * grad
        return 0

    def cudnnSetPooling2dDescriptor(self, desc, mode, nan, kh, kw, ph, pw, sh, sw):
        assert mode in (0, 1)
        kind = PoolType.POOL_MAX if mode == 0 else PoolType.POOL_AVG
        self._get(desc)["op"] = Pool2D(kh, kw, sh, sw, ph, pw, kind)
        return 0

    def cudnnPoolingForward(self, handle, pool, alpha, x_desc, x, beta, y_desc, y):
        (z,) = self._get(pool)["op"].forward([self._array(x_desc, x)], [])
        self._array(y_desc, y)[...] = z
        return 0

    def cudnnPoolingBackward(
        self, handle, pool, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx
    ):
        op = self._get(pool)["op"]
        (grad,), _ = op.backward(
            [self._array(x_desc, x)], [], [self._array(y_desc, y)], [self._array(dy_desc, dy)]
        )
        self._array(dx_desc, dx)[...] = grad
        return 0

    def cudnnSoftmaxForward(self, handle, algo, mode, alpha, x_desc, x, beta, y_desc, y):
        assert (algo, mode) == (1, 1)
        v = self._array(x_desc, x).astype(np.float64)
        e = np.exp(v - v.max(axis=1, keepdims=True))
        self._array(y_desc, y)[...] = alpha[0] * e / e.sum(axis=1, keepdims=True)
        return 0

    def cudnnSoftmaxBackward(
        self, handle, algo, mode, alpha, y_desc, y, dy_desc, dy, beta, dx_desc, dx
    ):
        assert (algo, mode) == (1, 1)
        p, d = self._array(y_desc, y).astype(np.float64), self._array(dy_desc, dy)
        self._array(dx_desc, dx)[...] = alpha[0] * p * (d - (d * p).sum(axis=1, keepdims=True))
        return 0

    def __getattr__(self, name: str):
        if name.startswith(("cudnnDestroy", "cudnnSetStream")):
            return lambda *args: 0
        raise AttributeError(name)
