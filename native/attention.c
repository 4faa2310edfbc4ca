/* Multi-head attention on float32 tiles for the C training step (native/step.c): the
 * formulas of flexflow.ops.multihead_attention's numpy reference (projections, scaled dot
 * products, a softmax over the keys, the output projection, and their gradients), the products
 * through the CBLAS GEMM the caller passes (MKL's, ops/blas.py). Rounding differs from numpy's
 * (another GEMM, the softmax's sums in order), not the results: a unit test holds them to
 * float32 tolerances. */
#include <math.h>

#include "kernels.h"

/* The scratch's parts: q, k, v, the probabilities and the context, which the forward keeps for
 * the backward, then the backward's dc, dq, dk, dv and one head's score gradients. */
typedef struct {
  float *q, *k, *v, *p, *c, *dc, *dq, *dk, *dv, *ds;
} parts;

static parts carve(const ff_attention_dims *d, float *scratch) {
  const long nq = d->n * d->lq * d->e, nk = d->n * d->lk * d->e;
  parts s;
  s.q = scratch;
  s.k = s.q + nq;
  s.v = s.k + nk;
  s.p = s.v + nk;
  s.c = s.p + d->n * d->heads * d->lq * d->lk;
  s.dc = s.c + nq;
  s.dq = s.dc + nq;
  s.dk = s.dq + nq;
  s.dv = s.dk + nk;
  s.ds = s.dv + nk;
  return s;
}

long ff_attention_scratch(const ff_attention_dims *d) {
  const long nq = d->n * d->lq * d->e, nk = d->n * d->lk * d->e;
  return 5 * nq + 4 * nk + d->n * d->heads * d->lq * d->lk + d->lq * d->lk;
}

/* y (rows, out) = x (rows, in) w^T (w: out x in) (+ b on every row). */
static void project(ff_sgemm_fn gemm, const float *x, const float *w, const float *b, float *y,
                    long rows, long out, long in) {
  gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)rows, (int)out, (int)in, 1.0f, x, (int)in, w,
       (int)in, 0.0f, y, (int)out);
  if (b)
    for (long r = 0; r < rows; ++r)
      for (long j = 0; j < out; ++j) y[r * out + j] = y[r * out + j] + b[j];
}

/* db (cols) = the column sums of g (rows, cols). */
static void column_sums(const float *g, float *db, long rows, long cols) {
  for (long j = 0; j < cols; ++j) db[j] = 0.0f;
  for (long r = 0; r < rows; ++r)
    for (long j = 0; j < cols; ++j) db[j] = db[j] + g[r * cols + j];
}

/* Input gradient dx (rows, in) = g (rows, out) w; weight gradient dw (out, in) = g^T x. */
static void project_backward(ff_sgemm_fn gemm, const float *x, const float *w, const float *g,
                             float *dx, float *dw, float *db, long rows, long out, long in) {
  gemm(FF_ROW_MAJOR, FF_TRANS, FF_NO_TRANS, (int)out, (int)in, (int)rows, 1.0f, g, (int)out, x,
       (int)in, 0.0f, dw, (int)in);
  if (db) column_sums(g, db, rows, out);
  if (dx)
    gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_NO_TRANS, (int)rows, (int)in, (int)out, 1.0f, g, (int)out,
         w, (int)in, 0.0f, dx, (int)in);
}

void ff_attention_forward_f32(ff_sgemm_fn gemm, const ff_attention_dims *d, const float *query,
                              const float *key, const float *value, const float *const *w,
                              float *scratch, float *y) {
  const long n = d->n, lq = d->lq, lk = d->lk, e = d->e, hd = e / d->heads;
  const float scale = sqrtf((float)hd);
  parts s = carve(d, scratch);
  project(gemm, query, w[0], w[4], s.q, n * lq, e, d->eq);
  project(gemm, key, w[1], w[5], s.k, n * lk, e, d->ek);
  project(gemm, value, w[2], w[6], s.v, n * lk, e, d->ev);
  for (long i = 0; i < n; ++i)
    for (long h = 0; h < d->heads; ++h) {
      const float *q = s.q + i * lq * e + h * hd, *k = s.k + i * lk * e + h * hd;
      const float *v = s.v + i * lk * e + h * hd;
      float *p = s.p + (i * d->heads + h) * lq * lk;
      gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)lq, (int)lk, (int)hd, 1.0f, q, (int)e, k,
           (int)e, 0.0f, p, (int)lk);
      for (long j = 0; j < lq * lk; ++j) p[j] = p[j] / scale;
      ff_softmax_rows_f32(p, p, lq, lk); /* over the keys of the scaled scores */
      gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_NO_TRANS, (int)lq, (int)hd, (int)lk, 1.0f, p, (int)lk, v,
           (int)e, 0.0f, s.c + i * lq * e + h * hd, (int)e);
    }
  project(gemm, s.c, w[3], w[7], y, n * lq, e, e);
}

void ff_attention_backward_f32(ff_sgemm_fn gemm, const ff_attention_dims *d, const float *query,
                               const float *key, const float *value, const float *const *w,
                               float *scratch, const float *dy, float *dquery, float *dkey,
                               float *dvalue, float *const *dw) {
  const long n = d->n, lq = d->lq, lk = d->lk, e = d->e, hd = e / d->heads;
  const float scale = sqrtf((float)hd);
  parts s = carve(d, scratch);
  project_backward(gemm, s.c, w[3], dy, s.dc, dw[3], dw[7], n * lq, e, e);
  for (long i = 0; i < n; ++i)
    for (long h = 0; h < d->heads; ++h) {
      const long at_q = i * lq * e + h * hd, at_k = i * lk * e + h * hd;
      const float *p = s.p + (i * d->heads + h) * lq * lk, *dc = s.dc + at_q;
      /* the probabilities' gradient, then the values' */
      gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_TRANS, (int)lq, (int)lk, (int)hd, 1.0f, dc, (int)e,
           s.v + at_k, (int)e, 0.0f, s.ds, (int)lk);
      gemm(FF_ROW_MAJOR, FF_TRANS, FF_NO_TRANS, (int)lk, (int)hd, (int)lq, 1.0f, p, (int)lk, dc,
           (int)e, 0.0f, s.dv + at_k, (int)e);
      ff_softmax_rows_backward_f32(p, s.ds, s.ds, lq, lk); /* through the softmax ... */
      for (long j = 0; j < lq * lk; ++j) s.ds[j] = s.ds[j] / scale; /* ... and the scale */
      gemm(FF_ROW_MAJOR, FF_NO_TRANS, FF_NO_TRANS, (int)lq, (int)hd, (int)lk, 1.0f, s.ds, (int)lk,
           s.k + at_k, (int)e, 0.0f, s.dq + at_q, (int)e);
      gemm(FF_ROW_MAJOR, FF_TRANS, FF_NO_TRANS, (int)lk, (int)hd, (int)lq, 1.0f, s.ds, (int)lk,
           s.q + at_q, (int)e, 0.0f, s.dk + at_k, (int)e);
    }
  project_backward(gemm, query, w[0], s.dq, dquery, dw[0], dw[4], n * lq, e, d->eq);
  project_backward(gemm, key, w[1], s.dk, dkey, dw[1], dw[5], n * lk, e, d->ek);
  project_backward(gemm, value, w[2], s.dv, dvalue, dw[2], dw[6], n * lk, e, d->ev);
}
