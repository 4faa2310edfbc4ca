/* CPU kernels called from Legate tasks through cffi: the one declaration Python (cffi cdef)
 * and C share. Layout NCHW, contiguous. Every call runs without the GIL (cffi releases it), so
 * tasks placed on different processors run their kernels at the same time. */

/* Pooling over a tile: `x` is the tile's input slice (halo included), h x w; the output is
 * oh x ow. pad_top/pad_left are the padding rows/columns before the slice (only at the
 * tensor's border); cells outside the slice are padding, left out: ignored by max pooling,
 * and not counted by average pooling, which divides each window's sum by its cells inside
 * the slice (FlexFlow's CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING). The slice holds its
 * halo, so those are the window's cells inside the whole tensor, for any tile of it.
 * is_max: 1 max, 0 average. */
void ff_pool2d_forward_f32(const float *x, float *y, long n, long c, long h, long w, long oh,
                           long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left,
                           int is_max);
void ff_pool2d_forward_f64(const double *x, double *y, long n, long c, long h, long w, long oh,
                           long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left,
                           int is_max);
/* The input gradient: max pooling routes each output's gradient to the first maximal cell of
 * its window (row-major), average pooling spreads it evenly over the window's cells inside
 * the slice; dx is overwritten. */
void ff_pool2d_backward_f32(const float *x, const float *dy, float *dx, long n, long c, long h,
                            long w, long oh, long ow, int kh, int kw, int sh, int sw, int pad_top,
                            int pad_left, int is_max);
void ff_pool2d_backward_f64(const double *x, const double *dy, double *dx, long n, long c,
                            long h, long w, long oh, long ow, int kh, int kw, int sh, int sw,
                            int pad_top, int pad_left, int is_max);

/* im2col for a convolution: x (n, c, h, w) -> cols (n*oh*ow, c*kh*kw), one row per output
 * cell (sample, row, column), one column per (channel, kernel row, kernel column). Cells that
 * fall in the padding (pad_top/pad_left before the input) read as zeros. */
void ff_im2col_f32(const float *x, float *cols, long n, long c, long h, long w, long oh, long ow,
                   int kh, int kw, int sh, int sw, int pad_top, int pad_left);
void ff_im2col_f64(const double *x, double *cols, long n, long c, long h, long w, long oh,
                   long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left);
/* col2im, the adjoint of im2col: dx (n, c, h, w) = the sum of every column cell that read it
 * (windows overlap when the stride is below the kernel); dx is overwritten. */
void ff_col2im_f32(const float *cols, float *dx, long n, long c, long h, long w, long oh,
                   long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left);
void ff_col2im_f64(const double *cols, double *dx, long n, long c, long h, long w, long oh,
                   long ow, int kh, int kw, int sh, int sw, int pad_top, int pad_left);

/* Batch norm on an NCHW tile seen as (n, c, hw) (hw = 1 for (n, c)), float32 data, float64
 * statistics, every formula as flexflow.ops.batch_norm's numpy reference computes it. stats,
 * sums and grad_stats are (2, c) row-major: per channel, the sums over the whole batch of x
 * and x^2 (stats) or of dz and dz * xhat (grad_stats), `count` elements per channel; dz is dy
 * through the relu (dy where y > 0) when relu is 1. ff_bn_backward_f32's dgamma and dbeta are
 * the tile's own sums of dz * xhat and dz: `tile_sums`, this tile's ff_bn_stats_backward_f32
 * (which grad_stats may be), or NULL to compute them (another pass over the tile). */
void ff_bn_stats_f32(const float *x, double *sums, long n, long c, long hw);
void ff_bn_forward_f32(const float *x, float *y, const double *stats, const float *gamma,
                       const float *beta, long n, long c, long hw, double count, double eps,
                       int relu);
void ff_bn_stats_backward_f32(const float *x, const float *y, const float *dy,
                              const double *stats, double *sums, long n, long c, long hw,
                              double count, double eps, int relu);
