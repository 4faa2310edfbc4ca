"""examples/train.py beyond the digits: other zoo models, strategy files, bad input."""

from __future__ import annotations

import json

import pytest

from tests.training.helpers import run_train

SMALL_LENET = ["--model", "lenet", "--image-size", "16", "--batch-size", "64", "--epochs", "1"]


@pytest.mark.legate
def test_a_searched_strategy_is_exported_and_trains_when_imported(tmp_path):
    strategy, picture = tmp_path / "lenet.json", tmp_path / "search.png"
    proc, searched = run_train(
        *SMALL_LENET, "--budget", "2", "--export-strategy", str(strategy),
        "--search-png", str(picture),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert picture.read_bytes().startswith(b"\x89PNG")  # the search, drawn
    assert searched["strategy"].startswith("searched for ")
    assert "of a 2 s budget" in searched["strategy"]
    exported = json.loads(strategy.read_text())
    assert exported["ops"] and exported["model"] == "lenet"  # a strategy file, named
    proc, imported = run_train(*SMALL_LENET, "--import-strategy", str(strategy))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert imported["strategy"] == f"imported from {strategy}"
    assert imported["simulated_ms"] == pytest.approx(searched["simulated_ms"])
    # the last epoch's time per iteration, next to the simulated one: 1,437 samples, batch 64
    epoch = imported["epochs"][-1]
    per_iteration_ms = 1e3 * (1_437 // 64 * 64) / epoch["samples_per_s"] / (1_437 // 64)
    assert imported["measured_ms"] == pytest.approx(per_iteration_ms, rel=1e-6)


@pytest.mark.legate
def test_a_profile_of_another_batch_size_gets_this_runs_tasks_added(tmp_path):
    """It was used as it was, pricing most tasks by the analytic model without a word."""
    profile = tmp_path / "p.json"
    proc, _ = run_train(*SMALL_LENET, "--profile", str(profile))  # batch 64: measured
    assert proc.returncode == 0, proc.stderr[-4000:]
    first = json.loads(profile.read_text())
    smaller = [*SMALL_LENET[:5], "32", *SMALL_LENET[6:]]  # batch 32
    proc, _ = run_train(*smaller, "--profile", str(profile))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "holds 0 of this model's" in " ".join(proc.stderr.split())
    both = json.loads(profile.read_text())
    assert len(both["entries"]) == 2 * len(first["entries"])  # the first kept, this one added
    proc, _ = run_train(*smaller, "--profile", str(profile))  # now it holds both
    assert proc.returncode == 0 and "measur" not in proc.stderr, proc.stderr[-4000:]


@pytest.mark.legate
def test_a_profile_an_older_flexflow_measured_is_measured_again(tmp_path):
    from flexflow.cost import PROFILE_VERSION, Profile

    path = tmp_path / "profile.json"
    path.write_text('{"format": "flexflow-profile", "version": 1, "entries": []}')
    proc, report = run_train(*SMALL_LENET, "--budget", "1", "--profile", str(path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "measured by an older flexflow; measuring it again" in " ".join(proc.stderr.split())
    assert json.loads(path.read_text())["version"] == PROFILE_VERSION
    assert Profile.load(path).times and report["simulated_ms"] > 0


@pytest.mark.legate
def test_a_recurrent_zoo_model_trains_on_synthetic_data():
    proc, report = run_train(
        "--model", "rnntc", "--seq-length", "4", "--vocab-size", "50", "--hidden-size", "16",
        "--embed-size", "16", "--batch-size", "8", "--epochs", "1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "synthetic data" in proc.stderr
    assert report["epochs"][0]["samples_per_s"] > 0


SMALL_IMAGES = """
def build(model):
    x = model.create_tensor((model.config.batch_size, 1, 6, 6))
    model.softmax(model.dense(model.flat(model.conv2d(x, 2, 3, 3, 1, 1, 1, 1)), 10))
"""
SOFTMAX_OVER_AXIS_1 = """
def build(model):
    x = model.create_tensor((model.config.batch_size, 4, 6))
    model.softmax(model.dense(x, 6), axis=1)
"""


@pytest.mark.legate
@pytest.mark.parametrize("source", [SMALL_IMAGES, SOFTMAX_OVER_AXIS_1])
def test_models_the_digits_do_not_fit_train_on_synthetic_data(tmp_path, source):
    """A 6x6 image classifier ('input is smaller than 8x8 digits', exit 2), and a model ending
    in a softmax over another axis than the last (given sparse cross-entropy, which compile
    refused): both train on synthetic data, the second on mean squared error."""
    model = tmp_path / "model.py"
    model.write_text(source)
    proc, report = run_train("--model", str(model), "--epochs", "1")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "synthetic data" in proc.stderr
    assert report["epochs"][0]["samples_per_s"] > 0


@pytest.mark.legate
def test_nmt_learns_the_copy_task_in_c_steps_from_two_inputs():
    """NMT (two inputs: source and target ids; encoder, decoder, attention) trains with each
    device's step one C call in a C++ task body, 8 steps per launch, and learns: its accuracy
    rises well above chance (1/32) on the copy task."""
    proc, report = run_train(
        "--model", "nmt", "--seq-length", "4", "--vocab-size", "32", "--hidden-size", "32",
        "--embed-size", "32", "--batch-size", "8", "--epochs", "12", "--lr", "0.02",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    from flexflow.ops import blas

    if blas.sgemm_address() is not None:
        log = " ".join(proc.stderr.split())
        assert "2 of 2 step tasks as one C call, 2 in C++ task bodies" in log
        assert "8 training steps per launch" in log
    first, last = report["epochs"][0], report["epochs"][-1]
    assert last["loss"] < first["loss"]
    assert 1.0 >= last["accuracy"] > 0.1 > 3 / 32


@pytest.mark.legate
def test_a_language_model_learns_the_copy_task_with_per_token_labels():
    """RNNLM's per-position softmax trains on per-token sparse cross-entropy: its accuracy
    counts every position and rises well above chance (1/32) on the copy task, each device's
    step one C call (flexflow.runtime.step_program)."""
    proc, report = run_train(
        "--model", "rnnlm", "--seq-length", "4", "--vocab-size", "32", "--hidden-size", "32",
        "--embed-size", "32", "--batch-size", "8", "--epochs", "12", "--lr", "0.02",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "copy task" in proc.stderr
    from flexflow.ops import blas

    if blas.sgemm_address() is not None:  # its unrolled steps learn in one C call per task
        assert "2 of 2 step tasks as one C call" in " ".join(proc.stderr.split())
    first, last = report["epochs"][0], report["epochs"][-1]
    assert last["loss"] < first["loss"]
    assert 1.0 >= last["accuracy"] > 0.5 > 1 / 32  # a share of the predictions


@pytest.mark.legate
@pytest.mark.parametrize(
    "args, message",
    [
        (["--import-strategy", "/nonexistent.json"], "strategy file '/nonexistent.json' does not"),
        (["--budget", "2", "--import-strategy", "x.json"], "(--import-strategy) or search_budget"),
        (["--model", "lenet", "--seq-length", "4"], "model 'lenet' takes no --seq-length"),
        (["--model", "no_such_model"], "no_such_model"),
        (["--resume"], "--resume continues from the file --checkpoint names"),
        (["--momentum", "0.5"], "--momentum is SGD's; this run uses --optimizer adam"),
        (["--measured-trace", "/proc/version/t.json"], "/proc/version is a file, not a dir"),
        (["--checkpoint", "/"], "/ is a directory; give a file name inside it"),
        (["--export-strategy", "/proc/version/s.json"], "/proc/version is a file, not a dir"),
        (
            ["--checkpoint", "/tmp/x.npz", "--export-strategy", "/tmp/x.npz"],
            "--checkpoint and --export-strategy both name /tmp/x.npz",
        ),
        (  # the strategy was lost under the picture
            ["--budget", "1", "--search-png", "/tmp/s.png", "--export-strategy", "/tmp/s.png"],
            "--export-strategy and --search-png both name /tmp/s.png",
        ),
        (  # the picture's bytes, then the report, in one stream
            ["--budget", "1", "--search-png", "-", "--json"],
            "--search-png and --json would both write to standard output",
        ),
        (["--search-png", "/tmp/s.png"], "--search-png draws the search, and none will run"),
        (
            ["--import-strategy", "dp", "--search-png", "/tmp/s.png"],
            "--search-png draws the search, and none will run",
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args, message):
    proc, _ = run_train(*SMALL_LENET, *args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert message in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


@pytest.mark.legate
def test_conflicting_choices_are_refused_before_a_profile_is_measured(tmp_path):
    """--import-strategy with --budget: the new profile was measured and written, then the
    run refused (a helper's walk through the README)."""
    profile = tmp_path / "p.json"
    args = ("--import-strategy", "dp", "--budget", "1", "--profile", str(profile))
    proc, _ = run_train(*SMALL_LENET, *args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "not both" in proc.stderr and "measured" not in proc.stderr
    assert not profile.exists()


@pytest.mark.legate
def test_an_output_over_the_model_file_is_refused_and_the_file_kept(tmp_path):
    """It was replaced by the exported strategy: the user's code, lost."""
    model = tmp_path / "mine.py"
    source = "def build(model):\n    model.softmax(model.dense(model.create_tensor((8, 4)), 2))\n"
    model.write_text(source)
    proc, _ = run_train("--model", str(model), "--export-strategy", str(model))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "is the model file this run reads" in " ".join(proc.stderr.split())
    assert model.read_text() == source


@pytest.mark.legate
def test_resuming_with_another_optimizer_is_refused(tmp_path):
    checkpoint = tmp_path / "run.npz"
    proc, _ = run_train(*SMALL_LENET, "--checkpoint", str(checkpoint))
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc, _ = run_train(
        *SMALL_LENET, "--checkpoint", str(checkpoint), "--resume", "--optimizer", "sgd"
    )
    assert proc.returncode == 2
    assert "was saved with AdamOptimizer" in " ".join(proc.stderr.split())


MLP_FILE = """
from flexflow import ActiMode


def build(model):
    x = model.create_tensor((model.config.batch_size, 1, 8, 8), name="image")
    x = model.dense(model.flat(x), 64, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(x, 10))
"""


@pytest.mark.legate
def test_an_mlp_model_file_learns_the_digits_with_its_steps_in_c(tmp_path):
    """A flat-dense-relu-dense-softmax model trains data parallel with each step task as one C
    call (flexflow.runtime.native_step) where MKL is installed, 8 steps per Legate launch
    (flexflow.runtime.step_launches), and learns the digits."""
    from flexflow.ops import blas

    path = tmp_path / "mlp.py"
    path.write_text(MLP_FILE)
    proc, report = run_train("--model", str(path), "--epochs", "3", "--batch-size", "32")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert report["test_accuracy"] >= 0.9, report
    kernels = " ".join(proc.stderr.split())
    if blas.sgemm_address() is not None:
        assert "CPU kernels: matrix products through mkl" in kernels
        assert "2 of 2 step tasks as one C call, 2 in C++ task bodies" in kernels
        assert "8 training steps per launch" in kernels  # FFConfig's steps_per_execution
        assert report["steps_per_launch"] == 8
    else:
        assert "CPU kernels: matrix products through numpy's BLAS" in kernels


SMALL_RNNLM = [
    "--model", "rnnlm", "--budget", "1", "--epochs", "1", "--batch-size", "8",
    "--seq-length", "8", "--hidden-size", "64", "--embed-size", "64", "--vocab-size", "200",
]  # fmt: skip


@pytest.mark.legate
def test_the_timed_candidates_are_reported_and_no_trials_keeps_the_pick():
    """The analytic simulation puts this RNNLM's one-device and data-parallel strategies
    within the trials' margin of the search's pick (flexflow.planning)."""
    proc, report = run_train(*SMALL_RNNLM)
    assert proc.returncode == 0, proc.stderr[-4000:]
    trials = report["trials"]
    assert len(trials) >= 2 and all(t["measured_ms"] > 0 for t in trials)
    kept = min(trials, key=lambda t: t["measured_ms"])
    assert f"kept {kept['label']}, the fastest measured of {len(trials)}" in report["strategy"]
    assert "close candidates timed after the search" in proc.stderr
    proc, untimed = run_train(*SMALL_RNNLM, "--no-trials")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert untimed["trials"] == [] and "close candidates" not in untimed["strategy"]


@pytest.mark.legate
def test_the_measured_trace_of_an_op_by_op_strategy_holds_the_whole_last_epoch(tmp_path):
    """Read before the last iteration's tasks had ended, it lacked their backward passes;
    the store fills before the first task (set-up) are not part of it."""
    import subprocess
    import sys
    from collections import Counter

    from tests.training.helpers import ROOT, legate_env

    strategy, trace = tmp_path / "expert.json", tmp_path / "measured.json"
    subprocess.run(
        [sys.executable, "-m", "flexflow", "strategy", "lenet", "--machine", "local", "--name",
         "expert", "--batch-size", "64", "--export", str(strategy)],
        env=legate_env(2), check=True, cwd=ROOT, capture_output=True,
    )  # fmt: skip
    proc, _ = run_train(
        "--model", "lenet", "--batch-size", "64", "--epochs", "1", "--import-strategy",
        str(strategy), "--measured-trace", str(trace),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    passes = Counter(e["cat"] for e in events)
    assert passes["forward"] == passes["backward"] > 0  # every op's tasks, both passes
    per_task = Counter(e["name"] for e in events if e["cat"] == "backward")
    assert set(per_task.values()) == {1437 // 64}  # each iteration's, the last one's too
    first = min(events, key=lambda e: e["ts"])
    assert first["ts"] == 0 and first["name"] != "store fill"
