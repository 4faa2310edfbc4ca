"""Legate launcher flags written after a script's name: `legate train.py --cpus 2 --gpus 0`.

The `legate` driver reads its own flags only before the script (`legate --cpus 2 train.py`);
after it, they are the script's arguments, so `legate examples/train.py --cpus 2 --gpus 0`
would reach argparse as unknown flags. A script that takes them (`examples/train.py`) calls
`relaunch_with_launcher_flags` first: where its arguments hold any of `LAUNCHER_FLAGS`, it runs
again through the `legate` driver with those flags before the script and the rest after it,
replacing this process (`os.execv`: nothing has started Legate yet, and nothing is lost). So the
same command line works however it is started (`legate`, `python`), and the resources a run gets
are the ones named, not the defaults of the first process.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from flexflow.errors import FlexFlowError

LAUNCHER_FLAGS = frozenset(
    {
        "--cpus",
        "--gpus",
        "--omps",
        "--ompthreads",
        "--utility",
        "--sysmem",
        "--numamem",
        "--fbmem",
        "--zcmem",
        "--regmem",
        "--nodes",
        "--ranks-per-node",
        "--launcher",
        "--launcher-extra",
    }
)
"""The driver's flags for the processors, memories and processes of a run, each with one value
(`legate --help`); the driver's other flags (`--profile`, `--verbose`, ...) are not taken here,
since a script may have flags of the same names."""

RELAUNCHED = "FLEXFLOW_RELAUNCHED"
"""Set in the relaunched process, which must not relaunch again."""


def split_launcher_flags(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the launcher flags in `argv` with their values, as the driver takes them; the rest, in
    order). Takes `--cpus 2` and `--cpus=2`; stops at `--`, after which everything is the
    script's."""
    flags: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name = arg.split("=", 1)[0]
        if name not in LAUNCHER_FLAGS:
            rest.append(arg)
        elif "=" in arg:
            flags.append(arg)
        elif i + 1 < len(argv):
            flags.extend((arg, argv[i + 1]))
            i += 1
        else:
            raise FlexFlowError(f"{arg} needs a value (as in `legate {arg} 2 script.py`).")
        i += 1
    return flags, rest


def legate_driver() -> str:
    """The `legate` driver of this Python environment (beside its interpreter), else on PATH."""
    beside = Path(sys.executable).with_name("legate")
    if beside.exists():
        return str(beside)
    found = shutil.which("legate")
    if found is None:
        raise FlexFlowError(
            "launcher flags such as --cpus need the `legate` driver, which is not installed "
            "beside this Python or on PATH; install the project (bash scripts/setup.sh)."
        )
    return found


def relaunch_with_launcher_flags(script: str, argv: Sequence[str]) -> list[str]:
    """`argv` when it holds no launcher flag; otherwise runs `legate FLAGS script REST` in
    place of this process (saying so on stderr) and does not return."""
    flags, rest = split_launcher_flags(argv)
    if not flags:
        return list(argv)
    if os.environ.get(RELAUNCHED):
        raise FlexFlowError(
            f"launcher flags {' '.join(flags)} reached the script after it was relaunched with "
            f"them; put them before the script: legate {' '.join(flags)} {script} ..."
        )
    command = [legate_driver(), *flags, script, *rest]
    sys.stderr.write(f"{Path(script).name}: running {shlex.join(command)}\n")
    sys.stderr.flush()
    os.environ[RELAUNCHED] = "1"
    os.execv(command[0], command)
    raise AssertionError("unreachable: execv returns only by raising")
