"""Compiling a kernel's CUDA source as host C++ (g++) for tests that run its lines on the CPU."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest


def compile_host(source: str, folder, name: str) -> ctypes.CDLL:
    """`source` built as a shared library `name`.so in `folder` and loaded; the test is
    skipped where there is no g++."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ to compile the kernels' source for the host")
    (folder / f"{name}.cpp").write_text(source)
    library = folder / f"{name}.so"
    subprocess.run(
        ["g++", "-O1", "-shared", "-fPIC", "-o", str(library), str(folder / f"{name}.cpp")],
        check=True,
        capture_output=True,
    )
    return ctypes.CDLL(str(library))
