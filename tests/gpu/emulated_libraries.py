"""cuBLAS's strided-batched SGEMM and the legacy cuDNN calls, emulated on a `HostGpu` from their
documented semantics (column-major leading dimensions; NCHW descriptors) for `emulator.py`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from flexflow.gpu.libraries import ffi
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.window import crop_hw, pad_hw

if TYPE_CHECKING:
    from .emulator import HostGpu


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
        # cudnnPoolingMode_t: 0 max, 1 AVERAGE_COUNT_INCLUDE_PADDING (padded cells are zeros
        # of the window, divisor kh*kw), 2 AVERAGE_COUNT_EXCLUDE_PADDING (divisor: the window's
        # cells inside x, Pool2D's own rule)
        assert mode in (0, 1, 2), f"cudnnPoolingMode_t {mode}"
        kind = PoolType.POOL_MAX if mode == 0 else PoolType.POOL_AVG
        if mode == 1:  # the zero-padded x pooled without padding: every cell counted
            self._get(desc).update(op=Pool2D(kh, kw, sh, sw, 0, 0, kind), zeros=(ph, pw))
        else:
            self._get(desc).update(op=Pool2D(kh, kw, sh, sw, ph, pw, kind), zeros=(0, 0))
        return 0

    def cudnnPoolingForward(self, handle, pool, alpha, x_desc, x, beta, y_desc, y):
        state = self._get(pool)
        (z,) = state["op"].forward([pad_hw(self._array(x_desc, x), state["zeros"])], [])
        self._array(y_desc, y)[...] = z
        return 0

    def cudnnPoolingBackward(
        self, handle, pool, alpha, y_desc, y, dy_desc, dy, x_desc, x, beta, dx_desc, dx
    ):
        state = self._get(pool)
        (grad,), _ = state["op"].backward(
            [pad_hw(self._array(x_desc, x), state["zeros"])],
            [],
            [self._array(y_desc, y)],
            [self._array(dy_desc, dy)],
        )
        self._array(dx_desc, dx)[...] = crop_hw(grad, state["zeros"])
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
