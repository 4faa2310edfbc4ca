/* A fused training step of a program of ops (dense layers, convolutions, poolings, dropouts,
 * LSTM steps, embeddings, stacks, concatenations, attention, element-wise ops, layer norms,
 * splits, means) ending in a softmax under sparse categorical cross-entropy, as
 * flexflow.runtime.step_program describes it, run as one C call for the CPU
 * tasks: forward, loss and backward without the interpreter lock, which the other processors'
 * tasks wait for whenever a task body runs Python between its kernels (two processors' step
 * tasks took turns at it; each op's Python cost twice its time in iteration time). Each op
 * computes what flexflow.ops' kernels compute: the dense layers through native/dense.c and
 * native/activations.c, layer norms through native/layer_norm.c, the LSTM steps through
 * native/lstm.c, attention through native/attention.c, convolutions and
 * poolings through native/kernels.c, the loss through native/losses.c, the softmax's gradient
 * as y * (dy - sum(dy * y)), a gradient with several readers summed in the op-by-op step's
 * order (flexflow.fused_run); only the softmax's own exp and sum may round differently from
 * numpy's. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"

void ff_softmax_rows_f32(const float *x, float *y, long rows, long classes) {
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

void ff_softmax_rows_backward_f32(const float *y, const float *dy, float *dx, long rows,
                                  long classes) {
  for (long i = 0; i < rows; ++i) {
    const float *p = y + i * classes, *g = dy + i * classes;
    float dot = 0.0f; /* the cross-entropy's dy is zero but at the label: any order is exact */
    for (long c = 0; c < classes; ++c) dot = dot + g[c] * p[c];
    for (long c = 0; c < classes; ++c) dx[i * classes + c] = p[c] * (g[c] - dot);
  }
}

/* dest += src, n floats: a gradient an earlier op (in the backward's order) already wrote. */
static void ff_add_f32(float *dest, const float *src, long n) {
  for (long i = 0; i < n; ++i) dest[i] = dest[i] + src[i];
}

/* Where an op's kernel writes gradient i of `dest`: the destination, or its scratch when the
 * gradient is added into the destination afterwards (ff_finish). */
static float *ff_out(float *dest, int add, float *tmp) { return dest && add ? tmp : dest; }

static void ff_finish(float *dest, int add, const float *tmp, long n) {
  if (dest && add) ff_add_f32(dest, tmp, n);
}

static void ff_finish_weights(const ff_step_op *op) {
  for (int i = 0; i < FF_STEP_WEIGHTS; ++i)
    ff_finish(op->dw[i], op->dw_add[i], op->tmp_w[i], op->w_n[i]);
}

long ff_conv_scratch(const ff_window_dims *d) {
  const long rows = d->n * d->oh * d->ow;
  if (ff_conv_direct(d)) return rows * d->o + ff_conv_direct_scratch(d); /* dz, the kernels' */
  return rows * d->c * d->kh * d->kw + rows * d->o;
}

static void ff_relu_in_place(float *y, long n) {
  for (long i = 0; i < n; ++i) y[i] = y[i] < 0.0f ? 0.0f : y[i];
}

/* The convolution's forward: im2col into the scratch's columns, z rows (n oh ow, o) = columns
 * kernel^T + bias, y (n, o, oh, ow) = z transposed, then relu. */
static void ff_conv_forward(ff_sgemm_fn gemm, const ff_step_op *op, const float *x) {
  const ff_window_dims *d = &op->win;
  const long pixels = d->oh * d->ow, rows = d->n * pixels, k = d->c * d->kh * d->kw;
  if (ff_conv_direct(d)) { /* as flexflow.ops.conv2d's tiles: native/conv.c */
    ff_conv_direct_forward_f32(x, op->w[0], op->w[1], op->y[0], d, op->scratch + rows * d->o,
                               -1);
    if (op->act == FF_ACT_RELU) ff_relu_in_place(op->y[0], rows * d->o);
    return;
  }
  float *cols = op->scratch, *z = cols + rows * k;
  ff_im2col_f32(x, cols, d->n, d->c, d->h, d->w, d->oh, d->ow, (int)d->kh, (int)d->kw,
                (int)d->sh, (int)d->sw, (int)d->ph, (int)d->pw);
  gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)rows, (int)d->o, (int)k, 1.0f, cols, (int)k,
       op->w[0], (int)k, 0.0f, z, (int)d->o);
  for (long i = 0; i < d->n; ++i)
    for (long c = 0; c < d->o; ++c) {
      float *out = op->y[0] + (i * d->o + c) * pixels;
      const float *in = z + i * pixels * d->o + c;
      for (long q = 0; q < pixels; ++q) {
        float v = in[q * d->o];
        if (op->w[1]) v = v + op->w[1][c];
        out[q] = op->act == FF_ACT_RELU && v < 0.0f ? 0.0f : v;
      }
    }
}

