"""Dropout in training and evaluation, under several strategies (see dropout_script.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.legate
def test_dropout_masks_per_iteration_and_passes_through_in_evaluation():
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env["LEGATE_CONFIG"] = "--cpus 2 --gpus 0"
    script = Path(__file__).with_name("dropout_script.py")
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["eval_is_identity"]
    assert report["masks_differ"]
    assert 0.3 < report["drop_fraction"] < 0.7
    dp = report["losses"]["dp"]
    for name, losses in report["losses"].items():
        assert losses == pytest.approx(dp, rel=1e-5), name  # same masks under any tiling
