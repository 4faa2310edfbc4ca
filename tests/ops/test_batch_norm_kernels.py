"""Batch norm's C tile kernels against its numpy reference on the same float32 tiles."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops import TensorSpec
from flexflow.ops.batch_norm import BatchNorm

shapes = st.one_of(
    st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4)),
    st.tuples(st.integers(1, 6), st.integers(1, 5)),
)


def _close(a, b, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol, atol)


@settings(max_examples=60, deadline=None)
@given(shapes, st.booleans(), st.integers(0, 2**16))
def test_c_tiles_compute_what_the_numpy_reference_does(shape, relu, seed):
    rng = np.random.default_rng(seed)
    op = BatchNorm(relu)
    sig = op.infer("bn", [TensorSpec(shape)])
    # a channel slice of a wider tensor: the kernels must not assume contiguous arguments
    wide = rng.standard_normal((shape[0], shape[1] + 2, *shape[2:])).astype(np.float32)
    x = wide[:, 1 : 1 + shape[1]]
    weights = [rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2)]
    stats = op.statistics_forward(x)
    assert stats.dtype == np.float64
    _close(stats, op.numpy_statistics_forward(x), rtol=1e-12, atol=1e-9)
    (y,) = op.forward_tile_with_statistics(sig, x, weights, stats)
    assert y.dtype == np.float32
    _close(y, op.numpy_forward_tile_with_statistics(sig, x, weights, stats)[0])
    dy = rng.standard_normal(shape).astype(np.float32)
    grad_stats = op.statistics_backward(sig, x, weights, y, dy, stats)
    ref = op.numpy_statistics_backward(sig, x, weights, y, dy, stats)
    _close(grad_stats, ref, rtol=1e-12, atol=1e-9)
    (dx,), grads = op.backward_tile_with_statistics(sig, x, weights, y, dy, stats, grad_stats)
    (ref_dx,), ref_grads = op.numpy_backward_tile_with_statistics(
        sig, x, weights, y, dy, stats, grad_stats
    )
    assert dx.dtype == np.float32 and all(g.dtype == np.float32 for g in grads)
    _close(dx, ref_dx)
    for g, ref_g in zip(grads, ref_grads, strict=True):
        _close(g, ref_g)


def _training_tiles(points: int, shape, relu: bool, seed: int):
    """A batch split into `points` sample tiles, the op, its signature and weights."""
    rng = np.random.default_rng(seed)
    op = BatchNorm(relu)
    sig = op.infer("bn", [TensorSpec(shape)])
    x = (1.5 + rng.standard_normal(shape)).astype(np.float32)
    tiles = np.array_split(x, points)
    weights = [rng.standard_normal(shape[1]).astype(np.float32) for _ in range(2)]
    running = np.stack([rng.standard_normal(shape[1]), rng.random(shape[1]) + 0.5])
    dys = [rng.standard_normal(t.shape).astype(np.float32) for t in tiles]
    return op, sig, tiles, weights, running, dys


def _by_kernels(op, sig, tiles, weights, running, dys):
    """Point by point as the kernels ran before one call did it all: the statistics summed in
    point order, the running update in numpy, then the forward and backward kernels."""
    stats = op.statistics_forward(tiles[0]).copy()
    for tile in tiles[1:]:
        stats += op.statistics_forward(tile)
    outs = [op.forward_tile_with_statistics(sig, t, weights, stats)[0] for t in tiles]
    grad_stats = op.statistics_backward(sig, tiles[0], weights, outs[0], dys[0], stats).copy()
    for t, y, dy in zip(tiles[1:], outs[1:], dys[1:], strict=True):
        grad_stats += op.statistics_backward(sig, t, weights, y, dy, stats)
    grads = [
        op.backward_tile_with_statistics(sig, t, weights, y, dy, stats, grad_stats)
        for t, y, dy in zip(tiles, outs, dys, strict=True)
    ]
    return stats, op.running_update(sig, stats, running), outs, grads


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), shapes, st.booleans(), st.integers(0, 2**16))
def test_a_training_pass_in_one_call_exchanges_and_computes_the_same_bits(
    points, shape, relu, seed
):
    import threading

    from flexflow.runtime.statistics_exchange import StatisticsExchange

    shape = (shape[0] * points, *shape[1:])  # a tile per point
    op, sig, tiles, weights, running, dys = _training_tiles(points, shape, relu, seed)
    stats, new_running, outs, grads = _by_kernels(op, sig, tiles, weights, running, dys)
    exchange = StatisticsExchange(points) if points > 1 else None
    results: list = [None] * points

    def point(p: int) -> None:
        into = np.full_like(running, np.nan)
        pointer = None if exchange is None else exchange.pointer
        (y,), got_stats = op.train_forward_tile(sig, tiles[p], weights, running, into, pointer, p)
        backward = op.train_backward_tile(sig, tiles[p], weights, y, dys[p], got_stats, pointer, p)
        results[p] = (got_stats, into, y, backward)

    threads = [threading.Thread(target=point, args=(p,)) for p in range(points)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for p, (got_stats, into, y, ((dx,), (dgamma, dbeta))) in enumerate(results):
        np.testing.assert_array_equal(got_stats, stats)
        np.testing.assert_array_equal(into, new_running)
        np.testing.assert_array_equal(y, outs[p])
        (want_dx,), (want_dgamma, want_dbeta) = grads[p]
        np.testing.assert_array_equal(dx, want_dx)
        np.testing.assert_array_equal(dgamma, want_dgamma)
        np.testing.assert_array_equal(dbeta, want_dbeta)


def test_a_failed_point_releases_a_training_pass_waiting_for_it():
    import threading

    import pytest

    from flexflow.errors import StrategyError
    from flexflow.runtime.statistics_exchange import StatisticsExchange

    op, sig, tiles, weights, running, _ = _training_tiles(2, (4, 3, 2, 2), True, 0)
    exchange = StatisticsExchange(2)
    errors: list = []

    def waiting() -> None:
        try:
            op.train_forward_tile(sig, tiles[0], weights, running, running.copy(), exchange.pointer)
        except StrategyError as error:
            errors.append(error)

    thread = threading.Thread(target=waiting)
    thread.start()
    exchange.abort()  # what the other point's task body does when its kernels raise
    thread.join(timeout=30)
    assert not thread.is_alive() and len(errors) == 1 and "abandoned" in str(errors[0])
    with pytest.raises(StrategyError, match="abandoned"):  # and every exchange after it
        exchange.all_sum(1, np.ones(2))