/* The direct kernels' backward (native/conv.c): dz (n, o, oh, ow) through the relu in the
 * scratch, the bias's gradient its sums per output channel. */
static void ff_conv_direct_backward(const ff_step_op *op, float *dx, float *dw, float *db) {
  const ff_window_dims *d = &op->win;
  const long pixels = d->oh * d->ow, count = d->n * d->o * pixels;
  float *dz = op->scratch, *scratch = dz + count;
  const float *g = op->dy[0], *y = op->y[0];
  for (long i = 0; i < count; ++i)
    dz[i] = op->act == FF_ACT_RELU && !(y[i] > 0.0f) ? 0.0f : g[i];
  ff_conv_direct_kernel_grad_f32((const float *)op->x[0], dz, dw, d, scratch, -1);
  if (db) {
    for (long c = 0; c < d->o; ++c) db[c] = 0.0f;
    for (long i = 0; i < d->n; ++i)
      for (long c = 0; c < d->o; ++c) {
        const float *row = dz + (i * d->o + c) * pixels;
        float sum = 0.0f;
        for (long q = 0; q < pixels; ++q) sum = sum + row[q];
        db[c] = db[c] + sum;
      }
  }
  if (dx) ff_conv_direct_input_grad_f32(dz, op->w[0], dx, d, scratch, -1);
}

/* Its backward from y and dy: dz through the relu, as rows (n oh ow, o) in the scratch; the
 * kernel's gradient dz^T columns, the bias's the rows' sums, the input's (when dx) col2im of
 * dz kernel, computed in the columns' place. */
static void ff_conv_backward(ff_sgemm_fn gemm, const ff_step_op *op, float *dx, float *dw,
                             float *db) {
  const ff_window_dims *d = &op->win;
  const long pixels = d->oh * d->ow, rows = d->n * pixels, k = d->c * d->kh * d->kw;
  if (ff_conv_direct(d)) {
    ff_conv_direct_backward(op, dx, dw, db);
    return;
  }
  float *cols = op->scratch, *dz = cols + rows * k;
  for (long i = 0; i < d->n; ++i)
    for (long c = 0; c < d->o; ++c) {
      const long at = (i * d->o + c) * pixels;
      const float *g = op->dy[0] + at, *y = op->y[0] + at;
      float *out = dz + i * pixels * d->o + c;
      for (long q = 0; q < pixels; ++q)
        out[q * d->o] = op->act == FF_ACT_RELU && !(y[q] > 0.0f) ? 0.0f : g[q];
    }
  gemm(FF_ROW_MAJOR, FF_TRANS, FF_NO_TRANS, (int)d->o, (int)k, (int)rows, 1.0f, dz, (int)d->o,
       cols, (int)k, 0.0f, dw, (int)k);
  if (db) {
    for (long c = 0; c < d->o; ++c) db[c] = 0.0f;
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < d->o; ++c) db[c] = db[c] + dz[r * d->o + c];
  }
  if (dx) {
    gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_NO_TRANS, (int)rows, (int)k, (int)d->o, 1.0f, dz,
         (int)d->o, op->w[0], (int)k, 0.0f, cols, (int)k);
    ff_col2im_f32(cols, dx, d->n, d->c, d->h, d->w, d->oh, d->ow, (int)d->kh, (int)d->kw,
                  (int)d->sh, (int)d->sw, (int)d->ph, (int)d->pw);
  }
}

/* splitmix64's finalizer (flexflow.ops.dropout._mix64). */
static uint64_t ff_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

