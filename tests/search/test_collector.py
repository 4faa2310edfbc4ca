"""The collector's thresholds are raised only while a search runs."""

from __future__ import annotations

import gc

import pytest

from flexflow.search.collector import SEARCH_THRESHOLDS, fewer_collections


def test_thresholds_are_raised_inside_and_restored_after_also_when_nested_or_raising():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with fewer_collections():
            assert gc.get_threshold() == SEARCH_THRESHOLDS
            with fewer_collections():
                assert gc.get_threshold() == SEARCH_THRESHOLDS
            assert gc.get_threshold() == SEARCH_THRESHOLDS
        assert gc.get_threshold() == (700, 10, 10)
        with pytest.raises(ValueError), fewer_collections():
            raise ValueError("a search that fails")
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(100_000, 5, 50)  # a process that asked for more keeps it
        with fewer_collections():
            assert gc.get_threshold() == (100_000, 20, 50)
    finally:
        gc.set_threshold(*before)


def test_a_search_function_runs_under_the_raised_thresholds(monkeypatch):
    from flexflow.search import local

    seen = []

    def scanner(*args, **kwargs):
        seen.append(gc.get_threshold())
        raise RuntimeError("stop here")

    monkeypatch.setattr(local, "make_scanner", scanner)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with pytest.raises(RuntimeError):
            local.improving_neighbours(None, (), None)
        assert seen == [SEARCH_THRESHOLDS]
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
