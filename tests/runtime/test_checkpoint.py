"""Checkpoints: a resumed run continues bit-identically; a checkpoint of another model is refused."""

from __future__ import annotations

import pytest

from tests.runtime.scripts import run_legate_script


@pytest.mark.legate
def test_resume_is_bit_identical(tmp_path):
    report = run_legate_script("checkpoint_script.py", str(tmp_path))
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
    assert report["reads"]["running"] == 1  # of_used covers batch norm's statistics too
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]  # no temporary file left behind
