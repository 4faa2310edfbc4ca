/* Optimizer updates for the CPU tasks: one pass over a weight that sums the devices' partial
 * gradients and applies the update, where flexflow.optimizers' numpy `apply` makes four to ten
 * passes (the update of a data-parallel replica is memory-bound). Every element goes through
 * exactly the float32 operations of the numpy reference, in its order, so the weights are
 * bit-identical (built with -ffp-contract=off: no fused multiply-adds). */
#include <math.h>

#include "clones.h"
#include "kernels.h"

#define FF_BLOCK 1024 /* elements per block: the summed gradient stays in L1 */

/* g[0..m) = partials[0][base..] + partials[1][base..] + ..., left to right. */
static void ff_sum_partials(const float *const *partials, long copies, long base, long m,
                            float *g) {
  const float *first = partials[0] + base;
  for (long j = 0; j < m; ++j) g[j] = first[j];
  for (long c = 1; c < copies; ++c) {
    const float *p = partials[c] + base;
    for (long j = 0; j < m; ++j) g[j] = g[j] + p[j];
  }
}

/* g[0..m) += l2 * w[0..m), then += weight_decay * w[0..m) (each skipped when 0). */
static inline void ff_decay(float *g, const float *w, long m, float l2, float weight_decay) {
  if (l2 != 0.0f)
    for (long j = 0; j < m; ++j) g[j] = g[j] + l2 * w[j];
  if (weight_decay != 0.0f)
    for (long j = 0; j < m; ++j) g[j] = g[j] + weight_decay * w[j];
}

FF_CLONES
void ff_sgd_update_f32(float *weight, const float *const *partials, long copies, long begin,
                       long end, float *velocity, float lr, float momentum, float weight_decay,
                       int nesterov, float l2) {
  float g[FF_BLOCK];
  for (long base = begin; base < end; base += FF_BLOCK) {
    long m = end - base < FF_BLOCK ? end - base : FF_BLOCK;
    float *w = weight + base;
    ff_sum_partials(partials, copies, base, m, g);
    ff_decay(g, w, m, l2, weight_decay);
    if (momentum != 0.0f) {
      float *v = velocity + base;
      for (long j = 0; j < m; ++j) {
        float vj = v[j] * momentum;
        vj = vj + g[j];
        v[j] = vj;
        g[j] = nesterov ? g[j] + momentum * vj : vj;
      }
    }
    for (long j = 0; j < m; ++j) w[j] = w[j] - g[j] * lr;
  }
}

FF_CLONES
void ff_adam_update_f32(float *weight, const float *const *partials, long copies, long begin,
                        long end, float *m1, float *m2, float lr, float beta1, float beta2,
                        float epsilon, float weight_decay, float correction1, float correction2,
                        float l2) {
  float g[FF_BLOCK];
  const float c1 = 1.0f - beta1, c2 = 1.0f - beta2;
  for (long base = begin; base < end; base += FF_BLOCK) {
    long m = end - base < FF_BLOCK ? end - base : FF_BLOCK;
    float *w = weight + base, *mo = m1 + base, *ve = m2 + base;
    ff_sum_partials(partials, copies, base, m, g);
    ff_decay(g, w, m, l2, weight_decay);
    for (long j = 0; j < m; ++j) {
      float mj = mo[j] * beta1;
      mj = mj + c1 * g[j];
      mo[j] = mj;
      float squared = c2 * g[j];
      squared = squared * g[j];
      float vj = ve[j] * beta2;
      vj = vj + squared;
      ve[j] = vj;
      float step = mj / correction1;
      step = step * lr;
      float denominator = sqrtf(vj / correction2) + epsilon;
      w[j] = w[j] - step / denominator;
    }
  }
}
