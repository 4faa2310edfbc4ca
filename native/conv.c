/* Direct convolutions of float32 NCHW tiles at stride 1, one group: the forward, the input's
 * gradient (the same correlation over dz with the kernel flipped and transposed) and the
 * kernel's gradient, without im2col columns.
 *
 * Why: im2col + GEMM on a small convolution spends most of its time writing and reading the
 * columns (c*kh*kw floats per output pixel) and runs the GEMM at a narrow width: a 16 -> 16
 * 3x3 convolution of 32 28x28 images took 5.6 ms forward on one core here (im2col 2.9 ms, the
 * GEMM 2.3 ms) against PyTorch's 0.9 ms. The loops below keep a block of output channels by
 * 16-float vectors of a sample's output rows (one flat span of padded rows) in registers and
 * read each input vector once per kernel cell and block.
 *
 * Every output sums its terms in one fixed order (channel, kernel row, kernel column; for the
 * kernel's gradient each of 16 lanes over the samples and the span's vectors, then a fixed tree
 * over the lanes), with separate multiplies and adds (built with -ffp-contract=off): the same bits
 * whichever instruction set the CPU has (AVX-512, AVX2 or the x86-64 baseline, picked at run
 * time) and however the output is blocked, so every tiling of a batch computes each sample's
 * values alike. */
#include <string.h>

#include "kernels.h"

#define FF_LANES 16 /* floats of the logical vector every path computes with */

typedef float ff_v16 __attribute__((vector_size(FF_LANES * sizeof(float))));
typedef float ff_v16u __attribute__((vector_size(FF_LANES * sizeof(float)), aligned(4)));

static long round_up(long n, long m) { return (n + m - 1) / m * m; }

/* The padded input planes of one sample a correlation reads, each row `wp` floats (the output
 * row and the kernel's width less one: the padding columns after a row are the next row's
 * padding before it) and `hp` rows, then FF_SLACK zeros: the output's rows are computed as one
 * flat span of oh * wp values, vector by vector, whose wp - ow values after each row are
 * computed and dropped (a 16-wide vector is never half empty at the end of a narrow row). */
typedef struct {
  long c, h, w, top, left; /* the input: channels, rows, columns, zero rows/columns before */
  long hp, wp;             /* the padded plane */
} ff_plane;

#define FF_SLACK (2 * FF_LANES) /* floats past the last plane a last vector may read */

static ff_plane plane(long c, long h, long w, long top, long left, long oh, long ow, long kh,
                      long kw) {
  ff_plane p = {c, h, w, top, left, 0, 0};
  const long rows = oh + kh - 1, cols = ow + kw - 1;
  p.hp = rows > top + h ? rows : top + h;
  p.wp = cols > left + w ? cols : left + w;
  return p;
}

static long plane_floats(const ff_plane *p, long kw) {
  return p->c * p->hp * p->wp + FF_SLACK + kw;
}

static void pad_sample(const ff_plane *p, const float *x, float *xp, long kw) {
  memset(xp, 0, sizeof(float) * (size_t)plane_floats(p, kw));
  for (long c = 0; c < p->c; ++c)
    for (long r = 0; r < p->h; ++r)
      memcpy(xp + (c * p->hp + p->top + r) * p->wp + p->left, x + (c * p->h + r) * p->w,
             sizeof(float) * (size_t)p->w);
}

/* out (n, co, oh, ow) = the correlation of `in` (n, p.c, p.h, p.w, padded as p says) with
 * wt ((c, i, j) rows of `op` floats: co output channels, zeros after) + bias (or none);
 * scratch: plane_floats floats. OB output channels by two vectors of the flat span per
 * register block. */
