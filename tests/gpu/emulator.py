"""A host emulation of the GPU under the kernels' Python side, to test it on a machine without one.

`HostGpu` keeps "device" arrays in host memory (a pointer is a numpy buffer's address). Kernel
launches are decoded with the C signature NVRTC compiles (parsed from the source, each argument's
cffi type checked against its C type) and run by numpy stand-ins; cuBLAS's column-major SGEMM
and the cuDNN calls are emulated from their documented semantics. This checks what runs on the
host: argument order and types, shapes, strides, transposes, padding and cropping. The CUDA
arithmetic itself is only checked on a GPU (`test_gpu_kernels.py`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np

from flexflow.gpu import nvrtc
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.gpu.libraries import ffi

from .emulated_kernels import KERNELS
from .emulated_libraries import HostCublas, HostCudnn

__all__ = ["KERNELS", "HostCublas", "HostCudnn", "HostGpu", "LAUNCHED", "make_launch"]

# ---- memory -------------------------------------------------------------------------------------


class HostGpu(Gpu):
    """A `Gpu` whose memory is host memory and whose kernels are the emulations below."""

    def __init__(self) -> None:  # no CUDA runtime: nothing to open
        self.device = 0
        self.stream = ffi.NULL
        self.buffers: dict[int, np.ndarray] = {}

    @property
    def arch(self) -> str:
        return "sm_90"

    def handle(self, key: str) -> str:
        return key

    def empty(self, shape, dtype="float32") -> DeviceArray:
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        # NaN-filled, so a kernel that forgets to write an element shows up in the comparison
        buffer = np.full(max(nbytes, 8), 0xFF, dtype=np.uint8)
        self.buffers[buffer.ctypes.data] = buffer
        return DeviceArray(buffer.ctypes.data, tuple(shape), dtype)

    def memory(self, address: int, dtype: str) -> np.ndarray:
        """A flat view of `dtype` from `address` to the end of the buffer holding it."""
        for base, buffer in self.buffers.items():
            if base <= address < base + buffer.size:
                return (
                    buffer[address - base :]
                    .view(np.uint8)[
                        : (buffer.size - (address - base))
                        // np.dtype(dtype).itemsize
                        * np.dtype(dtype).itemsize
                    ]
                    .view(dtype)
                )
        raise AssertionError(f"address {address:#x} is not in any allocation")

    def memset_zero(self, array: DeviceArray) -> None:
        if array.nbytes:
            self.memory(array.ptr, "uint8")[: array.nbytes] = 0

    def copy(self, dst: DeviceArray, src: DeviceArray) -> None:
        assert dst.is_contiguous and src.is_contiguous and dst.nbytes == src.nbytes
        if dst.nbytes:
            self.memory(dst.ptr, "uint8")[: dst.nbytes] = self.memory(src.ptr, "uint8")[
                : src.nbytes
            ]

    def to_device(self, array: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(array)
        device = self.empty(host.shape, host.dtype.name)
        if host.nbytes:
            self.memory(device.ptr, "uint8")[: host.nbytes] = host.reshape(-1).view(np.uint8)
        return device

    def to_host(self, array: DeviceArray) -> np.ndarray:
        assert array.is_contiguous, array
        if array.size == 0:
            return np.empty(array.shape, array.dtype)
        return self.memory(array.ptr, array.dtype)[: array.size].reshape(array.shape).copy()

    def synchronize(self) -> None:
        pass

    def close(self) -> None:
        pass

    def strided(self, address: int, dtype: str, shape, strides) -> np.ndarray:
        """A numpy view of `shape` with element `strides` at `address` (broadcast strides allowed)."""
        flat = self.memory(address, dtype)
        return np.lib.stride_tricks.as_strided(
            flat, shape=tuple(shape), strides=tuple(s * flat.itemsize for s in strides)
        )


# ---- kernel signatures --------------------------------------------------------------------------
_TYPES = {"f32": "float", "f64": "double", "i32": "int", "i64": "long long"}
_CFFI_KIND = {  # C parameter kind -> the cffi type nvrtc.Arg must have built for it
    "pointer": "unsigned long long *",
    "long long": "long long *",
    "unsigned long long": "unsigned long long *",
    "double": "double *",
    "float": "float *",
    "int": "int *",
    "Dims": "long long[8]",
    "Parts": "unsigned long long[64]",
}


def kernel_signature(source: str, name: str) -> list[tuple[str, str]]:
    """(kind, parameter name) of kernel `name` as `source` declares it (macros expanded by hand)."""
    match = re.search(rf'extern "C" __global__ void {name}\(([^)]*)\)', source)
    suffix_type = None
    if match is None:  # declared by a macro: NAME_##SUFFIX with T or I the suffix's type
        prefix, _, suffix = name.rpartition("_")
        match = re.search(rf"void {prefix}_##SUFFIX\(([^)]*)\)", source)
        suffix_type = _TYPES[suffix]
    assert match, f"kernel {name} is not declared in its source"
    params = []
    for raw in match.group(1).replace("\\", " ").split(","):
        declaration = " ".join(raw.split())
        pname = re.findall(r"\w+", declaration)[-1]
        ctype = declaration[: declaration.rfind(pname)].replace("const ", "").strip()
        if suffix_type:
            ctype = re.sub(r"\b[TI]\b", suffix_type, ctype)
        kind = "pointer" if ctype.endswith("*") else ctype
        params.append((kind, pname))
    return params


_SYMBOLS: dict[str, bytes] = {}


def _decode(kind: str, arg) -> object:
    expected = _CFFI_KIND[kind]
    got = ffi.typeof(arg).cname
    assert got == expected, f"argument of C type {kind} passed as cffi {got}"
    if kind in ("Dims", "Parts"):
        return [int(v) for v in arg]
    return arg[0]


LAUNCHED: set[tuple[str, str]] = set()


def make_launch(gpu_kernels: dict[str, Callable]) -> Callable:
    def launch(gpu: HostGpu, source: str, name: str, grid: int, args, block: int = nvrtc.BLOCK):
        cubin = _SYMBOLS.get(source) or _SYMBOLS.setdefault(
            source, nvrtc.compile_cubin(source, "sm_90")
        )
        assert b"\x00" + name.encode() + b"\x00" in cubin, f"{name} is not in the compiled cubin"
        assert grid >= 1 and block == nvrtc.BLOCK
        signature = kernel_signature(source, name)
        assert len(signature) == len(args), (
            f"{name}: {len(args)} arguments for {len(signature)} parameters"
        )
        params = {
            pname: _decode(kind, arg) for (kind, pname), arg in zip(signature, args, strict=True)
        }
        base = re.sub(r"_(f32|f64|i32|i64)$", "", name)
        LAUNCHED.add((base, name))
        gpu_kernels[base](gpu, name, **params)

    return launch
