"""Small tiles of every op kind that the GPU kernels are checked on against the numpy references.

Shared by `scripts/gpu_check.py` and the GPU tests. Each case is an op, its input specs and one
tile (degrees and coordinates of a SOAP split); halo cases put conv2d and pool2d tiles at the
tensor's border, where their padding differs per side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flexflow.ops import ActiMode, DType, Op, Signature, TensorSpec
from flexflow.ops.base import Region, region_slices
from flexflow.ops.batch_matmul import BatchMatmul
from flexflow.ops.batch_norm import BatchNorm
from flexflow.ops.concat import Concat
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.dense import Dense
from flexflow.ops.dropout import Dropout
from flexflow.ops.element_binary import BinaryOp, ElementBinary
from flexflow.ops.element_unary import ElementUnary
from flexflow.ops.embedding import AggrMode, Embedding
from flexflow.ops.flat import Flat
from flexflow.ops.gather import Gather
from flexflow.ops.init import initialize
from flexflow.ops.layer_norm import LayerNorm
from flexflow.ops.lstm import LSTM
from flexflow.ops.mean import Mean
from flexflow.ops.multihead_attention import MultiHeadAttention
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.reduce_sum import ReduceSum
from flexflow.ops.reshape import Reshape
from flexflow.ops.shapes import tile_region
from flexflow.ops.softmax import Softmax
from flexflow.ops.split import Split
from flexflow.ops.stack import Stack
from flexflow.ops.transpose import Transpose
from flexflow.ops.unary_functions import UNARY_FUNCTIONS, UnaryFunction


@dataclass(frozen=True, slots=True)
class TileCase:
    """One op tile to check: `degrees` split the output, `coords` pick the tile (default: whole)."""

    name: str
    op: Op
    inputs: tuple[TensorSpec, ...]
    degrees: tuple[int, ...] | None = None
    coords: tuple[int, ...] | None = None
    positive: bool = False
    """Float inputs drawn in [0.5, ...) instead of normal: a function's domain (rsqrt)."""

    def signature(self) -> Signature:
        return self.op.infer(self.name, self.inputs)

    def region(self) -> Region:
        shape = self.signature().output_shape
        degrees = self.degrees or (1,) * len(shape)
        return tile_region(shape, degrees, self.coords or (0,) * len(shape))


def _function(function: UnaryFunction) -> ElementUnary:
    """FlexFlow's element-wise `function`, with a scalar of 3 where it takes one (pow: a cube,
    defined on negative inputs)."""
    scalar = None if UNARY_FUNCTIONS[function].scalar is None else 3.0
    return ElementUnary(function=function, scalar=scalar)


IMAGE = (TensorSpec((4, 4, 8, 8)),)
SEQ = (TensorSpec((4, 4, 6)),)
I32, I64 = DType.INT32, DType.INT64