void ff_bn_backward_f32(const float *x, const float *y, const float *dy, const float *gamma,
                        const double *stats, const double *grad_stats, const double *tile_sums,
                        float *dx, float *dgamma, float *dbeta, long n, long c, long hw,
                        double count, double eps, int relu);

/* The all-reduce of a concurrent launch's points (native/exchange.c): each of `points`
 * threads calls ff_exchange_sum with its index and n doubles, and gets every point's summed in
 * point order. A point that failed calls ff_exchange_abort: the others' calls then return
 * FF_EXCHANGE_ABORTED instead of waiting; one left waiting past timeout_s seconds returns
 * FF_EXCHANGE_TIMEOUT. */
typedef struct ff_exchange ff_exchange;
enum { FF_EXCHANGE_ABORTED = -1, FF_EXCHANGE_TIMEOUT = -2, FF_EXCHANGE_NO_MEMORY = -3 };
enum { FF_EXCHANGE_MAX_POINTS = 256 }; /* ff_exchange_new returns NULL for more points */
ff_exchange *ff_exchange_new(int points);
void ff_exchange_free(ff_exchange *x);
void ff_exchange_abort(ff_exchange *x);
int ff_exchange_sum(ff_exchange *x, int point, const double *partial, double *total,
                        long n, double timeout_s);
/* Batch norm's training passes as one call each: forward, the tile's statistics summed over
 * the points (exchange NULL: the tile's own), written to `stats`, folded into the running
 * (mean, variance) `running` -> `running_out` with `momentum` as BatchNorm.running_update
 * does, then the tile normalized; backward, the tile's sums of dz and dz * xhat summed over
 * the points, then dx and the tile's gamma and beta gradients. 0, or an FF_EXCHANGE_ error. */
int ff_bn_train_forward_f32(const float *x, float *y, const float *gamma, const float *beta,
                                const double *running, double *running_out, double *stats,
                                long n, long c, long hw, double count, double eps, int relu,
                                double momentum, ff_exchange *exchange, int point,
                                double timeout_s);
int ff_bn_train_backward_f32(const float *x, const float *y, const float *dy,
                                 const float *gamma, const double *stats, float *dx,
                                 float *dgamma, float *dbeta, long n, long c, long hw,
                                 double count, double eps, int relu, ff_exchange *exchange,
                                 int point, double timeout_s);

/* Optimizer updates (native/optimizers.c), in place on elements [begin, end) of contiguous
 * float32 arrays (weight, each partial, the states, all indexed from their first element):
 * the gradient is the sum of `copies` partial gradients (partials[0..copies)) in that order,
 * plus l2 * weight (the parameter's L2 regularizer, flexflow.regularizers) and then
 * weight_decay * weight, then SGD (velocity unused when momentum is 0) or Adam (m1, m2: the
 * moments; correction1/2: 1 - beta^step rounded to float32), operation by operation as
 * flexflow.optimizers computes them in numpy, so the bits agree. */
void ff_sgd_update_f32(float *weight, const float *const *partials, long copies, long begin,
                       long end, float *velocity, float lr, float momentum, float weight_decay,
                       int nesterov, float l2);
void ff_adam_update_f32(float *weight, const float *const *partials, long copies, long begin,
                        long end, float *m1, float *m2, float lr, float beta1, float beta2,
                        float epsilon, float weight_decay, float correction1, float correction2,
                        float l2);

/* Activations (native/activations.c) of flexflow.ops.activations on count float32 values:
 * y = act(z) (y may be z); dz = dy through the activation, from the pre-activation `pre`
 * (GELU's gradient reads it; NULL for the others) and y (dz may be dy or pre). */
enum { FF_ACT_NONE = 0, FF_ACT_RELU = 1, FF_ACT_GELU = 2, FF_ACT_TANH = 3, FF_ACT_SIGMOID = 4,
       FF_ACT_ELU = 5 };
