/* Dense layers on float32 tiles for the CPU tasks: the matrix products through the CBLAS GEMM
 * the caller passes (MKL's, ops/blas.py) and the bias and activation in the same call, so a
 * whole layer runs without the interpreter lock (with numpy, two processors' tasks took turns
 * at it between the products). The element-wise steps are flexflow.ops.dense's numpy reference
 * operation by operation: y = max(x W^T + b, 0), dz = dy * (y > 0), db = dz summed row by row. */
#include "kernels.h"

void ff_dense_forward_f32(ff_sgemm_fn gemm, const float *x, const float *w, const float *b,
                          float *y, long m, long n, long k, int relu) {
  gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)m, (int)n, (int)k, 1.0f, x, (int)k, w, (int)k,
       0.0f, y, (int)n);
  for (long i = 0; i < m; ++i) {
    float *row = y + i * n;
    if (b)
      for (long j = 0; j < n; ++j) row[j] = row[j] + b[j];
    if (relu)
      for (long j = 0; j < n; ++j) row[j] = (row[j] >= 0.0f || row[j] != row[j]) ? row[j] : 0.0f;
  }
}

void ff_dense_backward_f32(ff_sgemm_fn gemm, const float *x, const float *w, const float *y,
                           const float *dy, float *dz, float *dw, float *db, float *dx, long m,
                           long n, long k, int relu) {
  const float *g = dy;
  if (relu) {
    for (long i = 0; i < m * n; ++i) dz[i] = dy[i] * (float)(y[i] > 0.0f);
    g = dz;
  }
  if (db) {
    for (long j = 0; j < n; ++j) db[j] = g[j];
    for (long i = 1; i < m; ++i)
      for (long j = 0; j < n; ++j) db[j] = db[j] + g[i * n + j];
  }
  gemm(FF_ROW_MAJOR, FF_TRANS, FF_NO_TRANS, (int)n, (int)k, (int)m, 1.0f, g, (int)n, x, (int)k,
       0.0f, dw, (int)k);
  if (dx)
    gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_NO_TRANS, (int)m, (int)k, (int)n, 1.0f, g, (int)n, w,
         (int)k, 0.0f, dx, (int)k);
}
