"""Every op's tiles assemble into its whole output: forward_tile on the slices its regions name.

This is what a runtime running one task per SOAP tile relies on (paper §4): for every tiling of
every op, each task computes its tile from exactly its input and weight regions (halos included,
padding only at the tensor's borders, dropout masks by global index), and the tiles equal the
single-device forward pass.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from flexflow.ops import ActiMode, DType, TensorSpec
from flexflow.ops.base import region_slices
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
from flexflow.ops.layer_norm import LayerNorm
from flexflow.ops.lstm import LSTM
from flexflow.ops.mean import Mean
from flexflow.ops.multihead_attention import MultiHeadAttention
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.reshape import Reshape
from flexflow.ops.shapes import tile_region
from flexflow.ops.softmax import Softmax
from flexflow.ops.split import Split
from flexflow.ops.stack import Stack
from flexflow.ops.transpose import Transpose

from .opcheck import random_inputs, random_weights, tilings

F = DType.FLOAT32
IMAGE = [TensorSpec((4, 4, 8, 8))]
CASES = [
    (Dense(6, ActiMode.AC_MODE_RELU), [TensorSpec((4, 5, 3))]),
    (Conv2D(6, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU), IMAGE),
    (Conv2D(4, 3, 3, 2, 2, 1, 1), IMAGE),
    (Conv2D(4, 5, 5, 1, 1, 2, 2, groups=2), IMAGE),
    (Conv2D(12, 3, 3, 1, 1, 1, 1, groups=3), [TensorSpec((2, 6, 5, 5))]),  # 4 per group
    (Conv2D(12, 1, 1, 1, 1, 0, 0, groups=6), [TensorSpec((2, 6, 5, 5))]),  # depthwise x2
    (Conv2D(6, 3, 3, 1, 1, 0, 0, use_bias=False), IMAGE),
    (Pool2D(3, 3, 2, 2, 1, 1, PoolType.POOL_MAX), IMAGE),
    (Pool2D(2, 2, 2, 2, 0, 0, PoolType.POOL_AVG), IMAGE),
    (Pool2D(3, 3, 1, 1, 1, 1, PoolType.POOL_AVG), IMAGE),
    (BatchNorm(relu=True), IMAGE),
    (Flat(), IMAGE),
    (Concat(axis=1), [TensorSpec((4, 2, 4, 4)), TensorSpec((4, 3, 4, 4))]),
    (Split((1, 3), axis=1), IMAGE),
    (Stack(axis=1), [TensorSpec((4, 6)), TensorSpec((4, 6)), TensorSpec((4, 6))]),
    (Embedding(10, 6), [TensorSpec((4, 3), DType.INT32)]),
    (Embedding(10, 6, AggrMode.AGGR_MODE_SUM), [TensorSpec((4, 3), DType.INT32)]),
    (LSTM(4, step=1), [TensorSpec((4, 3, 5))]),
    (LSTM(4), [TensorSpec((4, 5)), TensorSpec((4, 4)), TensorSpec((4, 4))]),
    (
        MultiHeadAttention(8, 2),
        [TensorSpec((4, 4, 8)), TensorSpec((4, 6, 8)), TensorSpec((4, 6, 8))],
    ),
    (BatchMatmul(), [TensorSpec((4, 4, 3)), TensorSpec((4, 3, 6))]),
    (Softmax(), [TensorSpec((4, 4, 6))]),
    (LayerNorm((-1,)), [TensorSpec((4, 4, 6))]),
    (ElementBinary(BinaryOp.MULTIPLY), [TensorSpec((4, 6)), TensorSpec((4, 6))]),
    (ElementBinary(BinaryOp.MULTIPLY), [TensorSpec((4, 3, 1)), TensorSpec((4, 3, 2))]),
    (ElementBinary(BinaryOp.MAX), [TensorSpec((4, 1, 2)), TensorSpec((4, 3, 1))]),
    (ElementBinary(BinaryOp.DIVIDE), [TensorSpec((4, 6)), TensorSpec((4, 1))]),
    (ElementUnary(ActiMode.AC_MODE_GELU), [TensorSpec((4, 4, 6))]),
    (Dropout(0.3, seed=5), [TensorSpec((4, 4, 6))]),
    (Mean((2,)), [TensorSpec((4, 4, 6))]),
    (Reshape((4, 12, 2)), [TensorSpec((4, 4, 6))]),
    (Transpose((0, 2, 1)), [TensorSpec((4, 4, 6))]),
]


@pytest.mark.parametrize("op, inputs", CASES, ids=lambda v: v.kind if hasattr(v, "kind") else "")
def test_tiles_assemble_into_the_whole_output(op, inputs):
    sig = op.infer("layer", inputs)
    rng = np.random.default_rng(0)
    xs, ws = random_inputs(sig, rng, high=10), random_weights(sig, rng)
    whole = op.forward(xs, ws)
    checked = 0
    for degrees in tilings(sig, max_tasks=8, skip=op.statistics_dims):
        for coords in itertools.product(*(range(d) for d in degrees)):
            region = tile_region(sig.output_shape, degrees, coords)
            ins = [
                x[region_slices(r)] for x, r in zip(xs, op.input_regions(sig, region), strict=True)
            ]
            wts = [
                w[region_slices(r)] for w, r in zip(ws, op.weight_regions(sig, region), strict=True)
            ]
            tiles = op.forward_tile(sig, region, ins, wts)
            for tile, out, out_region in zip(
                tiles, whole, op.output_regions(sig, region), strict=True
            ):
                np.testing.assert_allclose(
                    tile,
                    out[region_slices(out_region)],
                    rtol=1e-10,
                    atol=1e-12,
                    err_msg=f"{op.kind}: tile {region} of degrees {degrees}",
                )
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("op, inputs", CASES, ids=lambda v: v.kind if hasattr(v, "kind") else "")
def test_tile_gradients_sum_to_the_whole_gradients(op, inputs):
    """Each task's input and weight gradients, added into their regions, give the full backward."""
    sig = op.infer("layer", inputs)
    rng = np.random.default_rng(1)
    xs, ws = random_inputs(sig, rng, high=10), random_weights(sig, rng)
    outs = op.forward(xs, ws)
    upstream = [rng.standard_normal(o.shape) for o in outs]
    grad_xs, grad_ws = op.backward(xs, ws, outs, upstream)
    checked = 0
    for degrees in tilings(sig, max_tasks=8, skip=op.statistics_dims):
        sum_x = [None if g is None else np.zeros_like(g) for g in grad_xs]
        sum_w = [np.zeros_like(g) for g in grad_ws]
        for coords in itertools.product(*(range(d) for d in degrees)):
            region = tile_region(sig.output_shape, degrees, coords)
            in_regions = op.input_regions(sig, region)
            w_regions = op.weight_regions(sig, region)
            out_regions = op.output_regions(sig, region)
            ins = [x[region_slices(r)] for x, r in zip(xs, in_regions, strict=True)]
            wts = [w[region_slices(r)] for w, r in zip(ws, w_regions, strict=True)]
            tile_outs = [o[region_slices(r)] for o, r in zip(outs, out_regions, strict=True)]
            tile_up = [u[region_slices(r)] for u, r in zip(upstream, out_regions, strict=True)]
            gx, gw = op.backward_tile(sig, region, ins, wts, tile_outs, tile_up)
            for total, grad, r in zip(sum_x, gx, in_regions, strict=True):
                if total is not None:
                    total[region_slices(r)] += grad
            for total, grad, r in zip(sum_w, gw, w_regions, strict=True):
                total[region_slices(r)] += grad
        for label, totals, wholes in (("input", sum_x, grad_xs), ("weight", sum_w, grad_ws)):
            for i, (total, whole) in enumerate(zip(totals, wholes, strict=True)):
                if whole is None:
                    continue
                np.testing.assert_allclose(
                    total,
                    whole,
                    rtol=1e-9,
                    atol=1e-11,
                    err_msg=f"{op.kind}: {label} {i} gradient, degrees {degrees}",
                )
        checked += 1
    assert checked > 0
