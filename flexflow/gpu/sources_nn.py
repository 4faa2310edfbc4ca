"""CUDA C++ sources of the NVRTC kernels for normalization, embeddings, gathers, losses and optimizer updates.

Batch norm follows the runtime's split-statistics protocol (per-channel float64 sums a runtime
reduction adds across tiles; see `flexflow.ops.batch_norm`), which cuDNN's batch norm, computing
its own statistics, cannot. The optimizer kernels repeat `flexflow.optimizers` operation by
operation in float32 with round-to-nearest intrinsics (no fused multiply-add), so their result
is the numpy reference's to the bit.
"""

from __future__ import annotations

from flexflow.gpu.sources import COMMON

NORMS = (
    COMMON
    + r"""
// x_hat of row r of a (rows, cols) array; each block normalizes rows r = blockIdx.x, + gridDim.x...
__device__ void row_moments(const float *xr, long long cols, double eps, double *scratch,
                            double *mean, double *rstd) {
  double s = 0.0;
  for (long long c = threadIdx.x; c < cols; c += BLOCK) s += (double)xr[c];
  *mean = block_sum(s, scratch) / (double)cols;
  double v = 0.0;
  for (long long c = threadIdx.x; c < cols; c += BLOCK) {
    double d = (double)xr[c] - *mean;
    v += d * d;
  }
  *rstd = 1.0 / sqrt(block_sum(v, scratch) / (double)cols + eps);
}

extern "C" __global__ void layer_norm_forward(float *y, const float *x, const float *gamma,
    const float *beta, long long rows, long long cols, double eps) {
  __shared__ double scratch[BLOCK];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * cols;
    double mean, rstd;
    row_moments(xr, cols, eps, scratch, &mean, &rstd);
    for (long long c = threadIdx.x; c < cols; c += BLOCK) {
      double xhat = ((double)xr[c] - mean) * rstd;
      y[r * cols + c] = gamma ? (float)(xhat * gamma[c] + beta[c]) : (float)xhat;
    }
  }
}

// dx = rstd * (d_hat - mean(d_hat) - x_hat * mean(d_hat * x_hat)), d_hat = dy * gamma; also
// dy * x_hat per element (its column sums are gamma's gradient) when dy_xhat is given.
extern "C" __global__ void layer_norm_backward(float *dx, float *dy_xhat, const float *x,
    const float *gamma, const float *dy, long long rows, long long cols, double eps) {
  __shared__ double scratch[BLOCK];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * cols, *dyr = dy + r * cols;
    double mean, rstd;
    row_moments(xr, cols, eps, scratch, &mean, &rstd);
    double s1 = 0.0, s2 = 0.0;
    for (long long c = threadIdx.x; c < cols; c += BLOCK) {
      double xhat = ((double)xr[c] - mean) * rstd;
      double dhat = (double)dyr[c] * (gamma ? (double)gamma[c] : 1.0);
      s1 += dhat;
      s2 += dhat * xhat;
    }
    double mean_dhat = block_sum(s1, scratch) / (double)cols;
    double mean_dhat_xhat = block_sum(s2, scratch) / (double)cols;
    for (long long c = threadIdx.x; c < cols; c += BLOCK) {
      double xhat = ((double)xr[c] - mean) * rstd;
      double dhat = (double)dyr[c] * (gamma ? (double)gamma[c] : 1.0);
      dx[r * cols + c] = (float)(rstd * (dhat - mean_dhat - xhat * mean_dhat_xhat));
      if (dy_xhat) dy_xhat[r * cols + c] = (float)((double)dyr[c] * xhat);
    }
  }
}

// dx = scale * y * (dy - sum(dy * y)) along each row of (rows, cols): the softmax's backward
// over its last axis (cuDNN's channel-mode backward took 171 ms on an H200 for 2,560 rows of
// 32,000 classes, its forward 0.64 ms).
extern "C" __global__ void softmax_backward_rows(float *dx, const float *y, const float *dy,
    long long rows, long long cols, double scale) {
  __shared__ double scratch[BLOCK];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *yr = y + r * cols, *dyr = dy + r * cols;
    double s = 0.0;
    for (long long c = threadIdx.x; c < cols; c += BLOCK) s += (double)dyr[c] * (double)yr[c];
    double dot = block_sum(s, scratch);
    for (long long c = threadIdx.x; c < cols; c += BLOCK)
      dx[r * cols + c] = (float)(scale * (double)yr[c] * ((double)dyr[c] - dot));
  }
}

// Batch norm on x (N, C, S) (S = H * W, or 1), statistics (2, C) = per-channel sums over a
// whole batch of `count` elements per channel.
__device__ __forceinline__ void channel_norm(const double *stats, long long channels,
    long long c, double count, double eps, double *mean, double *inv_std) {
  *mean = stats[c] / count;
  double var = fmax(stats[channels + c] / count - *mean * *mean, 0.0);
  *inv_std = 1.0 / sqrt(var + eps);
}

// out (2, C) = per-channel sum of x and of x^2 over this tile; one block per channel.
extern "C" __global__ void batch_norm_statistics(double *out, const float *x, long long n,
                                                 long long channels, long long spatial) {
  __shared__ double scratch[BLOCK];
  for (long long c = blockIdx.x; c < channels; c += gridDim.x) {
    double s = 0.0, q = 0.0;
    for (long long k = threadIdx.x; k < n * spatial; k += BLOCK) {
      double v = (double)x[((k / spatial) * channels + c) * spatial + k % spatial];
      s += v;
      q += v * v;
    }
    double sum = block_sum(s, scratch), squares = block_sum(q, scratch);
    if (threadIdx.x == 0) {
      out[c] = sum;
      out[channels + c] = squares;
    }
  }
}

extern "C" __global__ void batch_norm_forward(float *y, const float *x, const float *gamma,
    const float *beta, const double *stats, long long n, long long channels, long long spatial,
    double count, double eps, long long relu) {
  GRID_STRIDE_LOOP(i, n * channels * spatial) {
    long long c = (i / spatial) % channels;
    double mean, inv_std;
    channel_norm(stats, channels, c, count, eps, &mean, &inv_std);
    double z = (double)gamma[c] * (((double)x[i] - mean) * inv_std) + (double)beta[c];
    y[i] = (float)(relu && z < 0.0 ? 0.0 : z);
  }
}

// out (2, C) = per-channel sums of dz and dz * x_hat (dz = dy through the ReLU) of this tile.
extern "C" __global__ void batch_norm_backward_statistics(double *out, const float *x,
    const float *y, const float *dy, const double *stats, long long n, long long channels,
    long long spatial, double count, double eps, long long relu) {
  __shared__ double scratch[BLOCK];
  for (long long c = blockIdx.x; c < channels; c += gridDim.x) {
    double mean, inv_std;
    channel_norm(stats, channels, c, count, eps, &mean, &inv_std);
    double s = 0.0, q = 0.0;
    for (long long k = threadIdx.x; k < n * spatial; k += BLOCK) {
      long long i = ((k / spatial) * channels + c) * spatial + k % spatial;
      double dz = (relu && !(y[i] > 0.0f)) ? 0.0 : (double)dy[i];
      s += dz;
      q += dz * (((double)x[i] - mean) * inv_std);
    }
    double sum = block_sum(s, scratch), product = block_sum(q, scratch);
    if (threadIdx.x == 0) {
      out[c] = sum;
      out[channels + c] = product;
    }
  }
}

// dx = (M dxhat - gamma sum(dz) - x_hat gamma sum(dz x_hat)) / (M sqrt(var + eps)), sums from
// grad_stats (added over every tile of the batch), M = count.
extern "C" __global__ void batch_norm_backward(float *dx, const float *x, const float *y,
    const float *dy, const float *gamma, const double *stats, const double *grad_stats,
    long long n, long long channels, long long spatial, double count, double eps,
    long long relu) {
  GRID_STRIDE_LOOP(i, n * channels * spatial) {
    long long c = (i / spatial) % channels;
    double mean, inv_std;
    channel_norm(stats, channels, c, count, eps, &mean, &inv_std);
    double dz = (relu && !(y[i] > 0.0f)) ? 0.0 : (double)dy[i];
    double g = (double)gamma[c], xhat = ((double)x[i] - mean) * inv_std;
    double sum_dxhat = g * grad_stats[c], sum_dxhat_xhat = g * grad_stats[channels + c];
    dx[i] = (float)((count * dz * g - sum_dxhat - xhat * sum_dxhat_xhat) * (inv_std / count));
  }
}
"""
)

