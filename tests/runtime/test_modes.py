"""Training and evaluation modes: dropout (dropout_script.py) and batch norm's running
statistics (batchnorm_script.py), run in Legate processes."""

from __future__ import annotations

import pytest

from tests.runtime.scripts import run_legate_script


@pytest.mark.legate
def test_batch_norm_keeps_running_statistics_and_evaluates_with_them(tmp_path):
    """Under data parallelism (statistics exchanged between the points of one concurrent
    launch), on one device (its own statistics, inside the fused task) and with the devices
    out of order (the batch norm alone, with statistics tasks): the same running statistics,
    evaluation and checkpoints, and the same losses."""
    report = run_legate_script("batchnorm_script.py", str(tmp_path))
    dp_losses, single_eval = report["dp"]["losses"], report["single"]["eval_loss"]
    for strategy, fused, exchanges, described in (
        ("dp", True, True, "1 exchanging statistics in concurrent launches"),
        ("single", True, False, "1 on their tiles' own statistics"),
        ("alone", False, False, "1 alone with statistics tasks"),
    ):
        run = report[strategy]
        assert run.pop("fused") is fused and run.pop("exchanges") is exchanges
        assert run.pop("described") == described  # what train.py prints
        losses = run.pop("losses")
        assert losses == pytest.approx(dp_losses, rel=1e-5)
        assert run.pop("eval_loss") == pytest.approx(single_eval, rel=1e-5)
        assert run == {
            "running_matches": True,
            "eval_uses_running": True,
            "checkpoint_keeps_running": True,
            "training_forward_updates_running": True,
        }


@pytest.mark.legate
def test_dropout_masks_per_iteration_and_passes_through_in_evaluation():
    report = run_legate_script("dropout_script.py")
    assert report["eval_is_identity"]
    assert report["masks_differ"]
    assert 0.3 < report["drop_fraction"] < 0.7
    dp = report["losses"]["dp"]
    for name, losses in report["losses"].items():
        assert losses == pytest.approx(dp, rel=1e-5), name  # same masks under any tiling


@pytest.mark.legate
def test_an_evaluation_as_one_c_call_gives_the_op_by_op_loss_and_correct_count():
    """Data parallelism and one device evaluate in one C call per device; with the devices out
    of order the ops run one by one: the same loss and correct count (of a whole batch and of
    a padded one), the running statistics untouched, training going on as before."""
    report = run_legate_script("evaluation_script.py")
    want = report["alone"]
    assert not want["one_c_call"]
    for name in ("dp", "single", "alone"):
        run = report[name]
        assert run["one_c_call"] is (name != "alone"), name
        assert run["running_kept"], name
        assert run["losses"] == pytest.approx(want["losses"], rel=1e-5), name
        assert run["after"] == pytest.approx(want["after"], rel=1e-5), name
        for (loss, correct), (want_loss, want_correct) in zip(
            run["eval"], want["eval"], strict=True
        ):
            assert loss == pytest.approx(want_loss, rel=1e-5), name
            assert correct == want_correct, name
