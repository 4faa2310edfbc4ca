"""After a search, compile times the strategies the simulation cannot tell apart and keeps the
fastest measured (flexflow.planning, flexflow.runtime.trials); the run's executor starts from
the same weights whatever was timed (Legate, 2 CPUs)."""

from __future__ import annotations

import math

import pytest

from tests.runtime.scripts import run_legate_script


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script("trials_script.py")


@pytest.mark.legate
def test_each_candidate_gets_a_time_per_iteration(report):
    assert len(report["timed_s"]) == 2
    assert all(0 < t < 1 and math.isfinite(t) for t in report["timed_s"])


@pytest.mark.legate
def test_timing_leaves_the_next_executor_as_it_would_have_been(report):
    assert report["after"] == report["before"]


@pytest.mark.legate
def test_the_synthetic_batch_has_the_models_shapes_and_valid_labels(report):
    assert report["batch"] == {"image": ["float32", [16, 1, 28, 28]]}
    assert report["target"][1] == [16] and report["target"][0].startswith("int")
    low, high = report["labels"]
    assert 0 <= low < high < 10  # spread over LeNet's ten classes
    dtype, first, last, distinct = report["ids"]  # RNNLM's token ids, 4 x 5 of 30
    assert dtype == "int32" and 0 <= first and last < 30 and distinct > 5
    assert report["word_labels"][0] == [4, 5] and report["word_labels"][1] < 30
    shape, sums = report["one_hot"]
    assert shape == [16, 10] and sums == [1.0] * 16


@pytest.mark.legate
def test_compile_keeps_the_fastest_measured_candidate(report):
    trials = report["trials"]
    assert len(trials) >= 2  # every distinct candidate, with the margin lifted
    assert all(measured > 0 for _, _, measured in trials)
    assert report["kept_is_fastest"]
    assert "close candidates" in report["source"] and "kept" in report["source"]
    # the run's executor starts from the seed's weights, as the untimed executors did
    assert report["trained_loss"] == pytest.approx(report["before"][0], rel=1e-5)
