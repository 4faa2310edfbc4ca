"""compile(loss='identity') in flexflow.keras (by name and as keras.losses.Identity) and
LossType.LOSS_IDENTITY in flexflow.core train FlexFlow's identity_loss.py model alike, its
labels ignored (tests/keras/identity_loss_script.py, one Legate process on 2 CPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexflow.errors import FlexFlowError
from flexflow.keras.layers import Dense, Input
from flexflow.keras.models import Model
from tests.runtime.scripts import run_legate_script


@pytest.mark.legate
def test_keras_and_ffmodel_train_on_the_identity_loss_alike():
    report = run_legate_script(Path(__file__).with_name("identity_loss_script.py"), "-b", "32")
    keras = report["keras"]
    assert keras[-1] < keras[0]  # the model lowers its own output
    assert report["keras_object"] == keras
    assert report["keras_other_labels"] == keras  # the labels are ignored
    assert report["ffmodel"] == keras
    evaluated = report["evaluated"]  # the last batch padded: only its samples count
    assert evaluated["loss"] == pytest.approx(evaluated["mean_output"], rel=1e-5)


def test_keras_identity_refuses_accuracy_before_starting_legate():
    inputs = Input(shape=(4,))
    model = Model(inputs, Dense(3)(inputs))
    with pytest.raises(FlexFlowError, match="'accuracy' does not apply to the identity loss"):
        model.compile(optimizer="sgd", loss="identity", metrics=["accuracy"])
