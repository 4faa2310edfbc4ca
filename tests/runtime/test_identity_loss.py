"""The identity loss (FlexFlow's LOSS_IDENTITY): the model's output is its loss; values by hand,
gradients against central differences, tiles adding up to the whole, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.core import LossType
from flexflow.errors import FlexFlowError, ShapeError
from flexflow.runtime.loss import (
    LOSS_IDS,
    check_target,
    check_targets,
    identity,
    loss_name,
    loss_tile,
    metric_names,
)
from tests.runtime.test_loss import numerical

IDENTITY = LOSS_IDS.index("identity")


@pytest.mark.parametrize("shape", [(4,), (4, 3), (4, 2, 3)])
def test_identity_is_the_mean_over_samples_of_each_summed_output(shape):
    output = np.random.default_rng(0).standard_normal(shape)
    loss, grad = identity(output, np.zeros(4))
    assert loss == pytest.approx(output.reshape(4, -1).sum(axis=1).mean())
    np.testing.assert_allclose(grad, np.full(shape, 0.25))  # 1 / samples, every element
    np.testing.assert_allclose(grad, numerical(lambda p: identity(p, None)[0], output.copy()))


def test_identity_ignores_its_labels():
    output = np.arange(6.0).reshape(3, 2)
    for labels in (np.zeros(3), np.full((3, 7), 5, np.int64), np.ones((3, 1), np.float32)):
        assert identity(output, labels)[0] == pytest.approx(15 / 3)


def test_identity_tiles_in_any_dimension_add_up_to_the_whole():
    """Each loss task divides by the batch's samples: the tiles' shares sum to the whole."""
    output = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
    whole, whole_grad, _ = loss_tile(IDENTITY, output, np.zeros(6), total=6, valid=6)
    assert whole == pytest.approx(float(output.sum(dtype=np.float64)) / 6)
    for rows, cols in [((0, 3), (0, 4)), ((0, 6), (0, 2)), ((0, 2), (0, 1))]:
        shares, grad = 0.0, np.zeros((6, 4))
        for r in range(0, 6, rows[1]):
            for c in range(0, 4, cols[1]):
                tile = output[r : r + rows[1], c : c + cols[1]]
                value, g, correct = loss_tile(IDENTITY, tile, np.zeros(len(tile)), 6, 6 - r)
                shares += value
                grad[r : r + rows[1], c : c + cols[1]] = g
                assert correct == 0
        assert shares == pytest.approx(whole)
        np.testing.assert_allclose(grad, whole_grad)


def test_identity_on_a_padded_last_batch_averages_its_valid_samples():
    output = np.ones((4, 2), np.float32)
    value, grad, _ = loss_tile(IDENTITY, output, np.zeros(4), total=3, valid=3)
    assert value == pytest.approx(2.0)
    np.testing.assert_allclose(grad[:3], 1 / 3)
    assert not grad[3].any()


def test_identity_is_named_as_flexflow_names_it():
    assert loss_name("identity") == "identity"
    assert loss_name("LOSS_IDENTITY") == "identity"
    assert loss_name(LossType.LOSS_IDENTITY) == "identity"


def test_identity_takes_targets_of_any_shape_one_per_sample():
    check_target("identity", (4,), np.zeros(4))
    check_target("identity", (4, 3), np.zeros((4, 9), np.int32))
    check_targets("identity", (2,), np.zeros(6, np.float32), 6)
    with pytest.raises(ShapeError, match=r"identity: expects one \(ignored\) target per sample"):
        check_target("identity", (4, 3), np.zeros(3))
    with pytest.raises(ShapeError, match="identity: expects one"):
        check_targets("identity", (2,), np.zeros(5), 6)
    check_targets("identity", (4,), np.array([np.nan, np.inf, 0.0, 1.0]), 4)  # never read
    for other in (np.array(list("abcd")), np.array([None] * 4), np.zeros(4, complex)):
        with pytest.raises(ShapeError, match=r"identity: its targets are ignored but must be "
                           r"numbers, got dtype .*; pass zeros shaped \(4,\)"):  # fmt: skip
            check_targets("identity", (4,), other, 4)


@pytest.mark.parametrize("metric", ["accuracy", "METRICS_ACCURACY"])
def test_identity_refuses_accuracy(metric):
    with pytest.raises(FlexFlowError, match="'accuracy' does not apply to the identity loss"):
        metric_names([metric], "identity")
    assert metric_names([], "identity") == ()


def test_identity_refuses_another_loss_as_a_metric():
    with pytest.raises(FlexFlowError, match="metric 'mean_squared_error' is a loss"):
        metric_names(["mean_squared_error"], "identity")


@pytest.fixture(scope="module")
def report() -> dict:
    from tests.runtime.scripts import run_legate_script

    return run_legate_script("identity_loss_script.py", "6", cpus=2)


@pytest.mark.legate
@pytest.mark.parametrize("model", ["summed", "rows", "sequence"])
def test_every_strategy_trains_on_the_identity_loss_like_one_device_and_numpy(report, model):
    """Loss tasks on tiles split by sample or attribute add up to one device's loss."""
    assert report[model]["single_vs_numpy_loss"] <= 1.0
    assert report[model]["single_vs_numpy_weights"] <= 1.0
    strategies = report[model]["strategies"]
    assert {"dp", "random0", "attribute", "attribute output"} <= set(strategies)
    failing = {name: r for name, r in strategies.items() if r["loss"] > 1.0 or r["weights"] > 1.0}
    assert failing == {}
    assert len(report[model]["splits"]) >= 3  # split by sample and by attribute
    # the launch count the simulator charges is the tasks each step issues (flexflow.launches)
    counts = report[model]["task_counts"]
    assert {name: c for name, c in counts.items() if set(c[0]) != {c[1]}} == {}
