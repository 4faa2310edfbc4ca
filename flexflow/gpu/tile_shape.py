"""GPU tiles of the data-movement ops: concat, split, stack, flat, reshape and transpose (strided copies).

Gradients of integer inputs are None, as in the numpy references.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from flexflow.gpu import prims
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.gpu.nvrtc import MAX_PARTS, Arg, grid_for, launch
from flexflow.gpu.prims import SUFFIX
from flexflow.gpu.sources import LAYOUT

Arrays = tuple[DeviceArray, ...]


def _is_float(x: DeviceArray) -> bool:
    return x.dtype.startswith("float")


def _join(gpu: Gpu, parts, axis: int) -> DeviceArray:
    """parts concatenated along `axis` (what concat's forward and split's backward compute)."""
    shape = list(parts[0].shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    out = gpu.empty(shape, parts[0].dtype)
    offsets = prims.concat_offsets([p.shape[axis] for p in parts])
    for part, start in zip(parts, offsets, strict=True):
        prims.copy(gpu, prims.slab(out, axis, start, part.shape[axis]), part)
    return out


def _cut(gpu: Gpu, whole: DeviceArray, sizes, axis: int) -> Arrays:
    """whole split along `axis` into parts of `sizes` (split's forward, concat's backward)."""
    offsets = prims.concat_offsets(sizes)
    return tuple(
        prims.contiguous(gpu, prims.slab(whole, axis, start, size))
        for start, size in zip(offsets, sizes, strict=True)
    )


def concat_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    return (_join(gpu, inputs, op.axis % inputs[0].ndim),)


def concat_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    axis = op.axis % inputs[0].ndim
    grads = _cut(gpu, grad_outputs[0], [x.shape[axis] for x in inputs], axis)
    return tuple(g if _is_float(x) else None for g, x in zip(grads, inputs, strict=True)), ()


def split_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    return _cut(gpu, inputs[0], op.sizes, op.axis % inputs[0].ndim)


def split_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (x,) = inputs
    grad = _join(gpu, grad_outputs, op.axis % x.ndim)
    return (grad if _is_float(x) else None,), ()


def _stack_parts(
    gpu: Gpu, whole: DeviceArray, parts: Sequence[DeviceArray], axis: int, join: bool
) -> None:
    """whole (.., len(parts), ..) from the equal row-major parts stacked at `axis` (`join`), or
    the parts from whole: one launch per MAX_PARTS parts (a launch per part cost 2.3 ms for
    NMT's 40 steps on an H200)."""
    shape = parts[0].shape
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis:])
    count = len(parts)
    for first in range(0, count, MAX_PARTS):
        group = parts[first : first + MAX_PARTS]
        # the group's slab of whole, seen as (outer, count, inner) starting at part `first`
        view = whole.ptr + first * inner * whole.itemsize
        launch(
            gpu, LAYOUT, f"stack_parts_{SUFFIX[whole.dtype]}", grid_for(outer * len(group) * inner),
            [Arg.ptr(view), Arg.parts([p.ptr for p in group]), Arg.i64(len(group)),
             Arg.i64(outer), Arg.i64(inner), Arg.i64(count), Arg.i64(int(join))],
        )  # fmt: skip


def stack_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    axis = op.axis % (inputs[0].ndim + 1)
    parts = [prims.contiguous(gpu, x) for x in inputs]
    shape = parts[0].shape
    out = gpu.empty(shape[:axis] + (len(parts),) + shape[axis:], parts[0].dtype)
    if out.size:
        _stack_parts(gpu, out, parts, axis, join=True)
    return (out,)


def stack_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    dy = prims.contiguous(gpu, grad_outputs[0])
    axis = op.axis % dy.ndim
    grads = [gpu.empty(x.shape, dy.dtype) for x in inputs]
    if dy.size:
        _stack_parts(gpu, dy, grads, axis, join=False)
    return tuple(g if _is_float(x) else None for g, x in zip(grads, inputs, strict=True)), ()


def _copy_as(gpu: Gpu, x: DeviceArray, shape) -> DeviceArray:
    """A new row-major array of `shape` holding x's elements in order (flat, reshape)."""
    source = prims.contiguous(gpu, x)
    out = gpu.empty(shape, x.dtype)
    gpu.copy(out, source.reshape(shape))
    return out


def flat_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    (x,) = inputs
    return (_copy_as(gpu, x, (x.shape[0], x.size // x.shape[0] if x.shape[0] else 0)),)


def flat_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (x,) = inputs
    return ((_copy_as(gpu, grad_outputs[0], x.shape) if _is_float(x) else None),), ()


def reshape_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    (x,) = inputs
    return (_copy_as(gpu, x, (x.shape[0],) + sig.outputs[0].shape[1:]),)  # the tile's samples


def reshape_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (x,) = inputs
    return ((_copy_as(gpu, grad_outputs[0], x.shape) if _is_float(x) else None),), ()


def transpose_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    return (prims.permute(gpu, inputs[0], op.perm),)


def transpose_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (x,) = inputs
    if not _is_float(x):
        return (None,), ()
    inverse = sorted(range(len(op.perm)), key=lambda axis: op.perm[axis])  # argsort(perm)
    return (prims.permute(gpu, grad_outputs[0], inverse),), ()
