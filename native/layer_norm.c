/* Layer normalization on float32 rows for the C training step (native/step.c), as flexflow.ops.
 * layer_norm's reference: each row (the normalized axes of a sample's position) centred by its
 * mean, scaled by 1 / sqrt(variance + eps), then by gamma plus beta. Sums run in double: the
 * rounding differs from numpy's float32 pairwise sums by less than theirs from the exact. */
#include <math.h>

#include "clones.h"
#include "kernels.h"

FF_CLONES
void ff_layer_norm_forward_f32(const float *x, const float *gamma, const float *beta, float *y,
                               float *x_hat, float *rstd, long rows, long width, double eps) {
  for (long r = 0; r < rows; ++r) {
    const float *in = x + r * width;
    float *hat = x_hat + r * width, *out = y + r * width;
    double sum = 0.0;
    for (long j = 0; j < width; ++j) sum += in[j];
    const float mean = (float)(sum / (double)width);
    double squares = 0.0;
    for (long j = 0; j < width; ++j) {
      const float centred = in[j] - mean;
      hat[j] = centred;
      squares += (double)centred * (double)centred;
    }
    const float scale = (float)(1.0 / sqrt(squares / (double)width + eps));
    rstd[r] = scale;
    for (long j = 0; j < width; ++j) {
      hat[j] = hat[j] * scale;
      out[j] = gamma ? hat[j] * gamma[j] + beta[j] : hat[j];
    }
  }
}

FF_CLONES
void ff_layer_norm_backward_f32(const float *x_hat, const float *rstd, const float *gamma,
                                const float *dy, float *dx, float *dgamma, float *dbeta,
                                double *sums, long rows, long width) {
  if (dgamma) {
    double *dg = sums, *db = sums + width;
    for (long j = 0; j < 2 * width; ++j) sums[j] = 0.0;
    for (long r = 0; r < rows; ++r)
      for (long j = 0; j < width; ++j) {
        dg[j] += (double)dy[r * width + j] * (double)x_hat[r * width + j];
        db[j] += dy[r * width + j];
      }
    for (long j = 0; j < width; ++j) {
      dgamma[j] = (float)dg[j];
      dbeta[j] = (float)db[j];
    }
  }
  if (!dx) return;
  for (long r = 0; r < rows; ++r) {
    const float *g = dy + r * width, *hat = x_hat + r * width;
    double mean_d = 0.0, mean_dh = 0.0;
    for (long j = 0; j < width; ++j) {
      const double d_hat = gamma ? (double)(g[j] * gamma[j]) : (double)g[j];
      mean_d += d_hat;
      mean_dh += d_hat * (double)hat[j];
    }
    mean_d /= (double)width;
    mean_dh /= (double)width;
    float *out = dx + r * width;
    for (long j = 0; j < width; ++j) {
      const double d_hat = gamma ? (double)(g[j] * gamma[j]) : (double)g[j];
      out[j] = (float)((double)rstd[r] * (d_hat - mean_d - (double)hat[j] * mean_dh));
    }
  }
}