EMBEDDING = (
    COMMON
    + r"""
// out (rows, E) = scale * sum over the bag of table rows ids[r, k]; bad ids set *bad.
template <typename I>
__device__ void embedding_forward(float *out, const I *ids, const float *table, int *bad,
    long long rows, long long bag, long long dim, long long entries, double scale) {
  GRID_STRIDE_LOOP(i, rows * dim) {
    long long r = i / dim, e = i % dim;
    double acc = 0.0;
    for (long long k = 0; k < bag; ++k) {
      long long id = (long long)ids[r * bag + k];
      if (id < 0 || id >= entries) { atomicExch(bad, 1); continue; }
      acc += (double)table[id * dim + e];
    }
    out[i] = (float)(scale * acc);
  }
}

// grad_table[ids[r, k]] += scale * dy[r]: repeated ids add up (atomics).
template <typename I>
__device__ void embedding_backward(float *grad_table, const I *ids, const float *dy,
    long long rows, long long bag, long long dim, long long entries, double scale) {
  GRID_STRIDE_LOOP(i, rows * bag * dim) {
    long long r = i / (bag * dim), k = (i / dim) % bag, e = i % dim;
    long long id = (long long)ids[r * bag + k];
    if (id >= 0 && id < entries) atomicAdd(grad_table + id * dim + e, (float)(scale * dy[r * dim + e]));
  }
}

#define EMBEDDING_KERNELS(SUFFIX, I)                                                         \
  extern "C" __global__ void embedding_forward_##SUFFIX(float *out, const I *ids,            \
      const float *table, int *bad, long long rows, long long bag, long long dim,            \
      long long entries, double scale) {                                                     \
    embedding_forward<I>(out, ids, table, bad, rows, bag, dim, entries, scale);              \
  }                                                                                          \
  extern "C" __global__ void embedding_backward_##SUFFIX(float *grad_table, const I *ids,    \
      const float *dy, long long rows, long long bag, long long dim, long long entries,      \
      double scale) {                                                                        \
    embedding_backward<I>(grad_table, ids, dy, rows, bag, dim, entries, scale);              \
  }
EMBEDDING_KERNELS(i32, int)
EMBEDDING_KERNELS(i64, long long)
"""
)

