"""flexflow.keras models train as the same models built with flexflow.core's FFModel calls
(tests/keras/keras_script.py, one Legate process on 2 CPUs, batches of 32)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.scripts import run_legate_script_said

pytestmark = pytest.mark.legate


@pytest.fixture(scope="module")
def run() -> tuple[dict, str]:
    return run_legate_script_said(Path(__file__).with_name("keras_script.py"), "-b", "32")


@pytest.fixture(scope="module")
def report(run) -> dict:
    return run[0]


@pytest.fixture(scope="module")
def said(run) -> str:
    """What the script printed on stderr (the epochs' lines)."""
    return run[1]


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


def test_a_model_compiled_again_keeps_its_trained_weights(report):
    """Keras' fine-tuning at another rate: compile again, train on from the weights."""
    said = report["fixes"]
    assert said["recompiled_kernel_kept"]
    after, before = said["recompiled_evaluation"]
    assert after == pytest.approx(before, rel=1e-6)


def test_a_scheduled_rate_is_the_one_the_model_trains_with(report):
    assert report["fixes"]["tiny_rate_kept_kernel"]  # a rate of 1e-12 leaves the weights


def test_stop_training_and_flexflow_style_callbacks(report):
    said = report["fixes"]
    assert said["stopped_after"] == [0, 1]  # Keras' model.stop_training, set after epoch 1
    assert said["flexflow_style_given"] == [0, 1]  # FlexFlow's on_epoch_end(self, logs)


def test_arguments_an_optimizer_of_another_model_and_predict_take(report):
    said = report["fixes"]
    assert "already trains another model" in said["shared_optimizer"]
    assert "evaluate: argument(s) batch_sizee are not offered" in said["evaluate_typo"]
    assert said["predict_shape"] == [256, 4]
    assert isinstance(said["evaluate_without_metrics"], float)  # Keras': the loss, a scalar


def test_verbose_zero_prints_no_epoch_line_and_the_lines_count_to_the_total(said):
    # the MLP's fit(epochs=3): one FFModel.fit per epoch, each line numbered in the total
    assert all(f"epoch {k}/3:" in said for k in (1, 2, 3))
    assert "/7:" not in said  # fit(epochs=7, verbose=0)
