/* recurrent.h — what the recurrent layers ([rnn], [gru], [lstm]) share: the row layout of a batch
 * of sequences, the gate layout of fused weights, the common keys, fast logistic and tanh, how
 * the threads share a pass's time loop, weights packed once per pass, the order of a gated
 * layer's passes (sh_rnn_gated_forward, sh_rnn_gated_backward).
 * Not here: each layer's equations (layer_rnn.c, layer_gru.c, layer_lstm.c).
 * Proved by tests/nn/test_layer_rnn.c. */
#ifndef SH_RECURRENT_H
#define SH_RECURRENT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nn/gemm_packed.h"
#include "nn/layer.h"

/* Vocabulary: T time steps, B streams (independent sequences), rows r = t*B + b (time-major, as
 * Darknet lays out time_steps x batch); H hidden units; a gate block is SH_RNN_BLOCK units whose
 * gates sit side by side in one row of the fused gate matrix, so a thread that owns a block
 * computes all of its gates with one product and updates those units alone. */

#define SH_RNN_BLOCK 16 /* units per gate block: one AVX-512 vector of each gate */
_Static_assert(SH_RNN_BLOCK == SH_PACKED_NR, "a gate block's units are one packed panel");

static inline int sh_rnn_nblocks(int h) { return (h + SH_RNN_BLOCK - 1) / SH_RNN_BLOCK; }
static inline int sh_rnn_block_width(int h, int blk)
{
    int w = h - blk * SH_RNN_BLOCK;
    return w < SH_RNN_BLOCK ? w : SH_RNN_BLOCK;
}
/* Column of gate q of unit j in a fused (rows, ngates*H) gate matrix; the same index is the
 * row of that gate's weights in the (ngates*H, I) and (ngates*H, H) weight matrices. Blocks
 * are contiguous: units [j0, j1) on block boundaries own columns [ngates*j0, ngates*j1). */
static inline int sh_rnn_gate_col(int h, int ngates, int q, int j)
{
    int blk = j / SH_RNN_BLOCK;
    return blk * SH_RNN_BLOCK * ngates + q * sh_rnn_block_width(h, blk) + j % SH_RNN_BLOCK;
}

/* Common keys and checks: time steps from [net], batch_normalize (into l->batch_normalize;
 * refused unless allow_bn), rows a whole number of sequences. Sets l->steps. */
/* Darknet's shortcut= of [rnn] and [crnn] (the state carried across each step as well):
 * 0 is read, 1 refused naming the key. */
shoal_result sh_rnn_parse_shortcut(sh_cfg_section *s);
shoal_result sh_rnn_parse_common(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx,
                                 int allow_bn);

/* Batch norm inside a recurrent layer, one time step at a time as Darknet's connected
 * sublayers do it: n units over the b rows of one step (v: b rows ld apart, in place).
 * Training: the step's mean and biased variance, rolling statistics updated (momentum 0.01,
 * the rolling variance unbiased) and x_hat kept in xh (ldxh apart), 1/std in invstd;
 * inference: the rolling statistics. Then v = gamma x_hat + beta. The conventions of
 * layer_batchnorm.c. */
void sh_rnn_bn_forward(float *v, int ld, int b, int n, const float *gamma, const float *beta,
                       float *rmean, float *rvar, int training, float *xh, int ldxh,
                       float *invstd);
/* Its backward: d (b rows ld apart) holds dL/d(output) and becomes dL/d(input); ggamma and
 * gbeta are added to (the steps of a batch sum into them). */
void sh_rnn_bn_backward(float *d, int ld, int b, int n, const float *gamma, const float *xh,
                        int ldxh, const float *invstd, float *ggamma, float *gbeta);

/* Streams in the current pass: rows / T. */
static inline int sh_rnn_streams(const sh_layer *l, const sh_exec *x) { return x->nimg / l->steps; }

/* uniform(-scale, scale) */
void sh_rnn_uniform(float *p, size_t count, float scale, sh_rng *rng);

