/* A fused training step of a chain of dense layers ending in a softmax under sparse
 * categorical cross-entropy, run as one C call for the CPU tasks: forward, loss and backward
 * without the interpreter lock, which the other processors' tasks wait for whenever a task
 * body runs Python between its kernels (two processors' step tasks took turns at it; each op's
 * Python cost twice its time in iteration time). Each op computes what flexflow.ops' kernels
 * compute: the dense layers through native/dense.c, the loss through native/losses.c, the
 * softmax's gradient as y * (dy - sum(dy * y)); only the softmax's own exp and sum may round
 * differently from numpy's. */
#define _GNU_SOURCE
#include <math.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"

static void ff_softmax_rows(const float *x, float *y, long rows, long classes) {
  for (long i = 0; i < rows; ++i) {
    const float *in = x + i * classes;
    float *out = y + i * classes;
    float top = in[0];
    for (long c = 1; c < classes; ++c) top = in[c] > top ? in[c] : top;
    float sum = 0.0f;
    for (long c = 0; c < classes; ++c) {
      out[c] = expf(in[c] - top);
      sum = sum + out[c];
    }
    for (long c = 0; c < classes; ++c) out[c] = out[c] / sum;
  }
}

static void ff_softmax_rows_backward(const float *y, const float *dy, float *dx, long rows,
                                     long classes) {
  for (long i = 0; i < rows; ++i) {
    const float *p = y + i * classes, *g = dy + i * classes;
    float dot = 0.0f; /* the cross-entropy's dy is zero but at the label: any order is exact */
    for (long c = 0; c < classes; ++c) dot = dot + g[c] * p[c];
    for (long c = 0; c < classes; ++c) dx[i * classes + c] = p[c] * (g[c] - dot);
  }
}

int ff_train_step_f32(ff_sgemm_fn gemm, ff_step_op *ops, long count, const ff_step_loss *loss,
                      const float *weights, float *grads) {
  if (count < 1 || ops[count - 1].kind != FF_STEP_SOFTMAX) return -2;
  if (weights && grads)
    for (long i = 0; i < count; ++i) {
      ff_step_op *op = ops + i;
      if (op->kind != FF_STEP_DENSE) continue;
      op->w = weights + op->w_at;
      op->dw = grads + op->dw_at;
      op->b = op->b_at >= 0 ? weights + op->b_at : 0;
      op->db = op->db_at >= 0 ? grads + op->db_at : 0;
    }
  for (long i = 0; i < count; ++i) {
    const ff_step_op *op = ops + i;
    if (op->kind == FF_STEP_DENSE)
      ff_dense_forward_f32(gemm, op->x, op->w, op->b, op->y, op->m, op->n, op->k, op->relu);
    else
      ff_softmax_rows(op->x, op->y, op->m, op->n);
  }
  const ff_step_op *last = ops + count - 1;
  double value;
  long correct;
  int status = ff_sparse_xent_f32(last->y, loss->labels, last->dy, last->m, last->n,
                                  loss->valid, loss->total, &value, &correct);
  if (status) return status;
  loss->sums[0] = value;
  loss->sums[1] = (double)correct;
  for (long i = count - 1; i >= 0; --i) {
    const ff_step_op *op = ops + i;
    if (op->kind == FF_STEP_DENSE)
      ff_dense_backward_f32(gemm, op->x, op->w, op->y, op->dy, op->dz, op->dw, op->db, op->dx,
                            op->m, op->n, op->k, op->relu);
    else
      ff_softmax_rows_backward(op->y, op->dy, op->dx, op->m, op->n);
  }
  return 0;
}

void ff_apply_update_f32(const ff_update *u) {
  if (u->kind == FF_UPDATE_SGD)
    ff_sgd_update_f32(u->weight, u->partials, u->copies, u->n, u->state0, u->h[0], u->h[1],
                      u->h[2], u->h[3] != 0.0f);
  else if (u->kind == FF_UPDATE_ADAM)
    ff_adam_update_f32(u->weight, u->partials, u->copies, u->n, u->state0, u->state1, u->h[0],
                       u->h[1], u->h[2], u->h[3], u->h[4], u->h[5], u->h[6]);
}

static double ff_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void ff_log_entry(ff_step_log *log, double begin, double end, int what) {
  long written = log->written;
  if (written - __atomic_load_n(&log->taken, __ATOMIC_ACQUIRE) >= log->capacity) {
    log->dropped += 1;
    return;
  }
  double *entry = log->entries + 4 * (written % log->capacity);
  entry[0] = begin;
  entry[1] = end;
  entry[2] = (double)syscall(SYS_gettid);
  entry[3] = what;
  __atomic_store_n(&log->written, written + 1, __ATOMIC_RELEASE);
}

long ff_step_log_take(ff_step_log *log, double *out) {
  long written = __atomic_load_n(&log->written, __ATOMIC_ACQUIRE), taken = log->taken;
  for (long i = taken; i < written; ++i)
    memcpy(out + 4 * (i - taken), log->entries + 4 * (i % log->capacity), 4 * sizeof(double));
  __atomic_store_n(&log->taken, written, __ATOMIC_RELEASE);
  return written - taken;
}

/* The update alone, logged: a step's first part, and what a launch of several steps applies
 * after its last one (native/legate_tasks.cc). */
int ff_native_update_f32(const ff_step_plan *plan, const ff_update *update) {
  if (update->kind != FF_UPDATE_NONE && update->kind != FF_UPDATE_SGD &&
      update->kind != FF_UPDATE_ADAM)
    return -3;
  ff_step_log *log = plan->log;
  double begin = log ? ff_now() : 0.0;
  ff_apply_update_f32(update);
  if (log && update->kind != FF_UPDATE_NONE) ff_log_entry(log, begin, ff_now(), FF_LOG_UPDATE);
  return 0;
}

int ff_native_step_f32(const ff_step_plan *plan, const ff_step_call *call) {
  int status = ff_native_update_f32(plan, &call->update);
  if (status != 0) return status;
  ff_step_log *log = plan->log;
  double updated = log ? ff_now() : 0.0;
  plan->ops[0].x = call->x;
  ff_step_loss *loss = plan->loss;
  loss->labels = call->labels;
  loss->valid = call->valid;
  loss->total = call->total;
  loss->sums = call->sums;
  status = ff_train_step_f32(plan->gemm, plan->ops, plan->count, loss, call->weights, call->grads);
  if (log) ff_log_entry(log, updated, ff_now(), FF_LOG_STEP);
  return status;
}
