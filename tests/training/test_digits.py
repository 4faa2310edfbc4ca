"""The README's main job: LeNet on scikit-learn's digits through the `legate` launcher, as the
issue's command runs it (`legate examples/train.py --cpus 2 --gpus 0 --model lenet --epochs 2`:
the launcher's flags after the script)."""

from __future__ import annotations

import json

import pytest

from tests.training.helpers import run_train


@pytest.mark.legate
def test_lenet_learns_the_digits_in_two_epochs(tmp_path):
    strategy, trace = tmp_path / "strategy.json", tmp_path / "measured.json"
    proc, report = run_train(
        "--model", "lenet", "--epochs", "2", "--export-strategy", str(strategy),
        "--measured-trace", str(trace), launcher=True, flags_after_script=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "legate --cpus 2 --gpus 0 " in proc.stderr  # relaunched with them before the script
    assert report["test_accuracy"] >= 0.95, report
    assert report["epochs"][1]["loss"] < report["epochs"][0]["loss"]
    assert report["epochs"][1]["samples_per_s"] > 0
    assert "data parallelism" in report["strategy"]
    assert strategy.exists()  # --export-strategy wrote the strategy it trained with
    assert "strategy for lenet on local" in proc.stderr  # the strategy is shown
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    batches = 1437 // 32  # the last epoch's iterations, each a step per device
    from flexflow.ops import blas

    if blas.sgemm_address() is not None:  # each device's step one C call (native_step)
        steps = sum(e["name"].startswith("step up to softmax[") for e in events)
        # ... with its ops' passes nested in it (native/step.c's log)
        inside = [e for e in events if e["cat"] == "backward in C step"]
        assert sum(e["name"].startswith("conv2[") for e in inside) == 2 * batches
    else:  # op by op: each with a forward of conv1's tiles
        steps = sum(e["name"].startswith("conv1[") and e["name"].endswith(".fwd") for e in events)
    assert steps == 2 * batches
    assert all(e["dur"] >= 0 for e in events) and {e["tid"] for e in events} == {0, 1}