void ff_dropout_f32(unsigned long long stream, double rate, long base, const float *in,
                    float *out, long count) {
  const uint64_t key = ff_mix64(stream);
  const double scale = 1.0 / (1.0 - rate);
  for (long i = 0; i < count; ++i) {
    const uint64_t counter = (uint64_t)(base + i) + 1;
    const uint64_t bits = ff_mix64(key + counter * UINT64_C(0x9E3779B97F4A7C15));
    const double uniform = (double)(bits >> 11) * 0x1.0p-53;
    out[i] = (float)((double)in[i] * (uniform >= rate ? scale : 0.0));
  }
}

/* out = in through the op's dropout at the step `iteration` (flexflow.task_modes.op_for_task
 * keys the stream so). */
static void ff_dropout_apply(const ff_step_op *op, long iteration, const float *in, float *out) {
  const uint64_t mask63 = (UINT64_C(1) << 63) - 1;
  const uint64_t stream = (op->seed * UINT64_C(1000003) + (uint64_t)iteration) & mask63;
  ff_dropout_f32(stream, op->rate, op->base, in, out, op->m);
}

int ff_embedding_backward_f32(const int *ids, const float *dy, float *grad, long rows,
                              long width, long table_rows) {
  for (long r = 0; r < rows; ++r)
    if (ids[r] < 0 || ids[r] >= table_rows) return FF_STEP_BAD_ID;
  memset(grad, 0, sizeof(float) * table_rows * width);
  for (long r = 0; r < rows; ++r) ff_add_f32(grad + (long)ids[r] * width, dy + r * width, width);
  return 0;
}

/* Joins `count` parts of m rows into `out`, each of its rows the parts' rows one after another
 * (part t has floats[t] floats a row, or n when floats is NULL): a stack's or concat's
 * forward, a split's backward. */
static void ff_join(const float *const *parts, const long *floats, long n, long count, long m,
                    float *out) {
  for (long r = 0; r < m; ++r)
    for (long t = 0; t < count; ++t) {
      const long width = floats ? floats[t] : n;
      memcpy(out, parts[t] + r * width, sizeof(float) * width);
      out += width;
    }
}

/* The reverse: each row of `in` cut into the parts, copied, or added where adds[t] (adds may be
 * NULL); a NULL part is skipped. A stack's or concat's backward, a split's forward. */
static void ff_cut(const float *in, float *const *parts, const int *adds, const long *floats,
                   long n, long count, long m) {
  for (long r = 0; r < m; ++r)
    for (long t = 0; t < count; ++t) {
      const long width = floats ? floats[t] : n;
      float *part = parts[t];
      if (part && adds && adds[t])
        ff_add_f32(part + r * width, in, width);
      else if (part)
        memcpy(part + r * width, in, sizeof(float) * width);
      in += width;
    }
}

/* y[0] = x[0] (op) x[1], element by element (flexflow.ops.element_binary's rules). */
static void ff_binary_forward(const ff_step_op *op, const float *a, const float *b) {
  float *y = op->y[0];
  if (op->p == FF_BINARY_ADD)
    for (long i = 0; i < op->m; ++i) y[i] = a[i] + b[i];
  else if (op->p == FF_BINARY_SUBTRACT)
    for (long i = 0; i < op->m; ++i) y[i] = a[i] - b[i];
  else
    for (long i = 0; i < op->m; ++i) y[i] = a[i] * b[i];
}

/* Its gradients into da and db (each skipped when NULL): dy, dy (add); dy, -dy (subtract);
 * dy b, dy a (multiply). */
static void ff_binary_backward(const ff_step_op *op, float *da, float *db) {
  const float *dy = op->dy[0], *a = (const float *)op->x[0], *b = (const float *)op->x[1];
  const long m = op->m;
  if (da) {
    if (op->p == FF_BINARY_MULTIPLY)
      for (long i = 0; i < m; ++i) da[i] = dy[i] * b[i];
    else
      memcpy(da, dy, sizeof(float) * m);
  }
  if (db) {
    if (op->p == FF_BINARY_MULTIPLY)
      for (long i = 0; i < m; ++i) db[i] = dy[i] * a[i];
    else if (op->p == FF_BINARY_SUBTRACT)
      for (long i = 0; i < m; ++i) db[i] = -dy[i];
    else
      memcpy(db, dy, sizeof(float) * m);
  }
}

/* A layer norm's rstd per row, after the backward's sums in its scratch. */
static float *ff_rstd(const ff_step_op *op) { return op->scratch + 4 * op->n; }

