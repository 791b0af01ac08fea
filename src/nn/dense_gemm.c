/* dense_gemm.c — [connected]'s products (Y = X W^T, dX = dY W, dW = dY^T X, the bias sums),
 * each on this pass's path: the stage's packed weights, the layer's own packed W^T, W and X,
 * few rows turned around (gemm_small.c) or OpenBLAS; the scratch and cache the paths need.
 * Not here: the machine's windows and sizes (dense_rules.c), the layer (layer_dense.c).
 * Proved by tests/nn/test_layer_dense.c (every path against plain loops, each choice pinned). */
#include <stdint.h>
#include <string.h>

#include "nn/dense.h"
#include "nn/gemm.h"
#include "nn/gemm_packed.h"
#include "nn/gemm_small.h"

/* Room for the fused update (dense_share.c): X packed (cache), SH_DENSE_FUSE_ROWS rows of dW
 * (scratch). */
static void fuse_room(sh_layer *l, int batch)
{
    size_t rows = (size_t)SH_DENSE_FUSE_ROWS * l->inputs;
    if (l->ws_count < rows) l->ws_count = rows;
    l->cache_count = sh_packed_count(batch, (int)l->inputs) + SH_PACKED_NR;
}

void sh_dense_gemm_size(sh_layer *l, const sh_parse_ctx *ctx, int k)
{
    int in = (int)l->inputs;
    if (ctx->share_ranks > 1) { /* a gather share: the whole batch by its slice of W */
        l->ws_count = sh_small_ws_count(sh_dense_min(ctx->batch, SH_DENSE_GATHER_ROWS), in, k);
        if (!l->batch_normalize) fuse_room(l, ctx->batch);
    }
    if (ctx->share_ranks <= 1 && k >= SH_DENSE_SMALL_MIN_OUTPUTS) { /* few rows (whole, column or row share) */
        int mf = sh_dense_min(ctx->batch, sh_dense_rules_window(0)[1]);
        int mb = sh_dense_min(ctx->batch, sh_dense_rules_window(1)[1]);
        size_t fwd = sh_small_ws_count(mf, in, k), bwd = sh_small_ws_count(mb, k, in);
        l->ws_count = fwd > bwd ? fwd : bwd;
    }
    if (ctx->tp_role == SH_TP_NONE && l->w_count <= SH_DENSE_SELF_PACK_MAX) /* own packing: W^T, W, X */
        l->cache_count = sh_packed_count(in, k) + sh_packed_count(k, in) + sh_packed_count(ctx->batch, in) +
                         3 * SH_PACKED_NR;
    else if (ctx->tp_role == SH_TP_NONE && ctx->share_ranks <= 1 && sh_dense_rules_newer()) /* X alone */
        l->cache_count = sh_packed_count(ctx->batch, in) + SH_PACKED_NR;
    /* tensor parallelism with one replica: a column or row share's gradients are final too */
    if ((ctx->tp_role == SH_TP_COLUMN || ctx->tp_role == SH_TP_ROW) && !l->batch_normalize) fuse_room(l, ctx->batch);
}

/* The layer's own packed operands in its cache, 64-byte aligned: W^T (I, K), W (K, I), X
 * (rows, I). */
static float *align64(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }
static float *self_fwd(const sh_layer *l) { return align64(l->cache); }
static float *self_bwd(const sh_layer *l)
{
    return align64(self_fwd(l) + sh_packed_count((int)l->inputs, l->out_shape.c));
}
static float *self_x(const sh_layer *l)
{
    return align64(self_bwd(l) + sh_packed_count(l->out_shape.c, (int)l->inputs));
}

/* Fixed for a thread count, so results are too. */
int sh_dense_gemm_chunk(const sh_exec *x)
{
    int parts = x->nthreads == 1 ? 1 : 2 * x->nthreads;
    return (x->nimg + parts - 1) / parts;
}

/* Forward and backward of a pass see the same rows, so both decide alike. */
int sh_dense_gemm_self_packs(const sh_layer *l, const sh_exec *x)
{
    return l->cache_count && !l->packed_fwd && l->tp_role == SH_TP_NONE &&
           sh_dense_self_packs(l->w_count, x->nimg, sh_dense_gemm_chunk(x));
}

