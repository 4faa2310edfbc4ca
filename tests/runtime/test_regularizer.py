"""A dense kernel's L2 regularizer trains the same under every update path and strategy as on
one device, one device as the numpy reference, and differently from no regularizer (Legate,
2 CPUs; regularizer_script.py)."""

from __future__ import annotations

import pytest

from tests.runtime.scripts import run_legate_script

OPTIMIZERS = ["sgd", "adam"]


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script("regularizer_script.py", cpus=2, timeout=900)


@pytest.mark.legate
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_one_device_matches_the_numpy_reference_with_each_kernels_lambda(report, optimizer):
    run = report[optimizer]
    assert run["lambdas"] == {"d1.kernel": 0.3, "d1.bias": 0.0, "d2.kernel": 0.05, "d2.bias": 0.0}
    assert run["single_vs_numpy_loss"] <= 1.0
    assert run["single_vs_numpy_weights"] <= 1.0


@pytest.mark.legate
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_every_update_path_and_strategy_adds_the_penalty_once(report, optimizer):
    """Data parallelism sums the replicas' gradients and adds lambda * W once (FlexFlow adds it
    in each replica's backward: twice here), as one device does; so do the update tasks of a
    channel split and of layers on other devices, and random strategies."""
    strategies = report[optimizer]["strategies"]
    failing = {n: r for n, r in strategies.items() if r["loss"] > 1.0 or r["weights"] > 1.0}
    assert failing == {}
    # each path ran: the C++ step bodies (the plan's L2 runs), Python step bodies (flat
    # runs through cffi), launches of several steps, and update tasks per weight tile
    assert strategies["dp"]["cpp_steps"] == 8 and strategies["dp"]["flat"]
    assert strategies["dp_python_bodies"]["cpp_steps"] == 0
    assert strategies["dp_python_bodies"]["native_steps"] == 2
    assert strategies["dp_launches"]["per_launch"] == 2
    assert not strategies["channels"]["flat"] and not strategies["model"]["flat"]


@pytest.mark.legate
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_the_regularizer_changes_the_weights_and_not_the_reported_loss(report, optimizer):
    """Without regularizers the kernels train elsewhere; the first step's loss is the same,
    as the loss reported is the data loss (FlexFlow's metrics add no penalty either)."""
    run = report[optimizer]
    assert run["unregularized_first_loss"] <= 1.0
    assert min(run["unregularized_kernels"].values()) > 100.0


@pytest.mark.legate
def test_a_checkpoint_records_the_lambdas_and_a_model_with_others_is_warned(report):
    notes = report["checkpoint"]
    assert notes["same"] == []
    (note,) = notes["unregularized"]
    assert "was trained with L2 lambdas {'d1.kernel': 0.3, 'd2.kernel': 0.05}" in note
    assert "this model has none" in note