static int ff_step_forward(ff_sgemm_fn gemm, const ff_step_op *op, long iteration) {
  const float *x = (const float *)op->x[0];
  switch (op->kind) {
    case FF_STEP_DENSE:
      ff_dense_forward_f32(gemm, x, op->w[0], op->w[1], op->y[0],
                           op->act == FF_ACT_GELU ? op->z : NULL,
                           op->act == FF_ACT_GELU ? op->dz : NULL, op->m, op->n, op->k, op->act);
      return 0;
    case FF_STEP_SOFTMAX:
      ff_softmax_rows_f32(x, op->y[0], op->m, op->n);
      return 0;
    case FF_STEP_LSTM:
      ff_lstm_forward_f32(gemm, x, (const float *)op->x[1], (const float *)op->x[2], op->w[0],
                          op->w[1], op->w[2], op->z, op->y[0], op->y[1], op->m, op->k, op->p,
                          op->n, op->ldx);
      return 0;
    case FF_STEP_EMBEDDING: {
      const int32_t *ids = (const int32_t *)op->x[0];
      for (long r = 0; r < op->m; ++r) {
        if (ids[r] < 0 || ids[r] >= op->k) return FF_STEP_BAD_ID;
        memcpy(op->y[0] + r * op->n, op->w[0] + (long)ids[r] * op->n, sizeof(float) * op->n);
      }
      return 0;
    }
    case FF_STEP_STACK:
    case FF_STEP_CONCAT:
      ff_join(op->parts, op->part_n, op->n, op->count, op->m, op->y[0]);
      return 0;
    case FF_STEP_ATTENTION:
      ff_attention_forward_f32(gemm, &op->att, x, (const float *)op->x[1],
                               (const float *)op->x[2], op->w, op->scratch, op->y[0]);
      return 0;
    case FF_STEP_CONV:
      ff_conv_forward(gemm, op, x);
      return 0;
    case FF_STEP_POOL: {
      const ff_window_dims *d = &op->win;
      ff_pool2d_forward_f32(x, op->y[0], d->n, d->c, d->h, d->w, d->oh, d->ow, (int)d->kh,
                            (int)d->kw, (int)d->sh, (int)d->sw, (int)d->ph, (int)d->pw,
                            (int)d->is_max);
      return 0;
    }
    case FF_STEP_DROPOUT:
      ff_dropout_apply(op, iteration, x, op->y[0]);
      return 0;
    case FF_STEP_BINARY:
      ff_binary_forward(op, x, (const float *)op->x[1]);
      return 0;
    case FF_STEP_LAYER_NORM:
      ff_layer_norm_forward_f32(x, op->w[0], op->w[1], op->y[0], op->z, ff_rstd(op), op->m,
                                op->n, op->eps);
      return 0;
    case FF_STEP_UNARY:
      ff_activate_f32(op->act, x, op->y[0], op->m);
      return 0;
    case FF_STEP_MEAN:
      for (long o = 0; o < op->m; ++o)
        for (long i = 0; i < op->n; ++i) {
          double sum = 0.0;
          for (long r = 0; r < op->k; ++r) sum += x[(o * op->k + r) * op->n + i];
          op->y[0][o * op->n + i] = (float)(sum / (double)op->k);
        }
      return 0;
    case FF_STEP_SPLIT: {
      const long floats[2] = {op->k * op->n, op->p * op->n};
      ff_cut(x, op->y, NULL, floats, 0, 2, op->m);
      return 0;
    }
    case FF_STEP_BATCH_NORM: {
      const int status = ff_bn_train_forward_f32(
          x, op->y[0], op->w[0], op->w[1], op->running, op->running_out, op->stats, op->m, op->n,
          op->k, op->batch_count, op->eps, op->act == FF_ACT_RELU, op->momentum, op->exchange,
          op->point, op->timeout_s);
      return status ? FF_STEP_EXCHANGE + status : 0;
    }
  }
  return -2;
}

