/* CPU kernels for op tiles (declared in kernels.h): pooling, and im2col/col2im for conv2d. */
#include <math.h>
#include <string.h>

#include "clones.h"
#include "kernels.h"

/* One implementation per element type. The first maximal cell wins ties, as in the numpy
 * reference (argmax over the window in row-major order). Each window's in-bounds rows and
 * columns [i0, i1) x [j0, j1) are found once, so the inner loops run without bounds checks;
 * an average divides by their number, (i1 - i0) * (j1 - j0), never by kh * kw (FlexFlow's
 * CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING). */
#define FF_POOL_WINDOW                                                                         \
  long top = r * sh - pad_top, left = q * sw - pad_left;                                       \
  int i0 = top < 0 ? (int)-top : 0, j0 = left < 0 ? (int)-left : 0;                            \
  int i1 = top + kh > h ? (int)(h - top) : kh, j1 = left + kw > w ? (int)(w - left) : kw;

#define FF_POOL2D(SUFFIX, T)                                                                   \
  FF_CLONES                                                                                    \
  void ff_pool2d_forward_##SUFFIX(const T *x, T *y, long n, long c, long h, long w, long oh,   \
                                  long ow, int kh, int kw, int sh, int sw, int pad_top,        \
                                  int pad_left, int is_max) {                                  \
    for (long plane = 0; plane < n * c; ++plane) {                                             \
      const T *xp = x + plane * h * w;                                                         \
      T *yp = y + plane * oh * ow;                                                             \
      for (long r = 0; r < oh; ++r) {                                                          \
        for (long q = 0; q < ow; ++q) {                                                        \
          FF_POOL_WINDOW                                                                       \
          T acc = 0;                                                                           \
          if (i0 < i1 && j0 < j1) {                                                            \
            const T *cell = xp + (top + i0) * w + left;                                        \
            if (is_max) {                                                                      \
              acc = cell[j0];                                                                  \
              for (int i = i0; i < i1; ++i, cell += w)                                         \
                for (int j = j0; j < j1; ++j) acc = cell[j] > acc ? cell[j] : acc;             \
            } else {                                                                           \
              for (int i = i0; i < i1; ++i, cell += w)                                         \
                for (int j = j0; j < j1; ++j) acc += cell[j];                                  \
              acc /= (T)((i1 - i0) * (j1 - j0)); /* the cells inside: padding not counted */   \
            }                                                                                  \
          }                                                                                    \
          yp[r * ow + q] = acc;                                                                \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
                                                                                               \
  FF_CLONES                                                                                    \
  void ff_pool2d_backward_##SUFFIX(const T *x, const T *dy, T *dx, long n, long c, long h,     \
                                   long w, long oh, long ow, int kh, int kw, int sh, int sw,   \
                                   int pad_top, int pad_left, int is_max) {                    \
    memset(dx, 0, sizeof(T) * (size_t)(n * c * h * w));                                         \
    for (long plane = 0; plane < n * c; ++plane) {                                             \
      const T *xp = x + plane * h * w;                                                         \
      const T *dyp = dy + plane * oh * ow;                                                     \
      T *dxp = dx + plane * h * w;                                                             \
      for (long r = 0; r < oh; ++r) {                                                          \
        for (long q = 0; q < ow; ++q) {                                                        \
          FF_POOL_WINDOW                                                                       \
          if (i0 >= i1 || j0 >= j1) continue;                                                  \
          T g = dyp[r * ow + q];                                                               \
          long first = (top + i0) * w + left;                                                  \
          if (is_max) {                                                                        \
            const T *row = xp + first;                                                         \
            long best = first + j0;                                                            \
            T best_v = row[j0];                                                                \
            for (int i = i0; i < i1; ++i, row += w)                                            \
              for (int j = j0; j < j1; ++j) {                                                  \
                T v = row[j];                                                                  \
                /* branch-free: a branch mispredicts on real data (2.3x slower here) */      \
                long better = -(long)(v > best_v);                                             \
                best ^= (best ^ ((row - xp) + j)) & better;                                    \
                best_v = v > best_v ? v : best_v;                                              \
              }                                                                                \
            dxp[best] += g;                                                                    \
          } else {                                                                             \
            T share = g / (T)((i1 - i0) * (j1 - j0));                                          \
            for (int i = i0; i < i1; ++i)                                                      \
              for (int j = j0; j < j1; ++j) dxp[first + (long)(i - i0) * w + j] += share;      \
          }                                                                                    \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

FF_POOL2D(f32, float)
FF_POOL2D(f64, double)

/* im2col and col2im walk the same cells in the same order: row (sample, output row, output
 * column), then channel, kernel row, kernel column. Each window's in-bounds columns [j0, j1)
 * are found once per output column, so the innermost loop is a plain run along an input row
 * (vectorized), with zeros only where the window hangs over the padding. */
/* The in-bounds kernel columns [j0, j1) of output column q's window, which starts at input
 * column `left` (negative in the left padding). */
#define FF_WINDOW_COLUMNS                                                                      \
  long left = q * sw - pad_left;                                                               \
  int j0 = left < 0 ? (int)-left : 0;                                                          \
  int j1 = left + kw > w ? (int)(w - left) : kw;                                               \
  if (j1 < j0) j1 = j0;

#define FF_IM2COL(SUFFIX, T)                                                                   \
  void ff_im2col_##SUFFIX(const T *x, T *cols, long n, long c, long h, long w, long oh,        \
                          long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left) { \
    T *out = cols;                                                                             \
    for (long s = 0; s < n; ++s)                                                               \
      for (long r = 0; r < oh; ++r)                                                            \
        for (long q = 0; q < ow; ++q) {                                                        \
          FF_WINDOW_COLUMNS                                                                    \
          for (long ch = 0; ch < c; ++ch) {                                                    \
            const T *plane = x + (s * c + ch) * h * w;                                         \
            for (int i = 0; i < kh; ++i, out += kw) {                                          \
              long ih = r * sh - pad_top + i;                                                  \
              if (ih < 0 || ih >= h) {                                                         \
                for (int j = 0; j < kw; ++j) out[j] = (T)0;                                    \
                continue;                                                                      \
              }                                                                                \
              const T *src = plane + ih * w + left;                                            \
              for (int j = 0; j < j0; ++j) out[j] = (T)0;                                      \
              for (int j = j0; j < j1; ++j) out[j] = src[j];                                   \
              for (int j = j1; j < kw; ++j) out[j] = (T)0;                                     \
            }                                                                                  \
          }                                                                                    \
        }                                                                                      \
  }                                                                                            \
                                                                                               \
  void ff_col2im_##SUFFIX(const T *cols, T *dx, long n, long c, long h, long w, long oh,       \
                          long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left) { \
    memset(dx, 0, sizeof(T) * (size_t)(n * c * h * w));                                         \
    const T *in = cols;                                                                        \
    for (long s = 0; s < n; ++s)                                                               \
      for (long r = 0; r < oh; ++r)                                                            \
        for (long q = 0; q < ow; ++q) {                                                        \
          FF_WINDOW_COLUMNS                                                                    \
          for (long ch = 0; ch < c; ++ch) {                                                    \
            T *plane = dx + (s * c + ch) * h * w;                                              \
            for (int i = 0; i < kh; ++i, in += kw) {                                           \
              long ih = r * sh - pad_top + i;                                                  \
              if (ih < 0 || ih >= h) continue;                                                 \
              T *dst = plane + ih * w + left;                                                  \
              for (int j = j0; j < j1; ++j) dst[j] += in[j];                                   \
            }                                                                                  \
          }                                                                                    \
        }                                                                                      \
  }

FF_IM2COL(f32, float)
FF_IM2COL(f64, double)

/* ---- batch norm (kernels.h) ------------------------------------------------------------- */

/* Per channel of the batch statistics: the mean and 1 / sqrt(var + eps) (biased variance,
 * clamped at 0 against rounding), as the numpy reference's _normalize_with. */
static void ff_bn_channel(const double *stats, long c, long ch, double count, double eps,
                          double *mean, double *inv_std) {
  double m = stats[ch] / count;
  double var = stats[c + ch] / count - m * m;
  if (var < 0.0) var = 0.0;
  *mean = m;
  *inv_std = 1.0 / sqrt(var + eps);
}

/* The per-channel sums below run over FF_LANES interleaved partial sums, added up at the end:
 * one running double sum is a chain of dependent additions (4 cycles each), which made the
 * backward 5-7 ns a value, 10x the forward. */
#define FF_LANES 8
typedef double ff_lanes __attribute__((vector_size(FF_LANES * sizeof(double))));
typedef float ff_floats __attribute__((vector_size(FF_LANES * sizeof(float)), aligned(4)));
typedef int ff_ints __attribute__((vector_size(FF_LANES * sizeof(int))));

static inline double ff_lanes_total(ff_lanes lanes) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

/* FF_LANES floats at p as doubles. */
static inline ff_lanes ff_load_lanes(const float *p) {
  return __builtin_convertvector(*(const ff_floats *)p, ff_lanes);
}

FF_CLONES
void ff_bn_stats_f32(const float *x, double *sums, long n, long c, long hw) {
  for (long ch = 0; ch < c; ++ch) {
    ff_lanes s = {0.0}, ss = {0.0};
    for (long i = 0; i < n; ++i) {
      const float *p = x + (i * c + ch) * hw;
      long k = 0;
      for (; k + FF_LANES <= hw; k += FF_LANES) {
        const ff_lanes v = ff_load_lanes(p + k);
        s += v;
        ss += v * v;
      }
      for (; k < hw; ++k) {
        const double v = (double)p[k];
        s[0] += v;
        ss[0] += v * v;
      }
    }
    sums[ch] = ff_lanes_total(s);
    sums[c + ch] = ff_lanes_total(ss);
  }
}

FF_CLONES
void ff_bn_forward_f32(const float *x, float *y, const double *stats, const float *gamma,
                       const float *beta, long n, long c, long hw, double count, double eps,
                       int relu) {
  for (long ch = 0; ch < c; ++ch) {
    double mean, inv_std;
    ff_bn_channel(stats, c, ch, count, eps, &mean, &inv_std);
    double g = (double)gamma[ch], b = (double)beta[ch];
    for (long i = 0; i < n; ++i) {
      const float *p = x + (i * c + ch) * hw;
      float *q = y + (i * c + ch) * hw;
      for (long k = 0; k < hw; ++k) {
        double z = g * (((double)p[k] - mean) * inv_std) + b;
        q[k] = (float)(relu && !(z > 0.0) ? 0.0 : z);
      }
    }
  }
}

/* dy through the relu (from y), or dy: dy times (y > 0), as the numpy reference computes it;
 * a multiply, not a branch on the relu's output, which mispredicted half the time and made
 * the backward 5x slower. */
static inline double ff_bn_dz(const float *y, const float *dy, long at, int relu) {
  return (double)dy[at] * (double)((y[at] > 0.0f) | !relu);
}

/* Adds one row's (hw values at `at`) dz and dz * xhat into the FF_LANES partial sums (the
 * values after the last whole group into lane 0), each lane as ff_bn_dz computes it. */
static inline void ff_bn_dz_sums(const float *x, const float *y, const float *dy, long at, long hw,
                                 double mean, double inv_std, int relu, ff_lanes *s,
                                 ff_lanes *sx) {
  long k = 0;
  for (; k + FF_LANES <= hw; k += FF_LANES) {
    const ff_ints kept = -(*(const ff_floats *)(y + at + k) > 0.0f) | !relu; /* 1 or 0 */
    const ff_lanes dz = ff_load_lanes(dy + at + k) * __builtin_convertvector(kept, ff_lanes);
    *s += dz;
    *sx += dz * ((ff_load_lanes(x + at + k) - mean) * inv_std);
  }
  for (; k < hw; ++k) {
    const double dz = ff_bn_dz(y, dy, at + k, relu);
    (*s)[0] += dz;
    (*sx)[0] += dz * (((double)x[at + k] - mean) * inv_std);
  }
}

FF_CLONES
void ff_bn_stats_backward_f32(const float *x, const float *y, const float *dy,
                              const double *stats, double *sums, long n, long c, long hw,
                              double count, double eps, int relu) {
  for (long ch = 0; ch < c; ++ch) {
    double mean, inv_std;
    ff_lanes s = {0.0}, sx = {0.0};
    ff_bn_channel(stats, c, ch, count, eps, &mean, &inv_std);
    for (long i = 0; i < n; ++i)
      ff_bn_dz_sums(x, y, dy, (i * c + ch) * hw, hw, mean, inv_std, relu, &s, &sx);
    sums[ch] = ff_lanes_total(s);
    sums[c + ch] = ff_lanes_total(sx);
  }
}

FF_CLONES
void ff_bn_backward_f32(const float *x, const float *y, const float *dy, const float *gamma,
                        const double *stats, const double *grad_stats, const double *tile_sums,
                        float *dx, float *dgamma, float *dbeta, long n, long c, long hw,
                        double count, double eps, int relu) {
  for (long ch = 0; ch < c; ++ch) {
    double mean, inv_std;
    ff_lanes s = {0.0}, sx = {0.0};
    ff_bn_channel(stats, c, ch, count, eps, &mean, &inv_std);
    const float g = gamma[ch];
    const double sum_dxhat = (double)g * grad_stats[ch];
    const double sum_dxhat_xhat = (double)g * grad_stats[c + ch];
    const double scale = inv_std / count;
    for (long i = 0; i < n; ++i) {
      const long at = (i * c + ch) * hw;
      if (dx) /* NULL: the input is the model's, no gradient wanted */
        for (long k = 0; k < hw; ++k) { /* element-wise: vectorized */
          const float dz = (float)ff_bn_dz(y, dy, at + k, relu);
          const double xhat = ((double)x[at + k] - mean) * inv_std;
          const float dxhat = dz * g; /* float32, as the reference's dz * gamma */
          dx[at + k] = (float)((count * dxhat - sum_dxhat - xhat * sum_dxhat_xhat) * scale);
        }
      if (!tile_sums) /* the tile's partials: a second pass, which the given sums spare */
        ff_bn_dz_sums(x, y, dy, at, hw, mean, inv_std, relu, &s, &sx);
    }
    dgamma[ch] = (float)(tile_sums ? tile_sums[c + ch] : ff_lanes_total(sx));
    dbeta[ch] = (float)(tile_sums ? tile_sums[ch] : ff_lanes_total(s));
  }
}