/* The part of time step t a step function computes: streams [b0, b1) (rows t*B + b0 ..
 * t*B + b1 - 1, contiguous) and column units [k0, k1) (gate blocks or panels: the layer's
 * own unit). */
typedef struct {
    int t;
    int b0, b1;
    int k0, k1;
} sh_rnn_part;
typedef void (*sh_rnn_step_fn)(sh_layer *l, sh_exec *x, const sh_rnn_part *p);

/* A pass's time loop: at each t from t_first to t_last (either way), step[0] then step[1]
 * (NULL: none; skipped at t = 0 when skip1_at_0), step i over count[i] column units, one
 * step's multiply-adds macs[i]. Two ways to share it among the threads, each computing
 * every element the same way (sh_packed_gemm's sums do not depend on the rows or columns
 * taken at a time), so the results are those of one thread bit for bit:
 *  - by streams: h_t of a stream depends on that stream's rows alone, so each thread runs
 *    the whole loop over its streams with no wait between steps: one dispatch per pass.
 *    Not with batch norm (statistics over all streams of a step) nor with fewer than
 *    sh_rnn_rows_min_streams streams a thread (too few rows per product), nor when the
 *    whole loop's work is under sh_rnn_split_min_macs;
 *  - else by columns, a dispatch per step function and step (each waits for every thread:
 *    microseconds, far more when a core is shared with other processes), when one step's
 *    work is sh_rnn_split_min_macs or more; else on the calling thread. */
typedef struct sh_rnn_loop {
    sh_rnn_step_fn step[2];
    int count[2];
    double macs[2];
    int t_first, t_last, skip1_at_0;
    int t, which; /* the column split's current step function (set by sh_rnn_run_loop) */
} sh_rnn_loop;
void sh_rnn_run_loop(sh_layer *l, sh_exec *x, sh_rnn_loop *lp);

extern double sh_rnn_split_min_macs; /* 2^21 by default; tests lower it to 0 */
/* 8 by default: from this many streams a thread the time loop splits by streams, below it by
 * gate blocks (columns), where each wins; tests set 1, or INT_MAX for the column split. */
extern int sh_rnn_rows_min_streams;

/* A weight matrix W (n, h) packed for sh_packed_gemm (gemm_packed.h) once per pass instead
 * of by OpenBLAS at every call: forward op(B) = W^T (h, n), backward op(B) = W (n, h). The
 * recurrent weights (the gates' Wh, n = ngates*H; [rnn]'s self weights) serve every step,
 * the input and output weights the products over all rows. One matrix at a time, at the end
 * of l->cache, 64-byte aligned: a layer's cache_count adds the largest sh_rnn_packed_count
 * of its matrices, and the passes pack each in turn before the products that use it. The
 * threads read it whole (split by streams) or in panels of 16, one gate block (SH_RNN_BLOCK,
 * split by columns). */
static inline size_t sh_rnn_packed_count(int h, int n)
{
    size_t fwd = sh_packed_count(h, n), bwd = sh_packed_count(n, h);
    return (fwd > bwd ? fwd : bwd) + SH_PACKED_NR; /* + room to align */
}
/* Where W (n, h) is packed: it ends (within alignment) at the cache's end, so a matrix with
 * a smaller count starts later inside the same reserved floats. */
static inline float *sh_rnn_packed(const sh_layer *l, int h, int n)
{
    uintptr_t end = (uintptr_t)(l->cache + l->cache_count - sh_rnn_packed_count(h, n) +
                                SH_PACKED_NR);
    return (float *)(end & ~(uintptr_t)63);
}
/* Pack W (n, h) for the forward products (transposed: 1) or the backward ones (0). */
static inline void sh_rnn_pack(sh_layer *l, const float *w, int h, int n, int transposed)
{
    float *pk = sh_rnn_packed(l, h, n);
    if (transposed)
        sh_packed_pack(1, h, n, w, h, 0, sh_packed_npanels(n), pk);
    else
        sh_packed_pack(0, n, h, w, h, 0, sh_packed_npanels(h), pk);
}

