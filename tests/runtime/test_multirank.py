"""Two Legate ranks on this host (UCX over loopback and shared memory, MPICH's mpirun) train LeNet
and an MLP to the same losses as one rank with the same two CPU processors.

What a multi-rank run needs, all installed by scripts/setup.sh (`cluster` extra):
- MPICH (the `mpich` wheel): `legate --launcher mpirun` starts the ranks with its mpirun, and
  Legate's bundled MPI wrapper and UCX bootstrap plugin for MPICH link its libmpi.so.12.
- A UCX whose InfiniBand module loads (the mpich wheel's, with libibverbs.so.1): Realm sets
  UCX_IB_SEG_SIZE, which the libucx-cu12 wheel's UCX rejects ("ucp_config_modify failed
  UCX_IB_SEG_SIZE 8192"). .venv/lib/legate-network names it and libmpi.so the way Legate looks
  for them; RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true makes Legate load that UCX.
- A rank count Legate 25.11 reads: it joins the ranks only when OMPI_COMM_WORLD_SIZE,
  MV2_COMM_WORLD_SIZE or SLURM_NTASKS says there are several; MPICH sets only PMI_SIZE, which
  `import flexflow` passes on as MV2_COMM_WORLD_SIZE (flexflow.bootstrap), so this test sets
  none of them.
"""

from __future__ import annotations

import ctypes.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("multirank_script.py")
BIN = Path(sys.executable).parent
NETWORK_LIBRARIES = Path(sys.prefix) / "lib" / "legate-network"
RANKS = 2


def _missing() -> str | None:
    if not (BIN / "mpirun").exists() or not (NETWORK_LIBRARIES / "libucp.so").exists():
        return (
            f"no MPICH mpirun in {BIN} or no {NETWORK_LIBRARIES}; run scripts/setup.sh "
            "(it installs the `cluster` extra and links MPICH's UCX)"
        )
    if ctypes.util.find_library("ibverbs") is None:
        return "libibverbs.so.1 is missing (Debian: apt-get install libibverbs1)"
    return None


def _run(command: list[str], env: dict[str, str]) -> list[dict]:
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.mark.legate
@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_two_ranks_train_lenet_like_one():
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEGATE_", "LD_"))}
    one = _run([sys.executable, str(SCRIPT)], {**base, "LEGATE_CONFIG": "--cpus 2 --gpus 0"})
    network = {
        "PATH": f"{BIN}{os.pathsep}{base.get('PATH', '')}",
        "LD_LIBRARY_PATH": str(NETWORK_LIBRARIES),
        "RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY": "true",
        "UCX_WARN_UNUSED_ENV_VARS": "n",
    }
    launch = [str(BIN / "legate"), "--launcher", "mpirun", "--ranks-per-node", str(RANKS)]
    ranks = _run([*launch, "--cpus", "1", "--gpus", "0", str(SCRIPT)], {**base, **network})

    assert [r["rank"] for r in sorted(ranks, key=lambda r: r["rank"])] == list(range(RANKS))
    (reference,) = one
    assert (reference["nodes"], reference["devices"]) == (1, 2)
    from flexflow.ops import blas

    assert reference["native_steps"] == (2 if blas.sgemm_address() is not None else 0)
    assert reference["nmt_native_steps"] == reference["native_steps"]
    for report in ranks:
        assert (report["nodes"], report["devices"]) == (RANKS, 2)  # `local` sees both ranks
        for got, want in zip(report["losses"], reference["losses"], strict=True):
            assert math.isclose(got, want, rel_tol=1e-5), (report["losses"], reference["losses"])
        # the MLP's steps as one C call each: the batch reaches them as stores across ranks
        for got, want in zip(report["mlp_losses"], reference["mlp_losses"], strict=True):
            assert math.isclose(got, want, rel_tol=1e-5), (report, reference["mlp_losses"])
        assert report["native_steps"] == reference["native_steps"]
        # ... in C++ task bodies (flexflow.runtime.native_tasks), on one rank and on two
        assert report["cpp_steps"] == reference["cpp_steps"]
        # NMT's two inputs of int32 ids reach its C steps as stores across ranks
        for got, want in zip(report["nmt_losses"], reference["nmt_losses"], strict=True):
            assert math.isclose(got, want, rel_tol=1e-5), (report, reference["nmt_losses"])
        assert report["nmt_native_steps"] == reference["nmt_native_steps"]
        # evaluation batches as one C call per device, their inputs as stores across ranks
        for name in ("evaluated", "nmt_evaluated"):
            (loss, correct), (want_loss, want_correct) = report[name], reference[name]
            assert math.isclose(loss, want_loss, rel_tol=1e-5), (name, report[name])
            assert correct == want_correct, (name, report[name], reference[name])
        # a channel split's gradient in parts, a batch norm's statistics in rows, across ranks
        for got, want in zip(report["split_losses"], reference["split_losses"], strict=True):
            assert math.isclose(got, want, rel_tol=1e-5), (report, reference["split_losses"])
        assert report["split_parts"] == reference["split_parts"] == 1
    # the ranks' offers reach every rank; one search's pick is trained by both
    assert [r["table"] for r in ranks] == [[[0.0, 1.0], [1.0, 11.0]]] * RANKS
    assert reference["table"] == [[0.0, 1.0]]
    first, second = ranks
    assert first["plan"] == second["plan"]
    assert "agreed across 2 ranks" in first["plan_source"]
    assert "agreed" not in reference["plan_source"]  # one rank keeps its own
    assert first["searched_losses"] == second["searched_losses"]
    if reference["native_steps"]:
        assert reference["cpp_steps"] == reference["native_steps"] * len(reference["mlp_losses"])
