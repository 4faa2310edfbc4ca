"""Run-time compiled CUDA kernels: NVRTC compiles each source once per process for the device's arch.

NVRTC needs no GPU to compile (tests compile every source here); loading the binary
(`cuModuleLoadData`) and launching (`cuLaunchKernel`) go through the driver. Sources compile
straight to a cubin for the device's `sm_XY`, so a driver older than NVRTC still loads them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from flexflow.gpu.device import Gpu
from flexflow.gpu.errors import CudaCallError
from flexflow.gpu.libraries import check, ffi, open_library

OPTIONS = ("--std=c++17",)
"""NVRTC flags besides the architecture. No fast-math: results must match numpy to 1e-4."""

MAX_RANK = 8
"""Largest tensor rank the strided kernels take (their `Dims` struct holds 8 sizes)."""
MAX_PARTS = 64
"""The most parts one `join_parts` launch takes (the `Parts` struct of sources.py)."""


@functools.cache
def compile_cubin(source: str, arch: str) -> bytes:
    """The cubin of `source` for `arch` (e.g. "sm_90"), compiled once per (source, arch)."""
    nvrtc = open_library("nvrtc")
    program = ffi.new("nvrtcProgram *")
    check(
        "nvrtc",
        nvrtc.nvrtcCreateProgram(program, source.encode(), b"flexflow.cu", 0, ffi.NULL, ffi.NULL),
        "nvrtcCreateProgram",
    )
    try:
        options = [ffi.new("char[]", o.encode()) for o in (f"--gpu-architecture={arch}",) + OPTIONS]
        status = nvrtc.nvrtcCompileProgram(program[0], len(options), ffi.new("char *[]", options))
        if status != 0:
            size = ffi.new("size_t *")
            nvrtc.nvrtcGetProgramLogSize(program[0], size)
            log = ffi.new("char[]", size[0] + 1)
            nvrtc.nvrtcGetProgramLog(program[0], log)
            raise CudaCallError(
                f"nvrtcCompileProgram for {arch} failed (status {status}):\n"
                f"{ffi.string(log).decode(errors='replace')}"
            )
        size = ffi.new("size_t *")
        check("nvrtc", nvrtc.nvrtcGetCUBINSize(program[0], size), "nvrtcGetCUBINSize")
        cubin = ffi.new("char[]", size[0])
        check("nvrtc", nvrtc.nvrtcGetCUBIN(program[0], cubin), "nvrtcGetCUBIN")
        return bytes(ffi.buffer(cubin, size[0]))
    finally:
        nvrtc.nvrtcDestroyProgram(program)


_MODULES: dict[tuple[int, str], Any] = {}
"""Loaded modules by (device, source): one `cuModuleLoadData` per device and source."""
_FUNCTIONS: dict[tuple[int, str, str], Any] = {}


def kernel(gpu: Gpu, source: str, name: str) -> Any:
    """The `CUfunction` `name` of `source` on `gpu`'s device (compiled and loaded on first use)."""
    key = (gpu.device, source, name)
    if key in _FUNCTIONS:
        return _FUNCTIONS[key]
    driver = open_library("driver")
    module = _MODULES.get((gpu.device, source))
    if module is None:
        cubin = compile_cubin(source, gpu.arch)
        handle = ffi.new("CUmodule *")
        check("driver", driver.cuModuleLoadData(handle, cubin), "cuModuleLoadData")
        module = _MODULES[(gpu.device, source)] = handle[0]
    function = ffi.new("CUfunction *")
    check(
        "driver",
        driver.cuModuleGetFunction(function, module, name.encode()),
        f"cuModuleGetFunction({name})",
    )
    _FUNCTIONS[key] = function[0]
    return function[0]


class Arg:
    """Kernel arguments with their C types; `cuLaunchKernel` takes a pointer to each value."""

    @staticmethod
    def ptr(value: int | None) -> Any:
        return ffi.new("unsigned long long *", value or 0)  # a device pointer is 8 bytes

    @staticmethod
    def i64(value: int) -> Any:
        return ffi.new("long long *", int(value))

    @staticmethod
    def u64(value: int) -> Any:
        return ffi.new("unsigned long long *", int(value) & (2**64 - 1))

    @staticmethod
    def f32(value: float) -> Any:
        return ffi.new("float *", float(value))

    @staticmethod
    def f64(value: float) -> Any:
        return ffi.new("double *", float(value))

    @staticmethod
    def dims(values: Sequence[int]) -> Any:
        """The `Dims` struct (8 long longs, passed by value) holding `values`, zero-padded."""
        values = [int(v) for v in values]
        if len(values) > MAX_RANK:
            raise CudaCallError(
                f"GPU kernels: rank {len(values)} ({values}) exceeds the kernels' limit of "
                f"{MAX_RANK}; reshape the tensor to fewer dimensions."
            )
        return ffi.new(f"long long[{MAX_RANK}]", values + [0] * (MAX_RANK - len(values)))

    @staticmethod
    def parts(pointers: Sequence[int]) -> Any:
        """The `Parts` struct (MAX_PARTS 64-bit values passed by value: device pointers or
        cumulative lengths), zero-padded."""
        if len(pointers) > MAX_PARTS:
            raise CudaCallError(
                f"GPU kernels: {len(pointers)} parts exceed one launch's {MAX_PARTS}; launch "
                "them in groups of at most that many (as tile_shape._move_parts does)."
            )
        values = [int(p) for p in pointers]
        return ffi.new(f"unsigned long long[{MAX_PARTS}]", values + [0] * (MAX_PARTS - len(values)))


BLOCK = 256
"""Threads per block of every kernel (the reductions' shared arrays are sized to it)."""


def grid_for(elements: int, block: int = BLOCK) -> int:
    """Blocks for a grid-stride loop over `elements`: enough to fill the GPU, at least one."""
    return max(1, min((elements + block - 1) // block, 65535 * 8))


def launch(
    gpu: Gpu, source: str, name: str, grid: int, args: Sequence[Any], block: int = BLOCK
) -> None:
    """Enqueue kernel `name` of `source` on `gpu`'s stream with `grid` blocks of `block` threads."""
    function = kernel(gpu, source, name)
    params = ffi.new("void *[]", [ffi.cast("void *", a) for a in args])
    status = open_library("driver").cuLaunchKernel(
        function, grid, 1, 1, block, 1, 1, 0, gpu.stream, params, ffi.NULL
    )
    check("driver", status, f"cuLaunchKernel({name}, grid {grid}, block {block})")