void ff_activate_f32(int act, const float *z, float *y, long count);
void ff_activation_grad_f32(int act, const float *pre, const float *y, const float *dy, float *dz,
                            long count);
/* GELU keeping its inner tanh t (count floats; y may be z), and its gradient from the
 * pre-activation and t (dz may be pre): the backward without another tanh. */
void ff_gelu_kept_f32(const float *z, float *y, float *t, long count);
void ff_gelu_grad_kept_f32(const float *pre, const float *t, const float *dy, float *dz,
                           long count);

/* Dense layers (native/dense.c) on C-contiguous float32 tiles: x (m, k), w (n, k), y and dy
 * (m, n). `gemm` is a CBLAS sgemm (ops/blas.py hands MKL's). Forward: y = act(x w^T (+ b)),
 * the pre-activation also into `pre` (m, n) unless NULL, and GELU's inner tanh into `kept`
 * (m, n) unless NULL. Backward from y (and `pre` for GELU, with its `kept` tanh or NULL) and
 * dy: dz = dy through the activation (dz: scratch of m * n, unused without an activation; it
 * may be `pre`), db (n) = dz summed over rows (skipped when db is NULL), dw (n, k) = dz^T x,
 * dx (m, k) = dz w (skipped when dx is NULL). */
enum { FF_ROW_MAJOR = 101, FF_NO_TRANS = 111, FF_TRANS = 112 }; /* mkl_cblas.h's values */
typedef void (*ff_sgemm_fn)(int layout, int trans_a, int trans_b, int m, int n, int k,
                            float alpha, const float *a, int lda, const float *b, int ldb,
                            float beta, float *c, int ldc);
void ff_dense_forward_f32(ff_sgemm_fn gemm, const float *x, const float *w, const float *b,
                          float *y, float *pre, float *kept, long m, long n, long k, int act);
void ff_dense_backward_f32(ff_sgemm_fn gemm, const float *x, const float *w, const float *y,
                           const float *pre, const float *kept, const float *dy, float *dz,
                           float *dw, float *db, float *dx, long m, long n, long k, int act);

/* Layer normalization (native/layer_norm.c) of `rows` rows of `width` float32 values, as
 * flexflow.ops.layer_norm: y = x_hat gamma + beta (x_hat alone when gamma is NULL), x_hat and
 * rstd (1 / std per row) kept for the backward, which writes dx (skipped when NULL) and, when
 * dgamma is not NULL, dgamma and dbeta (width), summing in `sums` (2 width doubles). */
void ff_layer_norm_forward_f32(const float *x, const float *gamma, const float *beta, float *y,
                               float *x_hat, float *rstd, long rows, long width, double eps);
void ff_layer_norm_backward_f32(const float *x_hat, const float *rstd, const float *gamma,
                                const float *dy, float *dx, float *dgamma, float *dbeta,
                                double *sums, long rows, long width);

/* One LSTM step (native/lstm.c) on C-contiguous float32 tiles: x (n, e) with ldx floats
 * between its rows (e; a time step of an (n, T, e) sequence: T e), h_prev (n, hh) and
 * c_prev (n, hid), both NULL on the first step (a zero state), w_ih (4 hid, e), w_hh (4 hid, hh),
 * bias (4 hid): gate-major rows (i, f, g, o) of the tile's hid hidden units; z is scratch of
 * (n, 4 hid). Forward writes h and c (n, hid) and leaves the activated gates in z. Backward,
 * from the step's output c and the gradients dh and dc (n, hid), recomputing the gates into z
 * unless gates_kept (z then holds the forward's): dz scratch (n, 4 hid), dx (n, e) contiguous,
 * dh_prev (n, hh) and dc_prev (n, hid) (both skipped when NULL), dw_ih, dw_hh (zeros without
 * h_prev) and db, written. */