static int ff_step_backward(ff_sgemm_fn gemm, const ff_step_op *op, long iteration) {
  if (op->zero) memset(op->zero, 0, sizeof(float) * op->zero_n);
  float *gx[FF_STEP_SLOTS], *gw[FF_STEP_WEIGHTS];
  for (int i = 0; i < FF_STEP_SLOTS; ++i) gx[i] = ff_out(op->dx[i], op->dx_add[i], op->tmp_x[i]);
  for (int i = 0; i < FF_STEP_WEIGHTS; ++i) gw[i] = ff_out(op->dw[i], op->dw_add[i], op->tmp_w[i]);
  const long m = op->m, n = op->n, k = op->k;
  switch (op->kind) {
    case FF_STEP_DENSE:
      ff_dense_backward_f32(gemm, (const float *)op->x[0], op->w[0], op->y[0], op->z,
                            op->act == FF_ACT_GELU ? op->dz : NULL, op->dy[0], op->z, gw[0],
                            gw[1], gx[0], m, n, k, op->act);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m * k);
      break;
    case FF_STEP_SOFTMAX:
      if (gx[0]) ff_softmax_rows_backward_f32(op->y[0], op->dy[0], gx[0], m, n);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m * n);
      break;
    case FF_STEP_LSTM: {
      /* the input's gradient always goes to scratch: it may be a time step of a sequence */
      ff_lstm_backward_f32(gemm, (const float *)op->x[0], (const float *)op->x[1],
                           (const float *)op->x[2], op->w[0], op->w[1], op->w[2], op->y[1],
                           op->dy[0], op->dy[1], op->z, op->dz, op->tmp_x[0], gx[1], gx[2], gw[0],
                           gw[1], gw[2], m, k, op->p, n, 1, op->ldx);
      if (op->dx[0]) {
        for (long r = 0; r < m; ++r) {
          float *row = op->dx[0] + r * op->ldx;
          const float *add = op->tmp_x[0] + r * k;
          if (op->dx_add[0])
            ff_add_f32(row, add, k);
          else
            memcpy(row, add, sizeof(float) * k);
        }
      }
      ff_finish(op->dx[1], op->dx_add[1], op->tmp_x[1], m * op->p);
      ff_finish(op->dx[2], op->dx_add[2], op->tmp_x[2], m * n);
      break;
    }
    case FF_STEP_EMBEDDING:
      /* the forward refused any id outside the table */
      (void)ff_embedding_backward_f32((const int *)op->x[0], op->dy[0], gw[0], m, n, op->k);
      break;
    case FF_STEP_STACK:
    case FF_STEP_CONCAT:
      ff_cut(op->dy[0], op->dparts, op->dparts_add, op->part_n, n, op->count, m);
      break;
    case FF_STEP_ATTENTION: {
      const ff_attention_dims *d = &op->att;
      ff_attention_backward_f32(gemm, d, (const float *)op->x[0], (const float *)op->x[1],
                                (const float *)op->x[2], op->w, op->scratch, op->dy[0], gx[0],
                                gx[1], gx[2], gw);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], d->n * d->lq * d->eq);
      ff_finish(op->dx[1], op->dx_add[1], op->tmp_x[1], d->n * d->lk * d->ek);
      ff_finish(op->dx[2], op->dx_add[2], op->tmp_x[2], d->n * d->lk * d->ev);
      break;
    }
    case FF_STEP_CONV: {
      const ff_window_dims *d = &op->win;
      ff_conv_backward(gemm, op, gx[0], gw[0], gw[1]);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], d->n * d->c * d->h * d->w);
      break;
    }
    case FF_STEP_POOL: {
      const ff_window_dims *d = &op->win;
      if (gx[0])
        ff_pool2d_backward_f32((const float *)op->x[0], op->dy[0], gx[0], d->n, d->c, d->h, d->w,
                               d->oh, d->ow, (int)d->kh, (int)d->kw, (int)d->sh, (int)d->sw,
                               (int)d->ph, (int)d->pw, (int)d->is_max);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], d->n * d->c * d->h * d->w);
      break;
    }
    case FF_STEP_DROPOUT:
      if (gx[0]) ff_dropout_apply(op, iteration, op->dy[0], gx[0]);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m);
      break;
    case FF_STEP_BINARY:
      ff_binary_backward(op, gx[0], gx[1]);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m);
      ff_finish(op->dx[1], op->dx_add[1], op->tmp_x[1], m);
      break;
    case FF_STEP_LAYER_NORM:
      ff_layer_norm_backward_f32(op->z, ff_rstd(op), op->w[0], op->dy[0], gx[0],
                                 op->w[0] ? gw[0] : NULL, gw[1], (double *)op->scratch, m, n);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m * n);
      break;
    case FF_STEP_MEAN:
      if (gx[0]) /* dy / count, broadcast over the reduced values, as the reference */
        for (long o = 0; o < m; ++o)
          for (long r = 0; r < k; ++r)
            for (long i = 0; i < n; ++i) gx[0][(o * k + r) * n + i] = op->dy[0][o * n + i] / (float)k;
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m * k * n);
      break;
    case FF_STEP_UNARY:
      if (gx[0])
        ff_activation_grad_f32(op->act, (const float *)op->x[0], op->y[0], op->dy[0], gx[0], m);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m);
      break;
    case FF_STEP_SPLIT: {
      const long floats[2] = {k * n, op->p * n};
      const float *const parts[2] = {op->dy[0], op->dy[1]};
      if (gx[0]) ff_join(parts, floats, 0, 2, m, gx[0]);
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m * (floats[0] + floats[1]));
      break;
    }
    case FF_STEP_BATCH_NORM: {
      const int status = ff_bn_train_backward_f32(
          (const float *)op->x[0], op->y[0], op->dy[0], op->w[0], op->stats, gx[0], gw[0], gw[1],
          m, n, k, op->batch_count, op->eps, op->act == FF_ACT_RELU, op->exchange, op->point,
          op->timeout_s);
      if (status) return FF_STEP_EXCHANGE + status;
      ff_finish(op->dx[0], op->dx_add[0], op->tmp_x[0], m * n * k);
      break;
    }
  }
  ff_finish_weights(op);
  return 0;
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