#define FF_CORRELATE(NAME, TARGET, OB)                                                        \
  TARGET static void NAME(const float *in, const ff_plane *p, const float *wt, long op,       \
                          const float *bias, float *out, long n, long co, long oh, long ow,   \
                          long kh, long kw, float *xp) {                                      \
    const long wp = p->wp, span = oh * wp, planes = p->hp * wp;                               \
    for (long s = 0; s < n; ++s) {                                                            \
      pad_sample(p, in + s * p->c * p->h * p->w, xp, kw);                                     \
      for (long ob = 0; ob < co; ob += OB)                                                    \
        for (long at = 0; at < span; at += 2 * FF_LANES) {                                    \
          ff_v16 acc[OB][2];                                                                  \
          _Pragma("GCC unroll 16") for (int o = 0; o < OB; ++o) acc[o][0] = acc[o][1] =       \
              (ff_v16){0};                                                                    \
          const int two = at + FF_LANES < span;                                               \
          const float *w = wt + ob;                                                           \
          for (long ci = 0; ci < p->c * kh; ++ci) /* (channel, kernel row) */                 \
            for (long j = 0; j < kw; ++j, w += op) {                                          \
              const long c = ci / kh, i = ci - c * kh;                                        \
              const float *from = xp + c * planes + i * wp + at + j;                          \
              const ff_v16 x0 = *(const ff_v16u *)from;                                       \
              if (two) {                                                                      \
                const ff_v16 x1 = *(const ff_v16u *)(from + FF_LANES);                        \
                _Pragma("GCC unroll 16") for (int o = 0; o < OB; ++o) {                       \
                  acc[o][0] = acc[o][0] + w[o] * x0;                                          \
                  acc[o][1] = acc[o][1] + w[o] * x1;                                          \
                }                                                                             \
              } else {                                                                        \
                _Pragma("GCC unroll 16") for (int o = 0; o < OB; ++o) acc[o][0] =             \
                    acc[o][0] + w[o] * x0;                                                    \
              }                                                                               \
            }                                                                                 \
          for (int o = 0; o < OB && ob + o < co; ++o) {                                       \
            float lanes[2 * FF_LANES];                                                        \
            memcpy(lanes, acc[o], sizeof lanes);                                              \
            float *dst = out + (s * co + ob + o) * oh * ow;                                   \
            const float b = bias ? bias[ob + o] : 0.0f;                                       \
            long r = at / wp, col = at - r * wp;                                              \
            for (long l = 0; l < (1 + two) * FF_LANES && at + l < span; ++l) {                \
              if (col < ow) dst[r * ow + col] = bias ? lanes[l] + b : lanes[l];               \
              if (++col == wp) col = 0, ++r;                                                  \
            }                                                                                 \
          }                                                                                   \
        }                                                                                     \
    }                                                                                         \
  }

/* The sum of a lane group, in a fixed tree: l + l+8, then +4, +2, +1. */
static inline float lanes_total(ff_v16 v) {
  float a[FF_LANES], t[8];
  memcpy(a, &v, sizeof a);
  for (int l = 0; l < 8; ++l) t[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) t[l] = t[l] + t[l + 4];
  for (int l = 0; l < 2; ++l) t[l] = t[l] + t[l + 2];
  return t[0] + t[1];
}

/* dw (co, p.c, kh, kw), written: each cell the sum over samples and the flat span of dz
 * (n, co, oh, ow), laid out as the span with zeros after each row, times the padded input it
 * multiplied: each of 16 lanes over the samples, then the span's vectors, then `lanes_total`.
 * scratch (xp): n * (plane_floats + co * round_up(oh * wp, 16)) floats: every sample's planes
 * first, so a register block sums over the whole batch without leaving its registers. OB
 * output channels by 3 kernel columns per register block (a block's dz vector serves 3 cells,
 * its input vectors OB), where a whole block fits. */
