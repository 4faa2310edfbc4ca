/* Float32 exp and tanh as inline arithmetic for the C kernels' element-wise loops
 * (native/activations.c, native/lstm.c): no libm call, so GCC vectorizes the loops (built with
 * -fno-trapping-math, which lets comparisons become selects); glibc's tanhf, a call per value,
 * took 10 ns a value (numpy's vectorized tanh: 0.2 ns). Within an ulp of the correctly
 * rounded tanh (tests/ops/test_activation_kernels.py). */
#ifndef FF_FASTMATH_H
#define FF_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* e^y for y in [0, 20], without a libm call (so loops over it vectorize): y = k ln2 + r with
 * |r| <= ln2 / 2 (ln2 in two parts, k ln2_hi exact), e^r by a degree-6 polynomial fitted to
 * its relative error (2e-9 on the interval, in float64), times 2^k built in the exponent. */
static inline float ff_exp_small(float y) {
  /* k = round(y / ln2) read off the float's bits (1.5 * 2^23 pushes the fraction out), not a
   * float-to-int conversion, which GCC does not if-convert in an AVX loop (a tanh loop built
   * for AVX-512 stayed scalar, 3.5x slower than the baseline's 4-wide one) */
  const float shifted = y * 1.44269504f + 12582912.0f;
  const float kf = shifted - 12582912.0f;
  int32_t k;
  memcpy(&k, &shifted, sizeof k);
  k -= 0x4B400000;
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

#endif
