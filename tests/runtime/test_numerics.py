"""Any valid strategy trains to the same numbers as one device, and one device matches numpy (Legate, 2 CPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("numerics_script.py")


@pytest.fixture(scope="module")
def report() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env["LEGATE_CONFIG"] = "--cpus 2 --gpus 0"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "10"], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.legate
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_one_device_matches_the_numpy_reference(report, model):
    assert report[model]["single_vs_numpy_loss"] <= 1.0
    assert report[model]["single_vs_numpy_weights"] <= 1.0


@pytest.mark.legate
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_every_strategy_trains_like_one_device(report, model):
    strategies = report[model]["strategies"]
    assert len(strategies) == 12  # one device, data parallel and 10 random strategies
    failing = {name: r for name, r in strategies.items() if r["loss"] > 1.0 or r["weights"] > 1.0}
    assert failing == {}
    # the random strategies really split ops in several dimensions
    assert len(report[model]["splits"]) >= 3
