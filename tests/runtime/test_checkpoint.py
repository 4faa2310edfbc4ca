"""Checkpoints: a resumed run continues bit-identically; a checkpoint of another model is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.legate
def test_resume_is_bit_identical(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env["LEGATE_CONFIG"] = "--cpus 2 --gpus 0"
    script = Path(__file__).with_name("checkpoint_script.py")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    runs = report["runs"]
    assert not runs["random"]["updates_in_step"] and runs["dp"]["updates_in_step"]
    for run in runs.values():
        assert run["resumed_losses"] == run["losses"]
        assert run["identical_weights"]
    assert "lacks 2 weight(s) of this model (head.bias, head.kernel)" in report["refused"]
    unknown, shape = report["bad_weights"]
    assert "no weight named nope.kernel in this model; its weights are " in unknown
    assert "has shape" in shape and "got (3,)" in shape
    partial = report["partial"]
    assert partial["dp"]["flat"] and not partial["random"]["flat"]
    for run in partial.values():
        assert run["changed"] and run["kept"]
    assert report["reads"]["reads"] > 0 and report["reads"]["of_used"] == 0
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]  # no temporary file left behind