#define FF_KERNEL_GRAD(NAME, TARGET, OB)                                                      \
  TARGET static void NAME(const float *x, const ff_plane *p, const float *dz, float *dw,      \
                          long n, long co, long oh, long ow, long kh, long kw, float *xp) {   \
    const long wp = p->wp, planes = p->hp * wp, pf = plane_floats(p, kw);                     \
    const long span = round_up(oh * wp, FF_LANES);                                            \
    float *dzp = xp + n * pf;                                                                 \
    memset(dzp, 0, sizeof(float) * (size_t)(n * co * span));                                  \
    for (long s = 0; s < n; ++s) {                                                            \
      pad_sample(p, x + s * p->c * p->h * p->w, xp + s * pf, kw);                             \
      for (long o = 0; o < co; ++o)                                                           \
        for (long r = 0; r < oh; ++r)                                                         \
          memcpy(dzp + (s * co + o) * span + r * wp, dz + ((s * co + o) * oh + r) * ow,       \
                 sizeof(float) * (size_t)ow);                                                 \
    }                                                                                         \
    for (long ob = 0; ob < co; ob += OB) {                                                    \
      const int block = co - ob < OB ? (int)(co - ob) : OB;                                   \
      for (long ci = 0; ci < p->c * kh; ++ci) {                                               \
        const long c = ci / kh, i = ci - c * kh;                                              \
        float *out = dw + (ob * p->c + c) * kh * kw + i * kw; /* o's cells: o * p->c * kh * kw */ \
        const long next = p->c * kh * kw;                                                     \
        long j = 0;                                                                           \
        if (block == OB)                                                                      \
          for (; j + 3 <= kw; j += 3) {                                                       \
            ff_v16 acc[OB][3];                                                                \
            _Pragma("GCC unroll 16") for (int o = 0; o < OB; ++o) acc[o][0] = acc[o][1] =     \
                acc[o][2] = (ff_v16){0};                                                      \
            for (long s = 0; s < n; ++s) {                                                    \
              const float *from = xp + s * pf + c * planes + i * wp + j;                      \
              const float *g = dzp + (s * co + ob) * span;                                    \
              for (long q = 0; q < span; q += FF_LANES) {                                     \
                const ff_v16 x0 = *(const ff_v16u *)(from + q);                               \
                const ff_v16 x1 = *(const ff_v16u *)(from + q + 1);                           \
                const ff_v16 x2 = *(const ff_v16u *)(from + q + 2);                           \
                _Pragma("GCC unroll 16") for (int o = 0; o < OB; ++o) {                       \
                  const ff_v16 d = *(const ff_v16u *)(g + o * span + q);                      \
                  acc[o][0] = acc[o][0] + d * x0;                                             \
                  acc[o][1] = acc[o][1] + d * x1;                                             \
                  acc[o][2] = acc[o][2] + d * x2;                                             \
                }                                                                             \
              }                                                                               \
            }                                                                                 \
            for (int o = 0; o < OB; ++o)                                                      \
              for (int t = 0; t < 3; ++t) out[o * next + j + t] = lanes_total(acc[o][t]);     \
          }                                                                                   \
        if (block == OB)                                                                      \
          for (; j < kw; ++j) { /* the columns left, one at a time */                         \
            ff_v16 acc[OB];                                                                   \
            _Pragma("GCC unroll 16") for (int o = 0; o < OB; ++o) acc[o] = (ff_v16){0};       \
            for (long s = 0; s < n; ++s) {                                                    \
              const float *from = xp + s * pf + c * planes + i * wp + j;                      \
              const float *g = dzp + (s * co + ob) * span;                                    \
              for (long q = 0; q < span; q += FF_LANES) {                                     \
                const ff_v16 x0 = *(const ff_v16u *)(from + q);                               \
                _Pragma("GCC unroll 16") for (int o = 0; o < OB; ++o) acc[o] =                \
                    acc[o] + *(const ff_v16u *)(g + o * span + q) * x0;                       \
              }                                                                               \
            }                                                                                 \
            for (int o = 0; o < OB; ++o) out[o * next + j] = lanes_total(acc[o]);             \
          }                                                                                   \
        for (; j < kw; ++j) /* a partial block's columns */                                   \
          for (int o = 0; o < block; ++o) {                                                   \
            ff_v16 acc = {0};                                                                 \
            for (long s = 0; s < n; ++s) {                                                    \
              const float *from = xp + s * pf + c * planes + i * wp + j;                      \
              const float *g = dzp + (s * co + ob + o) * span;                                \
              for (long q = 0; q < span; q += FF_LANES)                                       \
                acc = acc + *(const ff_v16u *)(g + q) * *(const ff_v16u *)(from + q);         \
            }                                                                                 \
            out[o * next + j] = lanes_total(acc);                                             \
          }                                                                                   \
      }                                                                                       \
    }                                                                                         \
  }

#if defined(__x86_64__) && defined(__GNUC__)
#define FF_X86 1
#define FF_AVX512 __attribute__((target("avx512f")))
#define FF_AVX2 __attribute__((target("avx2")))
#else /* elsewhere the three paths are the same portable code; only the baseline runs */
#define FF_X86 0
#define FF_AVX512
#define FF_AVX2
#endif
FF_CORRELATE(correlate_avx512, FF_AVX512, 8)
FF_CORRELATE(correlate_avx2, FF_AVX2, 2)
FF_CORRELATE(correlate_base, , 1)
FF_KERNEL_GRAD(kernel_grad_avx512, FF_AVX512, 8)
FF_KERNEL_GRAD(kernel_grad_avx2, FF_AVX2, 1)
FF_KERNEL_GRAD(kernel_grad_base, , 1)

int ff_conv_direct_isas(void) {
#if FF_X86
  __builtin_cpu_init();
  return 1 | (__builtin_cpu_supports("avx2") ? 2 : 0) | (__builtin_cpu_supports("avx512f") ? 4 : 0);
#else
  return 1;
#endif
}

/* The instruction set a call runs: `isa` (FF_ISA_*) if this CPU has it, else its best. */
static int pick(int isa) {
  const int have = ff_conv_direct_isas();
  if (isa >= 0 && (have >> isa & 1)) return isa;
  return have & 4 ? FF_ISA_AVX512 : have & 2 ? FF_ISA_AVX2 : FF_ISA_BASE;
}

