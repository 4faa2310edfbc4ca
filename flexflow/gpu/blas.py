"""Row-major matrix products through cuBLAS's column-major SGEMM (dense, LSTM, attention, batch matmul).

cuBLAS reads a row-major (m, k) matrix as its column-major transpose (k, m). So the row-major
C = op(A) @ op(B) is computed as the column-major C^T = op(B)^T @ op(A)^T: swap the operands,
swap m and n, keep each operand's transpose flag, and pass each matrix's row stride as its
leading dimension.
"""

from __future__ import annotations

from flexflow.gpu.device import DeviceArray, Gpu, require_contiguous
from flexflow.gpu.errors import UnsupportedTileError
from flexflow.gpu.libraries import check, ffi, open_library

_OP_N, _OP_T = 0, 1  # CUBLAS_OP_N, CUBLAS_OP_T


def gemm(
    gpu: Gpu,
    a: DeviceArray,
    b: DeviceArray,
    *,
    trans_a: bool = False,
    trans_b: bool = False,
    out: DeviceArray | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
) -> DeviceArray:
    """out = alpha * op(a) @ op(b) + beta * out for row-major float32 matrices or stacks of them.

    `a` is (m, k) or (batch, m, k) ((k, m) when `trans_a`), `b` is (k, n) (or (n, k)), `out` is
    (m, n) or (batch, m, n); a stack of matrices runs as one strided-batched SGEMM.
    """
    require_contiguous("blas.gemm", a, b, out)
    if a.ndim != b.ndim or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[0] != b.shape[0]):
        raise UnsupportedTileError(
            f"blas.gemm: operands {a.shape} and {b.shape} must both be matrices or equal stacks "
            "of matrices; reshape them to (m, k) / (batch, m, k) first."
        )
    batch = a.shape[0] if a.ndim == 3 else 1
    rows_a, cols_a = a.shape[-2:]
    rows_b, cols_b = b.shape[-2:]
    m, k = (cols_a, rows_a) if trans_a else (rows_a, cols_a)
    k_b, n = (cols_b, rows_b) if trans_b else (rows_b, cols_b)
    if k != k_b:
        raise UnsupportedTileError(
            f"blas.gemm: op(A) is ({m}, {k}) and op(B) is ({k_b}, {n}) for A {a.shape} "
            f"(transposed: {trans_a}) and B {b.shape} (transposed: {trans_b}); inner sizes differ."
        )
    shape = (batch, m, n) if a.ndim == 3 else (m, n)
    if out is None:
        out = gpu.empty(shape)
    elif out.shape != shape:
        raise UnsupportedTileError(
            f"blas.gemm: result is {shape}, the output given is {out.shape}."
        )
    if out.size == 0:
        return out
    if k == 0:  # nothing to multiply: beta * out, which cuBLAS would also leave
        return out
    status = open_library("cublas").cublasSgemmStridedBatched(
        gpu.handle("cublas"),
        _OP_T if trans_b else _OP_N,  # cuBLAS's A is our B (read transposed, row-major)
        _OP_T if trans_a else _OP_N,
        n,
        m,
        k,
        ffi.new("float *", alpha),
        ffi.cast("float *", b.ptr),
        cols_b,  # B's row stride: the leading dimension of its column-major view
        rows_b * cols_b,
        ffi.cast("float *", a.ptr),
        cols_a,
        rows_a * cols_a,
        ffi.new("float *", beta),
        ffi.cast("float *", out.ptr),
        n,
        m * n,
        batch,
    )
    check("cublas", status, f"cublasSgemmStridedBatched(m={m}, n={n}, k={k}, batch={batch})")
    return out