GATHER = (
    COMMON
    + r"""
// Gather along one axis (flexflow.ops.gather): x is (outer, rows, inner), index and out are
// (outer, picks, inner); out[a, p, b] = x[a, index[a, p, b], b]. Indices outside [0, rows)
// set *bad (the host raises, as the reference does) and give 0.
template <typename I>
__device__ void gather_forward(float *out, const float *x, const I *index, int *bad,
    long long outer, long long picks, long long rows, long long inner) {
  GRID_STRIDE_LOOP(o, outer * picks * inner) {
    long long a = o / (picks * inner), b = o % inner;
    long long r = (long long)index[o];
    if (r < 0 || r >= rows) {
      atomicExch(bad, 1);
      out[o] = 0.0f;
    } else {
      out[o] = x[(a * rows + r) * inner + b];
    }
  }
}

// grad_x (zeroed by the host) [a, index[a, p, b], b] += dy[a, p, b]: repeated indices add up
// (atomics); the index gets no gradient.
template <typename I>
__device__ void gather_backward(float *grad_x, const I *index, const float *dy,
    long long outer, long long picks, long long rows, long long inner) {
  GRID_STRIDE_LOOP(o, outer * picks * inner) {
    long long a = o / (picks * inner), b = o % inner;
    long long r = (long long)index[o];
    if (r >= 0 && r < rows) atomicAdd(grad_x + (a * rows + r) * inner + b, dy[o]);
  }
}

#define GATHER_KERNELS(SUFFIX, I)                                                            \
  extern "C" __global__ void gather_forward_##SUFFIX(float *out, const float *x,             \
      const I *index, int *bad, long long outer, long long picks, long long rows,            \
      long long inner) {                                                                     \
    gather_forward<I>(out, x, index, bad, outer, picks, rows, inner);                        \
  }                                                                                          \
  extern "C" __global__ void gather_backward_##SUFFIX(float *grad_x, const I *index,         \
      const float *dy, long long outer, long long picks, long long rows, long long inner) {  \
    gather_backward<I>(grad_x, index, dy, outer, picks, rows, inner);                        \
  }
GATHER_KERNELS(i32, int)
GATHER_KERNELS(i64, long long)
"""
)