/* p rounded up to 64 bytes (cache_count reserves SH_PACKED_NR floats for each such). */
static inline float *sh_rnn_align(float *p)
{
    return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
}

/* Rows per chunk of the passes over all rows at once (input products, input gradients):
 * two chunks per thread, one chunk when single-threaded. */
static inline int sh_rnn_chunk_rows(const sh_exec *x)
{
    int parts = x->nthreads == 1 ? 1 : 2 * x->nthreads;
    return (x->nimg + parts - 1) / parts;
}

/* A gated layer's ([gru], [lstm]) passes, run through sh_exec_* by the loops they share
 * (sh_rnn_gated_forward, sh_rnn_gated_backward). The layer sets l->ngates; its gate matrix is
 * (rows, ngates*H) in gate blocks, and backward leaves the gates' gradients there, at the
 * start of l->cache, with Wx (ngates*H, I) at w_off. The step functions work on the streams
 * and gate blocks of one time step (sh_rnn_part). */
typedef struct {
    sh_image_fn input_rows;    /* rows [r0, r1): the input part of the gates (X Wx^T + biases;
                                  Wx^T packed, sh_rnn_packed); NULL: step_forward does each
                                  step's (the layer packs Wx^T where it wants) */
    sh_rnn_step_fn step_forward;  /* gate blocks [k0, k1): the recurrent part (Wh^T packed,
                                     sh_rnn_packed), then the cells */
    sh_rnn_step_fn step_backward; /* gate blocks [k0, k1): the gates' gradients from dL/dh
                                     (and dL/dc), from above and from the step after */
    sh_rnn_step_fn step_carry;    /* gate blocks [k0, k1) (columns 16 k0 .. 16 k1) of dL/dh of
                                     the step before: dG_t Wh, Wh packed (sh_rnn_packed) */
    sh_image_fn pack_grads;    /* panels [p0, p1): the weight gradients' operands packed
                                  (sh_rnn_gated_pack) */
    sh_image_fn param_grads;   /* gate rows [k0, k1): weight and bias gradients, all rows */
} sh_rnn_gated;

/* Forward: every step's input part at once (Wx^T packed, unless the inputs are one-hot; or
 * none, for the steps to do), then the T steps in order (Wh^T packed). The caller loads the starting state before and saves
 * the last step's after. */
void sh_rnn_gated_forward(sh_layer *l, sh_exec *x, const sh_rnn_gated *g);
/* Backward through time: the T steps last to first (each carrying dL/dh to the step before
 * through the recurrent weights, packed), then the parameters' gradients over all rows, then
 * dL/dx = dG Wx (Wx packed) when in_delta[0] wants it. The caller zeroes the carried gradients (dh, dc)
 * before. */
void sh_rnn_gated_backward(sh_layer *l, sh_exec *x, const sh_rnn_gated *g);

/* A gated layer's weight gradients run on their right-hand operands packed once per
 * backward (gemm_packed.h): [h0; h] ((B + rows), H; rows [0, rows) are every step's h_prev)
 * and, unless one-hot, the inputs (rows, I). sh_rnn_gated_pack_count: the floats to reserve
 * in the cache (alignment included); sh_rnn_gated_pack: panels [p0, p1) of both (threads
 * take disjoint ranges; count: the larger panel count of H and I). */
static inline size_t sh_rnn_gated_pack_count(int rows, int streams, int h, int in)
{
    return sh_packed_count(rows + streams, h) + sh_packed_count(rows, in) + 3 * SH_PACKED_NR;
}
void sh_rnn_gated_pack(const sh_layer *l, const sh_exec *x, const float *h0, int p0, int p1,
                       float *hpk, float *xpk);
/* Gate rows [k0, k1) of gWx = dGx^T X (unless one-hot) and gWh = dGh^T h_prev, each over
 * every row (dGx, dGh: (rows, g) gate gradients; gwx, gwh: the gradients' first rows). */
void sh_rnn_gated_wgrads(const sh_layer *l, const sh_exec *x, int k0, int k1, const float *dgx,
                         const float *dgh, const float *hpk, const float *xpk, float *gwx,
                         float *gwh);

