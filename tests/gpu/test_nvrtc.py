"""Every CUDA source compiles with NVRTC for the GPUs we target (NVRTC needs no GPU to compile)."""

from __future__ import annotations

import re

import pytest

from flexflow.gpu import nvrtc, sources, sources_nn
from flexflow.gpu.errors import CudaCallError

SOURCES = {
    "LAYOUT": sources.LAYOUT,
    "ELEMENTWISE": sources.ELEMENTWISE,
    "NORMS": sources_nn.NORMS,
    "EMBEDDING": sources_nn.EMBEDDING,
    "TRAINING": sources_nn.TRAINING,
}
ARCHES = ("sm_70", "sm_80", "sm_90")  # V100 (double atomicAdd needs sm_60+), A100, H100/H200


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_source_compiles_to_a_cubin(name, arch):
    cubin = nvrtc.compile_cubin(SOURCES[name], arch)
    assert cubin[:4] == b"\x7fELF"


def _declared_kernels(source: str) -> set[str]:
    """Kernel names: plain `extern "C"` ones, and those each macro stamps per type suffix."""
    names = set(re.findall(r'extern "C" __global__ void (\w+)\(', source))
    for macro, body in re.findall(r"#define (\w+)\(SUFFIX, \w+\)((?:.*\\\n)+.*)", source):
        stamped = re.findall(r"void (\w+)_##SUFFIX\(", body)
        suffixes = re.findall(rf"^{macro}\((\w+), ", source, flags=re.MULTILINE)
        assert stamped and suffixes, macro
        names |= {f"{prefix}_{suffix}" for prefix in stamped for suffix in suffixes}
    return names


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_declared_kernel_is_in_the_cubin_unmangled(name):
    cubin = nvrtc.compile_cubin(SOURCES[name], "sm_90")
    kernels = _declared_kernels(SOURCES[name])
    assert kernels
    for kernel in kernels:
        assert b"\x00" + kernel.encode() + b"\x00" in cubin, kernel


def test_a_compile_error_shows_the_nvrtc_log():
    with pytest.raises(
        CudaCallError, match=r"(?s)nvrtcCompileProgram for sm_90 failed.*undefined_name"
    ):
        nvrtc.compile_cubin('extern "C" __global__ void k() { undefined_name(); }', "sm_90")


def test_compiles_are_cached_by_source_and_arch():
    assert nvrtc.compile_cubin(sources.LAYOUT, "sm_90") is nvrtc.compile_cubin(
        sources.LAYOUT, "sm_90"
    )


def test_dims_beyond_the_kernels_rank_limit_are_refused():
    nvrtc.Arg.dims(range(8))
    with pytest.raises(CudaCallError, match="rank 9 .* exceeds the kernels' limit of 8"):
        nvrtc.Arg.dims(range(9))


def test_parts_are_passed_by_value_padded_and_refused_beyond_one_launchs_limit():
    parts = nvrtc.Arg.parts([7, 9])
    assert len(parts) == nvrtc.MAX_PARTS and [parts[0], parts[1], parts[2]] == [7, 9, 0]
    assert f"#define MAX_PARTS {nvrtc.MAX_PARTS}" in sources.LAYOUT  # the struct's size
    with pytest.raises(CudaCallError, match="65 parts exceed one launch's 64"):
        nvrtc.Arg.parts(range(65))