/* Log a part of a step that began at `begin` as `what`; when it ended (the next part's begin). */
static double ff_log_part(ff_step_log *log, double begin, int what) {
  const double end = ff_now();
  ff_log_entry(log, begin, end, what);
  return end;
}

/* Point every op's weights (with `weights`) and weight gradients (with `grads`) at their
 * offsets in the flat buffers. */
static void ff_place_flat(ff_step_op *ops, long count, const float *weights, float *grads) {
  for (long i = 0; i < count; ++i)
    for (int j = 0; j < FF_STEP_WEIGHTS; ++j) {
      ff_step_op *op = ops + i;
      if (weights && op->w_at[j] >= 0) op->w[j] = weights + op->w_at[j];
      if (grads && op->dw_at[j] >= 0) op->dw[j] = grads + op->dw_at[j];
    }
}

/* An op's forward outside training: a dropout passes its input on, a batch norm normalizes
 * with the sums a batch of its running mean and variance would have (flexflow.ops.batch_norm's
 * statistics_from_running, then forward_tile_with_statistics); any other op as in training. */
static int ff_eval_forward(ff_sgemm_fn gemm, const ff_step_op *op) {
  const float *x = (const float *)op->x[0];
  if (op->kind == FF_STEP_DROPOUT) {
    memcpy(op->y[0], x, sizeof(float) * op->m);
    return 0;
  }
  if (op->kind != FF_STEP_BATCH_NORM) return ff_step_forward(gemm, op, 0);
  const long c = op->n;
  const double count = op->batch_count;
  for (long ch = 0; ch < c; ++ch) {
    const double mean = op->running[ch], var = op->running[c + ch];
    op->stats[ch] = mean * count;
    op->stats[c + ch] = (var + mean * mean) * count;
  }
  ff_bn_forward_f32(x, op->y[0], op->stats, op->w[0], op->w[1], op->m, c, op->k, count, op->eps,
                    op->act == FF_ACT_RELU);
  return 0;
}

/* The loss of the last op's output into loss->sums, its gradient into the op's dy[0]. */
static int ff_step_loss_sums(const ff_step_op *ops, long count, const ff_step_loss *loss) {
  const ff_step_op *last = ops + count - 1;
  double value;
  long correct;
  int status = ff_sparse_xent_f32(last->y[0], loss->labels, last->dy[0], last->m, last->n,
                                  loss->valid, loss->total, &value, &correct);
  if (status) return status;
  loss->sums[0] = value;
  loss->sums[1] = (double)correct;
  return 0;
}

