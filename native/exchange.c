/* The in-memory all-reduce of a concurrent launch's points (flexflow.runtime.concurrent), and
 * batch norm's training passes around it, each one C call without the interpreter lock.
 *
 * Why in C: the points of a data-parallel step meet at every batch norm, forward and
 * backward (208 times per ResNet-101 iteration). With a Python barrier each meeting woke a
 * thread through the interpreter lock, and then both points ran their Python glue (the
 * running statistics, the next kernel's arguments) at the same moment, taking turns at that
 * lock; ResNet-101's batch norms took 4x their kernels' time on two CPUs. Here a point waits
 * spinning briefly, then yielding its core, and the sum and the kernels after it run in the
 * same call.
 *
 * Every point gets the same sum, taken in point order element by element (p0 + p1 + ...), the
 * order numpy's `total = p0.copy(); total += p1; ...` adds in, so the bits match the numpy
 * path; the running statistics follow BatchNorm.running_update's operations in its order. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "kernels.h"

enum { FF_SPINS = 4000 };

struct ff_exchange {
  int points;
  _Atomic int arrived; /* points at the current barrier */
  _Atomic int phase;   /* barriers passed */
  _Atomic int aborted;
  const double *parts[FF_EXCHANGE_MAX_POINTS];
};

ff_exchange *ff_exchange_new(int points) {
  if (points < 1 || points > FF_EXCHANGE_MAX_POINTS) return NULL;
  ff_exchange *x = calloc(1, sizeof(ff_exchange));
  if (x != NULL) x->points = points;
  return x;
}

void ff_exchange_free(ff_exchange *x) { free(x); }

void ff_exchange_abort(ff_exchange *x) { atomic_store(&x->aborted, 1); }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Waits for every point: 0, or FF_EXCHANGE_ABORTED / FF_EXCHANGE_TIMEOUT. The last point to
 * arrive opens the next phase; the others spin a while, then give their core away between
 * looks (a point may be descheduled for milliseconds on a host with as many processors as
 * cores, and the runtime's threads need one). */
static int barrier(ff_exchange *x, double timeout_s) {
  const int phase = atomic_load(&x->phase);
  if (atomic_fetch_add(&x->arrived, 1) == x->points - 1) {
    atomic_store(&x->arrived, 0);
    atomic_store(&x->phase, phase + 1);
    return 0;
  }
  double deadline = 0.0;
  for (long spins = 0;; ++spins) {
    if (atomic_load(&x->phase) != phase) return 0;
    if (atomic_load(&x->aborted)) return FF_EXCHANGE_ABORTED;
    if (spins < FF_SPINS) continue;
    if (deadline == 0.0) deadline = now_s() + timeout_s;
    if ((spins & 1023) == 0 && now_s() > deadline) return FF_EXCHANGE_TIMEOUT;
    sched_yield();
  }
}

int ff_exchange_sum(ff_exchange *x, int point, const double *partial, double *total,
                        long n, double timeout_s) {
  if (atomic_load(&x->aborted)) return FF_EXCHANGE_ABORTED;
  x->parts[point] = partial;
  int status = barrier(x, timeout_s);
  if (status != 0) return status;
  for (long i = 0; i < n; ++i) {
    double sum = x->parts[0][i];
    for (int p = 1; p < x->points; ++p) sum += x->parts[p][i];
    total[i] = sum;
  }
  return barrier(x, timeout_s); /* no point hands in its next partial before all have read */
}

/* The whole batch's (2, c) sums from this tile's, through the exchange (a copy without one). */
static int batch_sums(ff_exchange *x, int point, const double *mine, double *sums,
                          long c, double timeout_s) {
  if (x == NULL) {
    for (long i = 0; i < 2 * c; ++i) sums[i] = mine[i];
    return 0;
  }
  return ff_exchange_sum(x, point, mine, sums, 2 * c, timeout_s);
}

int ff_bn_train_forward_f32(const float *x, float *y, const float *gamma, const float *beta,
                                const double *running, double *running_out, double *stats,
                                long n, long c, long hw, double count, double eps, int relu,
                                double momentum, ff_exchange *exchange, int point,
                                double timeout_s) {
  double *mine = malloc((size_t)(2 * c) * sizeof(double));
  if (mine == NULL) return FF_EXCHANGE_NO_MEMORY;
  ff_bn_stats_f32(x, mine, n, c, hw);
  int status = batch_sums(exchange, point, mine, stats, c, timeout_s);
  free(mine);
  if (status != 0) return status;
  /* BatchNorm.running_update: the unbiased batch variance, operation by operation */
  const double keep = 1.0 - momentum, ratio = count / (count - 1.0 > 1.0 ? count - 1.0 : 1.0);
  for (long ch = 0; ch < c; ++ch) {
    const double mean = stats[ch] / count, spread = stats[c + ch] / count - mean * mean;
    const double var = (spread < 0.0 ? 0.0 : spread) * ratio;
    running_out[ch] = keep * running[ch] + momentum * mean;
    running_out[c + ch] = keep * running[c + ch] + momentum * var;
  }
  ff_bn_forward_f32(x, y, stats, gamma, beta, n, c, hw, count, eps, relu);
  return 0;
}

int ff_bn_train_backward_f32(const float *x, const float *y, const float *dy,
                                 const float *gamma, const double *stats, float *dx,
                                 float *dgamma, float *dbeta, long n, long c, long hw,
                                 double count, double eps, int relu, ff_exchange *exchange,
                                 int point, double timeout_s) {
  double *mine = malloc((size_t)(4 * c) * sizeof(double));
  if (mine == NULL) return FF_EXCHANGE_NO_MEMORY;
  double *grad_stats = mine + 2 * c;
  ff_bn_stats_backward_f32(x, y, dy, stats, mine, n, c, hw, count, eps, relu);
  int status = batch_sums(exchange, point, mine, grad_stats, c, timeout_s);
  if (status == 0)
    ff_bn_backward_f32(x, y, dy, gamma, stats, grad_stats, mine, dx, dgamma, dbeta, n, c, hw,
                       count, eps, relu);
  free(mine);
  return status;
}
