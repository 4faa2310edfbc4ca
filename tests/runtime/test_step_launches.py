"""Several training steps per Legate launch (flexflow.runtime.step_launches) train exactly as one
step per launch: the same loss bits each step and the same weights, under data parallelism on
2 CPUs and on one device, SGD with momentum and weight decay and Adam, a padded last batch, a
last launch of fewer steps, and launches mixed with one-step iterations and an evaluation
(their pending updates); each launch's points run on the strategy's devices. Cases that cannot
launch several steps say why and train one step per launch (Legate, 2 CPUs)."""

from __future__ import annotations

import random

import pytest
from hypothesis import settings

from flexflow import FFConfig
from flexflow.errors import FlexFlowError
from flexflow.ops import blas
from tests.runtime.scripts import run_legate_script

STEPS, K = 7, 3
CASES = [f"{s}/{o}" for s in ("dp", "single") for o in ("sgd", "adam")]

needs_mkl = pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script("step_launches_script.py")


@needs_mkl
@pytest.mark.legate
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("schedule", ["launches", "mixed"])
def test_several_steps_per_launch_train_bit_identically(report, case, schedule):
    one, run = report[case]["one"], report[case][schedule]
    assert run["per_launch"] == K
    assert run["iteration"] == one["iteration"] == STEPS
    assert run["losses"] == one["losses"]
    assert run["weights"] == one["weights"]


@needs_mkl
@pytest.mark.legate
@pytest.mark.parametrize("case", CASES)
def test_a_launch_is_one_task_for_its_steps(report, case):
    assert report[case]["launches"]["tasks"] == -(-STEPS // K)  # 3 + 3 + 1 steps
    # the planner's simulation counts the launches fit issues (flexflow.launches)
    assert report[case]["launches"]["planned_per_launch"] == K
    assert "3 training steps per launch" in report[case]["launches"]["described"]


@needs_mkl
@pytest.mark.legate
@pytest.mark.parametrize("case", CASES)
def test_each_point_runs_on_its_device_and_is_timed(report, case):
    """The timeline's step entries of tile d come from the thread that runs device d's
    one-step tasks; every step and every update (the launches apply their last) is timed."""
    run, one = report[case]["timeline"], report[case]["one_timeline"]
    devices = 2 if case.startswith("dp/") else 1
    assert run["losses"] == one["losses"]
    assert run["threads"] == one["threads"]
    assert len(run["threads"]) == devices
    assert len({t for threads in run["threads"].values() for t in threads}) == devices
    assert run["steps_timed"] == STEPS * devices
    assert run["updates_timed"] == STEPS * devices


@needs_mkl
@pytest.mark.legate
def test_a_launch_on_processors_other_than_the_first_runs_on_them():
    """On 4 CPUs, data parallelism over devices 2 and 3 launches on those processors (the
    threads of their one-step tasks, not devices 0 and 1's) with the same numbers."""
    report = run_legate_script("step_launches_script.py", "offset", cpus=4)
    one, run, first_two = report["one"], report["launches"], report["first_two"]
    assert run["per_launch"] == run["planned_per_launch"] == K
    assert run["tasks"] == -(-STEPS // K)
    assert run["losses"] == one["losses"] and run["weights"] == one["weights"]
    assert run["threads"] == one["threads"]
    used = {t for threads in run["threads"].values() for t in threads}
    assert len(used) == 2
    assert not used & {t for threads in first_two["threads"].values() for t in threads}


@needs_mkl
@pytest.mark.legate
def test_any_grouping_of_steps_into_launches_trains_the_same():
    """Hypothesis, in the Legate process: steps per launch 2-6, 1-9 batches, the last padded
    by 0-15 of 16 samples (a device's whole tile padding included), SGD with momentum or Adam:
    the same losses and weights as one step per launch, and evaluating the batches as many per
    launch the same losses and correct counts as one per launch. Seeded here: the same examples
    on every run under the `ci` profile, new ones elsewhere."""
    seed = 0 if settings.default.derandomize else random.randrange(2**32)
    report = run_legate_script("step_launches_script.py", "property", str(seed), "12")
    assert report["ok"], f"seed {seed}: {report.get('error')} (checked {report['checked']})"
    assert len(report["checked"]) == 12


@pytest.mark.legate
@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("reversed", "the devices are not consecutive CPUs in ascending order"),
        ("python_bodies", "the step tasks run Python bodies (cpp_steps=False)"),
    ],
)
def test_what_cannot_launch_several_steps_says_why_and_trains_the_same(report, case, reason):
    run = report[case]
    if blas.sgemm_address() is not None:
        assert run["reason"] == reason
        assert f"one training step per launch: {reason}" in run["described"]
    assert run["per_launch"] == 1
    if case == "reversed":  # the simulation plans it one step per launch too
        assert run["planned_per_launch"] == 1
    assert run["losses"] == report["reversed_one"]["losses"]
    assert run["weights"] == report["reversed_one"]["weights"]


@pytest.mark.legate
def test_other_losses_run_one_step_per_launch(report):
    assert report["mse"]["3"] == report["mse"]["1"]


@pytest.mark.legate
@pytest.mark.parametrize("value", ["0", "-2", "2.5"])
def test_a_bad_steps_per_execution_is_an_error_naming_it(report, value):
    assert report["bad"][value] == f"steps_per_execution must be a positive integer, got {value}."


@pytest.mark.parametrize("value", [0, -1])
def test_config_rejects_a_bad_steps_per_execution(value):
    with pytest.raises(FlexFlowError, match=r"steps_per_execution \(--steps-per-execution\) must"):
        FFConfig(steps_per_execution=value)


def test_config_reads_the_flag():
    assert FFConfig.from_args(["--steps-per-execution", "4"]).steps_per_execution == 4
    assert FFConfig.from_args([]).steps_per_execution == 8
