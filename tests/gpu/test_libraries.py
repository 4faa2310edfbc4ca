"""The CUDA libraries are declared, found in the NVIDIA wheels, and absent ones are reported by name."""

from __future__ import annotations

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
    directories = libraries.wheel_directories(key)
    assert directories, f"no nvidia/*/lib directory holds {libraries.LIBRARIES[key].soname}"
    assert libraries.candidate_paths(key)[0].endswith(libraries.LIBRARIES[key].soname)
    assert libraries.candidate_paths(key)[-1] == libraries.LIBRARIES[key].soname  # system path


@pytest.mark.parametrize("key", ["cudart", "cublas", "nvrtc"])
def test_wheel_libraries_open_without_a_gpu(key):
    assert libraries.open_library(key) is libraries.open_library(key)  # opened once, cached


def test_nvrtc_reports_its_version_without_a_gpu():
    nvrtc = libraries.open_library("nvrtc")
    major, minor = libraries.ffi.new("int *"), libraries.ffi.new("int *")
    libraries.check("nvrtc", nvrtc.nvrtcVersion(major, minor), "nvrtcVersion")
    assert major[0] == 12


def test_gpu_available_is_false_here_and_does_not_raise():
    if libraries.gpu_available():
        pytest.skip("this host has a GPU")
    assert libraries.gpu_available() is False


def test_a_missing_library_names_its_pip_package():
    if not isinstance(libraries.missing_libraries().get("cudnn"), str):
        pytest.skip("cuDNN is installed here")
    with pytest.raises(MissingLibraryError, match=r"libcudnn\.so\.9.*nvidia-cudnn-cu12"):
        libraries.open_library("cudnn")


def test_failed_calls_name_the_call_and_the_status():
    libraries.open_library("nvrtc")
    with pytest.raises(
        Exception, match=r"nvrtcCompileProgram failed with status 6: NVRTC_ERROR_COMPILATION"
    ):
        libraries.check("nvrtc", 6, "nvrtcCompileProgram")
