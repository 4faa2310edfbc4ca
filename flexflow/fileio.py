"""Atomic file writes: an exported file is either the old one or the complete new one, never half written.

Output paths are checked before the work that produces them (`check_output_path`, the argparse
type `output_file`), so a long search or training run does not end in "File exists" and lose
its result. A path of `-` is standard output; an existing stream (a device, a named pipe, or
anything under /dev or /proc, such as /dev/stdout) is written directly, since there is nothing to replace atomically; a symbolic link
keeps pointing where it did and its target is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flexflow.errors import FlexFlowError, OutputPathError

STDOUT = "-"


def check_output_path(path: str | os.PathLike[str], example_suffix: str = ".json") -> Path:
    """Raise OutputPathError unless a file can be written at `path`: it is not a directory, and
    its nearest existing ancestor is a directory this process may write in (the missing ones
    are created when the file is written). Nothing is created. `example_suffix` is that of
    the file name a refusal suggests."""
    target = Path(path)
    if str(path) == STDOUT:
        return target
    if not str(path):
        raise OutputPathError(f"an empty path; give a file name (e.g. out{example_suffix})")
    if target.is_dir():
        raise OutputPathError(
            f"{path} is a directory; give a file name inside it "
            f"(e.g. {target / f'out{example_suffix}'})"
        )
    if str(path).endswith(os.sep):  # Path() drops the slash: it would write the file
        raise OutputPathError(
            f"{path} ends with {os.sep}, naming a directory; give a file name (e.g. "
            f"{str(path).rstrip(os.sep) or '.'}{os.sep}out{example_suffix})"
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


def argument_type(check: Callable[[str], object]) -> Callable[[str], str]:
    """An argparse `type=` that runs `check` on the text, its OutputPathError the usage error."""

    def parse(text: str) -> str:
        try:
            check(text)
        except OutputPathError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return parse


output_file = argument_type(check_output_path)
"""argparse `type=` of an output FILE: checked when the arguments are parsed."""


def check_outputs(
    outputs: Mapping[str, object],
    reads: Mapping[str, object] | None = None,
    report: str | None = None,
    rewrites: frozenset[tuple[str, str]] = frozenset(),
) -> list[str]:
    """Raise FlexFlowError when two of a run's `outputs` (flag -> path; None: not given) would
    write one file, or both standard output (`-` or /dev/stdout, with `report`, a flag that
    prints there, such as --json), or when an output would replace a file the run reads
    (`reads`: what it is -> path, e.g. "the model file") other than as `rewrites` allows
    ((output flag, what it reads): a strategy checked or imported and written back): the later
    write would silently replace the other, and one over the model file would lose the user's
    code. Devices and pipes are written, not replaced (`atomic_write_bytes`): not compared.
    Checked before any work; returns the output flags that write to standard output."""
    reads = reads or {}
    given = {flag: str(path) for flag, path in outputs.items() if path is not None}
    to_stdout = [flag for flag, path in given.items() if path in (STDOUT, "/dev/stdout")]
    if len(to_stdout) + (report is not None) > 1:
        both = " and ".join(to_stdout + ([report] if report else []))
        raise FlexFlowError(
            f"{both} would both write to standard output; give all but one a file name."
        )
    claimed: dict[str, str] = {}  # real path -> what reads it, or the flag writing it
    for what, path in reads.items():
        if path is not None and os.path.isfile(path):
            claimed[os.path.realpath(path)] = what
    for flag, path in given.items():
        if path == STDOUT or (os.path.exists(path) and not os.path.isfile(path)):
            continue  # standard output, a device or a pipe: written to, not replaced
        real = os.path.realpath(path)
        other = claimed.get(real)
        if other is not None and other in reads and (flag, other) not in rewrites:
            raise FlexFlowError(
                f"{flag} {path} is {other} this run reads, which writing it would replace; "
                f"give {flag} another path."
            )
        if other is not None and other not in reads:
            raise FlexFlowError(
                f"{other} and {flag} both name {path}; the later write would replace the other: "
                "give each its own file."
            )
        claimed[real] = flag
    return to_stdout


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
        try:
            with open(path, "ab") as handle:  # a stream: appended, as `>> /dev/stdout` would
                handle.write(data)
        except OSError as exc:  # named: `No space left on device` alone names no file
            raise OSError(
                exc.errno, f"{exc.strerror or exc} (writing to it failed)", str(path)
            ) from None
        return Path(path)
    target = Path(os.path.realpath(path))
    check_output_path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else new_file_mode()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:  # no temporary file to remove; named after the file asked for
        raise _not_written(exc, path) from None
    try:
        os.chmod(tmp, mode)  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:  # named after the file asked for, not the temporary one
        Path(tmp).unlink(missing_ok=True)
        raise _not_written(exc, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(path)


def _not_written(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """`exc` named after the file asked for (not the temporary file beside it)."""
    return OSError(
        exc.errno, f"{exc.strerror or exc} (not written; the file is as it was)", str(path)
    )


def new_file_mode() -> int:
    """The permissions a file created now gets (0o666 less the umask): a temporary file
    renamed into place is given them (mkstemp makes 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def read_text(path: str | os.PathLike[str], what: str, error: type[Exception]) -> str:
    """The text of the file `what` (e.g. "strategy file") at `path`, UTF-8 with or without a
    byte-order mark (Notepad writes one); `error` naming the file and the fix when it does not
    exist, is a directory or a device (/dev/zero would be read forever), or is not text (a
    checkpoint given as a strategy)."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{what} '{path}' is a directory; pass the path of the file.")
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise error(f"{what} '{path}' is a device, not a file; pass the path of the file.")
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{what} '{path}' does not exist; check the path.") from None
    except OSError as exc:
        raise error(f"cannot read {what} '{path}': {exc.strerror or exc}.") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        archive = " (it is a zip archive: a checkpoint?)" if raw[:4] == b"PK\x03\x04" else ""
        raise error(
            f"{what} '{path}' is not a JSON text file{archive}: byte {raw[exc.start]:#04x} at "
            f"position {exc.start} is not UTF-8; pass the {what} itself."
        ) from None


def load_json(path: str | os.PathLike[str], what: str, error: type[Exception], fix: str) -> Any:
    """The JSON value of the file `what` at `path` (`read_text`); `error` naming the file, where
    its JSON breaks and `fix` (what to do) when it is empty or not JSON."""
    text = read_text(path, what, error)
    if not text.strip():
        raise error(f"{what} {path} is empty; {fix}")
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError as exc:
        raise error(
            f"{what} {path} gives {exc.key!r} twice in one object (JSON readers keep either "
            f"value); {fix}"
        ) from None
    except json.JSONDecodeError as exc:
        raise error(
            f"{what} {path} is malformed or truncated: {exc.msg} at line {exc.lineno} column "
            f"{exc.colno}; {fix}"
        ) from None
    except RecursionError:
        raise error(f"{what} {path}: its JSON nests too deeply to be one; {fix}") from None


class DuplicateKeyError(ValueError):
    """A JSON object gives one key twice (`unique_keys`)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refusing a key given twice (`json` would keep the last silently:
    a hand-edited file's `"devices"` written twice must not pass as the second)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKeyError(key)
        found[key] = value
    return found
