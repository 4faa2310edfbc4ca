/* Dense layers on float32 tiles for the CPU tasks: the matrix products through the CBLAS GEMM
 * the caller passes (MKL's, ops/blas.py) and the bias and activation in the same call, so a
 * whole layer runs without the interpreter lock (with numpy, two processors' tasks took turns
 * at it between the products). The element-wise steps are flexflow.ops.dense's numpy reference
 * operation by operation: y = act(x W^T + b), dz = dy through the activation (native/
 * activations.c), db = dz summed row by row. */
#include <string.h>

#include "kernels.h"

void ff_dense_forward_f32(ff_sgemm_fn gemm, const float *x, const float *w, const float *b,
                          float *y, float *pre, float *kept, long m, long n, long k, int act) {
  gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)m, (int)n, (int)k, 1.0f, x, (int)k, w, (int)k,
       0.0f, y, (int)n);
  if (b)
    for (long i = 0; i < m; ++i) {
      float *row = y + i * n;
      for (long j = 0; j < n; ++j) row[j] = row[j] + b[j];
    }
  if (pre) memcpy(pre, y, sizeof(float) * m * n);
  if (act == FF_ACT_GELU && kept)
    ff_gelu_kept_f32(y, y, kept, m * n);
  else
    ff_activate_f32(act, y, y, m * n);
}

void ff_dense_backward_f32(ff_sgemm_fn gemm, const float *x, const float *w, const float *y,
                           const float *pre, const float *kept, const float *dy, float *dz,
                           float *dw, float *db, float *dx, long m, long n, long k, int act) {
  const float *g = dy;
  if (act == FF_ACT_GELU && kept) {
    ff_gelu_grad_kept_f32(pre, kept, dy, dz, m * n);
    g = dz;
  } else if (act != FF_ACT_NONE) {
    ff_activation_grad_f32(act, pre, y, dy, dz, m * n);
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