/* Rows of X the cache holds packed. */
static int self_x_fits(const sh_layer *l, const sh_exec *x)
{
    size_t used = (size_t)(self_x(l) - l->cache);
    return used + sh_packed_count(x->nimg, (int)l->inputs) <= l->cache_count;
}

/* A whole layer too large to pack its weights whose cache holds X alone (sh_dense_gemm_size):
 * dW on the packed kernel all the same, where the machine's rules say it wins. */
static int big_x_packs(const sh_layer *l, const sh_exec *x)
{
    return l->tp_role == SH_TP_NONE && l->w_count > SH_DENSE_SELF_PACK_MAX && l->cache_count &&
           sh_dense_rules_newer() && sh_packed_count(x->nimg, (int)l->inputs) + SH_PACKED_NR <= l->cache_count;
}

/* 1 when this pass's dW runs on X packed (sh_dense_gemm_pack_x), and where X is. */
static int dw_packs_x(const sh_layer *l, const sh_exec *x)
{
    return (sh_dense_gemm_self_packs(l, x) && self_x_fits(l, x)) || big_x_packs(l, x);
}
static float *dw_x(const sh_layer *l)
{
    return l->w_count > SH_DENSE_SELF_PACK_MAX ? align64(l->cache) : self_x(l);
}

/* 1 when the forward (dx 0) or input gradient (dx 1) of this pass runs on gemm_small.c: a
 * whole layer or a column or row share (a gather share always does, its own way), few rows
 * per product, outputs enough, its scratch sized for them (sh_dense_gemm_size). */
static int small_rows(const sh_layer *l, const sh_exec *x, int dx)
{
    if (l->tp_role == SH_TP_GATHER || l->out_shape.c < SH_DENSE_SMALL_MIN_OUTPUTS || sh_dense_gemm_self_packs(l, x))
        return 0;
    const int *lim = sh_dense_rules_window(dx);
    int m = sh_dense_gemm_chunk(x), k = l->out_shape.c, in = (int)l->inputs;
    if (!dx && !sh_dense_rules_fwd_fits(m, in)) return 0;
    return m >= lim[0] && m <= lim[1] &&
           (dx ? sh_small_ws_count(m, k, in) : sh_small_ws_count(m, in, k)) <= l->ws_count;
}

/* Panels [p0, p1) of the layer's own packed operands: W^T (forward), W and X (backward). */
static void pack_fwd_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int k = l->out_shape.c, in = (int)l->inputs;
    sh_packed_pack(1, in, k, x->params + l->w_off, in, p0, p1, self_fwd(l));
}
static void pack_bwd_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int k = l->out_shape.c, in = (int)l->inputs;
    sh_packed_pack(0, k, in, x->params + l->w_off, in, p0, p1, self_bwd(l));
}
static void pack_x_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int in = (int)l->inputs;
    sh_packed_pack(0, x->nimg, in, l->in[0], in, p0, p1, dw_x(l));
}

void sh_dense_gemm_pack_wt(sh_layer *l, sh_exec *x)
{
    sh_exec_split(l, x, sh_packed_npanels(l->out_shape.c), pack_fwd_panels);
}

void sh_dense_gemm_pack_w(sh_layer *l, sh_exec *x)
{
    sh_exec_split(l, x, sh_packed_npanels((int)l->inputs), pack_bwd_panels);
}

int sh_dense_gemm_pack_x(sh_layer *l, sh_exec *x)
{
    if (!dw_packs_x(l, x)) return 0;
    sh_exec_split(l, x, sh_packed_npanels((int)l->inputs), pack_x_panels);
    return 1;
}

/* The paths, first that applies: a pipeline stage's packed weights (sh_net_keep_packed); a
 * gather share's products of SH_DENSE_GATHER_ROWS rows; few rows turned around (small_rows);
 * the layer's own packed W^T, W and X (from sh_dense_self_pack_min_rows rows, few enough
 * weights: faster than OpenBLAS on a character model's few hundred outputs); OpenBLAS. */
