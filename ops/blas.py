"""Matrix products for the CPU op kernels: Intel MKL's sequential CBLAS where it is installed
(the `mkl` wheel, a dependency on x86-64), numpy's matmul elsewhere and for small products.

Why: numpy's bundled OpenBLAS runs the MLP's per-device GEMMs (batch 32, 784 -> 512 -> 512) on
one core in 871 us against MKL's 627 us (a throwaway timing on this repository's 2-core host;
benchmarks/README.md, "Training speed against PyTorch"). MKL runs sequentially
(a Legate CPU processor is one core) and in its reproducible mode (MKL_CBWR_AUTO | STRICT): the
same bits whatever the arrays' alignment, so a resumed run and every strategy's tiles compute
what they computed before. cffi releases the interpreter lock for each call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from flexflow.errors import RuntimeSetupError

SMALL_PRODUCT = 1 << 20
"""Products of fewer multiply-adds (m * n * k) stay with numpy: below about a million MKL's
call costs as much as it saves (32x10x512: numpy 3.6 us, MKL 5.2 us; 64x64x256: 21 vs 14 us;
measured on one core, throwaway timing)."""

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # mkl_cblas.h
_MKL_THREADING_SEQUENTIAL = 1  # mkl_service.h
_MKL_CBWR_AUTO, _MKL_CBWR_STRICT = 2, 0x10000  # mkl_types.h: reproducible, any alignment

_CDEF = """
void cblas_sgemm(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
void cblas_dgemm(int layout, int trans_a, int trans_b, int m, int n, int k, double alpha,
                 const double *a, int lda, const double *b, int ldb, double beta, double *c,
                 int ldc);
int MKL_CBWR_Set(int setting);
int MKL_Set_Threading_Layer(int code);
"""
_CTYPES = {np.dtype(np.float32): "float *", np.dtype(np.float64): "double *"}
_INT_MAX = 2**31 - 1  # MKL's LP64 interface takes int dimensions


@dataclass(frozen=True, slots=True)
class _Cblas:
    library_path: str
    ffi: object
    lib: object
    sgemm_address: int
    """cblas_sgemm, for the C kernels that call it (native/dense.c)."""


_LOCK = threading.Lock()
_LOADED: list[_Cblas | None] = []
"""The process's one handle on the library (like numpy's on its BLAS): loaded once, by the
first product that asks, since MKL's modes are set before its first call."""


def mkl_library() -> Path | None:
    """Where the installed `mkl` wheel put libmkl_rt (None when it is not installed)."""
    try:
        files = metadata.distribution("mkl").files or ()
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.startswith("libmkl_rt.so"):
            path = Path(file.locate()).resolve()
            if path.exists():
                return path
    return None


def _load() -> _Cblas | None:
    path = mkl_library()
    if path is None:
        return None
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    try:
        lib = ffi.dlopen(str(path))
    except OSError as error:
        raise RuntimeSetupError(
            f"MKL is installed but {path} does not load ({error}); reinstall it with "
            f"`pip install --force-reinstall mkl`."
        ) from None
    lib.MKL_Set_Threading_Layer(_MKL_THREADING_SEQUENTIAL)  # before anything else loads one
    status = lib.MKL_CBWR_Set(_MKL_CBWR_AUTO | _MKL_CBWR_STRICT)
    if status != 0:  # -8: something in this process called MKL before flexflow did
        raise RuntimeSetupError(
            f"MKL ({path}) refused its reproducible mode (MKL_CBWR_Set returned {status}: "
            f"another library in this process called MKL first); import flexflow before it, "
            f"or uninstall the mkl wheel to run the CPU kernels' products through numpy."
        )
    return _Cblas(str(path), ffi, lib, int(ffi.cast("uintptr_t", lib.cblas_sgemm)))


def _cblas() -> _Cblas | None:
    if not _LOADED:
        with _LOCK:
            if not _LOADED:
                _LOADED.append(_load())
    return _LOADED[0]


def provider() -> str:
    """What runs the CPU kernels' large matrix products, for reports ("mkl PATH" or "numpy")."""
    cblas = _cblas()
    return f"mkl {cblas.library_path}" if cblas is not None else "numpy"


def sgemm_address() -> int | None:
    """The address of MKL's cblas_sgemm for the C kernels, or None without MKL (the caller
    then runs its numpy reference)."""
    cblas = _cblas()
    return None if cblas is None else cblas.sgemm_address


def _operand(array: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    """(array, transpose flag, leading dimension) for a row-major matrix or the transpose of
    one, rows possibly apart (a slice); None for any other layout."""
    size = array.itemsize
    rows, cols = array.shape
    row_step, col_step = array.strides
    if col_step == size and row_step % size == 0 and row_step >= cols * size:
        return array, _NO_TRANS, max(1, row_step // size)
    if row_step == size and col_step % size == 0 and col_step >= rows * size:
        return array, _TRANS, max(1, col_step // size)
    return None


def _pointer(ffi, array: np.ndarray):
    # the array's first element; its whole extent lies within the buffer of its base
    return ffi.cast(_CTYPES[array.dtype], array.ctypes.data)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a @ b for 2-D arrays a (m, k) and b (k, n), either possibly a transposed view, as
    np.matmul(a, b, out=out) computes it; written into `out` when given (C-contiguous, (m, n),
    the operands' type), else into a new array."""
    cblas = _cblas()
    m, k = a.shape
    n = b.shape[1]
    if (
        cblas is None
        or a.dtype != b.dtype
        or a.dtype not in _CTYPES
        or m * n * k < SMALL_PRODUCT
        or max(m, n, k) > _INT_MAX
        or b.shape[0] != k
    ):
        return np.matmul(a, b, out=out)
    left = _operand(a) or _operand(np.ascontiguousarray(a))
    right = _operand(b) or _operand(np.ascontiguousarray(b))
    if out is None:
        out = np.empty((m, n), dtype=a.dtype)
    elif (
        out.shape != (m, n)
        or out.dtype != a.dtype
        or not out.flags.c_contiguous
        or np.may_share_memory(out, a)
        or np.may_share_memory(out, b)
    ):
        return np.matmul(a, b, out=out)  # (numpy copies an operand the output overlaps)
    elif not out.flags.writeable:
        raise ValueError("matmul: the output array is read-only")
    (a_array, a_trans, lda), (b_array, b_trans, ldb) = left, right
    gemm = cblas.lib.cblas_sgemm if a.dtype == np.float32 else cblas.lib.cblas_dgemm
    ffi = cblas.ffi
    gemm(
        _ROW_MAJOR, a_trans, b_trans, m, n, k, 1.0, _pointer(ffi, a_array), lda,
        _pointer(ffi, b_array), ldb, 0.0, _pointer(ffi, out), n,
    )  # fmt: skip
    return out


def grouped_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a @ b for stacks of G matrices, a (G, m, k) and b (G, k, n) -> (G, m, n): one `matmul`
    per group (a grouped convolution's groups); written into `out` when given (C-contiguous,
    (G, m, n), the operands' type), else into a new array."""
    if out is None:
        if a.shape[0] == 1:
            return matmul(a[0], b[0])[None]
        out = np.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=np.result_type(a, b))
    for group, (left, right) in enumerate(zip(a, b, strict=True)):
        matmul(left, right, out[group])
    return out
