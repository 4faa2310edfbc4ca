"""Checkpoints: a run killed while saving keeps the previous checkpoint whole; a run resumed
from a checkpoint ends exactly where the uninterrupted run ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.foreground import start_foreground
from tests.training.helpers import legate_env, run_train

META = "__flexflow__"


def load(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


@pytest.mark.legate
def test_a_run_killed_mid_save_leaves_the_previous_checkpoint_intact(tmp_path):
    checkpoint = tmp_path / "run.npz"
    script = Path(__file__).with_name("kill_script.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(checkpoint)],
        env=legate_env(2),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("saved 1"), proc.stderr.read()[-4000:]
        # the next save writes a temporary file beside the checkpoint: kill as soon as it appears
        deadline = time.monotonic() + 120
        partial = []
        while not partial and time.monotonic() < deadline:
            partial = list(tmp_path.glob(".run.npz.*.tmp"))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert partial, "never saw a save in progress"
    saved = [int(line.split()[1]) for line in ["saved 1", *proc.stdout.read().splitlines()]]
    data = load(checkpoint)  # the whole previous checkpoint, never the half-written one
    meta = json.loads(str(data[META]))
    assert meta["iteration"] == saved[-1]
    assert {"wide.kernel", "wide.kernel@m", "wide.kernel@v", "head.bias@v"} <= set(data)
    assert data["wide.kernel"].shape == (2048, 1024)


@pytest.mark.legate
def test_ctrl_c_during_training_ends_with_one_line_and_the_last_epoch_saved(tmp_path):
    """As a terminal's Ctrl-C (SIGINT to the process group) once an epoch is saved: Python's
    handler, not Realm's (every thread's C backtrace, exit 254), ends the run."""
    checkpoint = tmp_path / "run.npz"
    script = str(Path(__file__).resolve().parents[2] / "examples" / "train.py")
    args = ["--model", "lenet", "--image-size", "16", "--epochs", "500", "--checkpoint"]
    proc = start_foreground([sys.executable, script, *args, str(checkpoint)], env=legate_env(2))
    try:
        deadline = time.monotonic() + 120
        while not checkpoint.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert checkpoint.exists(), "no epoch was saved"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    said = " ".join(err.split())
    assert proc.returncode == 130, err[-3000:]
    assert f"interrupted; {checkpoint} holds the last whole epoch" in said
    assert "Signal 2" not in err and "Traceback" not in err
    assert json.loads(str(load(checkpoint)[META]))["epochs"] >= 1  # whole, and readable


MLP_FILE = """
from flexflow import ActiMode


def build(model):
    x = model.create_tensor((model.config.batch_size, 1, 8, 8), name="image")
    model.softmax(model.dense(model.dense(model.flat(x), 32, ActiMode.AC_MODE_RELU), 10))
"""


BATCH_NORM_FILE = """
def build(model):
    x = model.create_tensor((model.config.batch_size, 1, 8, 8), name="image")
    x = model.batch_norm(model.conv2d(x, 8, 3, 3, 1, 1, 1, 1, use_bias=False), name="bn1")
    y = model.batch_norm(model.conv2d(x, 8, 3, 3, 1, 1, 1, 1), relu=False, name="bn2")
    x = model.pool2d(model.add(x, y), 2, 2, 2, 2, 0, 0)
    model.softmax(model.dense(model.flat(x), 10))
"""


DROPOUT_FILE = """
def build(model):
    x = model.create_tensor((model.config.batch_size, 1, 8, 8), name="image")
    x = model.pool2d(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1), 2, 2, 2, 2, 0, 0)
    x = model.dropout(model.dense(model.flat(x), 16, ActiMode.AC_MODE_RELU), 0.5)
    model.softmax(model.dense(x, 10))
