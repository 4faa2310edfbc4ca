"""Where the data sets live: Keras' cache directory, filled by download on first use.

A file already there is used as it is (a Keras install's cache is shared), so a machine
without a network runs once the files are copied in. A download goes to a temporary file
beside its destination and is renamed into place only once whole and checked, so an
interrupted one leaves nothing a later run would take for the data set.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from flexflow.errors import FlexFlowError
from flexflow.fileio import new_file_mode

DOWNLOAD_TIMEOUT_S = 60.0


def cache_dir() -> Path:
    """`$KERAS_HOME/datasets`, else `~/.keras/datasets` (where Keras keeps them)."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return Path(home) / "datasets"


def cached_file(name: str, origin: str, sha256: str | None = None) -> Path:
    """The data set file `name` in the cache, downloaded from `origin` if absent (and
    checked against `sha256` when given)."""
    path = cache_dir() / name
    if not path.exists():
        _download(origin, path, sha256)
    return path


def cached_tree(name: str, origin: str) -> Path:
    """The directory `name` a .tar.gz archive at `origin` unpacks to, in the cache."""
    path = cache_dir() / name
    if path.is_dir():
        return path
    archive = cached_file(f"{name}.tar.gz", origin)
    unpacked = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=path.parent))
    try:
        with tarfile.open(archive) as tar:
            _extract(tar, unpacked)
        inner = unpacked / name
        if not inner.is_dir():
            raise FlexFlowError(
                f"{archive} does not hold a directory {name}; remove it to download it again."
            )
        try:
            os.replace(inner, path)
        except OSError:  # another process (a rank of this run) unpacked it first
            if not path.is_dir():
                raise
    except (tarfile.TarError, EOFError) as exc:
        raise FlexFlowError(
            f"{archive} is not a whole .tar.gz archive ({exc}); remove it to download it again."
        ) from None
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    return path


def _download(origin: str, path: Path, sha256: str | None) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise FlexFlowError(
            f"cannot write the data set cache {path.parent} ({exc.strerror or exc}); set "
            "KERAS_HOME to a writable directory."
        ) from None
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(origin, timeout=DOWNLOAD_TIMEOUT_S) as response:
                    while chunk := response.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError) as exc:
                raise FlexFlowError(
                    f"could not download {origin} ({getattr(exc, 'reason', exc)}); on a machine "
                    f"without a network, copy the file to {path}."
                ) from None
        if sha256 is not None and digest.hexdigest() != sha256:
            raise FlexFlowError(
                f"the download of {origin} has SHA-256 {digest.hexdigest()}, not {sha256}; try "
                f"again, or place the file at {path}."
            )
        os.chmod(tmp, new_file_mode())  # the cache is shared, as Keras'
        os.replace(tmp, path)
    except OSError as exc:  # writing it: a full disk
        raise FlexFlowError(f"could not write {path} ({exc.strerror or exc}).") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _extract(tar: tarfile.TarFile, into: Path) -> None:
    """Unpack files and directories only, none outside `into` (tarfile's "data" filter,
    which Pythons before 3.11.4 lack, checked by hand there)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")
        return
    root = into.resolve()
    for member in tar.getmembers():
        target = (into / member.name).resolve()
        if not (member.isfile() or member.isdir()) or not target.is_relative_to(root):
            raise tarfile.TarError(f"it holds {member.name!r}, not a data set's file")
    tar.extractall(into)
