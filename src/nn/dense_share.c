/* dense_share.c — [connected]'s tensor-parallel shares: column (K/T outputs, dX summed over the
 * ranks), row (I/T inputs, Y summed before bias), gather (hybrid: its outputs of a whole output,
 * summed); a share without batch norm steps dW in blocks while in cache (the update hook).
 * Not here: which layers are split (net_tensor.c, src/train/mp/tensor_plan.c), the products.
 * Proved by tests/train/test_tensor.c, test_hybrid.c and test_pipeline_tp.c. */
#include <math.h>
#include <stdint.h>

#include "base/err.h"
#include "nn/dense.h"
#include "nn/gemm_packed.h"

/* Rows (column split, gather share) or columns (row split) of the whole layer's draws: the
 * same values as one process. */
void sh_dense_share_init(sh_layer *l, float *params, sh_rng *rng)
{
    int gk0, gks, gld;
    sh_dense_cols(l, &gk0, &gks, &gld);
    size_t k = (size_t)gks, in = l->inputs;
    size_t whole_k = l->tp_role == SH_TP_COLUMN ? l->tp_whole : (size_t)gld;
    size_t whole_in = l->tp_role == SH_TP_ROW ? l->tp_whole : in;
    float scale = sqrtf(2.0f / (float)whole_in);
    size_t k0 = l->tp_role == SH_TP_COLUMN ? (size_t)l->tp_rank * k : (size_t)gk0;
    size_t i0 = l->tp_role == SH_TP_ROW ? (size_t)l->tp_rank * in : 0;
    for (size_t r = 0; r < whole_k; r++)
        for (size_t c = 0; c < whole_in; c++) {
            float v = scale * (2.0f * sh_rng_float(rng) - 1.0f);
            if (r >= k0 && r < k0 + k && c >= i0 && c < i0 + in) params[l->w_off + (r - k0) * in + (c - i0)] = v;
        }
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
}

/* Row split, after the sum over the ranks: bias and activation. */
static void finish_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)tid;
    int k = l->out_shape.c;
    const float *b = x->params + l->b_off;
    for (int n = n0; n < n1; n++) {
        float *row = l->out + (size_t)n * k;
        for (int j = 0; j < k; j++) row[j] += b[j];
        sh_act_forward(l->act, row, (size_t)k);
    }
}

void sh_dense_share_forward(sh_layer *l, sh_exec *x)
{
    size_t count = (size_t)x->nimg * l->out_shape.c;
    if (l->tp_role == SH_TP_ROW) { /* each rank's product covers its share of the inputs */
        if (x->sum_rc == SHOAL_OK) x->sum_rc = x->sum(x->sum_ctx, l->out, count);
        sh_exec_chunks(l, x, sh_dense_gemm_chunk(x), finish_images);
    }
    /* a gather share's columns are final: with the others' (zero here) the whole output */
    if (l->tp_role == SH_TP_GATHER && x->sum_rc == SHOAL_OK) x->sum_rc = x->sum(x->sum_ctx, l->out, count);
}

void sh_dense_share_backward(sh_layer *l, sh_exec *x)
{
    /* each rank's dX covers its share of the outputs */
    if ((l->tp_role == SH_TP_COLUMN || l->tp_role == SH_TP_GATHER) && l->in_delta[0] && x->sum_rc == SHOAL_OK)
        x->sum_rc = x->sum(x->sum_ctx, l->in_delta[0], (size_t)x->nimg * l->inputs);
}

/* ---- the fused update (x->update) ---- */

/* X packed at the start of the cache (sh_dense_gemm_size made room). */
static float *share_x(const sh_layer *l) { return (float *)(((uintptr_t)l->cache + 63) & ~(uintptr_t)63); }
static void pack_x_panels(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    int in = (int)l->inputs;
    sh_packed_pack(0, x->nimg, in, l->in[0], in, p0, p1, share_x(l));
}

/* Rows [k0, k1) of the share's dW, SH_DENSE_FUSE_ROWS at a time into this thread's scratch,
 * each block stepped at once; then those outputs' bias gradients (written, as unfused)
 * stepped too. */
static void update_rows(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    int c0, kc, k, in = (int)l->inputs, n = x->nimg;
    sh_dense_cols(l, &c0, &kc, &k);
    if (k1 <= k0) return;
    float *gw = x->work[tid];
    for (int r0 = k0; r0 < k1; r0 += SH_DENSE_FUSE_ROWS) {
        int nr = sh_dense_min(SH_DENSE_FUSE_ROWS, k1 - r0);
        sh_packed_gemm_tn(nr, 0, in, n, l->delta + c0 + r0, k, share_x(l), n, 0, gw, in);
        x->update(x->update_ctx, l->w_off + (size_t)r0 * in, gw, (size_t)nr * in);
    }
    sh_dense_gemm_bias(l, x, k0, k1); /* x->weights_add is 0 here */
    x->update(x->update_ctx, l->b_off + (size_t)k0, x->grad[0] + l->b_off + k0, (size_t)(k1 - k0));
}

void sh_dense_share_update(sh_layer *l, sh_exec *x)
{
    SH_ASSERT(!x->weights_add && sh_packed_count(x->nimg, (int)l->inputs) + SH_PACKED_NR <= l->cache_count);
    sh_exec_split(l, x, sh_packed_npanels((int)l->inputs), pack_x_panels);
    int k0, ks, ld;
    sh_dense_cols(l, &k0, &ks, &ld);
    sh_exec_split(l, x, ks, update_rows);
}
