"""FlexFlow's gather under Legate (2 CPUs): dense -> reshape -> gather -> reshape -> dense, the
index an int32 model input with repeated values, trains under data parallelism, random
strategies and the gather split along its dim (each tile reads the input whole along it and
their gradients of it are summed) or along the channel, as on one device and as the numpy
reference does (tests/runtime/gather_script.py); fit refuses an index out of range by name;
FlexFlow's native demo_gather.py runs unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.scripts import run_legate_script

STRATEGIES = 3

pytestmark = pytest.mark.legate


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script("gather_script.py", str(STRATEGIES), timeout=900)


def test_one_device_matches_the_numpy_reference(report):
    assert report["gather"]["single_vs_numpy_loss"] <= 1.0
    assert report["gather"]["single_vs_numpy_weights"] <= 1.0


def test_every_strategy_trains_like_one_device(report):
    strategies = report["gather"]["strategies"]
    # one device, data parallel, mixed, the random ones, the gather split two ways
    assert set(strategies) == {"single", "dp", "mixed", "gather dim", "channel"} | {
        f"random{s}" for s in range(STRATEGIES)
    }
    failing = {name: r for name, r in strategies.items() if r["loss"] > 1.0 or r["weights"] > 1.0}
    assert failing == {}
    assert {"(1, 2, 1)", "(1, 1, 2)", "(2, 1, 1)"} <= set(report["gather"]["splits"])


def test_the_launch_count_predicts_the_tasks_each_step_issues(report):
    counts = report["gather"]["task_counts"]
    assert {name: c for name, c in counts.items() if set(c[0]) != {c[1]}} == {}


def test_fit_refuses_an_index_out_of_range_naming_the_layer(report):
    assert report["refused_index"] == (
        "ShapeError: input 'index' holds index 20, outside [0, 20) of gather 'gather' (input "
        "(8, 20, 2), gathering along dim 1); indices count from 0: map them into [0, 20)."
    )


def test_flexflows_op_script_flow_reads_numpys_values(report):
    result = report["flexflow_op"]
    assert result["shape"] == [8, 5, 4, 10] and result["max_error"] == 0.0
    assert result["refusal"] == (
        "ShapeError: gather 'gather_layer': index must have the input's rank, got input "
        "(8, 5, 10, 10) (rank 4) and index (8,) (rank 1); give the index one entry per input "
        "position on every dim but the gather dim."
    )


REPO = Path(os.environ.get("FLEXFLOW_REPO", "/work/.mirror/flexflow+FlexFlow/repo"))


@pytest.mark.skipif(not REPO.exists(), reason=f"no FlexFlow checkout at {REPO}")
def test_flexflows_native_demo_gather_runs_unchanged(tmp_path):
    """examples/python/native/demo_gather.py: attach_numpy_array of the inputs and labels,
    then 100 forward/backward/update iterations of a dense layer and a gather."""
    script = tmp_path / "demo_gather.py"
    script.write_text(
        subprocess.run(
            ["git", "-C", str(REPO), "show", "HEAD:examples/python/native/demo_gather.py"],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    legate = shutil.which("legate", path=str(Path(sys.executable).parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEGATE_", "LEGION_"))}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [legate, "--cpus", "2", "--gpus", "0", script.name],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("Demo Gather\n(64, 6, 5)\n")