int ff_eval_step_f32(ff_sgemm_fn gemm, ff_step_op *ops, long count, const ff_step_loss *loss,
                     const float *weights) {
  if (count < 1 || ops[count - 1].kind != FF_STEP_SOFTMAX) return -2;
  ff_place_flat(ops, count, weights, NULL);
  for (long i = 0; i < count; ++i) {
    int status = ff_eval_forward(gemm, ops + i);
    if (status) return status;
  }
  return ff_step_loss_sums(ops, count, loss);
}

int ff_train_step_f32(ff_sgemm_fn gemm, ff_step_op *ops, long count, const ff_step_loss *loss,
                      const float *weights, float *grads, long iteration, ff_step_log *log) {
  if (count < 1 || ops[count - 1].kind != FF_STEP_SOFTMAX) return -2;
  if (weights && grads) ff_place_flat(ops, count, weights, grads);
  double begin = log ? ff_now() : 0.0;
  for (long i = 0; i < count; ++i) {
    int status = ff_step_forward(gemm, ops + i, iteration);
    if (status) return status;
    if (log) begin = ff_log_part(log, begin, FF_LOG_OPS + 2 * (int)i);
  }
  int status = ff_step_loss_sums(ops, count, loss);
  if (status) return status;
  if (log) begin = ff_log_part(log, begin, FF_LOG_OPS + 2 * (int)count);
  for (long i = count - 1; i >= 0; --i) {
    status = ff_step_backward(gemm, ops + i, iteration);
    if (status) return status;
    if (log) begin = ff_log_part(log, begin, FF_LOG_OPS + 2 * (int)i + 1);
  }
  return 0;
}

/* The update of elements [begin, end) with L2 lambda l2. */
static void ff_update_range(const ff_update *u, long begin, long end, float l2) {
  if (u->kind == FF_UPDATE_SGD)
    ff_sgd_update_f32(u->weight, u->partials, u->copies, begin, end, u->state0, u->h[0],
                      u->h[1], u->h[2], u->h[3] != 0.0f, l2);
  else if (u->kind == FF_UPDATE_ADAM)
    ff_adam_update_f32(u->weight, u->partials, u->copies, begin, end, u->state0, u->state1,
                       u->h[0], u->h[1], u->h[2], u->h[3], u->h[4], u->h[5], u->h[6], l2);
}

void ff_apply_update_runs_f32(const ff_update *u, const ff_l2_runs *runs) {
  long begin = 0;
  for (long i = 0; runs && i < runs->count; ++i) {
    long end = runs->stop[i] < u->n ? runs->stop[i] : u->n;
    if (end <= begin) continue; /* an empty run, or one past the buffer */
    ff_update_range(u, begin, end, runs->l2[i]);
    begin = end;
  }
  if (begin < u->n) ff_update_range(u, begin, u->n, 0.0f);
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
  ff_apply_update_runs_f32(update, plan->l2);
  if (log && update->kind != FF_UPDATE_NONE) ff_log_entry(log, begin, ff_now(), FF_LOG_UPDATE);
  return 0;
}

/* The model inputs' tiles and the loss's values of one call into the plan's structs. */
static void ff_plan_call(const ff_step_plan *plan, const ff_step_call *call) {
  for (long i = 0; i < plan->num_inputs; ++i) plan->ops[plan->inputs[i]].x[0] = call->xs[i];
  ff_step_loss *loss = plan->loss;
  loss->labels = call->labels;
  loss->valid = call->valid;
  loss->total = call->total;
  loss->sums = call->sums;
}

int ff_native_eval_f32(const ff_step_plan *plan, const ff_step_call *call) {
  ff_plan_call(plan, call);
  return ff_eval_step_f32(plan->gemm, plan->ops, plan->count, plan->loss, call->weights);
}

int ff_native_step_f32(const ff_step_plan *plan, const ff_step_call *call) {
  int status = ff_native_update_f32(plan, &call->update);
  if (status != 0) return status;
  ff_step_log *log = plan->log;
  double updated = log ? ff_now() : 0.0;
  ff_plan_call(plan, call);
  status = ff_train_step_f32(plan->gemm, plan->ops, plan->count, plan->loss, call->weights,
                             call->grads, call->iteration, log);
  if (log) ff_log_entry(log, updated, ff_now(), FF_LOG_STEP);
  return status;
}