CASES: tuple[TileCase, ...] = (
    TileCase("dense relu", Dense(6, ActiMode.AC_MODE_RELU), (TensorSpec((4, 5, 3)),)),
    TileCase("dense channel tile", Dense(6, ActiMode.AC_MODE_SIGMOID), (TensorSpec((4, 5, 3)),), (2, 1, 2), (1, 0, 1)),
    TileCase("dense no bias", Dense(5, use_bias=False), (TensorSpec((6, 7)),)),
    TileCase("conv2d relu", Conv2D(6, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU), IMAGE),
    TileCase("conv2d halo tile", Conv2D(6, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_GELU), IMAGE, (1, 1, 2, 2), (0, 0, 1, 0)),
    TileCase("conv2d stride 2", Conv2D(4, 3, 3, 2, 2, 1, 1), IMAGE),
    TileCase("conv2d stride 2 tile", Conv2D(4, 3, 3, 2, 2, 1, 1), IMAGE, (1, 2, 2, 1), (0, 1, 1, 0)),
    TileCase("conv2d groups halo", Conv2D(4, 5, 5, 1, 1, 2, 2, groups=2), IMAGE, (2, 2, 1, 2), (1, 1, 0, 1)),
    TileCase("conv2d no bias", Conv2D(6, 3, 3, 1, 1, 0, 0, use_bias=False), IMAGE),
    TileCase("pool2d max", Pool2D(3, 3, 2, 2, 1, 1, PoolType.POOL_MAX), IMAGE),
    TileCase("pool2d max halo", Pool2D(3, 3, 2, 2, 1, 1, PoolType.POOL_MAX), IMAGE, (1, 1, 2, 2), (0, 0, 1, 1)),
    TileCase("pool2d avg", Pool2D(2, 2, 2, 2, 0, 0, PoolType.POOL_AVG), IMAGE),
    # averages with padding left out of the divisor: cuDNN's own (EXCLUDE_PADDING) padding on a
    # whole image, and a border tile padded on one side only (explicitly, its divisor restored)
    TileCase("pool2d avg padded", Pool2D(3, 3, 1, 1, 1, 1, PoolType.POOL_AVG), IMAGE),
    TileCase("pool2d avg stride 2 padded", Pool2D(3, 3, 2, 2, 1, 1, PoolType.POOL_AVG), IMAGE),
    TileCase("pool2d avg halo", Pool2D(3, 3, 1, 1, 1, 1, PoolType.POOL_AVG, ActiMode.AC_MODE_TANH), IMAGE, (1, 2, 2, 2), (0, 1, 0, 1)),
    TileCase("batch_norm", BatchNorm(relu=True), IMAGE),
    TileCase("batch_norm channel tile", BatchNorm(relu=False), (TensorSpec((6, 4)),), (1, 2), (0, 1)),
    TileCase("flat", Flat(), IMAGE, (2, 1), (1, 0)),
    TileCase("concat", Concat(axis=1), (TensorSpec((4, 2, 4, 4)), TensorSpec((4, 3, 4, 4)))),
    TileCase("concat tile", Concat(axis=2), (TensorSpec((4, 3, 2)), TensorSpec((4, 3, 5))), (2, 3, 1), (1, 2, 0)),
    TileCase("split", Split((1, 3), axis=1), IMAGE, (2, 1, 2, 1), (0, 0, 1, 0)),
    TileCase("stack", Stack(axis=1), (TensorSpec((4, 6)),) * 3),
    TileCase("stack last", Stack(axis=2), (TensorSpec((4, 6)),) * 2, (2, 3, 1), (1, 1, 0)),
    # more parts than one launch takes (nvrtc.MAX_PARTS): two launches, the second at part 64
    TileCase("stack many", Stack(axis=1), (TensorSpec((2, 3)),) * 70),
    TileCase("embedding", Embedding(10, 6), (TensorSpec((4, 3), I64),)),
    TileCase("embedding sum tile", Embedding(10, 6, AggrMode.AGGR_MODE_SUM), (TensorSpec((4, 3), I32),), (2, 2), (1, 1)),
    TileCase("embedding avg", Embedding(10, 6, AggrMode.AGGR_MODE_AVG), (TensorSpec((4, 3), I32),)),
    TileCase("gather", Gather(1), (TensorSpec((4, 5, 6)), TensorSpec((4, 8, 6), I32))),
    TileCase("gather tile along dim", Gather(1), (TensorSpec((4, 5, 6)), TensorSpec((4, 8, 6), I64)), (2, 2, 1), (1, 1, 0)),
    TileCase("gather last dim tile", Gather(-1), (TensorSpec((4, 3, 4, 5)), TensorSpec((4, 3, 4, 7), I32)), (1, 3, 2, 1), (0, 2, 1, 0)),
    TileCase("lstm sequence tile", LSTM(4, step=1), (TensorSpec((4, 3, 5)),), (2, 2), (1, 0)),
    TileCase("lstm with state", LSTM(4), (TensorSpec((4, 5)), TensorSpec((4, 4)), TensorSpec((4, 4)))),
    TileCase("lstm state tile", LSTM(4), (TensorSpec((4, 5)), TensorSpec((4, 4)), TensorSpec((4, 4))), (2, 2), (0, 1)),
    TileCase("multihead_attention", MultiHeadAttention(8, 2), (TensorSpec((4, 4, 8)), TensorSpec((4, 6, 8)), TensorSpec((4, 6, 8)))),
    TileCase("multihead_attention tile", MultiHeadAttention(8, 2, kdim=5, vdim=3, bias=False), (TensorSpec((4, 4, 8)), TensorSpec((4, 6, 5)), TensorSpec((4, 6, 3))), (2, 2, 1), (1, 1, 0)),
    TileCase("batch_matmul", BatchMatmul(), (TensorSpec((4, 4, 3)), TensorSpec((4, 3, 6)))),
    TileCase("batch_matmul tile", BatchMatmul(), (TensorSpec((2, 3, 4, 5)), TensorSpec((2, 3, 5, 6))), (1, 3, 2, 2), (0, 1, 1, 0)),
    TileCase("softmax", Softmax(), SEQ),
    TileCase("softmax axis 1", Softmax(axis=1), SEQ, (2, 1, 3), (1, 0, 2)),
    TileCase("layer_norm", LayerNorm((-1,)), SEQ),
    TileCase("layer_norm 2 axes", LayerNorm((-2, -1), elementwise_affine=False), SEQ, (2, 1, 1), (1, 0, 0)),
    TileCase("element_binary add", ElementBinary(BinaryOp.ADD), (TensorSpec((4, 6)),) * 2),
    TileCase("element_binary subtract", ElementBinary(BinaryOp.SUBTRACT), (TensorSpec((4, 6)),) * 2),
    TileCase("element_binary multiply", ElementBinary(BinaryOp.MULTIPLY), (TensorSpec((4, 6)),) * 2, (2, 3), (1, 2)),
    TileCase("element_binary divide", ElementBinary(BinaryOp.DIVIDE), (TensorSpec((4, 6)),) * 2),
    TileCase("element_binary max", ElementBinary(BinaryOp.MAX), (TensorSpec((4, 6)),) * 2, (2, 3), (1, 2)),
    TileCase("element_binary min", ElementBinary(BinaryOp.MIN), (TensorSpec((4, 6)),) * 2),
    # broadcasting: a tile along a repeated dimension reads the small input's one row
    TileCase("element_binary multiply broadcast", ElementBinary(BinaryOp.MULTIPLY), (TensorSpec((4, 3, 1)), TensorSpec((4, 3, 2)))),
    TileCase("element_binary add both broadcast", ElementBinary(BinaryOp.ADD), (TensorSpec((4, 1, 2)), TensorSpec((4, 3, 1))), (2, 3, 1), (1, 2, 0)),
    TileCase("element_binary subtract broadcast tile", ElementBinary(BinaryOp.SUBTRACT), (TensorSpec((4, 3, 4)), TensorSpec((4, 1, 4))), (1, 1, 2), (0, 0, 1)),
    TileCase("element_binary divide broadcast", ElementBinary(BinaryOp.DIVIDE), (TensorSpec((4, 6)), TensorSpec((4, 1)))),
    TileCase("element_binary max broadcast tile", ElementBinary(BinaryOp.MAX), (TensorSpec((4, 1, 6)), TensorSpec((4, 3, 6))), (2, 3, 1), (0, 1, 0)),
    TileCase("element_binary min broadcast", ElementBinary(BinaryOp.MIN), (TensorSpec((4, 3, 1)), TensorSpec((4, 3, 5)))),
    *(
        TileCase(f"element_unary {mode.value}", ElementUnary(mode), SEQ)
        for mode in ActiMode
    ),
    # rsqrt is NaN on the normal inputs' negative half: its case draws positive ones
    *(
        TileCase(f"element_unary {function.value}", _function(function), SEQ, (2, 1, 2), (1, 0, 1))
        for function in UnaryFunction if function is not UnaryFunction.RSQRT
    ),
    TileCase("element_unary rsqrt", _function(UnaryFunction.RSQRT), (TensorSpec((4, 6)),), positive=True),
    TileCase("dropout", Dropout(0.3, seed=5), SEQ),
    TileCase("dropout tile", Dropout(0.5, seed=11), SEQ, (2, 2, 3), (1, 0, 2)),
    TileCase("mean", Mean((2,)), SEQ),
    TileCase("mean keepdims", Mean((1, 2), keepdims=True), IMAGE, (2, 1, 1, 1), (1, 0, 0, 0)),
    TileCase("reduce_sum", ReduceSum((1,)), SEQ, (2, 3), (1, 2)),
    TileCase("reduce_sum keepdims", ReduceSum((2, 3), keepdims=True), IMAGE),
    TileCase("reshape", Reshape((4, 12, 2)), SEQ, (2, 1, 1), (1, 0, 0)),
    TileCase("transpose", Transpose((0, 2, 1)), SEQ),
    TileCase("transpose 4d tile", Transpose((0, 3, 1, 2)), IMAGE, (2, 2, 1, 2), (1, 0, 0, 1)),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TileData:
    """A case's tile in float64 (the reference's precision), from float32-rounded random values."""

    sig: Signature
    region: Region
    inputs: tuple[np.ndarray, ...]
    weights: tuple[np.ndarray, ...]
    grad_outputs: tuple[np.ndarray, ...]


def _float32_values(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float32).astype(np.float64)  # exactly what the GPU will hold


def tile_data(case: TileCase, seed: int = 0) -> TileData:
    """Random whole inputs and weights, sliced to the case's tile, and an upstream gradient."""
    rng = np.random.default_rng(seed)
    sig, region = case.signature(), case.region()
    whole_inputs = []
    for spec in sig.inputs:
        if spec.dtype.is_float:
            values = rng.standard_normal(spec.shape)
            values = np.abs(values) + 0.5 if case.positive else values
            whole_inputs.append(_float32_values(values))
        else:
            high = case.op.index_limit(sig, len(whole_inputs)) or 10
            whole_inputs.append(rng.integers(0, high, spec.shape).astype(spec.dtype.value))
    whole_weights = [
        _float32_values(initialize(w, rng, np.float64) + 0.1 * rng.standard_normal(w.shape))
        for w in sig.weights
    ]
    inputs = tuple(
        np.ascontiguousarray(x[region_slices(r)])
        for x, r in zip(whole_inputs, case.op.input_regions(sig, region), strict=True)
    )
    weights = tuple(
        np.ascontiguousarray(w[region_slices(r)])
        for w, r in zip(whole_weights, case.op.weight_regions(sig, region), strict=True)
    )
    outputs = case.op.forward_tile(sig, region, inputs, weights)
    grad_outputs = tuple(_float32_values(rng.standard_normal(o.shape)) for o in outputs)
    return TileData(sig, region, inputs, weights, grad_outputs)