void ff_lstm_forward_f32(ff_sgemm_fn gemm, const float *x, const float *h_prev,
                         const float *c_prev, const float *w_ih, const float *w_hh,
                         const float *bias, float *z, float *h, float *c, long n, long e, long hh,
                         long hid, long ldx);
void ff_lstm_backward_f32(ff_sgemm_fn gemm, const float *x, const float *h_prev,
                          const float *c_prev, const float *w_ih, const float *w_hh,
                          const float *bias, const float *c, const float *dh, const float *dc,
                          float *z, float *dz, float *dx, float *dh_prev, float *dc_prev,
                          float *dw_ih, float *dw_hh, float *db, long n, long e, long hh,
                          long hid, int gates_kept, long ldx);

/* Softmax over each row of x (rows, classes) into y, and its gradient dx = y (dy - sum(dy y))
 * from y and dy (native/step.c); y may be x and dx may be dy (each row is read whole first). */
void ff_softmax_rows_f32(const float *x, float *y, long rows, long classes);
void ff_softmax_rows_backward_f32(const float *y, const float *dy, float *dx, long rows,
                                  long classes);

/* A convolution or pooling window over a whole NCHW tile (native/step.c): n samples, c
 * channels of h x w in, o channels of oh x ow out (a pooling: o = c), kh x kw windows at
 * strides sh, sw, ph and pw rows and columns of zero padding before the input (an average
 * pooling leaves them out of its divisor); is_max: 1 max pooling, 0 average. */
typedef struct {
  long n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph, pw, is_max;
} ff_window_dims;
/* The floats of a convolution's scratch (its im2col columns, kept for the backward, and the
 * products' rows). */
long ff_conv_scratch(const ff_window_dims *dims);

/* Direct convolutions (native/conv.c) of float32 tiles as `dims` says, at stride 1, one group:
 * ff_conv_direct says whether a convolution takes them (where im2col + GEMM spends its time on
 * the columns): at most FF_CONV_DIRECT_MAX_OUT output channels and FF_CONV_DIRECT_MAX_CELLS
 * products per output where 3/4 of the values it computes along a padded row are outputs
 * (ow of ow + kw - 1), twice the products where 17/20 are (benchmarks/conv.py measured the
 * limits). The forward writes z (n, o, oh, ow) = conv(x) + bias (bias may be NULL); the input's
 * gradient dx (n, c, h, w) from dz (n, o, oh, ow); the kernel's gradient dw (o, c, kh, kw),
 * written. Each takes `scratch` of ff_conv_direct_scratch(dims) floats and runs the instruction
 * set `isa` (FF_ISA_*; -1, or one this CPU lacks: its best), every one of which computes the
 * same bits; ff_conv_direct_isas is the mask (1 << FF_ISA_*) of those this CPU has. */
#define FF_CONV_DIRECT_MAX_CELLS 1152
#define FF_CONV_DIRECT_MAX_OUT 256
#define FF_ISA_BASE 0
#define FF_ISA_AVX2 1
#define FF_ISA_AVX512 2
int ff_conv_direct(const ff_window_dims *dims);
int ff_conv_direct_isas(void);
long ff_conv_direct_scratch(const ff_window_dims *dims);
void ff_conv_direct_forward_f32(const float *x, const float *w, const float *bias, float *z,
                                const ff_window_dims *dims, float *scratch, int isa);
void ff_conv_direct_input_grad_f32(const float *dz, const float *w, float *dx,
                                   const ff_window_dims *dims, float *scratch, int isa);
void ff_conv_direct_kernel_grad_f32(const float *x, const float *dz, float *dw,
                                    const ff_window_dims *dims, float *scratch, int isa);

