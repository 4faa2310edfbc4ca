"""Device memory as values (`DeviceArray`) and the stream a tile's kernels run on (`Gpu`).

A `DeviceArray` is a frozen view of device memory: a pointer, a shape, an element type and
strides in bytes (None for C-contiguous). It is built from anything exposing
`__cuda_array_interface__` (Legate's GPU inline allocations do) or allocated by a `Gpu`.

A `Gpu` is the context of one task: its device, its CUDA stream, the cuBLAS/cuDNN handles bound
to that stream, and the scratch memory the task's kernels allocate (stream-ordered, released
together when the task ends).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexflow.gpu.errors import UnsupportedTileError
from flexflow.gpu.libraries import check, ffi, open_library

DTYPES = ("float32", "float64", "int32", "int64")
"""Element types the kernels take (every tensor type of `flexflow.ops.DType`, plus float64 sums)."""

_MEMCPY_HOST_TO_DEVICE, _MEMCPY_DEVICE_TO_HOST, _MEMCPY_DEVICE_TO_DEVICE = 1, 2, 3
_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76  # cudaDevAttrComputeCapabilityMajor/Minor


def contiguous_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """Row-major strides in bytes of `shape`."""
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True, slots=True)
class DeviceArray:
    """A view of device memory: `ptr`, `shape`, `dtype` and byte `strides` (None: row-major)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: str = "float32"
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        dtype = np.dtype(self.dtype).name
        if dtype not in DTYPES:
            raise UnsupportedTileError(
                f"DeviceArray: element type {dtype} (shape {self.shape}) is not one of {DTYPES}; "
                "cast the store to float32 (or int32/int64 for ids) first."
            )
        object.__setattr__(self, "dtype", dtype)
        if self.strides is not None:
            strides = tuple(int(s) for s in self.strides)
            if len(strides) != len(self.shape):
                raise UnsupportedTileError(
                    f"DeviceArray: {len(strides)} strides {strides} for shape {self.shape}; "
                    "pass one stride (in bytes) per dimension."
                )
            plain = contiguous_strides(self.shape, self.itemsize)
            # strides of size-1 dims never matter; drop strides that describe a row-major layout
            same = all(s == p or n == 1 for s, p, n in zip(strides, plain, self.shape, strict=True))
            object.__setattr__(self, "strides", None if same or self.size == 0 else strides)

    @classmethod
    def from_cuda_array(cls, obj: Any) -> DeviceArray:
        """Wrap an object exposing `__cuda_array_interface__` (version 2 or 3) without copying."""
        info = obj.__cuda_array_interface__
        return cls(
            ptr=int(info["data"][0] or 0),
            shape=tuple(info["shape"]),
            dtype=np.dtype(info["typestr"]).name,
            strides=None if info.get("strides") is None else tuple(info["strides"]),
        )

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": np.dtype(self.dtype).str,
            "data": (self.ptr, False),
            "strides": self.strides,
        }

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_contiguous(self) -> bool:
        return self.strides is None

    @property
    def element_strides(self) -> tuple[int, ...]:
        """Strides in elements (what the kernels take)."""
        strides = self.strides or contiguous_strides(self.shape, self.itemsize)
        return tuple(s // self.itemsize for s in strides)

    def reshape(self, shape: Sequence[int]) -> DeviceArray:
        """The same contiguous memory seen with another shape of equal size (-1 inferred)."""
        shape = list(shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.size // known if known else 0
        if not self.is_contiguous or math.prod(shape) != self.size:
            raise UnsupportedTileError(
                f"DeviceArray.reshape: cannot view {self.shape} (strides {self.strides}) as "
                f"{tuple(shape)}; make it contiguous with the same element count first."
            )
        return DeviceArray(self.ptr, tuple(shape), self.dtype)

    def view(
        self, shape: Sequence[int], strides: Sequence[int], offset_elements: int = 0
    ) -> DeviceArray:
        """A strided view into this memory: `strides` and the offset are in elements."""
        return DeviceArray(
            self.ptr + offset_elements * self.itemsize,
            tuple(shape),
            self.dtype,
            tuple(s * self.itemsize for s in strides),
        )


def require_contiguous(what: str, *arrays: DeviceArray | None) -> None:
    """Kernels index row-major memory: refuse a strided view naming the tile's array."""
    for array in arrays:
        if array is not None and not array.is_contiguous:
            raise UnsupportedTileError(
                f"{what}: expects row-major device arrays, got shape {array.shape} with strides "
                f"{array.strides}; copy it with flexflow.gpu.prims.contiguous first."
            )


_HANDLES: dict[tuple[str, int], Any] = {}
"""cuBLAS/cuDNN handles by (library, device): created once per process (creation costs ms)."""


class Gpu:
    """One task's device context: stream, library handles and scratch memory.

    Scratch arrays come from CUDA's stream-ordered allocator and are freed on the same stream
    when the context closes, so they outlive every kernel the task enqueued on it.
    """

    def __init__(self, stream: int = 0) -> None:
        self.cudart = open_library("cudart")
        self.stream = ffi.cast("void *", stream)
        device = ffi.new("int *")
        check("cudart", self.cudart.cudaGetDevice(device), "cudaGetDevice")
        self.device = device[0]
        # the runtime creates the device's primary context lazily; kernels loaded through the
        # driver (cuModuleLoadData) need it current now
        check(
            "cudart", self.cudart.cudaFree(ffi.NULL), "cudaFree(NULL) (creating the CUDA context)"
        )
        self._scratch: list[Any] = []

    # ---- device facts -------------------------------------------------------------------------
    @property
    def arch(self) -> str:
        """The device's architecture as NVRTC names it, e.g. "sm_90" for an H100/H200."""
        major, minor = ffi.new("int *"), ffi.new("int *")
        call = "cudaDeviceGetAttribute(compute capability)"
        check(
            "cudart", self.cudart.cudaDeviceGetAttribute(major, _ATTR_CC_MAJOR, self.device), call
        )
        check(
            "cudart", self.cudart.cudaDeviceGetAttribute(minor, _ATTR_CC_MINOR, self.device), call
        )
        return f"sm_{major[0]}{minor[0]}"

    def handle(self, key: str) -> Any:
        """The cuBLAS or cuDNN handle of this device, bound to this task's stream."""
        library = open_library(key)
        cached = _HANDLES.get((key, self.device))
        if cached is None:
            if key == "cublas":
                cached = ffi.new("cublasHandle_t *")
                check(key, library.cublasCreate_v2(cached), "cublasCreate_v2")
                # plain FP32 arithmetic: no TF32 tensor cores, so results match float32 numpy
                check(key, library.cublasSetMathMode(cached[0], 0), "cublasSetMathMode")
            else:
                cached = ffi.new("cudnnHandle_t *")
                check(key, library.cudnnCreate(cached), "cudnnCreate")
            _HANDLES[(key, self.device)] = cached
        if key == "cublas":
            check(key, library.cublasSetStream_v2(cached[0], self.stream), "cublasSetStream_v2")
        else:
            check(key, library.cudnnSetStream(cached[0], self.stream), "cudnnSetStream")
        return cached[0]

    # ---- memory -------------------------------------------------------------------------------
    def empty(self, shape: Sequence[int], dtype: str = "float32") -> DeviceArray:
        """Uninitialized scratch memory, freed when this context closes."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes == 0:
            return DeviceArray(0, tuple(shape), dtype)
        pointer = ffi.new("void **")
        check(
            "cudart",
            self.cudart.cudaMallocAsync(pointer, nbytes, self.stream),
            f"cudaMallocAsync({nbytes} bytes for {tuple(shape)} {dtype})",
        )
        self._scratch.append(pointer[0])
        return DeviceArray(int(ffi.cast("uintptr_t", pointer[0])), tuple(shape), dtype)

    def zeros(self, shape: Sequence[int], dtype: str = "float32") -> DeviceArray:
        array = self.empty(shape, dtype)
        self.memset_zero(array)
        return array

    def memset_zero(self, array: DeviceArray) -> None:
        require_contiguous("Gpu.memset_zero", array)
        if array.nbytes:
            status = self.cudart.cudaMemsetAsync(
                ffi.cast("void *", array.ptr), 0, array.nbytes, self.stream
            )
            check("cudart", status, "cudaMemsetAsync")

    def copy(self, dst: DeviceArray, src: DeviceArray) -> None:
        """Device-to-device copy of equal contiguous arrays (strided ones: `prims.copy`)."""
        require_contiguous("Gpu.copy", dst, src)
        if dst.nbytes != src.nbytes:
            raise UnsupportedTileError(
                f"Gpu.copy: {src.shape} {src.dtype} into {dst.shape} {dst.dtype} differ in size; "
                "copy arrays of equal size."
            )
        self._memcpy(dst.ptr, src.ptr, src.nbytes, _MEMCPY_DEVICE_TO_DEVICE)

    def to_device(self, array: np.ndarray) -> DeviceArray:
        """A scratch copy of a host array (the check script's inputs)."""
        host = np.ascontiguousarray(array)
        device = self.empty(host.shape, host.dtype.name)
        self._memcpy(
            device.ptr,
            ffi.cast("void *", ffi.from_buffer(host)),
            host.nbytes,
            _MEMCPY_HOST_TO_DEVICE,
        )
        self.synchronize()  # the host buffer may go away once we return
        return device

    def to_host(self, array: DeviceArray) -> np.ndarray:
        """Copy a contiguous device array to a new numpy array (waits for the stream)."""
        require_contiguous("Gpu.to_host", array)
        host = np.empty(array.shape, dtype=array.dtype)
        self._memcpy(
            ffi.cast("void *", ffi.from_buffer(host)),
            array.ptr,
            array.nbytes,
            _MEMCPY_DEVICE_TO_HOST,
        )
        self.synchronize()
        return host

    def _memcpy(self, dst: Any, src: Any, nbytes: int, kind: int) -> None:
        if nbytes:
            status = self.cudart.cudaMemcpyAsync(
                ffi.cast("void *", dst), ffi.cast("void *", src), nbytes, kind, self.stream
            )
            check("cudart", status, f"cudaMemcpyAsync({nbytes} bytes, kind {kind})")

    def synchronize(self) -> None:
        check("cudart", self.cudart.cudaStreamSynchronize(self.stream), "cudaStreamSynchronize")

    def close(self) -> None:
        """Free the scratch memory, ordered after every kernel enqueued on the stream."""
        scratch, self._scratch = self._scratch, []
        for pointer in scratch:
            check("cudart", self.cudart.cudaFreeAsync(pointer, self.stream), "cudaFreeAsync")

    def __enter__(self) -> Gpu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
