"""How the C op kernels (flexflow._kernels through cffi) take numpy arrays: typed pointers, C-contiguous copies, the sgemm."""

from __future__ import annotations

import functools

import numpy as np

from flexflow._kernels import ffi

SUFFIX = {np.dtype(np.float32): ("f32", "float[]"), np.dtype(np.float64): ("f64", "double[]")}
"""Per element type, the suffix of a kernel's name (ff_pool2d_forward_f32) and its pointer type."""


def pointer(array: np.ndarray, ctype: str):
    """A C-contiguous array as a pointer argument of `ctype` ("float[]"): one cffi call (these
    run for every op of every task)."""
    return ffi.from_buffer(ctype, array)


def f32(array: np.ndarray) -> np.ndarray:
    """`array` as a C-contiguous float32 array (itself where it is one)."""
    return np.ascontiguousarray(array, dtype=np.float32)


def f64(array: np.ndarray) -> np.ndarray:
    """`array` as a C-contiguous float64 array (itself where it is one)."""
    return np.ascontiguousarray(array, dtype=np.float64)


F32_POINTER = SUFFIX[np.dtype(np.float32)][1]


def floats(array: np.ndarray | None):
    """A C-contiguous float32 array as a `float *` argument, NULL for None."""
    return ffi.NULL if array is None else pointer(array, F32_POINTER)


@functools.cache
def sgemm(address: int):
    """The sgemm at `address` (ops/blas.py) as the kernels' ff_sgemm_fn argument."""
    return ffi.cast("ff_sgemm_fn", address)
