"""Batches issued without reading their results never deadlock Legate (Legate, 2 CPUs)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flexflow.runtime.batches import TASKS_IN_FLIGHT

SCRIPT = Path(__file__).with_name("unread_script.py")


@pytest.mark.legate
def test_thousands_of_unread_batches_finish_under_legions_default_window():
    """With Legion's own window (1,024 operations) only the executor's bound keeps the program
    from freeing a store while the window is full, which deadlocked against the Python tasks
    (3,000 unread batches of the runtime benchmark's MLP hung 4 runs of 4 without it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEGATE_", "LEGION_"))}
    env["LEGATE_CONFIG"] = "--cpus 2 --gpus 0"
    env["LEGION_DEFAULT_ARGS"] = "-lg:window 1024"
    proc = subprocess.run([sys.executable, str(SCRIPT), "3000"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert math.isfinite(report["loss"])
    assert report["most_unread_tasks"] <= TASKS_IN_FLIGHT + report["tasks_per_batch"]
