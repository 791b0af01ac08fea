/* layer_dense.c — [connected]: Y (N, K) = X (N, I) W^T + b (W (K, I) as Darknet), activation
 * (default logistic), batch_normalize; forward and dX by chunks of images, dW by rows over the
 * pass, early in blocks (sh_net_set_grad_rows) or deferred (the weights hook).
 * Not here: the products' paths (dense_gemm.c, dense_rules.c), shares (dense_share.c).
 * Proved by tests/nn/test_layer_dense.c and tests/nn/test_grad_rows.c (blocks). */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "nn/dense.h"

static shoal_result dense_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int k = 1;
    SH_TRY(sh_cfg_int(s, "output", 1, 1, 1 << 24, &k));
    if (ctx->out_div > 1) k /= ctx->out_div; /* a column-split share (the caller checked) */
    SH_TRY(sh_cfg_int(s, "batch_normalize", 0, 0, 1, &l->batch_normalize));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    l->out_shape = (sh_shape){k, 1, 1};
    if (ctx->share_ranks > 1) { /* a gather share: its outputs, the output buffer whole */
        int r = ctx->share_rank, R = ctx->share_ranks;
        k = (int)(((long long)(r + 1) * k) / R - ((long long)r * k) / R);
    }
    l->w_off = 0;
    l->w_count = (size_t)k * l->inputs;
    l->b_off = l->w_count;
    l->b_count = (size_t)k;
    l->s_off = l->b_off + l->b_count;
    l->s_count = l->batch_normalize ? (size_t)k : 0;
    l->param_count = l->w_count + l->b_count + l->s_count;
    l->reduce_off = 0;
    l->reduce_count = 0; /* gradients are split by outputs, not by images: no partials */
    l->stat_count = l->batch_normalize ? 2 * (size_t)k : 0;
    l->keep_count = l->batch_normalize ? (size_t)k : 0;
    l->keep_fixed = l->batch_normalize ? 2 * (size_t)k : 0;
    l->flops = (double)k * (double)l->inputs;
    sh_dense_gemm_size(l, ctx, k);
    if (ctx->tp_role != SH_TP_NONE) l->caps &= ~(unsigned)SH_LAYER_PACKED_WEIGHTS; /* the net packs whole layers */
    if (ctx->tp_role != SH_TP_NONE && !l->batch_normalize && l->cache_count) l->caps |= SH_LAYER_FUSES_UPDATE;
    return SHOAL_OK;
}

/* Weights uniform(-1, 1) * sqrt(2 / I) as Darknet; a share draws the whole layer's. */
static void dense_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    if (l->tp_role != SH_TP_NONE) {
        sh_dense_share_init(l, params, rng);
        return;
    }
    float scale = sqrtf(2.0f / (float)l->inputs);
    for (size_t i = 0; i < l->w_count; i++)
        params[l->w_off + i] = scale * (2.0f * sh_rng_float(rng) - 1.0f);
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
    for (size_t i = 0; i < l->s_count; i++) params[l->s_off + i] = 1.0f;
    for (size_t i = 0; i < l->stat_count / 2; i++) {
        stats[l->stat_off + i] = 0.0f;
        stats[l->stat_off + l->stat_count / 2 + i] = 1.0f;
    }
}

static void dense_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    int k0, k, ld, nn = n1 - n0;
    sh_dense_cols(l, &k0, &k, &ld);
    if (nn <= 0) return;
    float *y = l->out + (size_t)n0 * ld;
    if (ld != k) memset(y, 0, (size_t)nn * ld * sizeof *y); /* the others' columns: summed in */
    sh_dense_gemm_forward(l, x, tid, n0, n1);
    if (l->batch_normalize || l->tp_role == SH_TP_ROW) return; /* row split: bias after the sum */
    const float *b = x->params + l->b_off;
    for (int n = 0; n < nn; n++) {
        float *row = y + (size_t)n * ld + k0;
        for (int j = 0; j < k; j++) row[j] += b[j];
        sh_act_forward(l->act, row, (size_t)k);
    }
}

static void dense_forward(sh_layer *l, sh_exec *x)
{
    if (sh_dense_gemm_self_packs(l, x)) sh_dense_gemm_pack_wt(l, x);
    sh_exec_chunks(l, x, sh_dense_gemm_chunk(x), dense_forward_images);
    if (l->tp_role != SH_TP_NONE) sh_dense_share_forward(l, x);
    if (l->batch_normalize) sh_bn_forward(l, x, l->out);
}

/* Phase 1, split by images: the activation's gradient of this share's rows (act_images), then
 * their input delta dX (n, I) = dY (n, K) W (K, I). */
static void act_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    int k0, k, ld, nn = n1 - n0;
    sh_dense_cols(l, &k0, &k, &ld);
    if (nn <= 0 || l->batch_normalize) return;
    float *dy = l->delta + (size_t)n0 * ld + k0;
    if (ld == k) sh_act_backward(l->act, l->out + (size_t)n0 * k, dy, (size_t)nn * k);
    else
        for (int n = 0; n < nn; n++)
            sh_act_backward(l->act, l->out + (size_t)(n0 + n) * ld + k0, dy + (size_t)n * ld, (size_t)k);
}