/* Multi-head attention (native/attention.c) on float32 tiles, as flexflow.ops.
 * multihead_attention's reference: query (n, lq, eq), key (n, lk, ek), value (n, lk, ev); w[0..3]
 * wq (e, eq), wk (e, ek), wv (e, ev), wo (e, e), w[4..7] their biases (e) or all NULL; `heads`
 * heads of e / heads units. `scratch` holds ff_attention_scratch(dims) floats: the forward
 * keeps its projections, probabilities and context there for the backward, which also works
 * there. Forward writes y (n, lq, e); backward, from dy (n, lq, e), writes dquery, dkey,
 * dvalue (each skipped when NULL) and dw[0..7] (the biases' when not NULL). */
typedef struct {
  long n, lq, lk, eq, ek, ev, e, heads;
} ff_attention_dims;
long ff_attention_scratch(const ff_attention_dims *dims);
void ff_attention_forward_f32(ff_sgemm_fn gemm, const ff_attention_dims *dims, const float *query,
                              const float *key, const float *value, const float *const *w,
                              float *scratch, float *y);
void ff_attention_backward_f32(ff_sgemm_fn gemm, const ff_attention_dims *dims,
                               const float *query, const float *key, const float *value,
                               const float *const *w, float *scratch, const float *dy,
                               float *dquery, float *dkey, float *dvalue, float *const *dw);

/* Sparse categorical cross-entropy (native/losses.c) of a tile of softmax outputs p (rows,
 * classes) against int64 labels (rows): grad (rows, classes) = the loss's gradient with
 * respect to p (zero past the first `valid` rows), *loss = -sum of log(max(p[label], FLT_MIN))
 * over the valid rows / total, *correct = valid rows whose first largest output is the label.
 * Returns -1 (and stops) at a label outside [0, classes), else 0. */
int ff_sparse_xent_f32(const float *p, const long long *labels, float *grad, long rows,
                       long classes, long valid, double total, double *loss, long *correct);

/* Inverted dropout of `count` float32 values (native/step.c), as flexflow.ops.dropout draws
 * it: value i is kept, times 1 / (1 - rate) in float64 then rounded, iff splitmix64 at counter
 * base + i + 1 of the stream keyed by `stream` (the op's seed as flexflow.task_modes mixes in
 * the step) gives a uniform >= rate; base: the first value's index in the whole tensor. */
void ff_dropout_f32(unsigned long long stream, double rate, long base, const float *in,
                    float *out, long count);
/* An embedding's table gradient (table_rows, width), zeroed, then each row of dy (rows,
 * width) added into its id's row, in order, as numpy's add.at; FF_STEP_BAD_ID (nothing
 * written) at an id outside [0, table_rows), else 0. */
int ff_embedding_backward_f32(const int *ids, const float *dy, float *grad, long rows,
                              long width, long table_rows);

