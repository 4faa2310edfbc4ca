"""Runs a test script in its own Legate process: Legate starts once per process, with the
processors LEGATE_CONFIG names, so tests that need a given machine run a script under it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def run_legate_script(
    name: str | Path,
    *args: str,
    cpus: int = 2,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> dict:
    """The JSON report (the last line of stdout) of tests/runtime/`name` (or the script at
    path `name`) run with `args` on `cpus` Legate CPUs and no GPU; `env` adds variables.
    Fails the test, showing the end of stderr, if the script exits non-zero."""
    return run_legate_script_said(name, *args, cpus=cpus, timeout=timeout, env=env)[0]


def run_legate_script_said(
    name: str | Path,
    *args: str,
    cpus: int = 2,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> tuple[dict, str]:
    """`run_legate_script`'s report and what the script said on stderr, its whitespace
    runs made single spaces (rich wraps long lines)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEGATE_", "LEGION_"))}
    base["LEGATE_CONFIG"] = f"--cpus {cpus} --gpus 0"
    base.update(env or {})
    proc = subprocess.run(
        [sys.executable, str(HERE / name), *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), " ".join(proc.stderr.split())