/* out[k - k0] = sum over rows of g[r*ld + k] for k in [k0, k1) (bias gradients). */
void sh_rnn_colsum(const float *g, int rows, int ld, int k0, int k1, float *out);

/* One-hot inputs (character models: a byte as 256 inputs) make the input product a row
 * lookup and its weight gradient a row sum, a sixth of a 2 x 256 LSTM's arithmetic.
 * sh_rnn_onehot: 1 when every row of x (rows, in) holds a single 1 and zeros, with each row's
 * column in idx; else 0 (the layer then multiplies as usual). */
int sh_rnn_onehot(const float *x, int rows, int in, int32_t *idx);
/* wt (in, g) = w (g, in) transposed: row c of wt is input c's column of weights. */
void sh_rnn_transpose(const float *w, int g, int in, float *wt);
/* Gradient rows [k0, k1) of w (g, in) for one-hot rows: gw[k][idx[r]] = sum of dg[r][k];
 * acc (in, g) is scratch whose columns [k0, k1) this call owns. Rows are added in order, so
 * the result does not depend on the thread count. */
void sh_rnn_onehot_grad(const float *dg, int rows, int g, const int32_t *idx, int in, int k0,
                        int k1, float *acc, float *gw);

/* The range reduction the exp functions below share: x = n ln2 + r with |r| <= ln2 / 2
 * (ln2 in two parts, so r is exact to float's precision); *scale = 2^n. */
static inline float sh_rnn_exp_reduce(float x, float *scale)
{
    float n = __builtin_rintf(x * 1.44269504088896341f);
    int32_t bits = ((int32_t)n + 127) << 23;
    memcpy(scale, &bits, sizeof *scale);
    return x - n * 0.693145751953125f - n * 1.42860682030941723e-6f;
}

/* exp(x) to about 2 ulp for |x| < 87 without a library call, so that loops over a row of
 * gates vectorise (the gate nonlinearities are a third of an LSTM step otherwise). */
static inline float sh_rnn_exp(float x)
{
    float scale, r = sh_rnn_exp_reduce(x < -87.0f ? -87.0f : (x > 87.0f ? 87.0f : x), &scale);
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * scale;
}
static inline float sh_rnn_sigmoid(float x) { return 1.0f / (1.0f + sh_rnn_exp(-x)); }
static inline float sh_rnn_tanh(float x) { return 1.0f - 2.0f / (1.0f + sh_rnn_exp(2.0f * x)); }

/* exp(x) - 1 for x <= 0 to a few ulp, small x included (sh_rnn_exp's reduction, with the
 * polynomial's leading 1 left out so that nothing cancels). */
static inline float sh_rnn_expm1_neg(float x)
{
    float scale, r = sh_rnn_exp_reduce(x < -87.0f ? -87.0f : x, &scale);
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r * r + r; /* exp(r) - 1 */
    return p * scale + (scale - 1.0f);
}
/* tanh(x) to a few ulp, near 0 as well (sh_rnn_tanh loses the low bits there): what [rnn]
 * uses in place of libm's tanhf, which does not vectorise. */
static inline float sh_rnn_tanh_exact(float x)
{
    float e = sh_rnn_expm1_neg(-2.0f * __builtin_fabsf(x));
    return __builtin_copysignf(-e / (2.0f + e), x);
}

/* x[i] = f(x[i] + bias[i]) (bias may be NULL) for count values: logistic and tanh through
 * the loops above, which vectorise; other activations through activation.c. */
static inline void sh_rnn_act(sh_act a, float *restrict x, const float *restrict bias, int count)
{
    if (bias)
        for (int i = 0; i < count; i++) x[i] += bias[i];
    if (a == SH_ACT_TANH)
        for (int i = 0; i < count; i++) x[i] = sh_rnn_tanh_exact(x[i]);
    else if (a == SH_ACT_LOGISTIC)
        for (int i = 0; i < count; i++) x[i] = sh_rnn_sigmoid(x[i]);
    else
        sh_act_forward(a, x, (size_t)count);
}

#endif
