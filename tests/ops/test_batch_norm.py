"""BatchNorm: shapes, dims, FLOPs, gradients, regions, a per-channel reference and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.batch_norm import BatchNorm

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def naive_batch_norm(x, gamma, beta, eps, relu):
    """Channel by channel: mean and biased variance over every other axis."""
    y = np.empty_like(x)
    for c in range(x.shape[1]):
        values = x[:, c]
        mean = values.sum() / values.size
        var = ((values - mean) ** 2).sum() / values.size
        y[:, c] = gamma[c] * (values - mean) / np.sqrt(var + eps) + beta[c]
    return np.maximum(y, 0) if relu else y


def test_registered():
    assert OP_KINDS["batch_norm"] is BatchNorm


def test_shapes_and_dims():
    sig = BatchNorm().infer("bn1", [TensorSpec((4, 3, 8, 8))])
    assert sig.output_shape == (4, 3, 8, 8)
    assert [(w.name, w.shape, w.init) for w in sig.weights] == [
        ("gamma", (3,), "ones"),
        ("beta", (3,), "zeros"),
    ]
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.PARAMETER),
        ("height", None),
        ("width", None),
    ]


def test_rank_2_input():
    sig = BatchNorm(relu=False).infer("bn1", [TensorSpec((4, 5))])
    assert sig.output_shape == (4, 5)
    assert [d.kind for d in sig.dims] == [DimKind.SAMPLE, DimKind.PARAMETER]


def test_flops_and_regions_of_a_sample_split():
    op = BatchNorm()
    sig = op.infer("bn1", [TensorSpec((2, 3, 4, 4))])
    elements = 2 * 3 * 4 * 4
    assert op.flops(sig, full_region(sig.output_shape)) == (8 * elements, 12 * elements)
    no_relu = BatchNorm(relu=False)
    assert no_relu.flops(sig, full_region(sig.output_shape)) == (7 * elements, 11 * elements)
    # a sample tile reads only its own slice; the batch statistics come from an all-reduce of
    # a sum and a sum of squares per channel of the tile
    tile = ((0, 1), (1, 3), (0, 4), (0, 4))
    assert op.statistics_dims == ("sample",)
    assert op.input_regions(sig, tile) == (((0, 1), (1, 3), (0, 4), (0, 4)),)
    assert op.weight_regions(sig, tile) == (((1, 3),), ((1, 3),))
    assert op.statistics_elements(sig, tile) == 4


def test_a_sample_split_needs_the_other_tiles_statistics():
    """Why the all-reduce exists: normalizing one sample tile alone gives other numbers."""
    op = BatchNorm(relu=False)
    sig = op.infer("bn1", [TensorSpec((4, 2, 3, 3))])
    rng = np.random.default_rng(0)
    (x,), weights = random_inputs(sig, rng), random_weights(sig, rng)
    (whole,) = op.forward([x], weights)
    (alone,) = op.forward([x[:2]], weights)
    assert not np.allclose(whole[:2], alone)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [True, False])
def test_a_tile_alone_normalizes_with_its_own_statistics(dtype, relu):
    """`forward_tile` and `backward_tile` (what a fused task runs where the tile holds every
    sample, and what the profiler times for any tile) compute the tile's own statistics over
    its own elements per channel: a sample tile gives the op run on that tile alone, the C
    kernels (float32) as the numpy reference."""
    op = BatchNorm(relu=relu)
    sig = op.infer("bn1", [TensorSpec((6, 3, 4, 4))])
    rng = np.random.default_rng(4)
    x = (1.5 + 2.0 * rng.standard_normal((6, 3, 4, 4))).astype(dtype)
    weights = [w.astype(dtype) for w in random_weights(sig, rng)]
    tile = ((0, 2), (0, 3), (0, 4), (0, 4))  # two of the six samples
    part = x[:2]
    (got,), stats = op.forward_tile_saving(sig, tile, [part], weights)
    (want,) = op.forward([part.astype(np.float64)], weights)
    tol = 2e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    dy = rng.standard_normal(got.shape).astype(dtype)
    (dx,), grads = op.backward_tile(sig, tile, [part], weights, [got], [dy])
    (want_dx,), want_grads = op.backward([part.astype(np.float64)], weights, [want], [dy])
    np.testing.assert_allclose(dx, want_dx, rtol=10 * tol, atol=10 * tol)
    for g, w in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(g, w, rtol=10 * tol, atol=10 * tol)
    # the forward's statistics, reused by a backward in the same task, give the same bits
    (again,), _ = op.backward_tile_into(
        sig, tile, [part], weights, [got], [dy], True, (), saved=stats
    )
    np.testing.assert_array_equal(again, dx)


def test_normalizes_each_channel():
    x = np.random.default_rng(5).standard_normal((8, 3, 4, 4)) * 3 + 2
    (y,) = BatchNorm(relu=False, eps=0.0).forward([x], [np.ones(3), np.zeros(3)])
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(0, 2, 3)), 1, rtol=1e-12)


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("shape", [(3, 2, 3, 2), (4, 3), (1, 2, 2, 3)])
def test_forward_matches_per_channel_reference(shape, relu):
    op = BatchNorm(relu, eps=1e-3)
    sig = op.infer("bn1", [TensorSpec(shape)])
    rng = np.random.default_rng(6)
    (x,), (gamma, beta) = random_inputs(sig, rng), random_weights(sig, rng)
    np.testing.assert_allclose(
        op.forward([x], [gamma, beta])[0],
        naive_batch_norm(x, gamma, beta, 1e-3, relu),
        rtol=1e-12,
        atol=1e-12,
    )


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("shape", [(3, 2, 3, 2), (5, 3), (1, 2, 2, 3)])
def test_gradients(shape, relu):
    op = BatchNorm(relu)
    sig = op.infer("bn1", [TensorSpec(shape)])
    rng = np.random.default_rng(7)
    assert_gradients(op, random_inputs(sig, rng), random_weights(sig, rng))


@pytest.mark.parametrize("shape", [(4, 6, 3, 3), (8, 4)])
def test_regions_are_sufficient(shape):
    op = BatchNorm()
    sig = op.infer("bn1", [TensorSpec(shape)])
    rng = np.random.default_rng(0)
    # only channel splits are checked: sample splits go through the statistics all-reduce
    assert (
        assert_regions_sufficient(op, sig, random_inputs(sig, rng), random_weights(sig, rng)) >= 6
    )


@pytest.mark.parametrize(
    "op, inputs, match",
    [
        (
            BatchNorm(),
            [TensorSpec((4, 3, 8))],
            r"batch_norm 'bn1': input must have rank 4 \(sample, channel, height, width\) "
            r"or rank 2 "
            r"\(sample, channel\), got shape \(4, 3, 8\)",
        ),
        (
            BatchNorm(),
            [TensorSpec((4, 3), DType.INT32)],
            r"batch_norm 'bn1': input must be float32",
        ),
        (BatchNorm(), [TensorSpec((4, 3))] * 2, r"batch_norm 'bn1': expected 1 input"),
        (
            BatchNorm(eps=0.0),
            [TensorSpec((4, 3))],
            r"batch_norm 'bn1': eps must be a positive finite number, got 0.0",
        ),
    ],
)
def test_shape_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=match):
        op.infer("bn1", inputs)


@pytest.mark.parametrize("shape", [(8, 3, 4, 4), (8, 5)])
@pytest.mark.parametrize("relu", [True, False])
def test_sample_tiles_with_shared_statistics_equal_the_whole_op(shape, relu):
    """Tiles that add their partial sums (as the runtime's reductions do) reproduce the batch."""
    op = BatchNorm(relu)
    sig = op.infer("bn1", [TensorSpec(shape)])
    rng = np.random.default_rng(3)
    (x,), weights = random_inputs(sig, rng), random_weights(sig, rng)
    (y,) = op.forward([x], weights)
    dy = rng.standard_normal(y.shape)
    (dx_whole,), grads_whole = op.backward([x], weights, [y], [dy])
    for parts in (1, 2, 4):
        tiles = [slice(k * shape[0] // parts, (k + 1) * shape[0] // parts) for k in range(parts)]
        stats = sum(op.statistics_forward(x[t]) for t in tiles)
        ys = [op.forward_tile_with_statistics(sig, x[t], weights, stats)[0] for t in tiles]
        np.testing.assert_allclose(np.concatenate(ys), y, rtol=1e-9, atol=1e-12)
        grad_stats = sum(
            op.statistics_backward(sig, x[t], weights, y[t], dy[t], stats) for t in tiles
        )
        results = [
            op.backward_tile_with_statistics(sig, x[t], weights, y[t], dy[t], stats, grad_stats)
            for t in tiles
        ]
        dx = np.concatenate([r[0][0] for r in results])
        np.testing.assert_allclose(dx, dx_whole, rtol=1e-8, atol=1e-10)
        for i, whole in enumerate(grads_whole):
            np.testing.assert_allclose(sum(r[1][i] for r in results), whole, rtol=1e-9, atol=1e-12)


def test_running_statistics_follow_pytorchs_rule_and_feed_evaluation():
    op = BatchNorm(relu=False)
    rng = np.random.default_rng(3)
    x = (2.0 + 3.0 * rng.standard_normal((5, 2, 3, 3))).astype(np.float64)
    sig = op.infer("bn", [TensorSpec(x.shape)])
    running = np.stack([np.zeros(2), np.ones(2)])
    updated = op.running_update(sig, op.statistics_forward(x), running)
    axes = (0, 2, 3)
    np.testing.assert_allclose(updated[0], 0.1 * x.mean(axis=axes))
    np.testing.assert_allclose(updated[1], 0.9 + 0.1 * x.var(axis=axes, ddof=1))  # unbiased
    # sums rebuilt from (mean, variance) give back that mean and (biased) variance
    stats = op.statistics_from_running(sig, np.stack([x.mean(axis=axes), x.var(axis=axes)]))
    np.testing.assert_allclose(stats, op.statistics_forward(x))
