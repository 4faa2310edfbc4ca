"""The in-memory all-reduce between a concurrent launch's points (flexflow.runtime.concurrent):
every point gets the same sum, taken in point order, round after round, and a failed point
releases the others instead of leaving them waiting."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from flexflow.errors import StrategyError
from flexflow.runtime.statistics_exchange import StatisticsExchange


def _run_points(points: int, body) -> list:
    """`body(point)` on `points` threads at once; their results (or exceptions), by point."""
    results: list = [None] * points

    def run(point: int) -> None:
        try:
            results[point] = body(point)
        except Exception as error:  # noqa: BLE001 (returned to the test)
            results[point] = error

    threads = [threading.Thread(target=run, args=(p,)) for p in range(points)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a point is still waiting"
    return results


@pytest.mark.parametrize("points", [2, 3, 4])
def test_every_point_gets_the_sum_in_point_order_round_after_round(points):
    exchange = StatisticsExchange(points)
    rng = np.random.default_rng(points)
    rounds = [rng.standard_normal((points, 2, 5)) * 10.0 ** rng.integers(-8, 8) for _ in range(6)]

    def body(point: int) -> list:
        return [exchange.all_sum(point, values[point].copy()) for values in rounds]

    results = _run_points(points, body)
    for r, values in enumerate(rounds):
        want = values[0].copy()
        for other in values[1:]:
            want += other
        for point in range(points):
            assert np.array_equal(results[point][r], want)  # the same bits everywhere


def test_a_failed_point_releases_the_others():
    exchange = StatisticsExchange(3)

    def body(point: int):
        if point == 2:
            exchange.abort()  # what a task body does when its kernels raise
            return "aborted"
        return exchange.all_sum(point, np.ones(2))

    results = _run_points(3, body)
    assert results[2] == "aborted"
    for error in results[:2]:
        assert isinstance(error, StrategyError) and "another point" in str(error)


@pytest.mark.parametrize("points", [0, 257])
def test_an_exchange_of_no_points_or_too_many_is_refused_by_name(points):
    with pytest.raises(StrategyError, match=f"has {points} points; it takes 1 to 256"):
        StatisticsExchange(points)
