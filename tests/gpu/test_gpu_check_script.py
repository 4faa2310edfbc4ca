"""scripts/gpu_check.py runs from a bare checkout: only numpy and cffi, no Legate, not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cffi
import numpy
import pytest

from flexflow.gpu.libraries import gpu_available

REPO = Path(__file__).resolve().parents[2]


def _bare_site(tmp_path: Path) -> Path:
    """A directory holding only numpy, cffi and cffi's backend: what the script may rely on."""
    site = tmp_path / "site"
    site.mkdir()
    packages = Path(numpy.__file__).parent.parent
    for name in ("numpy", "numpy.libs", "cffi", "pycparser"):
        if (packages / name).exists():
            (site / name).symlink_to(packages / name)
    for backend in packages.glob("_cffi_backend*.so"):
        (site / backend.name).symlink_to(backend)
    assert Path(cffi.__file__).parent.parent == packages
    return site


@pytest.mark.skipif(gpu_available(), reason="this host has a GPU: the GPU tests run the checks")
def test_without_a_gpu_it_reports_what_is_missing_and_exits_3(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LEGATE"))}
    env["PYTHONPATH"] = str(_bare_site(tmp_path))
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-S", "scripts/gpu_check.py", "--out", str(out)],  # -S: no site-packages
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 3, result.stderr  # 2 is a usage error
    assert result.stdout.startswith("gpu_check: no usable GPU")  # before what is missing
    assert "no usable GPU" in result.stdout
    # the wheels are out of reach; a host may still have a system runtime of either release
    assert "Install nvidia-cublas" in result.stdout
    report = json.loads((out / "gpu_check.json").read_text())
    assert set(report["missing_libraries"]) >= {"cublas", "nvrtc", "cudnn"}
    assert report["checked"] is False
    assert "legate" not in result.stderr


@pytest.mark.skipif(gpu_available(), reason="this host has a GPU: the script would run every check")
def test_without_the_c_kernels_the_references_fall_back_to_the_numpy_stand_in(tmp_path):
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('gpu_check', 'scripts/gpu_check.py')\n"
        "script = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(script)\n"
        "script.kernels_built = lambda: False  # as in a checkout nobody built\n"
        f"script.main(['--out', {str(tmp_path)!r}])\n"
        "print('native:', sys.modules['flexflow.ops.native_windows'].__file__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "LEGATE"))}
    env["PYTHONPATH"] = str(_bare_site(tmp_path))
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("flexflow/gpu/native_numpy.py")
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["reference_kernels"] == "numpy stand-in (not built)"


def _gpu_profile(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/gpu_profile.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(gpu_available(), reason="this host has a GPU: the script would measure")
def test_the_gpu_profile_script_without_a_gpu_measures_nothing_and_exits_3(tmp_path):
    result = _gpu_profile("lenet", "--out", str(tmp_path / "p.json"))
    assert result.returncode == 3, result.stderr
    assert "no usable GPU" in result.stdout
    assert not (tmp_path / "p.json").exists()


def test_the_gpu_profile_script_names_a_machine_without_gpus_and_exits_1(tmp_path):
    result = _gpu_profile("lenet", "--machine", "local", "--out", str(tmp_path / "p.json"))
    assert result.returncode == 1
    assert "machine 'local' has no GPU devices to measure" in result.stderr
    assert _gpu_profile("lenet", "--repeats", "0", "--out", "p.json").returncode == 2


def test_the_gpu_profile_script_checks_its_output_path_before_measuring(tmp_path):
    result = _gpu_profile("lenet", "--out", str(tmp_path))
    assert result.returncode == 1
    assert f"{tmp_path} is a directory; give a file name inside it" in result.stderr


def test_a_gpu_of_another_chip_than_the_machines_is_recognised():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from gpu_profile import same_chip
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert same_chip("NVIDIA H200", "H200 SXM")
    assert same_chip("Tesla P100-SXM2-16GB", "Tesla P100-SXM2")
    assert not same_chip("NVIDIA H100 80GB HBM3", "H200 SXM")
    assert not same_chip("NVIDIA H200", "a GPU")  # no chip name: never taken as a match
