/* One LSTM step on float32 tiles for the CPU tasks (flexflow.ops.lstm): the gate products
 * through the CBLAS GEMM the caller passes (MKL's, ops/blas.py) and the element-wise work in
 * one call each way, without the interpreter lock. With numpy an unrolled step spent most of
 * its time in Python between small calls, which two processors' tasks took turns at.
 *
 * The formulas are flexflow.ops.lstm's numpy reference (gates i, f, g, o; sigmoid as
 * 0.5 (1 + tanh(x / 2))), but tanh comes from native/fastmath.h, not numpy's: the two agree to
 * an ulp or two, not bit for bit. glibc's tanhf is scalar and made this kernel slower than
 * numpy's vectorized tanh. */
#include <string.h>

#include "clones.h"
#include "fastmath.h"
#include "kernels.h"

static inline float ff_sigmoidf(float x) { return 0.5f * (1.0f + ff_tanh(0.5f * x)); }

/* z (n, 4 hid) = x w_ih^T + h_prev w_hh^T (when h_prev) + bias, each row's four gates' units
 * in order (i, f, g, o), then the gates' activations in place. */
static void ff_lstm_gates(ff_sgemm_fn gemm, const float *x, const float *h_prev,
                          const float *w_ih, const float *w_hh, const float *bias, float *z,
                          long n, long e, long hh, long hid, long ldx) {
  long width = 4 * hid;
  gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)n, (int)width, (int)e, 1.0f, x, (int)ldx, w_ih,
       (int)e, 0.0f, z, (int)width);
  if (h_prev)
    gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)n, (int)width, (int)hh, 1.0f, h_prev, (int)hh,
         w_hh, (int)hh, 1.0f, z, (int)width);
  for (long r = 0; r < n; ++r) {
    float *row = z + r * width;
    for (long j = 0; j < width; ++j) row[j] = row[j] + bias[j];
    for (long j = 0; j < hid; ++j) row[j] = ff_sigmoidf(row[j]);                   /* i */
    for (long j = hid; j < 2 * hid; ++j) row[j] = ff_sigmoidf(row[j]);             /* f */
    for (long j = 2 * hid; j < 3 * hid; ++j) row[j] = ff_tanh(row[j]);            /* g */
    for (long j = 3 * hid; j < 4 * hid; ++j) row[j] = ff_sigmoidf(row[j]);         /* o */
  }
}

FF_CLONES
void ff_lstm_forward_f32(ff_sgemm_fn gemm, const float *x, const float *h_prev,
                         const float *c_prev, const float *w_ih, const float *w_hh,
                         const float *bias, float *z, float *h, float *c, long n, long e, long hh,
                         long hid, long ldx) {
  ff_lstm_gates(gemm, x, h_prev, w_ih, w_hh, bias, z, n, e, hh, hid, ldx);
  for (long r = 0; r < n; ++r) {
    const float *i = z + r * 4 * hid, *f = i + hid, *g = f + hid, *o = g + hid;
    float *cr = c + r * hid, *hr = h + r * hid;
    if (c_prev) {
      const float *cp = c_prev + r * hid;
      for (long j = 0; j < hid; ++j) cr[j] = f[j] * cp[j] + i[j] * g[j];
    } else {
      for (long j = 0; j < hid; ++j) cr[j] = i[j] * g[j];
    }
    for (long j = 0; j < hid; ++j) hr[j] = o[j] * ff_tanh(cr[j]);
  }
}

FF_CLONES
void ff_lstm_backward_f32(ff_sgemm_fn gemm, const float *x, const float *h_prev,
                          const float *c_prev, const float *w_ih, const float *w_hh,
                          const float *bias, const float *c, const float *dh, const float *dc,
                          float *z, float *dz, float *dx, float *dh_prev, float *dc_prev,
                          float *dw_ih, float *dw_hh, float *db, long n, long e, long hh,
                          long hid, int gates_kept, long ldx) {
  long width = 4 * hid;
  if (!gates_kept) ff_lstm_gates(gemm, x, h_prev, w_ih, w_hh, bias, z, n, e, hh, hid, ldx);
  for (long r = 0; r < n; ++r) {
    const float *i = z + r * width, *f = i + hid, *g = f + hid, *o = g + hid;
    const float *cr = c + r * hid, *dhr = dh + r * hid, *dcr = dc + r * hid;
    float *di = dz + r * width, *df = di + hid, *dg = df + hid, *dout = dg + hid;
    for (long j = 0; j < hid; ++j) { /* df holds dc's total until the last loop */
      float tanh_c = ff_tanh(cr[j]);
      float total = dcr[j] + dhr[j] * o[j] * (1.0f - tanh_c * tanh_c);
      df[j] = total;
      di[j] = total * g[j] * i[j] * (1.0f - i[j]);
      dg[j] = total * i[j] * (1.0f - g[j] * g[j]);
      dout[j] = dhr[j] * tanh_c * o[j] * (1.0f - o[j]);
    }
    if (dc_prev)
      for (long j = 0; j < hid; ++j) dc_prev[r * hid + j] = df[j] * f[j];
    if (c_prev) {
      const float *cp = c_prev + r * hid;
      for (long j = 0; j < hid; ++j) df[j] = df[j] * cp[j] * f[j] * (1.0f - f[j]);
    } else {
      for (long j = 0; j < hid; ++j) df[j] = 0.0f;
    }
  }
  for (long j = 0; j < width; ++j) db[j] = dz[j];
  for (long r = 1; r < n; ++r)
    for (long j = 0; j < width; ++j) db[j] = db[j] + dz[r * width + j];
  gemm(FF_ROW_MAJOR, FF_TRANS, FF_NO_TRANS, (int)width, (int)e, (int)n, 1.0f, dz, (int)width, x,
       (int)ldx, 0.0f, dw_ih, (int)e);
  if (h_prev)
    gemm(FF_ROW_MAJOR, FF_TRANS, FF_NO_TRANS, (int)width, (int)hh, (int)n, 1.0f, dz, (int)width,
         h_prev, (int)hh, 0.0f, dw_hh, (int)hh);
  else
    memset(dw_hh, 0, sizeof(float) * (size_t)(width * hh));
  gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_NO_TRANS, (int)n, (int)e, (int)width, 1.0f, dz, (int)width,
       w_ih, (int)e, 0.0f, dx, (int)e);
  if (dh_prev)
    gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_NO_TRANS, (int)n, (int)hh, (int)width, 1.0f, dz,
         (int)width, w_hh, (int)hh, 0.0f, dh_prev, (int)hh);
}
