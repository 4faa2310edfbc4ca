"""FlexFlow's own Keras example scripts run unchanged (read from a FlexFlow checkout's git
history: $FLEXFLOW_REPO, default the mirror this project was built against; skipped
without one), with a learnable synthetic MNIST in a temporary KERAS_HOME, under
`legate --cpus 2 --gpus 0 SCRIPT -b 64 -e 1`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(os.environ.get("FLEXFLOW_REPO", "/work/.mirror/flexflow+FlexFlow/repo"))
EXAMPLES = "examples/python/keras"

pytestmark = [
    pytest.mark.legate,
    pytest.mark.skipif(not REPO.exists(), reason=f"no FlexFlow checkout at {REPO}"),
]


def flexflow_file(path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "show", f"HEAD:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def synthetic_mnist(folder: Path) -> None:
    """60,000 and 10,000 digits of MNIST's file format whose class is a bright block's place
    (FlexFlow's MLP scripts reshape to exactly 60,000 samples)."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, count in (("train", 60_000), ("test", 10_000)):
        labels = rng.integers(0, 10, count).astype(np.uint8)
        x = rng.integers(0, 40, (count, 784), dtype=np.uint8)
        for k in range(10):
            x[np.ix_(labels == k, np.arange(k * 78, k * 78 + 19))] = 255
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x.reshape(count, 28, 28), labels
    folder.mkdir(parents=True)
    np.savez(folder / "mnist.npz", **arrays)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("flexflow_keras")
    for name in ("accuracy.py", *SCRIPTS):
        (where / name).write_text(flexflow_file(f"{EXAMPLES}/{name}"))
    synthetic_mnist(where / "keras" / "datasets")
    return where


SCRIPTS = {
    "elementwise_max_min.py": 4,  # two models, two epochs each
    "elementwise_mul_broadcast.py": 6,  # (B, 10, 1) x (B, 10, 2) three ways, two epochs each
    "unary.py": 0,  # compiles and init_layers only
    "reduce_sum.py": 6,
    "rsqrt.py": 2,
    "func_mnist_mlp.py": 1,  # 20 epochs asked; EpochVerifyMetrics stops after one at >90%
    "seq_mnist_mlp_net2net.py": 2,  # teacher, then the student from its weights
    "regularizer.py": 2,  # a Dense with kernel_regularizer=L2(0.001), Adam, two epochs
    "gather.py": 2,  # (B, 20, 3) gathered along axis 1 by an int32 (B, 6, 3) input
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_flexflows_keras_example_runs_unchanged(scripts, name):
    legate = shutil.which("legate", path=str(Path(sys.executable).parent))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEGATE_", "LEGION_"))}
    env["KERAS_HOME"] = str(scripts / "keras")
    # the scripts run in a temporary folder: this checkout's flexflow, whatever PYTHONPATH says
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [legate, "--cpus", "2", "--gpus", "0", name, "-b", "64", "-e", "1"],
        cwd=scripts,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    epochs = [line for line in said.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == SCRIPTS[name], said[-3000:]
