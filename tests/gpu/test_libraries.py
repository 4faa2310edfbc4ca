"""The CUDA libraries are declared, found in the NVIDIA wheels, and absent ones are reported by name."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cffi import FFI

from flexflow.gpu import libraries
from flexflow.gpu.errors import MissingLibraryError


@pytest.mark.parametrize("key", sorted(libraries.CDEFS))
def test_each_library_declaration_parses_on_its_own(key):
    ffi = FFI()
    ffi.cdef(libraries.CDEFS[key])  # raises CDefError on a malformed declaration


def test_every_library_has_a_declaration():
    assert set(libraries.CDEFS) == set(libraries.LIBRARIES)


@pytest.mark.parametrize("key", ["cudart", "cublas", "nvrtc"])
def test_the_cupynumeric_wheels_provide_cudart_cublas_and_nvrtc(key):
    assert libraries.cuda_release() == 12  # what Legate's and cuPyNumeric's wheels bring
    (soname,) = (f.soname for f in libraries.LIBRARIES[key].files_for(12))
    assert libraries.wheel_directories(key), f"no nvidia/*/lib directory holds {soname}"
    assert libraries.candidate_paths(key)[0].endswith(soname)
    assert libraries.candidate_paths(key)[-1] == soname  # the system loader's turn


@pytest.mark.parametrize("key", ["cudart", "cublas", "nvrtc"])
def test_cuda_13_wheels_are_found_under_nvidia_cu13(key, tmp_path, monkeypatch):
    stem = {"cudart": "libcudart", "cublas": "libcublas", "nvrtc": "libnvrtc"}[key]
    lib_dir = tmp_path / "nvidia" / "cu13" / "lib"
    lib_dir.mkdir(parents=True)
    (lib_dir / f"{stem}.so.13").touch()
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert libraries.wheel_directories(key, 13) == [lib_dir]
    assert libraries.wheel_directories(key, 12) == []
    assert libraries.candidate_paths(key, 13) == [str(lib_dir / f"{stem}.so.13"), f"{stem}.so.13"]


def test_libraries_of_one_release_only_are_opened():
    release = libraries.cuda_release()
    assert release in libraries.RELEASES
    for key in ("cudart", "cublas", "nvrtc"):
        assert all(p.endswith(f".so.{release}") for p in libraries.candidate_paths(key))
    assert libraries.candidate_paths("cudnn")[-1] == "libcudnn.so.9"  # one cuDNN 9 for either


def test_a_library_missing_from_the_runtimes_release_names_that_release(monkeypatch):
    absent = libraries._toolkit_library("cublas", "libnosuchblas", "nosuchblas", "nvidia-nosuch")
    monkeypatch.setitem(libraries.LIBRARIES, "cublas", absent)
    monkeypatch.delitem(libraries._OPENED, "cublas", raising=False)
    release = libraries.cuda_release()
    package = "nvidia-nosuch-cu12" if release == 12 else "nvidia-nosuch"
    with pytest.raises(
        MissingLibraryError,
        match=rf"libnosuchblas\.so\.{release} \(cublas\) \(CUDA {release}, the runtime's\).*"
        rf"Install {package}",
    ):
        libraries.open_library("cublas")


@pytest.mark.parametrize("key", ["cudart", "cublas", "nvrtc"])
def test_wheel_libraries_open_without_a_gpu(key):
    assert libraries.open_library(key) is libraries.open_library(key)  # opened once, cached


def test_nvrtc_reports_its_version_without_a_gpu():
    nvrtc = libraries.open_library("nvrtc")
    major, minor = libraries.ffi.new("int *"), libraries.ffi.new("int *")
    libraries.check("nvrtc", nvrtc.nvrtcVersion(major, minor), "nvrtcVersion")
    assert major[0] == libraries.cuda_release()


def test_gpu_available_is_false_here_and_does_not_raise():
    if libraries.gpu_available():
        pytest.skip("this host has a GPU")
    assert libraries.gpu_available() is False


def test_a_missing_library_names_its_pip_package():
    if not isinstance(libraries.missing_libraries().get("cudnn"), str):
        pytest.skip("cuDNN is installed here")
    with pytest.raises(
        MissingLibraryError,
        match=r"libcudnn\.so\.9 \(cudnn\) \(CUDA 12, the runtime's\).*Install nvidia-cudnn-cu12,",
    ):
        libraries.open_library("cudnn")


def test_failed_calls_name_the_call_and_the_status():
    libraries.open_library("nvrtc")
    with pytest.raises(
        Exception, match=r"nvrtcCompileProgram failed with status 6: NVRTC_ERROR_COMPILATION"
    ):
        libraries.check("nvrtc", 6, "nvrtcCompileProgram")


@pytest.fixture
def fake_loader(monkeypatch):
    """`cuda_release` decided over a fake set of loadable sonames, with its own cache of opened
    libraries; the real choice is recomputed afterwards."""
    loadable: set[str] = set()

    def dlopen(path):
        name = Path(path).name
        if name not in loadable:
            raise OSError(f"{path}: not loadable")
        if name.startswith("libcudnn"):  # "libcudnn.so.9@12": built for CUDA 12
            return SimpleNamespace(cudnnGetCudartVersion=lambda: int(path.split("@")[1]) * 1000)
        return f"opened {name}"

    monkeypatch.setattr(libraries, "_OPENED", {})
    monkeypatch.setattr(libraries.ffi, "dlopen", dlopen)
    monkeypatch.setattr(sys, "path", [])
    libraries.cuda_release.cache_clear()
    yield loadable
    libraries.cuda_release.cache_clear()


@pytest.mark.parametrize(
    ("loadable", "release"),
    [
        ({"libcudart.so.12", "libcublas.so.12", "libnvrtc.so.12"}, 12),
        ({"libcudart.so.12", "libcublas.so.13", "libcudart.so.13", "libnvrtc.so.13"}, 13),
        ({"libcudart.so.13"}, 13),  # a system runtime alone: the release to name packages for
        ({"libcudart.so.12", "libcudart.so.13", "libnvrtc.so.13"}, 12),  # neither whole: first
        (set(), 12),
    ],
)
def test_the_release_is_the_first_whose_runtime_cublas_and_nvrtc_all_open(
    fake_loader, loadable, release
):
    fake_loader.update(loadable)
    assert libraries.cuda_release() == release
    for key in ("cudart", "cublas", "nvrtc"):
        opened = libraries._OPENED.get(key)
        assert opened is None or opened.endswith(f".so.{release}"), (key, opened)


def test_choosing_the_release_keeps_libraries_opened_before(fake_loader):
    fake_loader.update({"libcudart.so.12", "libcublas.so.12", "libnvrtc.so.12"})
    libraries._OPENED["cublas"] = "an emulated cuBLAS"
    assert libraries.cuda_release() == 12
    assert libraries._OPENED["cublas"] == "an emulated cuBLAS"
    assert libraries._OPENED["cudart"] == "opened libcudart.so.12"


def test_the_driver_alone_is_opened_to_ask_for_a_gpu(fake_loader):
    fake_loader.update({"libcuda.so.1", "libcudart.so.12", "libcublas.so.12", "libnvrtc.so.12"})
    libraries.open_library("driver")
    assert set(libraries._OPENED) == {"driver"}  # no runtime, cuBLAS or NVRTC loaded for it


@pytest.mark.parametrize("release", [12, 13])
def test_a_cudnn_built_for_the_other_cuda_release_is_passed_over(fake_loader, monkeypatch, release):
    fake_loader.update({f"libcudart.so.{release}", f"libcublas.so.{release}"})
    fake_loader.update({f"libnvrtc.so.{release}", "libcudnn.so.9@12", "libcudnn.so.9@13"})
    other = 25 - release
    monkeypatch.setattr(
        libraries,
        "_candidates",
        lambda files: (
            [f"libcudnn.so.9@{other}", f"libcudnn.so.9@{release}"]
            if files[0].soname == "libcudnn.so.9"
            else [f.soname for f in files]
        ),
    )
    assert libraries.cuda_release() == release
    assert libraries.open_library("cudnn").cudnnGetCudartVersion() == release * 1000
    libraries._OPENED.pop("cudnn")
    fake_loader.discard(f"libcudnn.so.9@{release}")
    with pytest.raises(
        MissingLibraryError,
        match=rf"libcudnn.so.9@{other}: built for CUDA {other}, and this process uses CUDA "
        rf"{release}.*nvidia-cudnn-cu{release} is the one to install",
    ):
        libraries.open_library("cudnn")


def test_the_summary_names_the_release_what_opens_and_what_to_install(fake_loader):
    fake_loader.update({"libcudart.so.13", "libcublas.so.13", "libnvrtc.so.13"})
    gpu, rest = libraries.summary().split("; ", 1)  # gpu_available() is cached for the process
    assert gpu in ("a GPU", "no GPU")
    assert (
        rest == "CUDA 13: cudart, cublas, nvrtc open; cudnn missing (pip install nvidia-cudnn-cu13)"
    )
