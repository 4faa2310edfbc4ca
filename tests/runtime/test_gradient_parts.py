"""Gradients added into from several devices at once, in parts (Legate, 2 CPUs)."""

from __future__ import annotations

import pytest

from tests.runtime.scripts import run_legate_script


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script("gradient_parts_script.py", timeout=600)


@pytest.mark.legate
def test_two_overlapping_reductions_of_one_task_both_count(report):
    """The encoder's attention split by sequence: each task's query rows and whole keys go to
    two parts, and training matches one device (it did not, run first in a process)."""
    attention = report["attention"]
    assert attention["parts"], attention
    assert attention["loss"] <= 1.0 and attention["weights"] <= 1.0, attention


@pytest.mark.legate
def test_a_channel_split_convolution_adds_its_input_gradient_from_both_devices_at_once(report):
    conv = report["conv"]
    assert conv["parts"] == {"first:0": 2}, conv["parts"]
    assert conv["loss"] <= 1.0 and conv["weights"] <= 1.0, conv
    backward = conv["backward"]
    overlaps = [
        (min(a1, b1) - max(a0, b0)) / min(a1 - a0, b1 - b0)
        for (a0, a1), (b0, b1) in zip(backward["0"], backward["1"], strict=True)
    ]
    # one reduction into one store ran the two tasks one after the other in every iteration;
    # after the first (warm-up), some iteration of 12 shows them side by side
    assert max(overlaps[1:]) > 0.5, (backward, overlaps)