/* A fused training step (native/step.c): a program of ops on float32 tiles, in forward order,
 * the last a softmax whose output goes into sparse categorical cross-entropy. Every op reads
 * and writes buffers its owner (flexflow.runtime.native_step) allocated and named: forward in
 * order, the loss into the last op's dy[0] and sums (loss, correct), then backward in reverse.
 * An op writes each input's gradient into dx[i] (NULL: nothing reads it), or adds it there
 * when dx_add[i] (an op later in the program wrote it first), computing it in tmp_x[i] first;
 * a weight's gradient likewise (dw, dw_add, tmp_w: a weight shared by several ops, as an
 * unrolled layer's steps share theirs). Before its backward an op zeroes `zero` (zero_n
 * floats): the gradient of a tensor its readers read in parts and add into.
 * Kinds, with their sizes m, n, k, p:
 * - DENSE: x[0] (m, k), w[0] (n, k), w[1] bias (n) or NULL, y[0] and dy[0] (m, n), `act`
 *   (FF_ACT_*), z (m, n) with an activation: the pre-activation, then its gradient, and for
 *   GELU dz (m, n): its kept tanh; as ff_dense_forward/backward_f32.
 * - SOFTMAX: over the last dimension of x[0] and y[0] (m, n).
 * - LSTM: one step, as ff_lstm_forward/backward_f32 with m samples, n hidden units, k inputs
 *   and p units of h_prev: x[0] with ldx floats between rows (a time step of a sequence),
 *   its gradient going into dx[0] at the same stride, x[1] h_prev and x[2] c_prev (NULL on a
 *   first step), w[0..2] w_ih, w_hh, bias; y[0] h, y[1] c and their gradients dy[0], dy[1];
 *   z the gates (kept from the forward), dz their gradients; tmp_x[0] (m, k) always.
 * - EMBEDDING: x[0] int32 ids (m), w[0] the table (k, n), y[0] (m, n); -4 at an id outside
 *   [0, k). Its gradient adds each row of dy into the id's row, in order, as numpy's add.at.
 * - STACK: `count` parts (m, n) into y[0] (m, count, n); backward copies (or adds, per
 *   dparts_add) each part's slice of dy[0] into dparts.
 * - CONCAT: as STACK, part t (m, part_n[t]) into each row of y[0] after the parts before it.
 * - ATTENTION: x[0..2] query, key, value, w[0..7] and y[0] as ff_attention_forward_f32 with
 *   `att`, its scratch in `scratch`.
 * - CONV: x[0] (n, c, h, w), w[0] the kernel (o, c, kh, kw), w[1] bias (o) or NULL, y[0]
 *   (n, o, oh, ow) then relu when `act` is FF_ACT_RELU, as `win` says; the direct kernels
 *   (ff_conv_direct) or im2col and one GEMM, as flexflow.ops.conv2d's CPU tiles (one group, a
 *   whole tile); `scratch` of ff_conv_scratch(win) floats.
 * - POOL: x[0] (n, c, h, w) into y[0] (n, c, oh, ow), as `win` says.
 * - DROPOUT: x[0] into y[0], m elements, as flexflow.ops.dropout in training: element i is
 *   kept, times 1 / (1 - rate), iff splitmix64 at counter base + i + 1 of the stream keyed by
 *   (seed * 1000003 + iteration) mod 2^63 gives a uniform >= rate (base: the tile's first
 *   element's index in the whole tensor); the backward applies the same mask to dy.
 * - BINARY: x[0] and x[1] into y[0], m elements, added (p = FF_BINARY_ADD), subtracted or
 *   multiplied, as flexflow.ops.element_binary.
 * - LAYER_NORM: m rows of n values of x[0] into y[0] as ff_layer_norm_forward_f32 with `eps`,
 *   w[0] gamma and w[1] beta (n) or both NULL; z (m, n) keeps x_hat, `scratch` (2 n doubles'
 *   room, the backward's sums, then m floats) rstd.
 * - SPLIT: x[0] (m, k + p, n) into y[0] (m, k, n) and y[1] (m, p, n); the backward joins dy[0]
 *   and dy[1] (zeros where nothing read the part).
 * - UNARY: y[0] = act(x[0]), m elements, as ff_activate_f32 (GELU's gradient reads x[0]).
 * - MEAN: x[0] (m, k, n) averaged over k into y[0] (m, n) (summed in double).
 * - BATCH_NORM: x[0] (m, n, k) (samples, channels, pixels) into y[0] in training, then relu
 *   when `act` is FF_ACT_RELU, as ff_bn_train_forward/backward_f32 with w[0] gamma, w[1]
 *   beta, `batch_count` elements per channel in the batch, `eps`, `momentum`: the batch's
 *   sums through `exchange` as point `point` (NULL: the tile's own), waiting at most
 *   timeout_s; the running statistics (2, n) read from `running`, written to `running_out`;
 *   `stats` (2 n doubles) keeps the batch's sums for the backward.
 * With flat buffers, w[i] and dw[i] are taken at w_at[i] and dw_at[i] (-1: not a flat one).
 * Returns 0, -1 at a label outside [0, n), -2 when the program does not end in a softmax, -4
 * at an id outside the embedding's table, FF_STEP_EXCHANGE + e when a batch norm's exchange
 * failed with e (FF_EXCHANGE_*). */
