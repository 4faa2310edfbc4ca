"""CUDA C++ sources of the NVRTC kernels: layout (strided copies, reductions) and element-wise math.

Each source is compiled once per process (see `nvrtc.py`). Every kernel is `extern "C"` (its
name is the symbol), takes sizes as `long long`, loops grid-stride over its elements, and reads
shapes and strides through the by-value `Dims` struct. Sums accumulate in double. The math
follows the numpy references in `flexflow.ops` formula by formula (sigmoid as
0.5 * (1 + tanh(x / 2)), GELU's tanh approximation, ELU with alpha 1, rsqrt as 1 / sqrt(x)).
"""

from __future__ import annotations

COMMON = r"""
#define MAX_RANK 8
#define BLOCK 256
struct Dims { long long v[MAX_RANK]; };

#define GRID_STRIDE_LOOP(i, n) \
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)

// Offset (in elements) of row-major linear index `i` of `shape` laid out with `strides`.
__device__ __forceinline__ long long strided_offset(long long i, long long rank,
                                                    const Dims &shape, const Dims &strides) {
  long long offset = 0;
  for (int d = (int)rank - 1; d >= 0; --d) {
    long long n = shape.v[d];
    offset += (i % n) * strides.v[d];
    i /= n;
  }
  return offset;
}

// Sum of `value` over the block (BLOCK threads); every thread gets the total.
__device__ double block_sum(double value, double *scratch) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  double total = scratch[0];
  __syncthreads();
  return total;
}

__device__ __forceinline__ float sigmoid_(float x) { return 0.5f * (1.0f + tanhf(0.5f * x)); }
"""

LAYOUT = (
    COMMON
    + r"""
// dst[view] (=|+=) alpha * src[view]: copies, transposes, broadcasts, pads, crops, adds.
template <typename T>
__device__ void copy_strided(T *dst, const T *src, long long n, long long rank, Dims shape,
                             Dims dst_strides, Dims src_strides, double alpha, long long add) {
  GRID_STRIDE_LOOP(i, n) {
    T v = src[strided_offset(i, rank, shape, src_strides)];
    if (alpha != 1.0) v = (T)(alpha * (double)v);
    T *d = dst + strided_offset(i, rank, shape, dst_strides);
    *d = add ? (T)(*d + v) : v;
  }
}

template <typename T>
__device__ void fill(T *dst, long long n, double value) {
  GRID_STRIDE_LOOP(i, n) dst[i] = (T)value;
}

// Up to MAX_PARTS 64-bit values passed by value: the parts' pointers, or their cumulative lengths.
#define MAX_PARTS 64
struct Parts {
  unsigned long long p[MAX_PARTS];
};

// whole (outer, whole_len, inner) and `count` row-major parts laid along its middle axis from
// index `start`, part k (outer, ends[k] - ends[k - 1], inner): join fills whole's slabs from
// the parts (concat's and stack's forward, split's backward), else the parts from whole.
template <typename T>
__device__ void join_parts(T *whole, Parts parts, Parts ends, long long count, long long outer,
                           long long inner, long long whole_len, long long start,
                           long long join) {
  long long span = (long long)ends.p[count - 1];
  GRID_STRIDE_LOOP(i, outer * span * inner) {
    long long j = i % inner, a = (i / inner) % span, o = i / (inner * span);
    long long k = 0;
    while (a >= (long long)ends.p[k]) ++k;
    long long begin = k ? (long long)ends.p[k - 1] : 0, length = (long long)ends.p[k] - begin;
    T *part = (T *)parts.p[k] + (o * length + (a - begin)) * inner + j;
    T *w = whole + (o * whole_len + start + a) * inner + j;
    if (join) *w = *part; else *part = *w;
  }
}

#define LAYOUT_KERNELS(SUFFIX, T)                                                            \
  extern "C" __global__ void copy_strided_##SUFFIX(T *dst, const T *src, long long n,        \
      long long rank, Dims shape, Dims dst_strides, Dims src_strides, double alpha,          \
      long long add) {                                                                       \
    copy_strided<T>(dst, src, n, rank, shape, dst_strides, src_strides, alpha, add);         \
  }                                                                                          \
  extern "C" __global__ void fill_##SUFFIX(T *dst, long long n, double value) {              \
    fill<T>(dst, n, value);                                                                  \
  }                                                                                          \
  extern "C" __global__ void join_parts_##SUFFIX(T *whole, Parts parts, Parts ends,          \
      long long count, long long outer, long long inner, long long whole_len,                 \
      long long start, long long join) {                                                      \
    join_parts<T>(whole, parts, ends, count, outer, inner, whole_len, start, join);           \
  }
LAYOUT_KERNELS(f32, float)
LAYOUT_KERNELS(f64, double)
LAYOUT_KERNELS(i32, int)
LAYOUT_KERNELS(i64, long long)

// out[o] (=|+=) scale * sum_r src[kept(o) + reduced(r)]: one block per output element.
extern "C" __global__ void reduce_sum_f32(float *out, const float *src, long long outputs,
    long long kept_rank, Dims kept_shape, Dims kept_strides, long long reduced,
    long long reduced_rank, Dims reduced_shape, Dims reduced_strides, double scale,
    long long add) {
  __shared__ double scratch[BLOCK];
  for (long long o = blockIdx.x; o < outputs; o += gridDim.x) {
    long long base = strided_offset(o, kept_rank, kept_shape, kept_strides);
    double acc = 0.0;
    for (long long r = threadIdx.x; r < reduced; r += BLOCK)
      acc += (double)src[base + strided_offset(r, reduced_rank, reduced_shape, reduced_strides)];
    double total = block_sum(acc, scratch);
    if (threadIdx.x == 0) out[o] = (float)(add ? (double)out[o] + scale * total : scale * total);
  }
}

extern "C" __global__ void cast_f64_f32(float *dst, const double *src, long long n) {
  GRID_STRIDE_LOOP(i, n) dst[i] = (float)src[i];
}
"""
)

