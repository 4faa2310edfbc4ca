"""Embedding: shapes, SOAP dims, FLOPs, gradients, regions, a naive lookup and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.embedding import AggrMode, Embedding

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights

NONE, SUM, AVG = AggrMode.AGGR_MODE_NONE, AggrMode.AGGR_MODE_SUM, AggrMode.AGGR_MODE_AVG


def test_lookup_shapes_and_dims():
    sig = Embedding(100, 8).infer("emb", [TensorSpec((4, 5), DType.INT32)])
    assert sig.output_shape == (4, 5, 8)
    assert [(w.name, w.shape, w.init) for w in sig.weights] == [("weight", (100, 8), "normal")]
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", DimKind.ATTRIBUTE),
        ("channel", DimKind.PARAMETER),
    ]
    sig = Embedding(100, 8).infer("emb", [TensorSpec((4,), DType.INT64)])
    assert sig.output_shape == (4, 8)
    assert [d.kind for d in sig.dims] == [DimKind.SAMPLE, DimKind.PARAMETER]


@pytest.mark.parametrize("aggr", [SUM, AVG])
def test_aggregation_drops_the_bag_dim(aggr):
    sig = Embedding(100, 8, aggr).infer("emb", [TensorSpec((4, 5), DType.DT_INT64)])
    assert sig.output_shape == (4, 8)
    assert [d.kind for d in sig.dims] == [DimKind.SAMPLE, DimKind.PARAMETER]


def test_flops_and_channel_split_reads_table_columns():
    op = Embedding(100, 8, SUM)
    sig = op.infer("emb", [TensorSpec((4, 5), DType.INT32)])
    assert op.flops(sig, full_region((4, 8))) == (4 * 8 * 4, 4 * 8 * 5)
    avg = Embedding(100, 8, AVG)
    assert avg.flops(sig, full_region((4, 8))) == (4 * 8 * 5, 4 * 8 * 6)
    lookup = Embedding(100, 8)
    lookup_sig = lookup.infer("emb", [TensorSpec((4, 5), DType.INT32)])
    assert lookup.flops(lookup_sig, full_region((4, 5, 8))) == (0, 4 * 5 * 8)
    region = ((0, 2), (4, 8))
    assert op.input_regions(sig, region) == (((0, 2), (0, 5)),)
    assert op.weight_regions(sig, region) == (((0, 100), (4, 8)),)
    cost = op.tile_cost(sig, region)
    assert cost.forward_bytes_read == 4 * (2 * 5) + 4 * (100 * 4)
    assert cost.backward_bytes_written == 4 * (100 * 4)  # integer ids get no gradient


@pytest.mark.parametrize(
    "aggr, shape", [(NONE, (3,)), (NONE, (3, 4)), (SUM, (3, 4)), (AVG, (3, 4))]
)
def test_gradients(aggr, shape):
    op = Embedding(5, 3, aggr)
    sig = op.infer("emb", [TensorSpec(shape, DType.INT32)])
    rng = np.random.default_rng(1)
    inputs, weights = random_inputs(sig, rng, high=5), random_weights(sig, rng)
    assert_gradients(op, inputs, weights)


@pytest.mark.parametrize("aggr, shape", [(NONE, (4, 6)), (SUM, (4, 6)), (AVG, (4, 3))])
def test_regions_are_sufficient(aggr, shape):
    op = Embedding(7, 4, aggr)
    sig = op.infer("emb", [TensorSpec(shape, DType.INT64)])
    rng = np.random.default_rng(0)
    inputs, weights = random_inputs(sig, rng, high=7), random_weights(sig, rng)
    assert assert_regions_sufficient(op, sig, inputs, weights) > 10


def test_forward_matches_per_sample_loop():
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 9, (3, 4))
    table = rng.standard_normal((9, 5))
    for aggr in AggrMode:
        (out,) = Embedding(9, 5, aggr).forward([ids], [table])
        for n in range(3):
            rows = [table[ids[n, k]] for k in range(4)]
            if aggr is NONE:
                np.testing.assert_allclose(out[n], np.stack(rows))
            elif aggr is SUM:
                np.testing.assert_allclose(out[n], sum(rows))
            else:
                np.testing.assert_allclose(out[n], sum(rows) / 4)


def test_repeated_ids_accumulate_gradient():
    op = Embedding(3, 2)
    ids = np.array([[1, 1], [1, 0]])
    table = np.zeros((3, 2))
    outputs = op.forward([ids], [table])
    grad_in, (grad_table,) = op.backward([ids], [table], outputs, [np.ones((2, 2, 2))])
    assert grad_in == (None,)
    np.testing.assert_array_equal(grad_table, [[1, 1], [3, 3], [0, 0]])


@pytest.mark.parametrize("aggr", list(AggrMode))
def test_float32_gradients_through_c_give_add_ats_bits(aggr):
    """int32 ids and a float32 table: the C kernel adds each row in order, as numpy's add.at
    (30x slower) does, to the bit; repeated ids included."""
    rng = np.random.default_rng(2)
    op = Embedding(7, 5, aggr)
    ids = rng.integers(0, 7, (16, 3)).astype(np.int32)
    table = rng.standard_normal((7, 5)).astype(np.float32)
    (out,) = op.forward([ids], [table])
    dy = rng.standard_normal(out.shape).astype(np.float32)
    _, (got,) = op.backward([ids], [table], [out], [dy])
    _, (want,) = op.backward([ids.astype(np.int64)], [table], [out], [dy])  # numpy's add.at
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("ids", [np.array([0, 5]), np.array([-1, 2])])
def test_out_of_range_ids(ids):
    with pytest.raises(ShapeError, match=r"embedding \(5 x 2\): ids must lie in \[0, 5\)"):
        Embedding(5, 2).forward([ids], [np.zeros((5, 2))])


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (Embedding(10, 4), [TensorSpec((4, 3))], r"embedding 'emb': input must be an integer"),
        (
            Embedding(10, 4),
            [TensorSpec((4, 3, 2), DType.INT32)],
            r"embedding 'emb': input must have rank 1 or 2",
        ),
        (
            Embedding(10, 4, SUM),
            [TensorSpec((4,), DType.INT32)],
            r"embedding 'emb': aggregation 'sum' combines the ids along the last dim",
        ),
        (
            Embedding(10, 4),
            [TensorSpec((4,), DType.INT32)] * 2,
            r"embedding 'emb': expected 1 input",
        ),
        (
            Embedding(0, 4),
            [TensorSpec((4,), DType.INT32)],
            r"embedding 'emb': num_embeddings must be a positive integer, got 0",
        ),
        (
            Embedding(10, 0),
            [TensorSpec((4,), DType.INT32)],
            r"embedding 'emb': embedding_dim must be a positive integer, got 0",
        ),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=match):
        op.infer("emb", inputs)


@pytest.mark.parametrize("bad", [-1, 7])
def test_a_gradient_of_ids_outside_the_table_is_refused(bad):
    """The C gradient checks its ids before it writes: a bad id (which the forward refuses
    first in a step) gets the forward's error, not a write outside the table."""
    op = Embedding(7, 3)
    ids = np.array([[1, bad]], dtype=np.int32)
    table = np.zeros((7, 3), np.float32)
    with pytest.raises(ShapeError, match=r"ids must lie in \[0, 7\)"):
        op.backward(
            [ids], [table], [np.zeros((1, 2, 3), np.float32)], [np.ones((1, 2, 3), np.float32)]
        )