typedef void correlate_fn(const float *, const ff_plane *, const float *, long, const float *,
                          float *, long, long, long, long, long, long, float *);
typedef void kernel_grad_fn(const float *, const ff_plane *, const float *, float *, long, long,
                            long, long, long, long, float *);
/* by FF_ISA_* */
static correlate_fn *const correlate[] = {correlate_base, correlate_avx2, correlate_avx512};
static kernel_grad_fn *const kernel_grad[] = {kernel_grad_base, kernel_grad_avx2,
                                              kernel_grad_avx512};

/* The output channels a correlation's transposed weights are padded to (every path's block
 * divides it). */
static long padded_outputs(long co) { return round_up(co, 8); }

int ff_conv_direct(const ff_window_dims *d) {
  if (d->sh != 1 || d->sw != 1 || d->ph >= d->kh || d->pw >= d->kw) return 0;
  if (d->kh * d->kw == 1) return 0; /* a pointwise convolution is one GEMM without columns */
  /* im2col + GEMM wins where the products are long or the rows narrow (the kw - 1 values
   * computed after each output row are dropped): benchmarks/conv.py's table */
  const long cells = d->c * d->kh * d->kw, row = d->ow + d->kw - 1;
  if (d->o > FF_CONV_DIRECT_MAX_OUT || cells > 2 * FF_CONV_DIRECT_MAX_CELLS) return 0;
  if (cells > FF_CONV_DIRECT_MAX_CELLS) return 20 * d->ow >= 17 * row;
  return 4 * d->ow >= 3 * row;
}

long ff_conv_direct_scratch(const ff_window_dims *d) {
  const ff_plane f = plane(d->c, d->h, d->w, d->ph, d->pw, d->oh, d->ow, d->kh, d->kw);
  const ff_plane b =
      plane(d->o, d->oh, d->ow, d->kh - 1 - d->ph, d->kw - 1 - d->pw, d->h, d->w, d->kh, d->kw);
  const long cells = d->c * d->kh * d->kw;
  const long weights = cells * padded_outputs(d->o) + d->o * d->kh * d->kw * padded_outputs(d->c);
  const long forward = plane_floats(&f, d->kw), input = plane_floats(&b, d->kw);
  const long kernel = d->n * (forward + d->o * round_up(d->oh * f.wp, FF_LANES));
  long most = forward > input ? forward : input;
  if (kernel > most) most = kernel;
  return weights + most;
}

void ff_conv_direct_forward_f32(const float *x, const float *w, const float *bias, float *z,
                                const ff_window_dims *d, float *scratch, int isa) {
  const long cells = d->c * d->kh * d->kw, op = padded_outputs(d->o);
  float *wt = scratch, *xp = scratch + cells * op;
  for (long q = 0; q < cells; ++q)
    for (long o = 0; o < op; ++o) wt[q * op + o] = o < d->o ? w[o * cells + q] : 0.0f;
  const ff_plane p = plane(d->c, d->h, d->w, d->ph, d->pw, d->oh, d->ow, d->kh, d->kw);
  correlate[pick(isa)](x, &p, wt, op, bias, z, d->n, d->o, d->oh, d->ow, d->kh, d->kw, xp);
}

void ff_conv_direct_input_grad_f32(const float *dz, const float *w, float *dx,
                                   const ff_window_dims *d, float *scratch, int isa) {
  const long kk = d->kh * d->kw, cells = d->o * kk, op = padded_outputs(d->c);
  float *wt = scratch, *xp = scratch + cells * op;
  /* row (o, i, j) of the flipped kernel: w[o, c, kh-1-i, kw-1-j] for each input channel c */
  for (long o = 0; o < d->o; ++o)
    for (long t = 0; t < kk; ++t)
      for (long c = 0; c < op; ++c)
        wt[(o * kk + t) * op + c] = c < d->c ? w[(o * d->c + c) * kk + (kk - 1 - t)] : 0.0f;
  const ff_plane p =
      plane(d->o, d->oh, d->ow, d->kh - 1 - d->ph, d->kw - 1 - d->pw, d->h, d->w, d->kh, d->kw);
  correlate[pick(isa)](dz, &p, wt, op, NULL, dx, d->n, d->c, d->h, d->w, d->kh, d->kw, xp);
}

void ff_conv_direct_kernel_grad_f32(const float *x, const float *dz, float *dw,
                                    const ff_window_dims *d, float *scratch, int isa) {
  const ff_plane p = plane(d->c, d->h, d->w, d->ph, d->pw, d->oh, d->ow, d->kh, d->kw);
  kernel_grad[pick(isa)](x, &p, dz, dw, d->n, d->o, d->oh, d->ow, d->kh, d->kw, scratch);
}
