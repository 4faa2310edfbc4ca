/* CPU kernels for op tiles (declared in kernels.h): pooling, and im2col/col2im for conv2d. */
#include <string.h>

#include "kernels.h"

/* One implementation per element type. The first maximal cell wins ties, as in the numpy
 * reference (argmax over the window in row-major order). */
#define FF_POOL2D(SUFFIX, T)                                                                   \
  void ff_pool2d_forward_##SUFFIX(const T *x, T *y, long n, long c, long h, long w, long oh,   \
                                  long ow, int kh, int kw, int sh, int sw, int pad_top,        \
                                  int pad_left, int is_max) {                                  \
    for (long plane = 0; plane < n * c; ++plane) {                                             \
      const T *xp = x + plane * h * w;                                                         \
      T *yp = y + plane * oh * ow;                                                             \
      for (long r = 0; r < oh; ++r) {                                                          \
        for (long q = 0; q < ow; ++q) {                                                        \
          T acc = 0;                                                                           \
          int found = 0;                                                                       \
          for (int i = 0; i < kh; ++i) {                                                       \
            long ih = r * sh - pad_top + i;                                                    \
            if (ih < 0 || ih >= h) continue;                                                   \
            for (int j = 0; j < kw; ++j) {                                                     \
              long iw = q * sw - pad_left + j;                                                 \
              if (iw < 0 || iw >= w) continue;                                                 \
              T v = xp[ih * w + iw];                                                           \
              if (is_max) {                                                                    \
                if (!found || v > acc) acc = v;                                                \
                found = 1;                                                                     \
              } else {                                                                         \
                acc += v;                                                                      \
              }                                                                                \
            }                                                                                  \
          }                                                                                    \
          yp[r * ow + q] = is_max ? acc : acc / (T)(kh * kw);                                  \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
                                                                                               \
  void ff_pool2d_backward_##SUFFIX(const T *x, const T *dy, T *dx, long n, long c, long h,     \
                                   long w, long oh, long ow, int kh, int kw, int sh, int sw,   \
                                   int pad_top, int pad_left, int is_max) {                    \
    memset(dx, 0, sizeof(T) * (size_t)(n * c * h * w));                                        \
    for (long plane = 0; plane < n * c; ++plane) {                                             \
      const T *xp = x + plane * h * w;                                                         \
      const T *dyp = dy + plane * oh * ow;                                                     \
      T *dxp = dx + plane * h * w;                                                             \
      for (long r = 0; r < oh; ++r) {                                                          \
        for (long q = 0; q < ow; ++q) {                                                        \
          T g = dyp[r * ow + q];                                                               \
          long best = -1;                                                                      \
          T best_v = 0;                                                                        \
          for (int i = 0; i < kh; ++i) {                                                       \
            long ih = r * sh - pad_top + i;                                                    \
            if (ih < 0 || ih >= h) continue;                                                   \
            for (int j = 0; j < kw; ++j) {                                                     \
              long iw = q * sw - pad_left + j;                                                 \
              if (iw < 0 || iw >= w) continue;                                                 \
              if (is_max) {                                                                    \
                T v = xp[ih * w + iw];                                                         \
                if (best < 0 || v > best_v) {                                                  \
                  best = ih * w + iw;                                                          \
                  best_v = v;                                                                  \
                }                                                                              \
              } else {                                                                         \
                dxp[ih * w + iw] += g / (T)(kh * kw);                                          \
              }                                                                                \
            }                                                                                  \
          }                                                                                    \
          if (is_max && best >= 0) dxp[best] += g;                                             \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }

FF_POOL2D(f32, float)
FF_POOL2D(f64, double)

/* im2col and col2im walk the same cells in the same order: row (sample, output row, output
 * column), then channel, kernel row, kernel column; the innermost run reads or writes the input
 * along a row, so both stream through memory. */
#define FF_IM2COL(SUFFIX, T)                                                                   \
  void ff_im2col_##SUFFIX(const T *x, T *cols, long n, long c, long h, long w, long oh,        \
                          long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left) { \
    T *out = cols;                                                                             \
    for (long s = 0; s < n; ++s)                                                               \
      for (long r = 0; r < oh; ++r)                                                            \
        for (long q = 0; q < ow; ++q)                                                          \
          for (long ch = 0; ch < c; ++ch) {                                                    \
            const T *plane = x + (s * c + ch) * h * w;                                         \
            for (int i = 0; i < kh; ++i) {                                                     \
              long ih = r * sh - pad_top + i;                                                  \
              int row_in = ih >= 0 && ih < h;                                                  \
              for (int j = 0; j < kw; ++j) {                                                   \
                long iw = q * sw - pad_left + j;                                               \
                *out++ = (row_in && iw >= 0 && iw < w) ? plane[ih * w + iw] : (T)0;            \
              }                                                                                \
            }                                                                                  \
          }                                                                                    \
  }                                                                                            \
                                                                                               \
  void ff_col2im_##SUFFIX(const T *cols, T *dx, long n, long c, long h, long w, long oh,       \
                          long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left) { \
    memset(dx, 0, sizeof(T) * (size_t)(n * c * h * w));                                         \
    const T *in = cols;                                                                        \
    for (long s = 0; s < n; ++s)                                                               \
      for (long r = 0; r < oh; ++r)                                                            \
        for (long q = 0; q < ow; ++q)                                                          \
          for (long ch = 0; ch < c; ++ch) {                                                    \
            T *plane = dx + (s * c + ch) * h * w;                                              \
            for (int i = 0; i < kh; ++i) {                                                     \
              long ih = r * sh - pad_top + i;                                                  \
              int row_in = ih >= 0 && ih < h;                                                  \
              for (int j = 0; j < kw; ++j, ++in) {                                             \
                long iw = q * sw - pad_left + j;                                               \
                if (row_in && iw >= 0 && iw < w) plane[ih * w + iw] += *in;                    \
              }                                                                                \
            }                                                                                  \
          }                                                                                    \
  }

FF_IM2COL(f32, float)
FF_IM2COL(f64, double)
