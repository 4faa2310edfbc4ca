"""Smoke check of an installed flexflow, run by docker/install.sh under `legate --cpus 1 --gpus 0`
and, with MPICH, on two ranks (`legate --launcher mpirun --ranks-per-node 2`).

Imports every installed flexflow module (a missing subpackage or dependency fails here), checks
that flexflow comes from the environment given as the first argument (not from a source
checkout), and runs one SGD step of a small MLP through the Legate runtime. The optional second
argument is the rank count Legate must report (so that ranks which failed to join each other and
ran alone do not pass).
"""

import importlib
import math
import pkgutil
import sys
from pathlib import Path

import numpy as np

import flexflow  # first: prepares Legate for this host
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.runtime import Executor
from flexflow.strategies import named_strategy

BATCH = 16


def main(prefix: Path, ranks: int) -> None:
    package = Path(flexflow.__file__).resolve().parent
    if prefix.resolve() not in package.parents:
        sys.exit(f"smoke: flexflow was imported from {package}, not from the environment {prefix}")
    found = pkgutil.walk_packages(flexflow.__path__, "flexflow.")
    modules = [m.name for m in found if m.name != "flexflow.__main__"]  # __main__ runs the CLI
    for name in modules:
        importlib.import_module(name)

    from legate.core import get_legate_runtime  # after flexflow, which prepares Legate

    nodes = get_legate_runtime().node_count
    if nodes != ranks:
        sys.exit(f"smoke: Legate has {nodes} ranks, expected {ranks}")

    model = FFModel(FFConfig(batch_size=BATCH))
    x = model.create_tensor((BATCH, 32), name="x")
    model.softmax(model.dense(model.dense(x, 16, ActiMode.AC_MODE_RELU), 4))
    graph = model.graph()
    strategy = named_strategy("dp", graph, parse_machine("local"))
    rng = np.random.default_rng(0)
    images = rng.random((BATCH, 32), dtype=np.float32)
    labels = rng.integers(0, 4, BATCH)
    with Executor(graph, strategy, learning_rate=0.1) as executor:
        loss = float(executor.step({"x": images}, labels, "sparse_categorical_crossentropy"))
    if not math.isfinite(loss):
        sys.exit(f"smoke: the training step's loss is {loss}")
    print(
        f"smoke: ok: {len(modules)} modules from {package}, one training step on {nodes} rank(s), "
        f"loss {loss:.4f}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1)