enum { FF_STEP_DENSE = 0, FF_STEP_SOFTMAX = 1, FF_STEP_LSTM = 2, FF_STEP_EMBEDDING = 3,
       FF_STEP_STACK = 4, FF_STEP_ATTENTION = 5, FF_STEP_CONV = 6, FF_STEP_POOL = 7,
       FF_STEP_DROPOUT = 8, FF_STEP_BINARY = 9, FF_STEP_LAYER_NORM = 10, FF_STEP_SPLIT = 11,
       FF_STEP_UNARY = 12, FF_STEP_CONCAT = 13, FF_STEP_MEAN = 14, FF_STEP_BATCH_NORM = 15 };
enum { FF_BINARY_ADD = 0, FF_BINARY_SUBTRACT = 1, FF_BINARY_MULTIPLY = 2 };
enum { FF_STEP_SLOTS = 3, FF_STEP_WEIGHTS = 8, FF_STEP_BAD_ID = -4, FF_STEP_EXCHANGE = -16 };
typedef struct {
  int kind;
  int act;
  long m, n, k, p;
  long ldx;
  const void *x[3];
  float *dx[3];
  int dx_add[3];
  float *tmp_x[3];
  const float *w[8];
  float *dw[8];
  int dw_add[8];
  float *tmp_w[8];
  long w_at[8], dw_at[8];
  long w_n[8]; /* floats of each weight */
  float *y[2], *dy[2];
  float *z, *dz;
  float *zero;
  long zero_n;
  const float *const *parts;
  float *const *dparts;
  const int *dparts_add;
  long count;
  const long *part_n;
  ff_attention_dims att;
  ff_window_dims win;
  float *scratch;
  double rate;
  double eps;
  unsigned long long seed;
  long base;
  const double *running;
  double *running_out, *stats;
  double batch_count, momentum, timeout_s;
  ff_exchange *exchange;
  int point;
} ff_step_op;
typedef struct {
  const long long *labels;
  long valid;
  double total;
  double *sums;
} ff_step_loss;

/* A step task of a native step with flat parameters, whole (native/step.c): the pending
 * optimizer update of this device's replica of the flat weights, then the step. The C++
 * Legate task (native/legate_tasks.cc) calls it with no Python in the task body; the Python
 * task body calls the same function through cffi, so both run the same code.
 * The update (kind FF_UPDATE_NONE: none pending): weight (n floats, this device's replica,
 * updated in place) from partials[0..copies) and the states as ff_sgd_update_f32 (h: lr,
 * momentum, weight decay, nesterov; state0: the velocity or NULL) or ff_adam_update_f32 (h: lr,
 * beta1, beta2, epsilon, weight decay, correction1, correction2; state0, state1: m1, m2). */
enum { FF_UPDATE_NONE = 0, FF_UPDATE_SGD = 1, FF_UPDATE_ADAM = 2 };
typedef struct {
  int kind;
  long n;
  float *weight;
  const float *const *partials;
  long copies;
  float *state0, *state1;
  float h[7];
} ff_update;
/* When a step task's calls ran, for a run that records a timeline: a ring of `capacity`
 * entries (begin s, end s, Linux thread id, what), times on
 * CLOCK_MONOTONIC (Python's time.perf_counter). One writer (the processor running the task) and
 * one reader (the Python thread): `written` and `taken` count entries since the start; the
 * writer drops an entry (counting it) when the ring is full. */
enum { FF_LOG_UPDATE = 0, FF_LOG_STEP = 1, FF_LOG_OPS = 2 };
/* what: FF_LOG_UPDATE, FF_LOG_STEP (a whole step), or inside a step FF_LOG_OPS + 2 i (op i's
 * forward), FF_LOG_OPS + 2 i + 1 (its backward), FF_LOG_OPS + 2 count (the loss). */
