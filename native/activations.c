/* Activations on float32 tiles for the C kernels (native/dense.c, native/step.c): the formulas
 * of flexflow.ops.activations operation by operation in float32 (compiled without fused
 * multiply-adds). tanh is our own (ff_tanh, below), within 2e-7 of the exact value as numpy's
 * float32 tanh is within an ulp or two: glibc's tanhf, a call per element, was 40% of a
 * transformer's C step (10 ns per value; numpy's vectorized tanh takes 0.2 ns). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#define FF_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define FF_GELU_A 0.044715f

/* e^y for y in [0, 20], without a libm call (so loops over it vectorize): y = k ln2 + r with
 * |r| <= ln2 / 2 (ln2 in two parts, k ln2_hi exact), e^r by a degree-6 polynomial fitted to
 * its relative error (2e-9 on the interval, in float64), times 2^k built in the exponent. */
static inline float ff_exp_small(float y) {
  const int k = (int)(y * 1.44269504f + 0.5f);
  const float kf = (float)k;
  const float r = (y - kf * 0.693145751953125f) - kf * 1.428606765330187e-06f;
  float p = 1.38294206e-03f;
  p = p * r + 8.37477152e-03f;
  p = p * r + 4.16683580e-02f;
  p = p * r + 1.66664208e-01f;
  p = p * r + 4.99999915e-01f;
  p = p * r + 1.00000004e+00f;
  p = p * r + 1.0f;
  const uint32_t bits = (uint32_t)(k + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/* tanh(x): x + x^3 P(x^2) for |x| < 0.625 (P fitted to the relative error, 1.2e-8 in
 * float64), else 1 - 2 / (e^(2|x|) + 1) with the sign of x; |x| >= 10 gives +-1 in float32. */
static inline float ff_tanh(float x) {
  const float a = fabsf(x) < 10.0f ? fabsf(x) : 10.0f, z = a * a; /* not fminf: a call */
  float p = -5.704042525e-03f;
  p = p * z + 2.063786149e-02f;
  p = p * z - 5.373915650e-02f;
  p = p * z + 1.333143175e-01f;
  p = p * z - 3.333328128e-01f;
  const float small = a + a * z * p;
  const float large = 1.0f - 2.0f / (ff_exp_small(a + a) + 1.0f);
  const float t = copysignf(a < 0.625f ? small : large, x);
  return x != x ? x : t;
}

/* tanh(C x (1 + A x^2)): GELU's inner term, as flexflow.ops.activations._gelu_tanh. */
static inline float ff_gelu_tanh(float x) {
  float t = x * x;
  t = t * FF_GELU_A;
  t = t + 1.0f;
  t = t * x;
  t = t * FF_GELU_C;
  return ff_tanh(t);
}

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

void ff_activation_grad_f32(int act, const float *pre, const float *y, const float *dy, float *dz,
                            long count) {
  switch (act) {
    case FF_ACT_RELU:
      for (long i = 0; i < count; ++i) dz[i] = dy[i] * (float)(y[i] > 0.0f);
      return;
    case FF_ACT_GELU:
      for (long i = 0; i < count; ++i) {
        const float x = pre[i], t = ff_gelu_tanh(x);
        float slope = x * x;
        slope = slope * (3.0f * FF_GELU_A);
        slope = slope + 1.0f;
        slope = slope * x;
        slope = slope * (0.5f * FF_GELU_C);
        slope = slope * (1.0f - t * t);
        dz[i] = (((t + 1.0f) * 0.5f) + slope) * dy[i];
      }
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