TRAINING = (
    COMMON
    + r"""
// SGD as flexflow.optimizers.SGDOptimizer.update, in float32, one rounding per operation;
// l2: the parameter's L2 regularizer, added to the gradient before the weight decay.
extern "C" __global__ void sgd_update(float *w_out, float *v_out, const float *w,
    const float *g, const float *v, long long n, float lr, float momentum, float weight_decay,
    long long nesterov, float l2) {
  GRID_STRIDE_LOOP(i, n) {
    float grad = g[i];
    if (l2 != 0.0f) grad = __fadd_rn(grad, __fmul_rn(l2, w[i]));
    if (weight_decay != 0.0f) grad = __fadd_rn(grad, __fmul_rn(weight_decay, w[i]));
    float direction = grad;
    if (v) {  // momentum > 0: the velocity is the state
      float velocity = __fadd_rn(__fmul_rn(momentum, v[i]), grad);
      v_out[i] = velocity;
      direction = nesterov ? __fadd_rn(grad, __fmul_rn(momentum, velocity)) : velocity;
    }
    w_out[i] = __fsub_rn(w[i], __fmul_rn(lr, direction));
  }
}

// Adam as flexflow.optimizers.AdamOptimizer.update; one_minus_* and bias* are float32 values
// the host computed like the reference (1 - b1, 1 - b1^t, ...); l2 as for sgd_update.
extern "C" __global__ void adam_update(float *w_out, float *m_out, float *v_out,
    const float *w, const float *g, const float *m, const float *v, long long n, float lr,
    float beta1, float beta2, float one_minus_beta1, float one_minus_beta2, float bias1,
    float bias2, float eps, float weight_decay, float l2) {
  GRID_STRIDE_LOOP(i, n) {
    float grad = g[i];
    if (l2 != 0.0f) grad = __fadd_rn(grad, __fmul_rn(l2, w[i]));
    if (weight_decay != 0.0f) grad = __fadd_rn(grad, __fmul_rn(weight_decay, w[i]));
    float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(one_minus_beta1, grad));
    float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(one_minus_beta2, grad), grad));
    float m_hat = __fdiv_rn(mi, bias1), v_hat = __fdiv_rn(vi, bias2);
    float step = __fdiv_rn(__fmul_rn(lr, m_hat), __fadd_rn(__fsqrt_rn(v_hat), eps));
    w_out[i] = __fsub_rn(w[i], step);
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

// Losses on a (rows, classes) tile whose first `valid` rows count; sums[0] += loss / total,
// sums[1] += correct predictions (argmax, first maximum wins like numpy). grad is zeroed first.
__device__ long long row_argmax_f32(const float *row, long long classes) {
  long long best = 0;
  for (long long k = 1; k < classes; ++k) if (row[k] > row[best]) best = k;
  return best;
}

template <typename T>
__device__ long long row_argmax(const T *row, long long classes) {
  long long best = 0;
  for (long long k = 1; k < classes; ++k) if (row[k] > row[best]) best = k;
  return best;
}

__device__ void add_sums(double *sums, double loss, double correct, double *scratch) {
  double l = block_sum(loss, scratch), c = block_sum(correct, scratch);
  if (threadIdx.x == 0) {
    atomicAdd(sums, l);
    atomicAdd(sums + 1, c);
  }
}

// mean squared error: loss sum((p - t)^2) / total, grad 2 (p - t) / total; correct counts
// rows whose argmax matches the target's argmax when `count_correct` (outputs of rank >= 2).
template <typename T>
__device__ void mse(double *sums, float *grad, const float *p, const T *t, long long rows,
                    long long classes, long long valid, double total, long long count_correct) {
  __shared__ double scratch[BLOCK];
  double loss = 0.0, correct = 0.0;
  long long n = rows * classes;
  for (long long base = blockIdx.x * (long long)BLOCK; base < n; base += (long long)BLOCK * gridDim.x) {
    long long i = base + threadIdx.x;
    if (i < n) {
      if (i / classes < valid) {
        double diff = (double)p[i] - (double)t[i];
        loss += diff * diff;
        grad[i] = (float)(2.0 * diff / total);
        if (count_correct && i % classes == 0)
          correct += row_argmax_f32(p + i, classes) == row_argmax<T>(t + i, classes);
      } else {
        grad[i] = 0.0f;
      }
    }
  }
  add_sums(sums, loss / total, correct, scratch);
}

// categorical cross-entropy on probabilities: loss -sum(t log p) / total, grad -t / (total p),
// p clipped below at float's smallest normal number as the reference does
// (flexflow.runtime.loss.SMALLEST_P; NVRTC has no <cfloat> for FLT_MIN).
#define FF_SMALLEST_P 1.1754943508222875e-38
template <typename T>
__device__ void cce(double *sums, float *grad, const float *p, const T *t, long long rows,
                    long long classes, long long valid, double total) {
  __shared__ double scratch[BLOCK];
  double loss = 0.0, correct = 0.0;
  long long n = rows * classes;
  for (long long base = blockIdx.x * (long long)BLOCK; base < n; base += (long long)BLOCK * gridDim.x) {
    long long i = base + threadIdx.x;
    if (i < n) {
      if (i / classes < valid) {
        double pk = fmax((double)p[i], FF_SMALLEST_P), tk = (double)t[i];
        loss -= tk * log(pk);
        grad[i] = (float)(-tk / (total * pk));
        if (i % classes == 0)
          correct += row_argmax_f32(p + i, classes) == row_argmax<T>(t + i, classes);
      } else {
        grad[i] = 0.0f;
      }
    }
  }
  add_sums(sums, loss / total, correct, scratch);
}

// sparse categorical cross-entropy: loss -sum(log p[label]) / total, grad -1 / (total p[label])
// at the label (grad must be zeroed before); bad labels set *bad.
template <typename I>
__device__ void sparse_cce(double *sums, float *grad, int *bad, const float *p, const I *labels,
                           long long rows, long long classes, long long valid, double total) {
  __shared__ double scratch[BLOCK];
  double loss = 0.0, correct = 0.0;
  for (long long base = blockIdx.x * (long long)BLOCK; base < valid; base += (long long)BLOCK * gridDim.x) {
    long long r = base + threadIdx.x;
    if (r < valid) {
      long long label = (long long)labels[r];
      if (label < 0 || label >= classes) {
        atomicExch(bad, 1);
      } else {
        double picked = fmax((double)p[r * classes + label], FF_SMALLEST_P);
        loss -= log(picked);
        grad[r * classes + label] = (float)(-1.0 / (total * picked));
        correct += row_argmax_f32(p + r * classes, classes) == label;
      }
    }
  }
  add_sums(sums, loss / total, correct, scratch);
}

#define LOSS_KERNELS(SUFFIX, T)                                                              \
  extern "C" __global__ void mse_##SUFFIX(double *sums, float *grad, const float *p,         \
      const T *t, long long rows, long long classes, long long valid, double total,          \
      long long count_correct) {                                                             \
    mse<T>(sums, grad, p, t, rows, classes, valid, total, count_correct);                    \
  }                                                                                          \
  extern "C" __global__ void cce_##SUFFIX(double *sums, float *grad, const float *p,         \
      const T *t, long long rows, long long classes, long long valid, double total) {        \
    cce<T>(sums, grad, p, t, rows, classes, valid, total);                                   \
  }
LOSS_KERNELS(f32, float)
LOSS_KERNELS(f64, double)

#define SPARSE_KERNELS(SUFFIX, I)                                                            \
  extern "C" __global__ void sparse_cce_##SUFFIX(double *sums, float *grad, int *bad,        \
      const float *p, const I *labels, long long rows, long long classes, long long valid,   \
      double total) {                                                                        \
    sparse_cce<I>(sums, grad, bad, p, labels, rows, classes, valid, total);                  \
  }
SPARSE_KERNELS(i32, int)
SPARSE_KERNELS(i64, long long)

// identity (FlexFlow's LOSS_IDENTITY): the output is the loss, sum(p) / total over the first
// `valid` rows, grad 1 / total there (0 past them); the labels are not read, nothing is correct.
extern "C" __global__ void identity_loss(double *sums, float *grad, const float *p,
                                         long long rows, long long per_row, long long valid,
                                         double total) {
  __shared__ double scratch[BLOCK];
  double loss = 0.0;
  long long n = rows * per_row;
  for (long long base = blockIdx.x * (long long)BLOCK; base < n; base += (long long)BLOCK * gridDim.x) {
    long long i = base + threadIdx.x;
    if (i < n) {
      if (i / per_row < valid) {
        loss += (double)p[i];
        grad[i] = (float)(1.0 / total);
      } else {
        grad[i] = 0.0f;
      }
    }
  }
  add_sums(sums, loss / total, 0.0, scratch);
}
"""
)
