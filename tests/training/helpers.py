"""Running training scripts in their own Legate processes (Legate starts once per process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def legate_env(cpus: int = 2) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env["LEGATE_CONFIG"] = f"--cpus {cpus} --gpus 0"
    return env


def run_train(
    *args: str,
    cpus: int = 2,
    launcher: bool = False,
    flags_after_script: bool = False,
    timeout: int = 600,
):
    """`examples/train.py ARGS --json` under `python` (LEGATE_CONFIG) or the `legate` launcher,
    its flags before the script or, `flags_after_script`, after it (`flexflow.relaunch`); the
    completed process and its JSON report (None when it failed)."""
    script = str(ROOT / "examples" / "train.py")
    if launcher:
        legate = shutil.which("legate", path=str(Path(sys.executable).parent))
        flags = ["--cpus", str(cpus), "--gpus", "0"]
        if flags_after_script:
            command = [legate, script, *flags, *args, "--json"]
        else:
            command = [legate, *flags, script, *args, "--json"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    else:
        command = [sys.executable, script, *args, "--json"]
        env = legate_env(cpus)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    report = None
    if proc.returncode == 0:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    return proc, report
