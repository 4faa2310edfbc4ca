/* Activations on float32 tiles for the C kernels (native/dense.c, native/step.c): the formulas
 * of flexflow.ops.activations operation by operation in float32 (compiled without fused
 * multiply-adds), tanh our own (native/fastmath.h): glibc's tanhf was 40% of a transformer's
 * C step. */
#include <math.h>

#include "clones.h"
#include "fastmath.h"
#include "kernels.h"

#define FF_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define FF_GELU_A 0.044715f

/* tanh(C x (1 + A x^2)): GELU's inner term, as flexflow.ops.activations._gelu_tanh. */
static inline float ff_gelu_tanh(float x) {
  float t = x * x;
  t = t * FF_GELU_A;
  t = t + 1.0f;
  t = t * x;
  t = t * FF_GELU_C;
  return ff_tanh(t);
}

/* GELU's gradient at x, from its inner tanh t, times dy (flexflow.ops.activations._gelu_grad):
 * 0.5 (1 + t) + 0.5 x (1 - t^2) C (1 + 3 A x^2). */
static inline float ff_gelu_grad(float x, float t, float dy) {
  float slope = x * x;
  slope = slope * (3.0f * FF_GELU_A);
  slope = slope + 1.0f;
  slope = slope * x;
  slope = slope * (0.5f * FF_GELU_C);
  slope = slope * (1.0f - t * t);
  return (((t + 1.0f) * 0.5f) + slope) * dy;
}

FF_CLONES
void ff_gelu_kept_f32(const float *z, float *y, float *t, long count) {
  for (long i = 0; i < count; ++i) {
    const float x = z[i], inner = ff_gelu_tanh(x);
    t[i] = inner;
    y[i] = ((inner + 1.0f) * x) * 0.5f;
  }
}

FF_CLONES
void ff_gelu_grad_kept_f32(const float *pre, const float *t, const float *dy, float *dz,
                           long count) {
  for (long i = 0; i < count; ++i) dz[i] = ff_gelu_grad(pre[i], t[i], dy[i]);
}

FF_CLONES
void ff_activate_f32(int act, const float *z, float *y, long count) {
  switch (act) {
    case FF_ACT_RELU:
      for (long i = 0; i < count; ++i) y[i] = (z[i] >= 0.0f || z[i] != z[i]) ? z[i] : 0.0f;
      return;
    case FF_ACT_GELU:
      for (long i = 0; i < count; ++i) y[i] = ((ff_gelu_tanh(z[i]) + 1.0f) * z[i]) * 0.5f;
      return;
    case FF_ACT_TANH:
      for (long i = 0; i < count; ++i) y[i] = ff_tanh(z[i]);
      return;
    case FF_ACT_SIGMOID:
      for (long i = 0; i < count; ++i) y[i] = 0.5f * (1.0f + ff_tanh(0.5f * z[i]));
      return;
    case FF_ACT_ELU:
      for (long i = 0; i < count; ++i) y[i] = z[i] > 0.0f ? z[i] : expm1f(fminf(z[i], 0.0f));
      return;
    default:
      if (y != z)
        for (long i = 0; i < count; ++i) y[i] = z[i];
  }
}

FF_CLONES
void ff_activation_grad_f32(int act, const float *pre, const float *y, const float *dy, float *dz,
                            long count) {
  switch (act) {
    case FF_ACT_RELU:
      for (long i = 0; i < count; ++i) dz[i] = dy[i] * (float)(y[i] > 0.0f);
      return;
    case FF_ACT_GELU:
      for (long i = 0; i < count; ++i) dz[i] = ff_gelu_grad(pre[i], ff_gelu_tanh(pre[i]), dy[i]);
      return;
    case FF_ACT_TANH:
      for (long i = 0; i < count; ++i) dz[i] = dy[i] * (1.0f - y[i] * y[i]);
      return;
    case FF_ACT_SIGMOID:
      for (long i = 0; i < count; ++i) dz[i] = dy[i] * y[i] * (1.0f - y[i]);
      return;
    case FF_ACT_ELU:
      for (long i = 0; i < count; ++i) dz[i] = dy[i] * (y[i] > 0.0f ? 1.0f : y[i] + 1.0f);
      return;
    default:
      if (dz != dy)
        for (long i = 0; i < count; ++i) dz[i] = dy[i];
  }
}
