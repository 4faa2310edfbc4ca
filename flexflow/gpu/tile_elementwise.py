"""GPU tiles of the element-wise ops and lookups: element_unary, element_binary, dropout, embedding, gather.

Dropout draws its mask from (seed, global element index) exactly as `flexflow.ops.dropout`, so a
GPU tile keeps the elements the numpy reference keeps.
"""

from __future__ import annotations

import math

from flexflow.errors import ShapeError
from flexflow.gpu import prims
from flexflow.gpu.device import DeviceArray, Gpu, require_contiguous
from flexflow.gpu.nvrtc import Arg, grid_for, launch
from flexflow.gpu.sources import ELEMENTWISE
from flexflow.gpu.sources_nn import EMBEDDING, GATHER
from flexflow.ops.embedding import AggrMode

Arrays = tuple[DeviceArray, ...]


# ---- element_unary ------------------------------------------------------------------------------
def unary_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    if op.function is not None:  # exp, pow, scalar_add, ...
        return (prims.function_forward(gpu, op.function, op.scalar_value, inputs[0]),)
    return (prims.activation_forward(gpu, op.activation, inputs[0]),)


def unary_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    x, y, dy = inputs[0], outputs[0], grad_outputs[0]
    if op.function is not None:
        return (prims.function_backward(gpu, op.function, op.scalar_value, x, y, dy),), ()
    return (prims.activation_backward(gpu, op.activation, x, y, dy),), ()


# ---- element_binary -----------------------------------------------------------------------------
# An input of size 1 along a dimension the output has longer (`flexflow.ops.element_binary`'s
# broadcasting) is read through stride 0 there, and its gradient is the output tile's summed
# over those dimensions.
def _repeated(a: DeviceArray, shape: tuple[int, ...]) -> DeviceArray:
    """`a` seen as `shape`: stride 0 along each dimension of size 1 it is repeated along."""
    if a.shape == shape:
        return a
    strides = [
        0 if n != m else s for n, m, s in zip(a.shape, shape, a.element_strides, strict=True)
    ]
    return a.view(shape, strides)


def _summed(gpu: Gpu, grad: DeviceArray, shape: tuple[int, ...], scale: float = 1.0):
    """The gradient of an input of `shape` from the output tile's `grad` (scaled): summed over
    the dimensions it was repeated along; `grad` itself where none was and the scale is 1."""
    axes = [d for d, (n, m) in enumerate(zip(shape, grad.shape, strict=True)) if n != m]
    if axes:
        return prims.reduce_sum(gpu, grad, axes, scale=scale).reshape(shape)
    if scale == 1.0:
        return grad
    return prims.copy(gpu, gpu.empty(grad.shape), grad, alpha=scale)


def binary_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    x, y = inputs
    shape = tuple(max(a, b) for a, b in zip(x.shape, y.shape, strict=True))
    return (prims.binary(gpu, op.op_type.value, _repeated(x, shape), _repeated(y, shape)),)


def binary_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    x, y = inputs
    (dz,) = grad_outputs
    kind = op.op_type.value
    if kind in ("divide", "max", "min"):  # one kernel reads x, y and dz together
        wide_x = prims.contiguous(gpu, _repeated(x, dz.shape))
        wide_y = prims.contiguous(gpu, _repeated(y, dz.shape))
        dx, dy = prims.binary_backward(gpu, kind, wide_x, wide_y, dz)
    elif kind == "multiply":
        dx = prims.binary(gpu, "multiply", dz, _repeated(y, dz.shape))
        dy = prims.binary(gpu, "multiply", dz, _repeated(x, dz.shape))
    else:  # add, subtract: dz itself (negated for y), copied where nothing is summed
        sign = -1.0 if kind == "subtract" else 1.0
        dx, dy = _summed(gpu, dz, x.shape), _summed(gpu, dz, y.shape, sign)
        dx, dy = (prims.copy(gpu, gpu.empty(g.shape), g) if g is dz else g for g in (dx, dy))
        return (dx, dy), ()
    return (_summed(gpu, dx, x.shape), _summed(gpu, dy, y.shape)), ()


# ---- dropout ------------------------------------------------------------------------------------
_GOLDEN, _MIX1, _MIX2, _MASK = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 2**64 - 1


def dropout_key(seed: int) -> int:
    """splitmix64's finalizer of the seed: the stream key of `flexflow.ops.dropout.dropout_mask`."""
    z = seed & _MASK
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    return z ^ (z >> 31)


def _dropout(gpu: Gpu, op, sig, region, x: DeviceArray) -> DeviceArray:
    require_contiguous("dropout", x)
    y = gpu.empty(x.shape)
    if x.size:
        launch(
            gpu, ELEMENTWISE, "dropout_apply", grid_for(x.size),
            [Arg.ptr(y.ptr), Arg.ptr(x.ptr), Arg.i64(x.size), Arg.i64(x.ndim),
             Arg.dims(x.shape), Arg.dims([start for start, _ in region]),
             Arg.dims(sig.outputs[0].shape), Arg.u64(dropout_key(op.seed)), Arg.f64(op.rate),
             Arg.f64(1.0 / (1.0 - op.rate))],
        )  # fmt: skip
    return y


def dropout_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    return (_dropout(gpu, op, sig, region, inputs[0]),)


