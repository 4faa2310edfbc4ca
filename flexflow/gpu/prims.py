"""Layout and element-wise primitives on device arrays: strided copies, reductions, activations.

Every op's GPU tile is built from these, cuBLAS (`blas.py`) and cuDNN (`dnn.py`). They take and
return `DeviceArray`s; results are scratch arrays of the task's `Gpu` unless `out` is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flexflow.gpu.device import DeviceArray, Gpu, require_contiguous
from flexflow.gpu.errors import UnsupportedTileError
from flexflow.gpu.nvrtc import Arg, grid_for, launch
from flexflow.gpu.sources import ELEMENTWISE, LAYOUT
from flexflow.ops.activations import ACTIVATIONS, ActiMode
from flexflow.ops.unary_functions import UnaryFunction

SUFFIX = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}
"""Kernel name suffix of each element type."""

ACTIVATION_CODES: dict[ActiMode, int] = {
    ActiMode.AC_MODE_NONE: 0,
    ActiMode.AC_MODE_RELU: 1,
    ActiMode.AC_MODE_SIGMOID: 2,
    ActiMode.AC_MODE_TANH: 3,
    ActiMode.AC_MODE_GELU: 4,
    ActiMode.AC_MODE_ELU: 5,
}
"""The `ACT_*` codes of sources.ELEMENTWISE, one per activation of `flexflow.ops.ACTIVATIONS`."""


# ---- layout -------------------------------------------------------------------------------------
def copy(
    gpu: Gpu, dst: DeviceArray, src: DeviceArray, *, alpha: float = 1.0, add: bool = False
) -> DeviceArray:
    """dst (=|+=) alpha * src, elementwise over equal shapes, each read through its own strides."""
    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise UnsupportedTileError(
            f"prims.copy: source {src.shape} {src.dtype} and destination {dst.shape} {dst.dtype} "
            "must have one shape and element type; reshape or cast first."
        )
    if dst.size == 0:
        return dst
    if dst.is_contiguous and src.is_contiguous and alpha == 1.0 and not add:
        gpu.copy(dst, src)
        return dst
    launch(
        gpu, LAYOUT, f"copy_strided_{SUFFIX[dst.dtype]}", grid_for(dst.size),
        [Arg.ptr(dst.ptr), Arg.ptr(src.ptr), Arg.i64(dst.size), Arg.i64(dst.ndim),
         Arg.dims(dst.shape), Arg.dims(dst.element_strides), Arg.dims(src.element_strides),
         Arg.f64(alpha), Arg.i64(int(add))],
    )  # fmt: skip
    return dst


def contiguous(gpu: Gpu, array: DeviceArray) -> DeviceArray:
    """`array` itself when row-major, else a row-major scratch copy."""
    if array.is_contiguous:
        return array
    return copy(gpu, gpu.empty(array.shape, array.dtype), array)


def fill(gpu: Gpu, array: DeviceArray, value: float) -> DeviceArray:
    require_contiguous("prims.fill", array)
    if array.size:
        launch(
            gpu, LAYOUT, f"fill_{SUFFIX[array.dtype]}", grid_for(array.size),
            [Arg.ptr(array.ptr), Arg.i64(array.size), Arg.f64(value)],
        )  # fmt: skip
    return array


def permute(gpu: Gpu, array: DeviceArray, perm: Sequence[int]) -> DeviceArray:
    """A row-major copy of `array.transpose(perm)` (output dim i is input dim perm[i])."""
    strides = array.element_strides
    view = array.view([array.shape[p] for p in perm], [strides[p] for p in perm])
    return copy(gpu, gpu.empty(view.shape, array.dtype), view)


def broadcast_view(array: DeviceArray, shape: Sequence[int], axes: Sequence[int]) -> DeviceArray:
    """`array` seen as `shape`, its dims placed at `axes` of it, every other dim repeated
    (stride 0): e.g. a bias (C,) as (N, C, H, W) with axes (1,)."""
    strides = [0] * len(shape)
    for axis, stride in zip(axes, array.element_strides, strict=True):
        strides[axis] = stride
    return array.view(shape, strides)


def pad_hw(
    gpu: Gpu, x: DeviceArray, rows: tuple[int, int], cols: tuple[int, int], value: float = 0.0
) -> DeviceArray:
    """x (N, C, H, W) with (top, bottom) rows and (left, right) columns of `value` around it."""
    n, c, h, w = x.shape
    padded = fill(gpu, gpu.empty((n, c, h + sum(rows), w + sum(cols)), x.dtype), value)
    copy(gpu, crop_view(padded, rows, cols), x)
    return padded


def crop_view(padded: DeviceArray, rows: tuple[int, int], cols: tuple[int, int]) -> DeviceArray:
    """The interior view of `padded` (N, C, Hp, Wp) without (top, bottom) rows, (left, right) cols."""
    n, c, hp, wp = padded.shape
    strides = padded.element_strides
    offset = rows[0] * strides[2] + cols[0] * strides[3]
    return padded.view((n, c, hp - sum(rows), wp - sum(cols)), strides, offset)


# ---- reductions ---------------------------------------------------------------------------------
def reduce_sum(
    gpu: Gpu,
    src: DeviceArray,
    axes: Sequence[int],
    *,
    scale: float = 1.0,
    out: DeviceArray | None = None,
    add: bool = False,
) -> DeviceArray:
    """scale * src summed over `axes` (float32, double accumulation); kept dims in order."""
    if src.dtype != "float32":
        raise UnsupportedTileError(
            f"prims.reduce_sum: expects float32, got {src.dtype} {src.shape}."
        )
    axes = sorted(a % src.ndim for a in axes)
    strides = src.element_strides
    kept = [d for d in range(src.ndim) if d not in axes]
    kept_shape = [src.shape[d] for d in kept]
    out = gpu.empty(kept_shape) if out is None else out
    require_contiguous("prims.reduce_sum", out)
    outputs = math.prod(kept_shape)
    if outputs == 0:
        return out
    launch(
        gpu, LAYOUT, "reduce_sum_f32", min(outputs, 65535 * 8),
        [Arg.ptr(out.ptr), Arg.ptr(src.ptr), Arg.i64(outputs), Arg.i64(len(kept)),
         Arg.dims(kept_shape), Arg.dims([strides[d] for d in kept]),
         Arg.i64(math.prod(src.shape[d] for d in axes)), Arg.i64(len(axes)),
         Arg.dims([src.shape[d] for d in axes]), Arg.dims([strides[d] for d in axes]),
         Arg.f64(scale), Arg.i64(int(add))],
    )  # fmt: skip
    return out


def cast_to_float32(gpu: Gpu, src: DeviceArray) -> DeviceArray:
    require_contiguous("prims.cast_to_float32", src)
    out = gpu.empty(src.shape)
    if src.size:
        launch(
            gpu, LAYOUT, "cast_f64_f32", grid_for(src.size),
            [Arg.ptr(out.ptr), Arg.ptr(src.ptr), Arg.i64(src.size)],
        )  # fmt: skip
    return out


# ---- element-wise math --------------------------------------------------------------------------
def activation_forward(gpu: Gpu, mode: ActiMode, x: DeviceArray) -> DeviceArray:
    """act(x) as a new array (a copy for AC_MODE_NONE, never an alias)."""
    require_contiguous("activation_forward", x)
    y = gpu.empty(x.shape)
    if x.size:
        launch(
            gpu, ELEMENTWISE, "activation_forward", grid_for(x.size),
            [Arg.ptr(y.ptr), Arg.ptr(x.ptr), Arg.i64(x.size), Arg.i64(ACTIVATION_CODES[mode])],
        )  # fmt: skip
    return y


def grad_needs_input(mode: ActiMode) -> bool:
    """Whether `activation_backward` reads x; when not, pass y for x and skip recomputing it."""
    return ACTIVATIONS[mode].grad_needs_input


def activation_backward(
    gpu: Gpu, mode: ActiMode, x: DeviceArray, y: DeviceArray, dy: DeviceArray
) -> DeviceArray:
    """dL/dx of y = act(x) (the reference's `ACTIVATIONS[mode].grad(x, y, dy)`)."""
    require_contiguous("activation_backward", x, y, dy)
    dx = gpu.empty(x.shape)
    if x.size:
        launch(
            gpu, ELEMENTWISE, "activation_backward", grid_for(x.size),
            [Arg.ptr(dx.ptr), Arg.ptr(x.ptr), Arg.ptr(y.ptr), Arg.ptr(dy.ptr), Arg.i64(x.size),
             Arg.i64(ACTIVATION_CODES[mode])],
        )  # fmt: skip
    return dx


FUNCTION_CODES: dict[UnaryFunction, int] = {function: code for code, function in enumerate(
    (UnaryFunction.EXP, UnaryFunction.SIN, UnaryFunction.COS, UnaryFunction.POW,
     UnaryFunction.RSQRT, UnaryFunction.SCALAR_MULTIPLY, UnaryFunction.SCALAR_ADD,
     UnaryFunction.SCALAR_SUB, UnaryFunction.SCALAR_TRUE_DIVIDE)
)}  # fmt: skip
"""The `FN_*` codes of sources.ELEMENTWISE, one per function of `flexflow.ops.UNARY_FUNCTIONS`."""


def function_forward(gpu: Gpu, function: UnaryFunction, scalar: float, x: DeviceArray):
    """function(x, scalar) as a new array (`UNARY_FUNCTIONS[function].forward`)."""
    require_contiguous("function_forward", x)
    y = gpu.empty(x.shape)
    if x.size:
        launch(
            gpu, ELEMENTWISE, "function_forward", grid_for(x.size),
            [Arg.ptr(y.ptr), Arg.ptr(x.ptr), Arg.i64(x.size), Arg.i64(FUNCTION_CODES[function]),
             Arg.f64(scalar)],
        )  # fmt: skip
    return y


def function_backward(
    gpu: Gpu, function: UnaryFunction, scalar: float, x: DeviceArray, y: DeviceArray,
    dy: DeviceArray,
) -> DeviceArray:  # fmt: skip
    """dL/dx of y = function(x, scalar) (`UNARY_FUNCTIONS[function].grad(x, y, dy, scalar)`)."""
    require_contiguous("function_backward", x, y, dy)
    dx = gpu.empty(x.shape)
    if x.size:
        launch(
            gpu, ELEMENTWISE, "function_backward", grid_for(x.size),
            [Arg.ptr(dx.ptr), Arg.ptr(x.ptr), Arg.ptr(y.ptr), Arg.ptr(dy.ptr), Arg.i64(x.size),
             Arg.i64(FUNCTION_CODES[function]), Arg.f64(scalar)],
        )  # fmt: skip
    return dx


BINARY_CODES = {"add": 0, "subtract": 1, "multiply": 2, "divide": 3, "max": 4, "min": 5}
"""The `BINARY_*` codes of sources.ELEMENTWISE, by `BinaryOp` value."""


def binary(gpu: Gpu, op: str, a: DeviceArray, b: DeviceArray) -> DeviceArray:
    """a (op) b into a new row-major array of a's shape; b may be a broadcast view of that shape."""
    if a.shape != b.shape:
        raise UnsupportedTileError(
            f"prims.binary {op}: operands {a.shape} and {b.shape} differ; pass a broadcast view "
            "(prims.broadcast_view) of the smaller one."
        )
    out = gpu.empty(a.shape)
    if out.size:
        launch(
            gpu, ELEMENTWISE, "binary", grid_for(out.size),
            [Arg.ptr(out.ptr), Arg.ptr(a.ptr), Arg.ptr(b.ptr), Arg.i64(out.size),
             Arg.i64(out.ndim), Arg.dims(out.shape), Arg.dims(a.element_strides),
             Arg.dims(b.element_strides), Arg.i64(BINARY_CODES[op])],
        )  # fmt: skip
    return out


def binary_backward(
    gpu: Gpu, op: str, a: DeviceArray, b: DeviceArray, dz: DeviceArray
) -> tuple[DeviceArray, DeviceArray]:
    """(dL/da, dL/db) of a (op) b for divide, max and min (`BINARY_RULES[op].grads`)."""
    require_contiguous(f"binary_backward {op}", a, b, dz)
    da, db = gpu.empty(a.shape), gpu.empty(a.shape)
    if a.size:
        launch(
            gpu, ELEMENTWISE, "binary_backward", grid_for(a.size),
            [Arg.ptr(da.ptr), Arg.ptr(db.ptr), Arg.ptr(a.ptr), Arg.ptr(b.ptr), Arg.ptr(dz.ptr),
             Arg.i64(a.size), Arg.i64(BINARY_CODES[op])],
        )  # fmt: skip
    return da, db
