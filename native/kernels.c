/* CPU kernels for op tiles (declared in kernels.h). */
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
