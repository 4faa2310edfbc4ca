"""cuDNN calls on NCHW float32 tensors: convolution (forward, backward data/filter), pooling, softmax.

Descriptors are made per call and destroyed after it (cheap, host-only); algorithm choices are
cached per shape. cuDNN takes one padding per spatial dim, applied on both sides; tiles whose
border padding differs per side are padded explicitly by the caller (`prims.pad_hw`), and
convolutions run with FMA math only (no TF32) so they match float32 numpy to 1e-4.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from flexflow.gpu.device import DeviceArray, Gpu, require_contiguous
from flexflow.gpu.errors import UnsupportedTileError
from flexflow.gpu.libraries import check, ffi, open_library

_NCHW, _FLOAT = 0, 0  # CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT
_CROSS_CORRELATION = 1  # what the numpy reference computes (no kernel flip)
_FMA_MATH = 3  # CUDNN_FMA_MATH: no tensor-core TF32 rounding
# cudnnPoolingMode_t: CUDNN_POOLING_MAX = 0, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING = 1
# (not used: it divides by kh*kw), CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING = 2 (FlexFlow's,
# src/ops/kernels/pool_2d_kernels.cu: the window's cells inside the input)
POOL_MAX, POOL_AVG_EXCLUDE_PADDING = 0, 2
_SOFTMAX_ACCURATE, _SOFTMAX_CHANNEL = 1, 1  # max-subtracted softmax over the C dim
_FALLBACK_ALGO = {"forward": 0, "data": 1, "filter": 1}  # IMPLICIT_GEMM, BWD_*_ALGO_1


def _lib() -> Any:
    return open_library("cudnn")


def _scalars(alpha: float, beta: float) -> tuple[Any, Any]:
    return ffi.new("float *", alpha), ffi.new("float *", beta)


@contextlib.contextmanager
def _tensor(shape: Sequence[int]) -> Iterator[Any]:
    """A 4-d NCHW float32 tensor descriptor (shapes of lower rank are padded with 1s)."""
    dims = list(shape) + [1] * (4 - len(shape))
    desc = ffi.new("cudnnTensorDescriptor_t *")
    check("cudnn", _lib().cudnnCreateTensorDescriptor(desc), "cudnnCreateTensorDescriptor")
    try:
        check(
            "cudnn",
            _lib().cudnnSetTensor4dDescriptor(desc[0], _NCHW, _FLOAT, *dims),
            f"cudnnSetTensor4dDescriptor{tuple(dims)}",
        )
        yield desc[0]
    finally:
        _lib().cudnnDestroyTensorDescriptor(desc[0])


@dataclass(frozen=True, slots=True)
class ConvShape:
    """One convolution: input, kernel and output NCHW shapes, symmetric padding, stride, groups."""

    x: tuple[int, int, int, int]
    w: tuple[int, int, int, int]
    y: tuple[int, int, int, int]
    padding: tuple[int, int]
    stride: tuple[int, int]
    groups: int


@contextlib.contextmanager
def _conv_descriptors(conv: ConvShape) -> Iterator[tuple[Any, Any, Any, Any]]:
    lib = _lib()
    x_cm, y_cm = _tensor(conv.x), _tensor(conv.y)
    w_desc = ffi.new("cudnnFilterDescriptor_t *")
    c_desc = ffi.new("cudnnConvolutionDescriptor_t *")
    check("cudnn", lib.cudnnCreateFilterDescriptor(w_desc), "cudnnCreateFilterDescriptor")
    check("cudnn", lib.cudnnCreateConvolutionDescriptor(c_desc), "cudnnCreateConvolutionDescriptor")
    try:
        with x_cm as x_desc, y_cm as y_desc:
            check(
                "cudnn",
                lib.cudnnSetFilter4dDescriptor(w_desc[0], _FLOAT, _NCHW, *conv.w),
                f"cudnnSetFilter4dDescriptor{conv.w}",
            )
            check(
                "cudnn",
                lib.cudnnSetConvolution2dDescriptor(
                    c_desc[0], *conv.padding, *conv.stride, 1, 1, _CROSS_CORRELATION, _FLOAT
                ),
                f"cudnnSetConvolution2dDescriptor(padding {conv.padding}, stride {conv.stride})",
            )
            check(
                "cudnn",
                lib.cudnnSetConvolutionGroupCount(c_desc[0], conv.groups),
                "cudnnSetConvolutionGroupCount",
            )
            check(
                "cudnn",
                lib.cudnnSetConvolutionMathType(c_desc[0], _FMA_MATH),
                "cudnnSetConvolutionMathType",
            )
            dims = [ffi.new("int *") for _ in range(4)]
            check(
                "cudnn",
                lib.cudnnGetConvolution2dForwardOutputDim(c_desc[0], x_desc, w_desc[0], *dims),
                "cudnnGetConvolution2dForwardOutputDim",
            )
            got = tuple(d[0] for d in dims)
            if got != conv.y:
                raise UnsupportedTileError(
                    f"conv2d on GPU: cuDNN computes output {got} for input {conv.x}, kernel "
                    f"{conv.w}, padding {conv.padding}, stride {conv.stride}, but the tile is "
                    f"{conv.y}; this is a bug in the tile's padding."
                )
            yield x_desc, w_desc[0], c_desc[0], y_desc
    finally:
        lib.cudnnDestroyConvolutionDescriptor(c_desc[0])
        lib.cudnnDestroyFilterDescriptor(w_desc[0])


_ALGORITHMS: dict[tuple[str, ConvShape], tuple[int, int]] = {}
"""Chosen (algorithm, workspace bytes) per pass and convolution (cuDNN's heuristic ranking)."""

_HEURISTICS = {
    "forward": ("cudnnGetConvolutionForwardAlgorithm_v7", "cudnnGetConvolutionForwardWorkspaceSize"),
    "data": ("cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnGetConvolutionBackwardDataWorkspaceSize"),
    "filter": ("cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnGetConvolutionBackwardFilterWorkspaceSize"),
}  # fmt: skip


def _algorithm(gpu: Gpu, which: str, conv: ConvShape, descs: tuple[Any, ...]) -> tuple[int, int]:
    """cuDNN's best-ranked usable algorithm for this pass and its workspace size, cached."""
    key = (which, conv)
    if key in _ALGORITHMS:
        return _ALGORITHMS[key]
    lib, handle = _lib(), gpu.handle("cudnn")
    find, size_fn = (getattr(lib, name) for name in _HEURISTICS[which])
    results = ffi.new("cudnnConvolutionAlgoPerf_t[8]")
    returned = ffi.new("int *")
    check("cudnn", find(handle, *descs, 8, returned, results), _HEURISTICS[which][0])
    algos = [results[i].algo for i in range(returned[0]) if results[i].status == 0]
    algo = algos[0] if algos else _FALLBACK_ALGO[which]
    size = ffi.new("size_t *")
    check("cudnn", size_fn(handle, *descs, algo, size), f"{_HEURISTICS[which][1]}(algo {algo})")
    _ALGORITHMS[key] = (algo, size[0])
    return algo, size[0]


def _workspace(gpu: Gpu, size: int) -> Any:
    """A `size`-byte cuDNN workspace on the task's stream (NULL when none is needed)."""
    return ffi.cast("void *", gpu.empty(((size + 3) // 4,), "int32").ptr if size else 0)


def conv_forward(
    gpu: Gpu, conv: ConvShape, x: DeviceArray, w: DeviceArray, y: DeviceArray, beta: float = 0.0
) -> None:
    """y = conv(x, w) + beta * y (cross-correlation, as the numpy reference)."""
    require_contiguous("conv_forward", x, w, y)
    with _conv_descriptors(conv) as (x_desc, w_desc, c_desc, y_desc):
        algo, size = _algorithm(gpu, "forward", conv, (x_desc, w_desc, c_desc, y_desc))
        work = _workspace(gpu, size)
        alpha_p, beta_p = _scalars(1.0, beta)
        status = _lib().cudnnConvolutionForward(
            gpu.handle("cudnn"), alpha_p, x_desc, ffi.cast("void *", x.ptr), w_desc,
            ffi.cast("void *", w.ptr), c_desc, algo, work,
            size, beta_p, y_desc, ffi.cast("void *", y.ptr),
        )  # fmt: skip
        check("cudnn", status, f"cudnnConvolutionForward(algo {algo}, {conv})")


def conv_backward_data(
    gpu: Gpu, conv: ConvShape, w: DeviceArray, dy: DeviceArray, dx: DeviceArray
) -> None:
    """dx = the gradient of conv(x, w) with respect to x, given dy."""
    require_contiguous("conv_backward_data", w, dy, dx)
    with _conv_descriptors(conv) as (x_desc, w_desc, c_desc, y_desc):
        algo, size = _algorithm(gpu, "data", conv, (w_desc, y_desc, c_desc, x_desc))
        work = _workspace(gpu, size)
        alpha_p, beta_p = _scalars(1.0, 0.0)
        status = _lib().cudnnConvolutionBackwardData(
            gpu.handle("cudnn"), alpha_p, w_desc, ffi.cast("void *", w.ptr), y_desc,
            ffi.cast("void *", dy.ptr), c_desc, algo, work,
            size, beta_p, x_desc, ffi.cast("void *", dx.ptr),
        )  # fmt: skip
        check("cudnn", status, f"cudnnConvolutionBackwardData(algo {algo}, {conv})")


def conv_backward_filter(
    gpu: Gpu, conv: ConvShape, x: DeviceArray, dy: DeviceArray, dw: DeviceArray
) -> None:
    """dw = the gradient of conv(x, w) with respect to w, given dy."""
    require_contiguous("conv_backward_filter", x, dy, dw)
    with _conv_descriptors(conv) as (x_desc, w_desc, c_desc, y_desc):
        algo, size = _algorithm(gpu, "filter", conv, (x_desc, y_desc, c_desc, w_desc))
        work = _workspace(gpu, size)
        alpha_p, beta_p = _scalars(1.0, 0.0)
        status = _lib().cudnnConvolutionBackwardFilter(
            gpu.handle("cudnn"), alpha_p, x_desc, ffi.cast("void *", x.ptr), y_desc,
            ffi.cast("void *", dy.ptr), c_desc, algo, work,
            size, beta_p, w_desc, ffi.cast("void *", dw.ptr),
        )  # fmt: skip
        check("cudnn", status, f"cudnnConvolutionBackwardFilter(algo {algo}, {conv})")


@contextlib.contextmanager
def _pooling(
    mode: int, kernel: tuple[int, int], padding: tuple[int, int], stride: tuple[int, int]
) -> Iterator[Any]:
    lib = _lib()
    desc = ffi.new("cudnnPoolingDescriptor_t *")
    check("cudnn", lib.cudnnCreatePoolingDescriptor(desc), "cudnnCreatePoolingDescriptor")
    try:
        check(
            "cudnn",
            lib.cudnnSetPooling2dDescriptor(desc[0], mode, 0, *kernel, *padding, *stride),
            f"cudnnSetPooling2dDescriptor(kernel {kernel}, padding {padding}, stride {stride})",
        )
        yield desc[0]
    finally:
        lib.cudnnDestroyPoolingDescriptor(desc[0])


def pool_forward(
    gpu: Gpu, mode: int, kernel: tuple[int, int], padding: tuple[int, int],
    stride: tuple[int, int], x: DeviceArray, y: DeviceArray,
) -> None:  # fmt: skip
    """y = max or average pooling of x (`mode`; an average of POOL_AVG_EXCLUDE_PADDING divides
    by the window's cells inside x, the padding left out)."""
    require_contiguous("pool_forward", x, y)
    with (
        _pooling(mode, kernel, padding, stride) as pool,
        _tensor(x.shape) as x_desc,
        _tensor(y.shape) as y_desc,
    ):
        alpha_p, beta_p = _scalars(1.0, 0.0)
        status = _lib().cudnnPoolingForward(
            gpu.handle("cudnn"), pool, alpha_p, x_desc, ffi.cast("void *", x.ptr), beta_p,
            y_desc, ffi.cast("void *", y.ptr),
        )  # fmt: skip
        check("cudnn", status, f"cudnnPoolingForward(x {x.shape}, y {y.shape})")


def pool_backward(
    gpu: Gpu, mode: int, kernel: tuple[int, int], padding: tuple[int, int],
    stride: tuple[int, int], x: DeviceArray, y: DeviceArray, dy: DeviceArray, dx: DeviceArray,
) -> None:  # fmt: skip
    """dx of pooling (max: each window's gradient to its maximum; average: spread evenly over
    the cells its divisor counts)."""
    require_contiguous("pool_backward", x, y, dy, dx)
    with (
        _pooling(mode, kernel, padding, stride) as pool,
        _tensor(x.shape) as x_desc,
        _tensor(y.shape) as y_desc,
    ):
        alpha_p, beta_p = _scalars(1.0, 0.0)
        status = _lib().cudnnPoolingBackward(
            gpu.handle("cudnn"), pool, alpha_p, y_desc, ffi.cast("void *", y.ptr), y_desc,
            ffi.cast("void *", dy.ptr), x_desc, ffi.cast("void *", x.ptr), beta_p, x_desc,
            ffi.cast("void *", dx.ptr),
        )  # fmt: skip
        check("cudnn", status, f"cudnnPoolingBackward(x {x.shape}, y {y.shape})")


def _softmax_shape(shape: Sequence[int], axis: int) -> tuple[int, int, int, int]:
    """shape seen as (outer, axis length, inner, 1): cuDNN's channel mode normalizes over dim 1."""
    outer = inner = 1
    for d, size in enumerate(shape):
        if d < axis:
            outer *= size
        elif d > axis:
            inner *= size
    return (outer, shape[axis], inner, 1)


def softmax_forward(gpu: Gpu, x: DeviceArray, axis: int, y: DeviceArray) -> None:
    require_contiguous("softmax_forward", x, y)
    if x.size == 0:
        return
    with _tensor(_softmax_shape(x.shape, axis % x.ndim)) as desc:
        alpha_p, beta_p = _scalars(1.0, 0.0)
        status = _lib().cudnnSoftmaxForward(
            gpu.handle("cudnn"), _SOFTMAX_ACCURATE, _SOFTMAX_CHANNEL, alpha_p, desc,
            ffi.cast("void *", x.ptr), beta_p, desc, ffi.cast("void *", y.ptr),
        )  # fmt: skip
        check("cudnn", status, f"cudnnSoftmaxForward(x {x.shape}, axis {axis})")


def softmax_backward(
    gpu: Gpu, y: DeviceArray, dy: DeviceArray, axis: int, dx: DeviceArray, scale: float = 1.0
) -> None:
    """dx = scale * y * (dy - sum(dy * y)) along `axis`."""
    require_contiguous("softmax_backward", y, dy, dx)
    if y.size == 0:
        return
    with _tensor(_softmax_shape(y.shape, axis % y.ndim)) as desc:
        alpha_p, beta_p = _scalars(scale, 0.0)
        status = _lib().cudnnSoftmaxBackward(
            gpu.handle("cudnn"), _SOFTMAX_ACCURATE, _SOFTMAX_CHANNEL, alpha_p, desc,
            ffi.cast("void *", y.ptr), desc, ffi.cast("void *", dy.ptr), beta_p, desc,
            ffi.cast("void *", dx.ptr),
        )  # fmt: skip
        check("cudnn", status, f"cudnnSoftmaxBackward(y {y.shape}, axis {axis})")