typedef struct {
  double *entries;
  long capacity;
  long written, taken, dropped;
} ff_step_log;
/* weights and grads: NULL, or flat buffers every op's w[i] and dw[i] are taken from at their
 * w_at[i] and dw_at[i] offsets (overriding the pointers); iteration: the training step's
 * number, which dropout's masks are drawn for; log: NULL, or where each op's forward and
 * backward and the loss are logged, as ff_step_log says */
int ff_train_step_f32(ff_sgemm_fn gemm, ff_step_op *ops, long count, const ff_step_loss *loss,
                      const float *weights, float *grads, long iteration, ff_step_log *log);
/* The forward pass outside training (an evaluation batch) and the loss's sums, as
 * flexflow.fused_run's forward and loss compute them there: dropouts pass their input on, batch
 * norms normalize with their running statistics (`running`, read only; `stats` their scratch),
 * every other op as in training; weights: NULL, or the flat buffer w[i] are taken from. Writes
 * the ops' outputs, the loss's gradient (dy[0] of the last op) and loss->sums; returns as
 * ff_train_step_f32. */
int ff_eval_step_f32(ff_sgemm_fn gemm, ff_step_op *ops, long count, const ff_step_loss *loss,
                     const float *weights);
/* What stays the same between a step task's iterations (flexflow.runtime.native_step owns it):
 * the sgemm, the program's ops and buffers, the loss struct the call's values go into, the
 * log of its calls (NULL when not recording), and which op reads each model input (as its
 * x[0]), in the call's order: at most FF_STEP_MAX_INPUTS. */
enum { FF_STEP_MAX_INPUTS = 8 };
/* The L2 regularizers of a flat buffer's parameters (flexflow.runtime.flat.FlatLayout.runs):
 * `count` runs, run i the elements [stop[i - 1] (0 for the first), stop[i]) with lambda l2[i];
 * elements past the last run have none. */
typedef struct {
  long count;
  const long *stop;
  const float *l2;
} ff_l2_runs;
/* l2: NULL, or the L2 regularizers of the flat weights the plan's update updates (last in
 * the struct: the C++ task library, built against the fields before it, reads those alone). */
typedef struct {
  ff_sgemm_fn gemm;
  ff_step_op *ops;
  long count;
  ff_step_loss *loss;
  ff_step_log *log;
  const long *inputs;
  long num_inputs;
  const ff_l2_runs *l2;
} ff_step_plan;
/* One iteration's arrays: the model inputs' tiles xs (float32, or an embedding's int32 ids),
 * the int64 labels of the predictions, the first `valid` predictions count toward a loss
 * divided by `total`, (loss, correct) go into sums; the flat weights and this task's flat row
 * of partial gradients; the step's number (dropout's masks). Returns as ff_train_step_f32; -3
 * for an update of an unknown kind. */
typedef struct {
  const void *xs[8];
  const long long *labels;
  long valid;
  double total;
  double *sums;
  float *weights;
  float *grads;
  ff_update update;
  long iteration;
} ff_step_call;
/* The update, with the L2 regularizers `runs` (NULL: none) run by run. */
void ff_apply_update_runs_f32(const ff_update *update, const ff_l2_runs *runs);
int ff_native_step_f32(const ff_step_plan *plan, const ff_step_call *call);
/* An evaluation batch as ff_eval_step_f32 (no update, no gradients: the call's grads,
 * update and iteration are not read), the model inputs and loss values as for a step. */
int ff_native_eval_f32(const ff_step_plan *plan, const ff_step_call *call);
/* The update alone (logged as FF_LOG_UPDATE), with the plan's L2 regularizers; 0, or -3 for an
 * update of an unknown kind. */
int ff_native_update_f32(const ff_step_plan *plan, const ff_update *update);
/* Entries the log holds that the reader has not taken, copied into out (room for `capacity`
 * entries); their number. */
long ff_step_log_take(ff_step_log *log, double *out);
