"""Batches issued without reading their results never deadlock Legate (Legate, 2 CPUs)."""

from __future__ import annotations

import math

import pytest

from flexflow.runtime.batches import TASKS_IN_FLIGHT
from tests.runtime.scripts import run_legate_script


@pytest.mark.legate
def test_thousands_of_unread_batches_finish_under_legions_default_window():
    """With Legion's own window (1,024 operations) only the executor's bound keeps the program
    from freeing a store while the window is full, which deadlocked against the Python tasks
    (3,000 unread batches of the runtime benchmark's MLP hung 4 runs of 4 without it)."""
    report = run_legate_script(
        "unread_script.py", "3000", timeout=300, env={"LEGION_DEFAULT_ARGS": "-lg:window 1024"}
    )
    assert math.isfinite(report["loss"])
    assert report["most_unread_tasks"] <= TASKS_IN_FLIGHT + report["tasks_per_batch"]
