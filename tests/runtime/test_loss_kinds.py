"""The table of losses (`flexflow.runtime.loss.KINDS`): one record per loss, under every name
FlexFlow and Keras give it, in the order of the ids the loss tasks and the GPU bodies share."""

from __future__ import annotations

import dataclasses

import pytest

from flexflow.core import LossType, MetricsType
from flexflow.gpu import training
from flexflow.keras import losses as keras_losses
from flexflow.runtime.loss import KINDS, LOSS_IDS, LOSS_KINDS, LOSS_METRICS, loss_kind, loss_name


def test_each_loss_has_one_record_in_the_order_of_its_task_id():
    assert LOSS_IDS == tuple(kind.name for kind in KINDS) == tuple(LOSS_KINDS)
    assert LOSS_IDS == training.LOSS_NAMES  # the GPU bodies take the same names


def test_every_flexflow_and_keras_name_of_a_loss_finds_its_record():
    for member in LossType:
        assert loss_kind(member) is loss_kind(member.name) is LOSS_KINDS[member.value]
    for name, loss in keras_losses.NAMES.items():
        assert loss_kind(name) is LOSS_KINDS[loss.type]
    for member in MetricsType:
        if member.value != "accuracy":  # a loss named as a metric: the loss trained on
            assert LOSS_METRICS[member.name] == loss_name(member.value)


def test_records_are_frozen_values():
    with pytest.raises(dataclasses.FrozenInstanceError):
        KINDS[0].reads_targets = False  # type: ignore[misc]
    assert len(set(KINDS)) == len(KINDS)  # hashable


def test_only_losses_whose_output_is_predictions_count_accuracy():
    scored = {kind.name for kind in KINDS if kind.scores_predictions}
    assert scored == {
        "mean_squared_error",
        "sparse_categorical_crossentropy",
        "categorical_crossentropy",
    }
    assert all("accuracy" not in k.default_metrics for k in KINDS if not k.scores_predictions)
