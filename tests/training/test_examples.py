"""The examples other than train.py (tests/training/test_digits.py runs that one)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.training.helpers import ROOT, legate_env


@pytest.mark.legate
def test_flexflows_mlp_example_runs_as_flexflow_writes_it_and_learns_the_digits():
    script = ROOT / "examples" / "flexflow_mlp.py"
    proc = subprocess.run(
        [sys.executable, str(script), "-b", "64", "-e", "10", "--lr", "0.05"],
        env=legate_env(2), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "batchSize(64) workersPerNodes(2) numNodes(1)" in proc.stdout  # FFConfig() read -b
    assert "THROUGHPUT = " in proc.stdout  # get_current_time, create_data_loader
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", proc.stdout).group(1))
    assert accuracy >= 90.0
    assert "epoch 10/10: loss" in proc.stderr  # a line per epoch
