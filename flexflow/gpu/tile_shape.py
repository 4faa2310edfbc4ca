"""GPU tiles of the data-movement ops: concat, split, stack, flat, reshape and transpose (strided copies).

Gradients of integer inputs are None, as in the numpy references.
"""

from __future__ import annotations

import itertools
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


def _move_parts(
    gpu: Gpu,
    whole: DeviceArray,
    pointers: Sequence[int],
    lengths: Sequence[int],
    axis: int,
    join: bool,
) -> None:
    """whole's slabs along `axis`, in order, from row-major parts (`join`), or the parts from
    them; part k at `pointers[k]` holds `lengths[k]` indices along `axis`. One launch per
    MAX_PARTS parts (a copy per part cost 0.4-2.3 ms per task on an H200 for Inception-v3's
    concats and NMT's 40-step stacks); pointers, not views, as building a `DeviceArray` per
    part costs about 4 us of host time."""
    outer, inner = math.prod(whole.shape[:axis]), math.prod(whole.shape[axis + 1 :])
    start = 0
    for first in range(0, len(pointers), MAX_PARTS):
        ends = list(itertools.accumulate(lengths[first : first + MAX_PARTS]))
        if outer * ends[-1] * inner:
            launch(
                gpu, LAYOUT, f"join_parts_{SUFFIX[whole.dtype]}",
                grid_for(outer * ends[-1] * inner),
                [Arg.ptr(whole.ptr), Arg.parts(pointers[first : first + MAX_PARTS]),
                 Arg.parts(ends), Arg.i64(len(ends)), Arg.i64(outer), Arg.i64(inner),
                 Arg.i64(whole.shape[axis]), Arg.i64(start), Arg.i64(int(join))],
            )  # fmt: skip
        start += ends[-1]


def _join(gpu: Gpu, parts, axis: int) -> DeviceArray:
    """parts concatenated along `axis` (concat's forward, split's backward)."""
    parts = [prims.contiguous(gpu, p) for p in parts]
    lengths = [p.shape[axis] for p in parts]
    shape = list(parts[0].shape)
    shape[axis] = sum(lengths)
    out = gpu.empty(shape, parts[0].dtype)
    _move_parts(gpu, out, [p.ptr for p in parts], lengths, axis, join=True)
    return out


def _cut(gpu: Gpu, whole: DeviceArray, sizes, axis: int) -> Arrays:
    """whole split along `axis` into parts of `sizes` (split's forward, concat's backward)."""
    whole = prims.contiguous(gpu, whole)
    parts = tuple(
        gpu.empty(whole.shape[:axis] + (size,) + whole.shape[axis + 1 :], whole.dtype)
        for size in sizes
    )
    _move_parts(gpu, whole, [p.ptr for p in parts], list(sizes), axis, join=False)
    return parts


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


def stack_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    axis = op.axis % (inputs[0].ndim + 1)
    parts = [prims.contiguous(gpu, x) for x in inputs]
    shape = parts[0].shape
    out = gpu.empty(shape[:axis] + (len(parts),) + shape[axis:], parts[0].dtype)
    _move_parts(gpu, out, [x.ptr for x in parts], [1] * len(parts), axis, join=True)
    return (out,)


def stack_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    dy = prims.contiguous(gpu, grad_outputs[0])
    axis = op.axis % dy.ndim
    grads = [gpu.empty(x.shape, dy.dtype) for x in inputs]
    _move_parts(gpu, dy, [g.ptr for g in grads], [1] * len(grads), axis, join=False)
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
