"""flexflow.keras models train as the same models built with flexflow.core's FFModel calls
(tests/keras/keras_script.py, one Legate process on 2 CPUs, batches of 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.scripts import run_legate_script_said

pytestmark = pytest.mark.legate


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script_said(Path(__file__).with_name("keras_script.py"), "-b", "32")[0]


def test_a_sequential_mlp_learns_and_trains_as_its_ffmodel_calls_do(report):
    keras, ffmodel = report["mlp_keras"], report["mlp_ffmodel"]
    assert keras[-1] < keras[0]
    assert keras == ffmodel  # same graph, seed and batches: the same numbers


def test_a_functional_cnn_with_concat_trains_as_its_ffmodel_calls_do(report):
    keras, ffmodel = report["cnn_keras"], report["cnn_ffmodel"]
    assert keras[-1] < keras[0]
    assert keras == ffmodel


def test_fit_calls_the_callbacks_around_each_epoch(report):
    logs = "['accuracy', 'loss']"
    assert report["calls"] == [
        "train_begin",
        *[f"epoch_{edge} {e}" + (f" {logs}" if edge == "end" else "")
          for e in range(3) for edge in ("begin", "end")],
        "train_end",
    ]  # fmt: skip


def test_flexflows_callbacks_schedule_stop_early_and_verify(report):
    said = report["callbacks"]
    assert said["rate_after_schedule"] == said["ffmodel_rate"] == 0.01
    assert said["epochs_before_early_stop"] == 1
    assert "VerifyMetrics: accuracy" in said["verify_refused"]
    assert "below 100.5%" in said["verify_refused"]


def test_weights_copied_with_get_and_set_weights_give_the_same_model(report):
    weights = report["weights"]
    assert weights["student"] == pytest.approx(weights["teacher"], rel=1e-6)
    assert weights["kernel_shape"] == [32, 12]  # FlexFlow's layout: (units, inputs)
