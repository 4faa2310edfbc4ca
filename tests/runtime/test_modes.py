"""Training and evaluation modes: dropout (dropout_script.py) and batch norm's running
statistics (batchnorm_script.py), run in Legate processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_script(name: str, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env["LEGATE_CONFIG"] = "--cpus 2 --gpus 0"
    script = Path(__file__).with_name(name)
    proc = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.legate
def test_batch_norm_keeps_running_statistics_and_evaluates_with_them(tmp_path):
    report = run_script("batchnorm_script.py", str(tmp_path))
    assert report == {
        "running_matches": True,
        "eval_uses_running": True,
        "checkpoint_keeps_running": True,
    }


@pytest.mark.legate
def test_dropout_masks_per_iteration_and_passes_through_in_evaluation():
    report = run_script("dropout_script.py")
    assert report["eval_is_identity"]
    assert report["masks_differ"]
    assert 0.3 < report["drop_fraction"] < 0.7
    dp = report["losses"]["dp"]
    for name, losses in report["losses"].items():
        assert losses == pytest.approx(dp, rel=1e-5), name  # same masks under any tiling