static void dense_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    act_images(l, x, tid, n0, n1);
    sh_dense_gemm_dx(l, x, tid, n0, n1);
}

/* Phase 2, split by outputs: rows [k0, k1) of dW (K, I) = dY^T (K, N) X (N, I) over the whole
 * pass, and those outputs' bias gradients: each written by one thread, no reduction. */
static void dense_backward_outputs(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    if (k1 <= k0) return;
    sh_dense_gemm_dw(l, x, k0, k1);
    if (!l->batch_normalize) sh_dense_gemm_bias(l, x, k0, k1);
}

/* Rows [grad_row0 + c0, grad_row0 + c1) of dW: a thread's share of the current block. */
static void block_outputs(sh_layer *l, sh_exec *x, int tid, int c0, int c1)
{
    dense_backward_outputs(l, x, tid, x->grad_row0 + c0, x->grad_row0 + c1);
}

/* Early readiness (x->grad_rows): dY first, then dW in blocks of rows, each offered as it is
 * done, then dX. Every value is computed as in the whole pass (the activation gradient is
 * elementwise; the packed kernel sums each element of dW in the same order whatever the
 * rows it is given), only sooner or later. Where X is not packed, dW is OpenBLAS's, whose
 * sums follow the shape, so it goes whole (still before dX). Taken only where dX reads the
 * layer's own packed copy of W, or there is no dX (dense_backward). */
static void dense_backward_blocks(sh_layer *l, sh_exec *x)
{
    int k = l->out_shape.c, in = (int)l->inputs;
    sh_exec_chunks(l, x, sh_dense_gemm_chunk(x), act_images);
    /* W for dX is copied before the first offer: an offered block may be reduced and stepped
     * (the allreduce applies the update) while dX still needs the old weights */
    if (l->in_delta[0]) sh_dense_gemm_pack_w(l, x);
    int rows = sh_dense_gemm_pack_x(l, x) ? x->grad_rows : k;
    for (int r0 = 0; r0 < k; r0 += rows) {
        int r1 = k - r0 < rows ? k : r0 + rows;
        x->grad_row0 = r0;
        sh_exec_split(l, x, r1 - r0, block_outputs);
        sh_exec_offer(x, l, (size_t)(r1 - r0) * in);
    }
    sh_exec_chunks(l, x, sh_dense_gemm_chunk(x), sh_dense_gemm_dx);
}

static void dense_backward(sh_layer *l, sh_exec *x)
{
    if (l->batch_normalize) sh_bn_backward(l, x);
    /* blocks only where dX reads its own copy of W (or there is no dX): see dense_backward_blocks */
    if (x->grad_rows > 0 && l->tp_role == SH_TP_NONE && !x->defer_weights &&
        (!l->in_delta[0] || sh_dense_gemm_self_packs(l, x))) {
        dense_backward_blocks(l, x);
        return;
    }
    if (l->in_delta[0] && sh_dense_gemm_self_packs(l, x)) sh_dense_gemm_pack_w(l, x);
    sh_exec_chunks(l, x, sh_dense_gemm_chunk(x), dense_backward_images);
    int k0, ks, ld;
    sh_dense_cols(l, &k0, &ks, &ld);
    if (x->update && sh_layer_can(l, SH_LAYER_FUSES_UPDATE)) {
        sh_dense_share_update(l, x);
    } else if (!x->defer_weights || !sh_layer_defers_weights(l)) {
        sh_dense_gemm_pack_x(l, x);
        sh_exec_split(l, x, ks, dense_backward_outputs);
    }
    if (l->tp_role != SH_TP_NONE) sh_dense_share_backward(l, x);
}

/* Deferred (x->defer_weights): phase 2 alone, over the nimg rows of the factors the caller
 * put in in[0] and delta. */
static void dense_weights(sh_layer *l, sh_exec *x)
{
    sh_dense_gemm_pack_x(l, x);
    sh_exec_split(l, x, l->out_shape.c, dense_backward_outputs);
}

/* Darknet: biases, weights (K, I), [scales, rolling mean, rolling variance]. */
static int dense_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    int k = 0;
    size_t nk = (size_t)l->out_shape.c;
    b[k++] = (sh_dn_blob){.off = l->b_off, .count = l->b_count};
    b[k++] = (sh_dn_blob){.off = l->w_off, .count = l->w_count, .rows = nk};
    if (l->batch_normalize) {
        b[k++] = (sh_dn_blob){.off = l->s_off, .count = l->s_count};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off, .count = nk};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off + nk, .count = nk};
    }
    return k;
}

const sh_layer_ops sh_dense_ops = {
    .cfg_name = "connected",
    .short_name = "connected",
    .caps = SH_LAYER_SPLIT_COLUMN | SH_LAYER_SPLIT_ROW | SH_LAYER_GATHER | SH_LAYER_PACKED_WEIGHTS | SH_LAYER_FACTORS |
            SH_LAYER_ACTIVATION,
    .parse = dense_parse,
    .init = dense_init,
    .forward = dense_forward,
    .backward = dense_backward,
    .weights = dense_weights,
    .darknet_blobs = dense_darknet_blobs,
};