"""


@pytest.mark.legate
@pytest.mark.parametrize("model", ["lenet", "mlp", "batch_norm", "nmt", "dropout"])
def test_a_resumed_run_continues_bit_identically(tmp_path, model):
    """LeNet's and the MLP's steps run as one C call each (flexflow.runtime.native_step), the
    MLP's 8 per launch in the straight run and 3 in the interrupted one (flexflow.runtime.
    step_launches: the launches group the epochs' batches differently, and the resumed run's
    first launch starts mid-way through the straight run's), and so do NMT's (two inputs,
    LSTM steps sharing their layers' weights, attention); the batch norms' step as one
    concurrent launch exchanging their statistics, with momentum, the weights' flat copies
    updated at the start of the next step (the update pending when the checkpoint is
    written)."""
    split: list[str] = []
    if model == "mlp":
        (tmp_path / "mlp.py").write_text(MLP_FILE)
        common = ["--model", str(tmp_path / "mlp.py"), "--batch-size", "32"]
        split = ["--steps-per-execution", "3"]
    elif model == "dropout":  # its masks drawn per step number, 8 or 3 steps a launch
        (tmp_path / "dropout.py").write_text("from flexflow import ActiMode\n" + DROPOUT_FILE)
        common = ["--model", str(tmp_path / "dropout.py"), "--batch-size", "32"]
        split = ["--steps-per-execution", "3"]
    elif model == "nmt":
        common = ["--model", "nmt", "--seq-length", "4", "--vocab-size", "32"]
        common += ["--hidden-size", "16", "--embed-size", "16", "--batch-size", "4"]
        split = ["--steps-per-execution", "3"]
    elif model == "batch_norm":
        (tmp_path / "bn.py").write_text(BATCH_NORM_FILE)
        common = ["--model", str(tmp_path / "bn.py"), "--batch-size", "16"]
        common += ["--optimizer", "sgd", "--momentum", "0.9"]
    else:
        common = ["--model", "lenet", "--image-size", "16", "--batch-size", "64"]
    straight, interrupted = tmp_path / "straight.npz", tmp_path / "interrupted.npz"
    proc, whole = run_train(*common, "--epochs", "2", "--checkpoint", str(straight))
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc, first = run_train(*common, *split, "--epochs", "1", "--checkpoint", str(interrupted))
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc, rest = run_train(
        *common, *split, "--epochs", "2", "--checkpoint", str(interrupted), "--resume"
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "resumed from" in proc.stderr
    assert [e["epoch"] for e in rest["epochs"]] == [1]  # only the second epoch ran
    assert rest["epochs"][0]["loss"] == whole["epochs"][1]["loss"]
    assert rest["test_loss"] == whole["test_loss"]
    a, b = load(straight), load(interrupted)
    assert set(a) == set(b)
    for name in a:
        if name != META:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.legate
def test_a_searched_run_resumes_under_the_strategy_it_trained_with(tmp_path):
    """A search may pick another strategy on the second run (its clock, the trials'); the
    resumed run keeps the checkpoint's and ends where the uninterrupted run under it ends."""
    common = ["--model", "lenet", "--image-size", "16", "--batch-size", "64"]
    checkpoint, strategy = tmp_path / "run.npz", tmp_path / "s.json"
    proc, first = run_train(
        *common, "--epochs", "1", "--budget", "1", "--checkpoint", str(checkpoint),
        "--export-strategy", str(strategy),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    saved = json.loads(str(load(checkpoint)[META]))["strategy"]
    assert saved["ops"] == json.loads(strategy.read_text())["ops"]
    proc, rest = run_train(
        *common, "--epochs", "2", "--budget", "1", "--checkpoint", str(checkpoint), "--resume"
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert rest["strategy"].startswith("the checkpoint's") and "no search" in rest["strategy"]
    proc, whole = run_train(*common, "--epochs", "2", "--import-strategy", str(strategy))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert rest["epochs"][0]["loss"] == whole["epochs"][1]["loss"]
    assert rest["test_loss"] == whole["test_loss"]


@pytest.mark.legate
def test_a_run_resumed_with_another_batch_size_starts_the_next_epoch(tmp_path):
    """The checkpoint records the epochs done, not only the iterations: read in batches of
    another size, 22 iterations of 64 would have placed the run inside the epoch it had done."""
    common = ["--model", "lenet", "--image-size", "16"]
    checkpoint = tmp_path / "run.npz"
    proc, _ = run_train(
        *common, "--batch-size", "64", "--epochs", "1", "--checkpoint", str(checkpoint)
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    meta = json.loads(str(load(checkpoint)[META]))
    assert (meta["epochs"], meta["batch_size"], meta["iteration"]) == (1, 64, 1437 // 64)
    resumed = [*common, "--batch-size", "32", "--checkpoint", str(checkpoint), "--resume"]
    proc, rest = run_train(*resumed, "--epochs", "2")
    assert proc.returncode == 0, proc.stderr[-4000:]
    said = " ".join(proc.stderr.split())
    assert "1 epoch(s) done in batches of 64; the next epochs take batches of 32" in said
    assert [e["epoch"] for e in rest["epochs"]] == [1]  # the whole second epoch, at 32
    meta = json.loads(str(load(checkpoint)[META]))
    assert (meta["epochs"], meta["batch_size"], meta["iteration"]) == (2, 32, 22 + 1437 // 32)
    proc, done = run_train(*resumed, "--epochs", "2")  # both epochs done: nothing to run
    assert proc.returncode == 0, proc.stderr[-4000:]
    said = " ".join(proc.stderr.split())
    assert done["epochs"] == [] and "epochs=2 from initial_epoch=2 leaves nothing" in said


@pytest.mark.legate
def test_another_models_checkpoint_is_refused_as_such(tmp_path):
    """Before its strategy is checked against this model (which would list every op as
    unknown and suggest --import-strategy), and one of other sizes names the shape."""
    checkpoint = tmp_path / "lenet.npz"
    lenet = ["--model", "lenet", "--image-size", "16", "--batch-size", "64", "--epochs", "1"]
    proc, _ = run_train(*lenet, "--checkpoint", str(checkpoint))
    assert proc.returncode == 0, proc.stderr[-4000:]
    (tmp_path / "mlp.py").write_text(MLP_FILE)
    proc, _ = run_train(
        "--model", str(tmp_path / "mlp.py"), "--epochs", "1", "--checkpoint", str(checkpoint),
        "--resume",
    )  # fmt: skip
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "it was saved from another model" in said, said[-2000:]
    assert "unknown op" not in said and "Traceback" not in said
    bigger = [*lenet[:3], "20", *lenet[4:], "--checkpoint", str(checkpoint), "--resume"]
    proc, _ = run_train(*bigger)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "it was saved from a model of other sizes" in said, said


@pytest.mark.legate
def test_a_checkpoint_without_its_epochs_resumes_by_its_iterations(tmp_path):
    """A checkpoint of a flexflow before session 34 records only the iteration: the resumed
    run trained every epoch again from the first (it passed 0 epochs done to fit)."""
    common = ["--model", "lenet", "--image-size", "16", "--batch-size", "64"]
    checkpoint = tmp_path / "run.npz"
    proc, _ = run_train(*common, "--epochs", "1", "--checkpoint", str(checkpoint))
    assert proc.returncode == 0, proc.stderr[-4000:]
    arrays = load(checkpoint)
    meta = json.loads(str(arrays[META]))
    del meta["epochs"], meta["batch_size"]  # as an older flexflow wrote it
    arrays[META] = np.array(json.dumps(meta))
    np.savez(checkpoint, **arrays)
    resumed = [*common, "--checkpoint", str(checkpoint), "--resume", "--epochs", "2"]
    proc, rest = run_train(*resumed)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [e["epoch"] for e in rest["epochs"]] == [1]  # the second epoch alone