def dropout_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    return (_dropout(gpu, op, sig, region, grad_outputs[0]),), ()


# ---- embedding ----------------------------------------------------------------------------------
def _bag(op, ids: DeviceArray) -> tuple[int, int, float]:
    """(rows, ids per row, scale): every id its own row, or a bag per sample (sum or mean)."""
    if op.aggr is AggrMode.AGGR_MODE_NONE:
        return ids.size, 1, 1.0
    bag = ids.shape[1]
    return ids.shape[0], bag, (1.0 / bag if op.aggr is AggrMode.AGGR_MODE_AVG else 1.0)


def embedding_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    (ids,), (table,) = inputs, weights  # table: (num_embeddings, E_t), a column tile
    require_contiguous("embedding", ids, table)
    rows, bag, scale = _bag(op, ids)
    dim = table.shape[1]
    out_rows = ids.shape if op.aggr is AggrMode.AGGR_MODE_NONE else ids.shape[:1]
    out = gpu.empty(out_rows + (dim,))
    bad = gpu.zeros((1,), "int32")
    if out.size:
        launch(
            gpu, EMBEDDING, f"embedding_forward_{prims.SUFFIX[ids.dtype]}", grid_for(out.size),
            [Arg.ptr(out.ptr), Arg.ptr(ids.ptr), Arg.ptr(table.ptr), Arg.ptr(bad.ptr),
             Arg.i64(rows), Arg.i64(bag), Arg.i64(dim), Arg.i64(table.shape[0]), Arg.f64(scale)],
        )  # fmt: skip
        if gpu.to_host(bad)[0]:  # waits for the stream: ids are data, checked like the reference
            raise ShapeError(
                f"embedding ({op.num_embeddings} x {op.embedding_dim}) on GPU: some ids of the "
                f"tile {ids.shape} lie outside [0, {op.num_embeddings}); remap the ids or "
                "enlarge num_embeddings."
            )
    return (out,)


def embedding_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (ids,), (table,), (dy,) = inputs, weights, grad_outputs
    require_contiguous("embedding backward", ids, dy)
    rows, bag, scale = _bag(op, ids)
    grad_table = gpu.zeros(table.shape)
    if ids.size and table.shape[1]:
        launch(
            gpu, EMBEDDING, f"embedding_backward_{prims.SUFFIX[ids.dtype]}",
            grid_for(rows * bag * table.shape[1]),
            [Arg.ptr(grad_table.ptr), Arg.ptr(ids.ptr), Arg.ptr(dy.ptr), Arg.i64(rows),
             Arg.i64(bag), Arg.i64(table.shape[1]), Arg.i64(table.shape[0]), Arg.f64(scale)],
        )  # fmt: skip
    return (None,), (grad_table,)


# ---- gather -------------------------------------------------------------------------------------
def _gather_dims(op, x: DeviceArray, index: DeviceArray) -> tuple[int, int, int, int]:
    """(outer, picks, rows, inner): x seen as (outer, rows, inner) around the gather axis, the
    index and the output as (outer, picks, inner)."""
    axis = op.axis(x.ndim)
    return (
        math.prod(x.shape[:axis]), index.shape[axis], x.shape[axis], math.prod(x.shape[axis + 1 :])
    )  # fmt: skip


def gather_forward(gpu: Gpu, op, sig, region, inputs, weights) -> Arrays:
    x, index = inputs  # x: the tile's rows, whole along the gather axis; index: the tile's
    require_contiguous("gather", x, index)
    outer, picks, rows, inner = _gather_dims(op, x, index)
    out = gpu.empty(index.shape)
    bad = gpu.zeros((1,), "int32")
    if out.size:
        launch(
            gpu, GATHER, f"gather_forward_{prims.SUFFIX[index.dtype]}", grid_for(out.size),
            [Arg.ptr(out.ptr), Arg.ptr(x.ptr), Arg.ptr(index.ptr), Arg.ptr(bad.ptr),
             Arg.i64(outer), Arg.i64(picks), Arg.i64(rows), Arg.i64(inner)],
        )  # fmt: skip
        # waits for the stream: indices are data, checked like the reference
        if gpu.to_host(bad)[0]:
            raise ShapeError(
                f"gather along dim {op.axis(x.ndim)} on GPU: some index values of the tile "
                f"{index.shape} lie outside [0, {rows}) (input tile {x.shape}); map the index "
                "into that range."
            )
    return (out,)


def gather_backward(gpu: Gpu, op, sig, region, inputs, weights, outputs, grad_outputs):
    (x, index), (dy,) = inputs, grad_outputs
    require_contiguous("gather backward", index, dy)
    outer, picks, rows, inner = _gather_dims(op, x, index)
    grad_x = gpu.zeros(x.shape)  # scatter-add target: every entry no index names stays 0
    if dy.size:
        launch(
            gpu, GATHER, f"gather_backward_{prims.SUFFIX[index.dtype]}", grid_for(dy.size),
            [Arg.ptr(grad_x.ptr), Arg.ptr(index.ptr), Arg.ptr(dy.ptr), Arg.i64(outer),
             Arg.i64(picks), Arg.i64(rows), Arg.i64(inner)],
        )  # fmt: skip
    return (grad_x, None), ()
