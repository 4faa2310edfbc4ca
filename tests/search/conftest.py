"""Fixtures of the search tests."""

from __future__ import annotations

import pytest

from flexflow.search.evaluator import FullEvaluator


class Counter:
    """How many strategies full simulation evaluated (`FullEvaluator`) since the last `take`."""

    def __init__(self) -> None:
        self.count = 0

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


@pytest.fixture
def full_simulations(monkeypatch) -> Counter:
    """Counts `FullEvaluator`'s simulations in this process: a search asked for full
    simulation that quietly ran delta simulation would make the same chain, so tests
    comparing the two check that the full one really simulated every proposal whole."""
    counter = Counter()
    simulate = FullEvaluator._simulate

    def counted(self, strategy):
        counter.count += 1
        return simulate(self, strategy)

    monkeypatch.setattr(FullEvaluator, "_simulate", counted)
    return counter
