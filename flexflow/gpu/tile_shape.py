"""GPU tiles of the data-movement ops: concat, split, stack, flat, reshape and transpose (strided copies).

Gradients of integer inputs are None, as in the numpy references.
"""

from __future__ import annotations

from flexflow.gpu import prims
from flexflow.gpu.device import DeviceArray, Gpu

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


def stack_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    axis = op.axis % (inputs[0].ndim + 1)
    parts = []
    for x in inputs:
        x = prims.contiguous(gpu, x)
        parts.append(x.reshape(x.shape[:axis] + (1,) + x.shape[axis:]))  # a length-1 slab
    return (_join(gpu, parts, axis),)


def stack_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (dy,) = grad_outputs
    axis = op.axis % dy.ndim
    grads = _cut(gpu, dy, [1] * dy.shape[axis], axis)
    return tuple(
        g.reshape(x.shape) if _is_float(x) else None for g, x in zip(grads, inputs, strict=True)
    ), ()


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
