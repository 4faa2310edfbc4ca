"""Atomic file writes: an exported file is either the old one or the complete new one, never half written.

Output paths are checked before the work that produces them (`check_output_path`, the argparse
type `output_file`), so a long search or training run does not end in "File exists" and lose
its result. A path of `-` is standard output; an existing stream (a device, a named pipe, or
anything under /dev or /proc, such as /dev/stdout) is written directly, since there is nothing to replace atomically; a symbolic link
keeps pointing where it did and its target is replaced.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import tempfile
from pathlib import Path

from flexflow.errors import OutputPathError

STDOUT = "-"


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """Raise OutputPathError unless a file can be written at `path`: it is not a directory, and
    its nearest existing ancestor is a directory this process may write in (the missing ones
    are created when the file is written). Nothing is created."""
    target = Path(path)
    if str(path) == STDOUT:
        return target
    if target.is_dir():
        raise OutputPathError(
            f"{path} is a directory; give a file name inside it (e.g. {target / 'out.json'})"
        )
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(
            f"cannot write {path}: {ancestor} is a file, not a directory; choose another path"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"cannot write {path}: no permission to write in {ancestor}; choose another path"
        )
    return target


def output_file(text: str) -> str:
    """argparse `type=` of an output FILE: checked when the arguments are parsed."""
    try:
        check_output_path(text)
    except OutputPathError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same directory and `os.replace`
    (an existing file's permissions kept). `-` writes to standard output, an existing device
    or pipe is written directly, a symbolic link's target is replaced."""
    if str(path) == STDOUT:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return Path(path)
    try:
        mode = os.stat(path).st_mode  # through links
    except OSError:
        mode = None
    pseudo = Path(path).absolute().parts[1:2] in (("dev",), ("proc",))  # /dev/stdout, /dev/fd/3
    if mode is not None and (pseudo or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))):
        with open(path, "ab") as handle:  # a stream: appended, as `>> /dev/stdout` would
            handle.write(data)
        return Path(path)
    target = Path(os.path.realpath(path))
    check_output_path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.chmod(tmp, mode)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode())
