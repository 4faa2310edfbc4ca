"""The Python training API as a user drives it by hand (tests/training/api_script.py, one
Legate process on 2 CPUs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.runtime.scripts import run_legate_script_said


@pytest.fixture(scope="module")
def run() -> tuple[dict, str]:
    return run_legate_script_said(Path(__file__).with_name("api_script.py"))


pytestmark = pytest.mark.legate


def test_the_learning_rate_changes_between_epochs_as_compiling_again_would(run):
    """Compiling again drew the first epoch's dropout masks again (the optimizer's step count
    restarts, the masks' does not)."""
    schedules = run[0]["schedules"]
    # set_learning_rate after two epochs == compiling again at the new rate (plain SGD has no
    # state to lose), bit for bit; and both differ from keeping the rate
    assert schedules["setter"] == schedules["recompiled"]
    assert schedules["setter"][:2] == schedules["constant"][:2]
    assert schedules["setter"][2] != schedules["constant"][2]
    before, after = schedules["eval_around_compile"]
    assert before == after  # compiling again keeps the trained weights
    assert "learning_rate=0.05" in schedules["optimizer"]
    assert "a new optimizer must be the same kind" in schedules["switch_kind"]
    assert "learning_rate must be a positive number" in schedules["bad_rate"]


def test_optimizers_are_taken_by_name_or_set_before_compile(run):
    named = run[0]["named_optimizers"]
    assert named["is_adam"] and "learning_rate=0.01" in named["named"]  # the config's rate
    assert "unknown optimizer 'rmsprop'; name one of sgd, adam" in named["unknown"]
    assert "must be an SGDOptimizer or AdamOptimizer" in named["wrong_type"]


def test_predict_gives_every_sample_the_output_eval_scores(run):
    predictions = run[0]["predictions"]
    assert predictions["shape"] == [37, 3]  # the padding of the last batch left out
    assert predictions["loss_from_predict"] == pytest.approx(predictions["eval_loss"], rel=1e-5)
    assert predictions["first_rows_again"]  # no dropout outside training


def test_targets_are_checked_before_any_training(run):
    checks = run[0]["data_checks"]
    assert "no targets given (y is None)" in checks["no_targets"]
    assert "labels must lie in [0, 3), got [0, 7]" in checks["late_label"]
    # NaN or inf in data showed only as a loss of nan; negative "probabilities" trained
    nan_input = (
        "input 'x' holds NaN, infinite or beyond-float32 values in 2 of its 96 samples (the "
        "first is sample 40); clean or drop them first."
    )
    assert nan_input in checks["nan_input"]
    assert nan_input in checks["nan_cupynumeric_input"]  # by reductions in Legate
    assert (
        "categorical_crossentropy: targets are probabilities (one-hot, or rows summing to 1), "
        "got negative ones (the first in sample 50)"
    ) in checks["negative_probabilities"]
    assert "mean_squared_error: y holds NaN, infinite or beyond-float32 values in 1 of its 96 " \
        "samples (the first is sample 90)" in checks["nan_target"]  # fmt: skip
    assert checks["iterations_after_refusals"] == [0, 0, 0]  # refused before the first batch
    # a cuPyNumeric float label aborted the process inside a task before
    assert (
        "labels must be integers (class indices), got float32"
        in (checks["float_cupynumeric_labels"])
    )
    assert checks["flexflow_metrics"] == ""  # the loss trained on, named as a metric
    assert "metric 'METRICS_MEAN_SQUARED_ERROR' is a loss" in checks["other_loss_metric"]


def test_a_closed_executor_refuses_work_and_compiling_again_keeps_its_weights(run):
    closing = run[0]["closing"]
    assert "this executor was closed" in closing["refused"]
    assert closing["recompiled"] == closing["trained"]


def test_the_run_seed_draws_the_dropout_masks(run):
    seeds = run[0]["dropout_seeds"]
    assert seeds["seed3"] == seeds["seed3_again"]
    assert seeds["seed3"] != seeds["seed4"]  # same weights: only the masks differ


def test_fit_prints_a_line_per_epoch_where_no_bar_shows(run):
    said = run[1]
    assert "epoch 1/2: loss" in said and "epoch 2/2: loss" in said


