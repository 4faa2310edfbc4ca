"""Step tasks with C++ bodies (flexflow.runtime.native_tasks) train exactly as the same steps in
Python bodies: the same loss bits each step and the same weights, under data parallelism and on
one device, SGD with momentum and Adam (their pending updates run in the C++ body), a padded
last batch, with and without a leading flat; labels also reach them as int64 Legate stores
(other label types keep Python bodies) (Legate, 2 CPUs)."""

from __future__ import annotations

import pytest

from flexflow.ops import blas
from tests.runtime.scripts import run_legate_script

# native steps need MKL's sgemm (flexflow.runtime.native_step); without it steps run op by op
pytestmark = pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")

STEPS = 6


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script("native_tasks_script.py")


CASES = [
    f"{m}/{s}/{o}" for m in ("dense", "flat") for s in ("dp", "single") for o in ("sgd", "adam")
]


@pytest.mark.legate
@pytest.mark.parametrize("case", CASES)
def test_cpp_bodies_train_bit_identically_to_python_bodies(report, case):
    runs = report[case]
    devices = 2 if "/dp/" in case else 1
    assert runs["cpp"]["cpp"] == STEPS * devices  # every step task ran in C++
    assert runs["cpp"]["predicted_cpp_per_step"] == devices  # as flexflow.launches counts
    assert runs["python"]["cpp"] == 0  # cpp_steps=False
    assert runs["cpp"]["losses"] == runs["python"]["losses"]
    assert runs["cpp"]["weights"] == runs["python"]["weights"]


@pytest.mark.legate
@pytest.mark.parametrize("case", CASES)
def test_labels_in_stores(report, case):
    runs = report[case]
    devices = 2 if "/dp/" in case else 1
    assert runs["int64_store"]["cpp"] == STEPS * devices
    assert runs["int64_store"]["losses"] == runs["cpp"]["losses"]
    assert runs["int64_store"]["weights"] == runs["cpp"]["weights"]
    assert runs["int32_store"]["cpp"] == 0  # the C++ step reads int64 labels only
    assert runs["int32_store"]["losses"] == runs["cpp"]["losses"]


@pytest.mark.legate
def test_a_label_out_of_range_in_a_store_is_an_error_naming_it(report):
    assert "a label outside [0, classes)" in report["out_of_range"]


@pytest.mark.legate
@pytest.mark.parametrize("case", CASES)
def test_a_timeline_times_the_cpp_steps_and_their_updates(report, case):
    """Recording a timeline keeps C++ bodies; each step and each pending update it applied is
    an entry, timed on the processors' threads (ff_step_log)."""
    run, devices = report[case]["cpp_timeline"], 2 if "/dp/" in case else 1
    assert run["cpp"] == STEPS * devices
    assert run["losses"] == report[case]["cpp"]["losses"]
    assert run["steps_timed"] == STEPS * devices
    assert run["updates_timed"] == (STEPS - 1) * devices  # the first step has none pending
    assert run["threads"] == devices
    # inside each step (native/step.c's log): every op's forward and backward and the loss,
    # nested in the step's entry, forwards in the graph's order, then the loss, then backwards
    assert run["inside"] == STEPS * devices * (2 * run["ops"] + 1)
    assert run["inside_nested"]
    assert run["first_step_in_order"], run["first_step_order"]