ELEMENTWISE = (
    COMMON
    + r"""
// Activation modes, in the order of flexflow.gpu.prims.ACTIVATION_CODES.
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_SIGMOID 2
#define ACT_TANH 3
#define ACT_GELU 4
#define ACT_ELU 5
#define GELU_C 0.7978845608028654f  // sqrt(2 / pi)

__device__ float act_forward(long long mode, float x) {
  switch (mode) {
    case ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ACT_SIGMOID: return sigmoid_(x);
    case ACT_TANH: return tanhf(x);
    case ACT_GELU: return 0.5f * x * (1.0f + tanhf(GELU_C * (x + 0.044715f * x * x * x)));
    case ACT_ELU: return x > 0.0f ? x : expm1f(fminf(x, 0.0f));
    default: return x;
  }
}

// dL/dx from the input x, the output y = act(x) and dL/dy.
__device__ float act_grad(long long mode, float x, float y, float dy) {
  switch (mode) {
    case ACT_RELU: return y > 0.0f ? dy : 0.0f;  // y > 0 exactly when x > 0
    case ACT_SIGMOID: return dy * y * (1.0f - y);
    case ACT_TANH: return dy * (1.0f - y * y);
    case ACT_GELU: {
      float t = tanhf(GELU_C * (x + 0.044715f * x * x * x));
      float dt = (1.0f - t * t) * GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
      return dy * (0.5f * (1.0f + t) + 0.5f * x * dt);
    }
    case ACT_ELU: return dy * (y > 0.0f ? 1.0f : y + 1.0f);
    default: return dy;
  }
}

extern "C" __global__ void activation_forward(float *y, const float *x, long long n,
                                              long long mode) {
  GRID_STRIDE_LOOP(i, n) y[i] = act_forward(mode, x[i]);
}

extern "C" __global__ void activation_backward(float *dx, const float *x, const float *y,
                                               const float *dy, long long n, long long mode) {
  GRID_STRIDE_LOOP(i, n) dx[i] = act_grad(mode, x[i], y[i], dy[i]);
}

// FlexFlow's other element-wise functions, in the order of flexflow.gpu.prims.FUNCTION_CODES;
// s is the scalar (pow's exponent, the scalar_* operand), as flexflow.ops.unary_functions.
#define FN_EXP 0
#define FN_SIN 1
#define FN_COS 2
#define FN_POW 3
#define FN_RSQRT 4
#define FN_SCALAR_MULTIPLY 5
#define FN_SCALAR_ADD 6
#define FN_SCALAR_SUB 7
#define FN_SCALAR_TRUE_DIVIDE 8

__device__ float fn_forward(long long fn, float x, float s) {
  switch (fn) {
    case FN_EXP: return expf(x);
    case FN_SIN: return sinf(x);
    case FN_COS: return cosf(x);
    case FN_POW: return powf(x, s);
    case FN_RSQRT: return 1.0f / sqrtf(x);  // inf at 0, NaN below (rsqrtf is approximate)
    case FN_SCALAR_MULTIPLY: return x * s;
    case FN_SCALAR_ADD: return x + s;
    case FN_SCALAR_SUB: return x - s;
    default: return x / s;  // FN_SCALAR_TRUE_DIVIDE
  }
}

// dL/dx from the input x, the output y = fn(x, s) and dL/dy.
__device__ float fn_grad(long long fn, float x, float y, float dy, float s) {
  switch (fn) {
    case FN_EXP: return dy * y;
    case FN_SIN: return dy * cosf(x);
    case FN_COS: return -dy * sinf(x);
    case FN_POW: return s == 0.0f ? 0.0f : dy * (s * powf(x, s - 1.0f));  // x^0: constant
    case FN_RSQRT: return -0.5f * dy * y * y * y;
    case FN_SCALAR_MULTIPLY: return dy * s;
    case FN_SCALAR_ADD: return dy;
    case FN_SCALAR_SUB: return dy;
    default: return dy / s;  // FN_SCALAR_TRUE_DIVIDE
  }
}

extern "C" __global__ void function_forward(float *y, const float *x, long long n, long long fn,
                                            double s) {
  GRID_STRIDE_LOOP(i, n) y[i] = fn_forward(fn, x[i], (float)s);
}

extern "C" __global__ void function_backward(float *dx, const float *x, const float *y,
    const float *dy, long long n, long long fn, double s) {
  GRID_STRIDE_LOOP(i, n) dx[i] = fn_grad(fn, x[i], y[i], dy[i], (float)s);
}

// Binary ops, in the order of flexflow.gpu.prims.BINARY_CODES.
#define BINARY_ADD 0
#define BINARY_SUBTRACT 1
#define BINARY_MULTIPLY 2
#define BINARY_DIVIDE 3
#define BINARY_MAX 4
#define BINARY_MIN 5

__device__ float binary_op(long long op, float x, float y) {
  switch (op) {
    case BINARY_ADD: return x + y;
    case BINARY_SUBTRACT: return x - y;
    case BINARY_MULTIPLY: return x * y;
    case BINARY_DIVIDE: return x / y;
    // NaN from either input, as numpy's maximum and minimum (fmaxf drops it)
    case BINARY_MAX: return (isnan(x) || x >= y) ? x : y;
    default: return (isnan(x) || x <= y) ? x : y;  // BINARY_MIN
  }
}

// out = a (op) b with broadcasting: a and b are read through their own strides (0 = broadcast).
extern "C" __global__ void binary(float *out, const float *a, const float *b, long long n,
    long long rank, Dims shape, Dims a_strides, Dims b_strides, long long op) {
  GRID_STRIDE_LOOP(i, n) {
    float x = a[strided_offset(i, rank, shape, a_strides)];
    float y = b[strided_offset(i, rank, shape, b_strides)];
    out[i] = binary_op(op, x, y);
  }
}

// dL/da and dL/db of out = a (op) b for divide, max and min, on row-major a, b and dz. Max and
// min send dz to the input they output: a on ties and where a is NaN, as
// flexflow.ops.element_binary.
extern "C" __global__ void binary_backward(float *da, float *db, const float *a, const float *b,
                                           const float *dz, long long n, long long op) {
  GRID_STRIDE_LOOP(i, n) {
    float x = a[i], y = b[i], g = dz[i];
    if (op == BINARY_DIVIDE) {
      float d = g / y;
      da[i] = d;
      db[i] = -d * x / y;
    } else {
      bool first = isnan(x) || (op == BINARY_MAX ? x >= y : x <= y);  // x is output
      da[i] = first ? g : 0.0f;
      db[i] = first ? 0.0f : g;
    }
  }
}

// splitmix64's finalizer, as flexflow.ops.dropout._mix64.
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// y = x * keep / (1 - rate) on a tile starting at `start` of a tensor of `full` shape: the
// mask of element i is a function of (key, its row-major index in the whole tensor).
extern "C" __global__ void dropout_apply(float *y, const float *x, long long n, long long rank,
    Dims tile, Dims start, Dims full, unsigned long long key, double rate, double scale) {
  GRID_STRIDE_LOOP(i, n) {
    long long rest = i;
    unsigned long long index = 0, stride = 1;
    for (int d = (int)rank - 1; d >= 0; --d) {
      long long coord = rest % tile.v[d] + start.v[d];
      rest /= tile.v[d];
      index += (unsigned long long)coord * stride;
      stride *= (unsigned long long)full.v[d];
    }
    unsigned long long bits = mix64(key + (index + 1ULL) * 0x9E3779B97F4A7C15ULL);
    double uniform = (double)(bits >> 11) / 9007199254740992.0;  // top 53 bits / 2^53
    y[i] = uniform >= rate ? (float)((double)x[i] * scale) : 0.0f;
  }
}

// One LSTM step from the gate pre-activations z (N, 4, H): i, f, g, o as in PyTorch.
extern "C" __global__ void lstm_forward(float *h, float *c, const float *z, const float *c_prev,
                                        long long n, long long hidden) {
  GRID_STRIDE_LOOP(idx, n * hidden) {
    long long s = idx / hidden, u = idx % hidden, base = s * 4 * hidden + u;
    float i = sigmoid_(z[base]), f = sigmoid_(z[base + hidden]);
    float g = tanhf(z[base + 2 * hidden]), o = sigmoid_(z[base + 3 * hidden]);
    float cp = c_prev ? c_prev[idx] : 0.0f;
    float cc = f * cp + i * g;
    c[idx] = cc;
    h[idx] = o * tanhf(cc);
  }
}

// Gradients of the gate pre-activations (N, 4, H) and of c_prev, given the step's c.
extern "C" __global__ void lstm_backward(float *dz, float *dc_prev, const float *z,
    const float *c_prev, const float *c, const float *dh, const float *dc, long long n,
    long long hidden) {
  GRID_STRIDE_LOOP(idx, n * hidden) {
    long long s = idx / hidden, u = idx % hidden, base = s * 4 * hidden + u;
    float i = sigmoid_(z[base]), f = sigmoid_(z[base + hidden]);
    float g = tanhf(z[base + 2 * hidden]), o = sigmoid_(z[base + 3 * hidden]);
    float cp = c_prev ? c_prev[idx] : 0.0f;
    float tanh_c = tanhf(c[idx]);
    float dct = dc[idx] + dh[idx] * o * (1.0f - tanh_c * tanh_c);  // c reaches the loss twice
    dz[base] = dct * g * i * (1.0f - i);
    dz[base + hidden] = dct * cp * f * (1.0f - f);
    dz[base + 2 * hidden] = dct * i * (1.0f - g * g);
    dz[base + 3 * hidden] = dh[idx] * tanh_c * o * (1.0f - o);
    if (dc_prev) dc_prev[idx] = dct * f;
  }
}
"""
)