def test_a_script_written_for_flexflow_runs_through_flexflow_core(run):
    port = run[0]["flexflow_port"]
    assert port["batch_epochs_lr"] == [16, 2, 0.05]  # FFConfig() read -b, -e, --lr
    assert port["epochs"] == [0, 1] and port["accuracy"] is not None
    assert port["adam"] == [0.002, 0.8, 0.99, 1e-4, 1e-7]  # weight decay before epsilon
    assert port["uniform_kernel_drawn"]  # FlexFlow's UniformInitializer, applied at compile


def test_flexflows_layer_handles_read_and_write_the_weights_training_starts_from(run):
    """get_layer_by_id and the rest were refused ('layer handles are not offered'), so
    FlexFlow's scripts reading or setting weights through them stopped."""
    handles = run[0]["layer_handles"]
    assert "call ffmodel.compile(...) first" in handles["before_compile"]
    assert handles["layers"] == [
        "Layer(0, 'dense_1', dense)", "Layer(1, 'dense_2', dense)", "Layer(2, 'softmax_1', softmax)"
    ]  # fmt: skip
    assert handles["last"] == "Layer(2, 'softmax_1', softmax)"
    assert handles["dims"] == [[24, 12], [3]]  # FlexFlow's (out_dim, in_dim)
    assert handles["tensors"] == [[16, 12], [16, 24]]
    assert handles["read_is_the_weight"] and handles["kernel_set"]
    assert handles["bias_written_back"] == [2.5, 2.5, 2.5]  # dense_2's bias starts at zero
    assert handles["trained_from_them"]
    assert "has shape (24, 12), got an array of shape (3, 3)" in handles["wrong_shape"]
    assert handles["by_global_id"] == "dense_1.bias"
    assert "the model has 3 layer(s)" in handles["no_layer"]
    assert "call inline_map(ffmodel, ffconfig) first" in handles["unmapped"]
    assert "it is mapped already; inline_unmap it first" in handles["mapped_twice"]
    assert handles["read_only_map_kept_training"]  # unmapping wrote back the old weights
    assert (
        "set_weights of 'dense_1.kernel' between forward() and update()"
        in (handles["set_after_forward"])
    )


def test_a_one_input_model_takes_its_array_in_a_list_and_weights_as_lists(run):
    forms = run[0]["data_forms"]
    assert forms["list_equals_array"]  # [x] read as (1, N, ...) data before
    assert forms["bias"] == [0.5, -0.5, 0.0]  # a list was an AttributeError


def test_garbage_is_collected_by_the_program_never_inside_a_task():
    """6 rounds of predict on cuPyNumeric data and training under model parallelism (Python
    task bodies): aborted in every run before (a store freed inside a task)."""
    report = run_legate_script_said(Path(__file__).with_name("collection_script.py"))[0]
    assert len(report["losses"]) == 6 and all(np.isfinite(report["losses"]))
    assert report["automatic"] == [False, True]  # off while an executor is open, then back


def test_a_run_resumed_from_a_checkpoint_keeps_its_schedules_learning_rate(run):
    """The checkpoint was saved before on_epoch lowered the rate, and loading kept the rate
    the resumed model was compiled with: epochs 3-4 trained at the wrong rate, silently."""
    resumed = run[0]["resumed_schedule"]
    assert resumed["resumed"] == resumed["straight"][2:]
    assert "learning_rate=0.0005" in resumed["rate"]
    assert "was saved training with AdamOptimizer" in resumed["other_kind"]  # loaded before


