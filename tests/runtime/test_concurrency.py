"""Two ops placed on different processors run at the same time (times measured inside the tasks)."""

from __future__ import annotations

import pytest

from tests.runtime.scripts import run_legate_script


@pytest.mark.legate
def test_ops_on_different_cpus_overlap_in_time():
    report = run_legate_script("concurrency_script.py")
    spans = report["spans"]
    assert "element_binary 'join': device(s) 5 do not exist on machine 'local'" in report["refused"]
    overlaps = []
    for (l0, l1), (r0, r1) in zip(spans["left"], spans["right"], strict=True):
        overlap = min(l1, r1) - max(l0, r0)
        overlaps.append(overlap / min(l1 - l0, r1 - r0))
    # after the first (warm-up) iteration, the two matmuls run side by side most of the time
    assert max(overlaps[1:]) > 0.5, (spans, overlaps)
    # and the join, placed after both, starts only when both have ended
    for (_, l1), (_, r1), (j0, _) in zip(spans["left"], spans["right"], spans["join"], strict=True):
        assert j0 >= max(l1, r1)

    # data parallelism: the two devices' backward tiles run side by side too (each adds into its
    # own partial weight gradient: one shared reduction made Legate run them in turn). Some
    # iteration of 15 must show it: a run in CI once had its second device start late, tile
    # after tile, for 4 of 5 iterations; a reduction serializes every one of them.
    backward = report["backward"]
    overlaps = [
        (min(a1, b1) - max(a0, b0)) / min(a1 - a0, b1 - b0)
        for (a0, a1), (b0, b1) in zip(backward["0"], backward["1"], strict=True)
    ]
    assert max(overlaps[1:]) > 0.5, (backward, overlaps)
    # 2 tasks, one per device: each applies the last update to its copy of the weights, reads
    # its shard of the batch, then runs forward, loss and backward
    assert report["tasks_per_iteration"] == 2