void sh_dense_gemm_forward(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    int k0, k, ld, in = (int)l->inputs, nn = n1 - n0;
    sh_dense_cols(l, &k0, &k, &ld);
    const float *w = x->params + l->w_off, *a = l->in[0] + (size_t)n0 * in;
    float *y = l->out + (size_t)n0 * ld;
    if (l->packed_fwd && !(x->unpacked & SH_PACK_FORWARD)) /* a whole layer: the net packs no share */
        sh_packed_gemm(nn, 0, k, in, a, in, l->packed_fwd, 0, y, ld);
    else if (l->tp_role == SH_TP_GATHER) /* SH_DENSE_GATHER_ROWS at a time: packed A stays in L2 */
        for (int r0 = 0; r0 < nn; r0 += SH_DENSE_GATHER_ROWS)
            sh_small_gemm_nt(sh_dense_min(SH_DENSE_GATHER_ROWS, nn - r0), k, in, a + (size_t)r0 * in, in, w, in,
                             y + (size_t)r0 * ld + k0, ld, x->work[tid]);
    else if (small_rows(l, x, 0))
        sh_small_gemm_nt(nn, k, in, a, in, w, in, y + k0, ld, x->work[tid]);
    else if (sh_dense_gemm_self_packs(l, x))
        sh_packed_gemm(nn, 0, k, in, a, in, self_fwd(l), 0, y, ld);
    else
        sh_gemm(0, 1, nn, k, in, 1.0f, a, in, w, in, 0.0f, y + k0, ld);
}

/* A gather share's input gradient takes OpenBLAS's (turned around it ran at half its speed). */
void sh_dense_gemm_dx(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    int k0, k, ld, in = (int)l->inputs, nn = n1 - n0;
    sh_dense_cols(l, &k0, &k, &ld);
    if (nn <= 0 || !l->in_delta[0]) return;
    const float *dy = l->delta + (size_t)n0 * ld + k0;
    float *dx = l->in_delta[0] + (size_t)n0 * in;
    int add = l->accum[0];
    if (l->packed_bwd && !(x->unpacked & SH_PACK_BACKWARD))
        sh_packed_gemm(nn, 0, in, k, dy, ld, l->packed_bwd, add, dx, in);
    else if (small_rows(l, x, 1))
        sh_small_gemm_nn(nn, in, k, dy, ld, x->params + l->w_off, in, add, dx, in, x->work[tid]);
    else if (sh_dense_gemm_self_packs(l, x))
        sh_packed_gemm(nn, 0, in, k, dy, ld, self_bwd(l), add, dx, in);
    else
        sh_gemm(0, 0, nn, in, k, 1.0f, dy, ld, x->params + l->w_off, in, add ? 1.0f : 0.0f, dx, in);
}

/* Each row of dW sums over the whole pass on one thread: no partial blocks. On the packed
 * kernel the bits do not depend on the rows a thread is given; OpenBLAS's product may round
 * a block of fewer rows differently, so there they follow the thread count as well. */
void sh_dense_gemm_dw(sh_layer *l, sh_exec *x, int k0, int k1)
{
    int c0, kc, k, in = (int)l->inputs, n = x->nimg, nk = k1 - k0;
    sh_dense_cols(l, &c0, &kc, &k); /* k: the delta's row length; c0: our first column there */
    float *gw = x->grad[0] + l->w_off + (size_t)k0 * in;
    if (dw_packs_x(l, x)) /* X packed (sh_dense_gemm_pack_x) */
        sh_packed_gemm_tn(nk, 0, in, n, l->delta + c0 + k0, k, dw_x(l), n, x->weights_add, gw, in);
    else
        sh_gemm(1, 0, nk, in, n, 1.0f, l->delta + c0 + k0, k, l->in[0], in, x->weights_add ? 1.0f : 0.0f, gw, in);
}

void sh_dense_gemm_bias(sh_layer *l, sh_exec *x, int k0, int k1)
{
    int c0, kc, k;
    sh_dense_cols(l, &c0, &kc, &k);
    float *gb = x->grad[0] + l->b_off;
    if (!x->weights_add)
        for (int j = k0; j < k1; j++) gb[j] = 0.0f;
    for (int i = 0; i < x->nimg; i++) {
        const float *row = l->delta + (size_t)i * k + c0;
        for (int j = k0; j < k1; j++) gb[j] += row[j];
    }
}