def test_flexflows_hand_written_loop_trains_as_train_on_batch_and_fit_do(run):
    loop = run[0]["hand_written_loop"]
    assert loop["outputs_match"] == [True] * 6  # the output read after forward() is predict's
    assert loop["loop_equals_train_on_batch"] and loop["loop_equals_fit"]  # bit for bit
    running = np.array(loop["running_losses"])  # get_perf_metrics: the mean since the start
    means = np.cumsum(loop["batch_losses"]) / np.arange(1, 7)
    np.testing.assert_allclose(running, means, rtol=1e-6)
    assert loop["perf_accuracy"] == pytest.approx(loop["batch_accuracy"])  # a percentage
    refused = loop["refused"]
    assert "update() needs backward() first" in refused["update_first"]
    assert "backward() needs forward() first" in refused["backward_first"]
    assert "call reset() to start again" in refused["past_the_end"]
    assert "read between forward() and update()" in refused["output_after_update"]
    assert "takes the model first (inline_map(ffmodel, ...)" in refused["old_api"]
    assert "only the model's inputs, the labels and (after forward)" in refused["hidden"]
    assert "between backward() and update()" in refused["batch_before_update"]
    assert "would discard its gradients" in refused["zero_after_backward"]
    assert "takes one batch of 16 samples (the model's batch size), got 5" in refused["short_batch"]
    for call in ("train_on_batch", "compile"):
        assert (
            f"{call} was called between backward() and update()"
            in (refused[f"{call}_before_update"])
        )


def test_a_model_its_loss_cannot_read_runs_forward_and_is_refused_training(run):
    """FlexFlow's single-op scripts compile with a cross-entropy and only run forward()."""
    forward = run[0]["forward_only"]
    assert forward["output_close"]
    for call in ("update", "fit"):
        assert "reads probabilities over the last axis (a softmax's)" in forward[call]
    # compile(comp_mode=CompMode.INFERENCE) was refused: FlexFlow's attention scripts stopped
    assert forward["inference_output_is_predict"]
    assert "compiled with comp_mode=CompMode.INFERENCE" in forward["inference_fit"]


def test_the_loop_copies_its_batches_and_checks_them_and_fit_after_it_trains_whole_epochs(run):
    edges = run[0]["loop_edges"]
    # the step read the caller's buffer after update() returned: the next batch's data
    assert edges["reused_buffer_equals_train_on_batch"]
    assert edges["iterations_after_fit"] == 1 + 6  # fit skipped the batches trained by hand
    assert "labels must lie in [0, 3), got [7, 7]" in edges["bad_labels"]  # at set_tensor
    assert "fit was called between backward() and update()" in edges["fit_before_update"]
    assert "pass an array of 16 samples, got NoneType" in edges["none_labels"]
    looped, whole = edges["compute_metrics_loss"]  # forward(), compute_metrics() per batch
    assert looped == pytest.approx(whole, rel=1e-6)
    assert edges["compute_metrics_accuracy"][0] == edges["compute_metrics_accuracy"][1]
    assert edges["get_array_is_a_copy"]
    assert "read-only" in edges["get_array_write"]


def test_batches_do_not_accumulate_in_the_executors_view_cache(run):
    after_one, after_four, after_eval, after_eval_again = run[0]["cached_views"]["sizes"]
    assert after_four == after_one and after_eval_again == after_eval


def test_validation_data_is_evaluated_after_every_epoch_and_checked_first(run):
    """Keras' fit(validation_data=...) was a TypeError."""
    checks = run[0]["validation"]
    assert checks["validation_samples"] == [40, 40]
    assert checks["validation_losses"][0] != checks["validation_losses"][1]
    assert checks["validation_losses"][1] == checks["eval_after"]  # the weights after epoch 2
    assert "; validation loss" in checks["described"]
    assert "fit: validation_data: input 'x' takes samples of shape (12,)" in checks["bad_shape"]
    assert "validation_data is an (x, y) pair" in checks["bad_form"]
    assert checks["iterations_after_refusals"] == 0  # both refused before the first batch
    warned = (
        "fit: the last 10 of 90 samples never train (batches of 16, shuffle=False); shuffle, "
        "or pass a whole number of batches."
    )
    assert checks["partial_batch_warnings"] == [warned, warned]  # arrays; the dropping loader


def test_weights_set_by_hand_must_be_finite_numbers(run):
    """Strings were a raw numpy ValueError; NaN was taken and every later step was NaN."""
    checks = run[0]["validation"]
    assert "takes numbers, got <U1 values; pass a float array" in checks["text_weights"]
    assert "non-finite values (NaN or inf); pass finite weights" in checks["nan_weights"]
    assert checks["weights_kept"]
