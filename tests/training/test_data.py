"""Data loaders: batches, order and padding (no Legate), and cuPyNumeric data in a Legate run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flexflow.data import DataLoader
from flexflow.errors import FlexFlowError
from tests.runtime.scripts import run_legate_script_said


def test_batches_cover_the_data_in_a_seeded_order_and_pad_the_last_for_evaluation():
    x, y = np.arange(10).reshape(10, 1), np.arange(10)
    loader = DataLoader({"x": x}, y, 4, shuffle=True, seed=1)
    assert len(loader) == 3
    batches = list(loader.epoch(0))
    assert [b.valid for b in batches] == [4, 4, 2]
    seen = np.concatenate([b.target[: b.valid] for b in batches])
    assert sorted(seen) == list(range(10))
    assert all(np.array_equal(b.inputs["x"][:, 0], b.target) for b in batches)
    assert batches[-1].target.shape == (4,)  # padded to the model's batch
    again = [b.target.tolist() for b in DataLoader({"x": x}, y, 4, shuffle=True, seed=1).epoch(0)]
    assert again == [b.target.tolist() for b in batches]  # (seed, epoch) fixes the order
    assert [b.target.tolist() for b in loader.epoch(1)] != again  # another epoch, another order
    resumed = [b.target.tolist() for b in loader.epoch(0, start=1)]
    assert resumed == again[1:]
    training = DataLoader({"x": x}, y, 4, drop_last=True)
    assert len(training) == 2 and [b.valid for b in training] == [4, 4]


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: DataLoader({}, np.zeros(3), 2), "at least one input"),
        (lambda: DataLoader({"x": np.zeros(3)}, np.zeros(4), 2), "one entry per sample"),
        (lambda: DataLoader({"x": np.zeros(3)}, np.zeros(3), 0), "batch_size must be positive"),
        (lambda: DataLoader({"x": np.zeros(3)}, np.zeros(3), 4, drop_last=True), "no full batch"),
    ],
)
def test_bad_data_is_refused(make, match):
    with pytest.raises(FlexFlowError, match=match):
        make()


@pytest.mark.legate
def test_cupynumeric_arrays_train_like_numpy_arrays():
    report, said = run_legate_script_said(Path(__file__).with_name("cupynumeric_script.py"))
    assert report["cupynumeric"] == pytest.approx(report["numpy"], rel=1e-6)
    assert report["mixed"] == pytest.approx(report["numpy"], rel=1e-6)
    assert report["numpy"][1] < report["numpy"][0]  # it learns
    # fit(epochs=n) trains n more epochs, numbered on (FlexFlow's and Keras' fit; it trained
    # none on a model with an epoch done before); Keras' initial_epoch runs up to `epochs`
    assert report["repeated"]["ran"] == [[0], [1], [2, 3, 4], [5, 6], []]
    assert "epochs must be a positive integer, got 0" in report["repeated"]["refused"]
    assert report["repeated"]["mse_accuracy"] is None  # compile's default under MSE: no accuracy
    assert "fit: continuing at epoch 6 of 7." in said
    assert "fit: epochs=7 from initial_epoch=7 leaves nothing to train" in said
