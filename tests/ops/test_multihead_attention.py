"""Multi-head attention: shapes, dims, FLOPs, gradients, regions, a naive loop and shape errors."""

import math

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.multihead_attention import MultiHeadAttention

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def _specs(n, lq, lk, eq, ek, ev):
    return [TensorSpec((n, lq, eq)), TensorSpec((n, lk, ek)), TensorSpec((n, lk, ev))]


def test_shapes_weights_and_dims():
    sig = MultiHeadAttention(8, 2, kdim=5, vdim=3).infer("attn", _specs(4, 6, 7, 8, 5, 3))
    assert sig.output_shape == (4, 6, 8)
    assert [(w.name, w.shape) for w in sig.weights] == [
        ("wq", (8, 8)),
        ("wk", (8, 5)),
        ("wv", (8, 3)),
        ("wo", (8, 8)),
        ("bq", (8,)),
        ("bk", (8,)),
        ("bv", (8,)),
        ("bo", (8,)),
    ]
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", DimKind.ATTRIBUTE),
        ("channel", None),
    ]
    no_bias = MultiHeadAttention(8, 2, bias=False).infer("attn", _specs(4, 6, 7, 8, 8, 8))
    assert [w.name for w in no_bias.weights] == ["wq", "wk", "wv", "wo"]


def test_flops_and_regions_of_a_query_split():
    op = MultiHeadAttention(4, 2, kdim=3, vdim=2)
    sig = op.infer("attn", _specs(2, 6, 5, 4, 3, 2))
    n, lq, lk, d, heads = 2, 6, 5, 4, 2
    projections = 2 * n * d * (lq * 4 + lk * 3 + lk * 2 + lq * d)
    attention = 2 * 2 * n * lq * lk * d
    softmax = 5 * n * heads * lq * lk
    fwd, bwd = op.flops(sig, full_region((n, lq, d)))
    assert fwd == projections + attention + softmax
    assert bwd == 2 * (projections + attention) + softmax
    region = ((1, 2), (3, 6), (0, 4))
    assert op.input_regions(sig, region) == (
        ((1, 2), (3, 6), (0, 4)),  # the tile's queries
        ((1, 2), (0, 5), (0, 3)),  # all keys of its samples
        ((1, 2), (0, 5), (0, 2)),
    )


@pytest.mark.parametrize(
    "op, specs",
    [
        (MultiHeadAttention(4, 2), _specs(2, 3, 3, 4, 4, 4)),
        (MultiHeadAttention(4, 1, kdim=3, vdim=2), _specs(2, 2, 3, 4, 3, 2)),
        (MultiHeadAttention(6, 3, bias=False), _specs(1, 3, 2, 6, 6, 6)),
    ],
)
def test_gradients(op, specs):
    sig = op.infer("attn", specs)
    rng = np.random.default_rng(1)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    assert_gradients(op, inputs, weights)


def test_regions_are_sufficient():
    op = MultiHeadAttention(4, 2, kdim=3)
    sig = op.infer("attn", _specs(4, 6, 5, 4, 3, 4))
    rng = np.random.default_rng(0)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    assert assert_regions_sufficient(op, sig, inputs, weights) > 10


def _naive_attention(query, key, value, wq, wk, wv, wo, bq, bk, bv, bo, heads):
    """Per sample, head and query position, with an explicit softmax over the keys."""
    embed = wq.shape[0]
    d = embed // heads
    out = np.zeros(query.shape[:2] + (embed,))
    for n in range(query.shape[0]):
        q, k, v = query[n] @ wq.T + bq, key[n] @ wk.T + bk, value[n] @ wv.T + bv
        context = np.zeros((query.shape[1], embed))
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            for i in range(query.shape[1]):
                scores = [q[i, cols] @ k[j, cols] / math.sqrt(d) for j in range(key.shape[1])]
                weights = np.exp(np.array(scores) - max(scores))
                weights /= weights.sum()
                context[i, cols] = sum(w * v[j, cols] for j, w in enumerate(weights))
        out[n] = context @ wo.T + bo
    return out


def test_forward_matches_naive_loop():
    op = MultiHeadAttention(6, 3, kdim=4, vdim=5)
    sig = op.infer("attn", _specs(2, 3, 4, 6, 4, 5))
    rng = np.random.default_rng(2)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    (out,) = op.forward(inputs, weights)
    np.testing.assert_allclose(out, _naive_attention(*inputs, *weights, heads=3), rtol=1e-12)


PREFIX = r"multihead_attention 'attn': "
GOOD = _specs(2, 3, 3, 4, 4, 4)


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (MultiHeadAttention(4, 2), GOOD[:2], r"expected 3 input"),
        (MultiHeadAttention(0, 2), GOOD, r"embed_dim must be a positive integer, got 0"),
        (MultiHeadAttention(4, 0), GOOD, r"num_heads must be a positive integer, got 0"),
        (MultiHeadAttention(4, 2, kdim=-1), GOOD, r"kdim must be an integer >= 0, got -1"),
        (MultiHeadAttention(6, 4), _specs(2, 3, 3, 6, 6, 6), r"num_heads 4 does not divide"),
        (
            MultiHeadAttention(4, 2, dropout=0.1),
            GOOD,
            r"dropout on the attention probabilities is not supported.*FFModel.dropout",
        ),
        (
            MultiHeadAttention(4, 2),
            [TensorSpec((2, 3, 4), DType.INT32)] + GOOD[1:],
            r"query must be float32",
        ),
        (MultiHeadAttention(4, 2), [TensorSpec((2, 4))] + GOOD[1:], r"query must have rank 3"),
        (
            MultiHeadAttention(4, 2),
            GOOD[:2] + [TensorSpec((2, 5, 4))],
            r"query .* must share the sample dim, and key and value the length dim",
        ),
        (
            MultiHeadAttention(4, 2),
            [TensorSpec((3, 3, 4))] + GOOD[1:],
            r"query \(3, 3, 4\), key .* must share the sample dim",
        ),
        (MultiHeadAttention(4, 2), _specs(2, 3, 3, 5, 4, 4), r"query must have 4 features"),
        (MultiHeadAttention(4, 2), _specs(2, 3, 3, 4, 3, 4), r"key must have 4 features"),
        (MultiHeadAttention(4, 2, vdim=3), GOOD, r"value must have 3 features"),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=PREFIX + match):
        op.infer("attn", inputs)
