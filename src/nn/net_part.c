/* net_part.c — a pipeline stage's part of a net beyond its passes: the constructor, deferred
 * weight gradients (zero-bubble's W), packed weights for micro-batch products.
 * Not here: where a net may be cut (net_cut.c), building (net.c), stages (src/train/mp/).
 * Proved by tests/train/test_pipeline.c and tests/nn/test_layer_dense.c (packed weights). */
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "nn/gemm_packed.h"
#include "nn/net_internal.h"

shoal_result sh_net_create_part(sh_cfg *cfg, int batch, uint64_t seed, int lo, int hi, sh_net **out)
{
    return sh_net_build(cfg, batch, 0, seed, lo, hi, 0, 1, NULL, out);
}

void sh_net_defer_weights(sh_net *n, int on) { n->exec.defer_weights = on; }

int sh_net_layer_defers(const sh_net *n, int i)
{
    return i >= n->lo && i < n->hi && sh_layer_defers_weights(&n->layers[i]);
}

/* The layer's hook reads its factors where backward leaves them: they are lent there for
 * the call, with nimg = rows. */
void sh_net_layer_weight_grads(sh_net *n, int i, const float *x, const float *dy, int rows, int add)
{
    sh_layer *l = &n->layers[i];
    SH_ASSERT(sh_net_layer_defers(n, i));
    const float *in0 = l->in[0];
    float *delta = l->delta;
    sh_net_fill_exec(n);
    n->exec.nimg = rows;
    n->exec.weights_add = add;
    l->in[0] = x;
    l->delta = (float *)dy; /* the hook only reads it */
    l->ops->weights(l, &n->exec);
    n->exec.weights_add = 0;
    l->in[0] = in0;
    l->delta = delta;
}

/* ---- packed weights ---- */

/* A whole [connected] layer of the part: its W (K, I) packed as W^T (I, K) for forward and as
 * W (K, I) for the input's gradient. */
static int packable(const sh_net *n, int i)
{
    const sh_layer *l = &n->layers[i];
    return i >= n->lo && i < n->hi && sh_layer_can(l, SH_LAYER_PACKED_WEIGHTS);
}

shoal_result sh_net_keep_packed(sh_net *n, size_t max_bytes)
{
    size_t total = 0;
    for (int i = 0; i < n->nlayers; i++) {
        if (!packable(n, i)) continue;
        const sh_layer *l = &n->layers[i];
        int k = l->out_shape.c, in = (int)l->inputs;
        size_t need = (sh_packed_count(in, k) + sh_packed_count(k, in)) * sizeof(float);
        if (total + need > max_bytes) break;
        total += need;
    }
    if (!total) return SHOAL_OK;
    SH_TRY(sh_alloc_aligned(total, (void **)&n->packed));
    float *at = n->packed;
    for (int i = 0; i < n->nlayers && at < n->packed + total / sizeof(float); i++) {
        if (!packable(n, i)) continue;
        sh_layer *l = &n->layers[i];
        int k = l->out_shape.c, in = (int)l->inputs;
        l->packed_fwd = at;
        at += sh_packed_count(in, k);
        l->packed_bwd = at;
        at += sh_packed_count(k, in);
    }
    sh_net_pack_weights(n, SH_PACK_FORWARD | SH_PACK_BACKWARD);
    return SHOAL_OK;
}

void sh_net_use_packed(sh_net *n, int which) { n->exec.unpacked = ~which & (SH_PACK_FORWARD | SH_PACK_BACKWARD); }

void sh_net_share_packed(sh_net *dst, const sh_net *src)
{
    for (int i = 0; i < dst->nlayers && i < src->nlayers; i++) {
        dst->layers[i].packed_fwd = src->layers[i].packed_fwd;
        dst->layers[i].packed_bwd = src->layers[i].packed_bwd;
    }
}

void sh_net_pack_weights(sh_net *n, int which)
{
    for (int i = 0; n->packed && i < n->nlayers; i++) {
        sh_layer *l = &n->layers[i];
        if (!l->packed_fwd) continue;
        int k = l->out_shape.c, in = (int)l->inputs;
        const float *w = n->params + l->w_off;
        if (which & SH_PACK_FORWARD)
            sh_packed_pack(1, in, k, w, in, 0, sh_packed_npanels(k), (float *)l->packed_fwd);
        if ((which & SH_PACK_BACKWARD) && l->in_delta[0]) /* the part's first may need none */
            sh_packed_pack(0, k, in, w, in, 0, sh_packed_npanels(in), (float *)l->packed_bwd);
    }
}

/* Rows [r0, r1) of W (K, I) into every panel of its packed copy for the input's gradient
 * (sh_packed_pack with trans_b = 0: panel p holds columns [16 p, 16 p + 16) of all K rows). */
static void pack_rows_backward(const float *w, int k, int in, int r0, int r1, float *packed)
{
    for (int p = 0; p < sh_packed_npanels(in); p++) {
        int j0 = p * SH_PACKED_NR, cols = in - j0 < SH_PACKED_NR ? in - j0 : SH_PACKED_NR;
        float *dst = packed + (size_t)p * k * SH_PACKED_NR;
        for (int r = r0; r < r1; r++) {
            memcpy(dst + (size_t)r * SH_PACKED_NR, w + (size_t)r * in + j0, (size_t)cols * sizeof(float));
            if (cols < SH_PACKED_NR) memset(dst + (size_t)r * SH_PACKED_NR + cols, 0, (SH_PACKED_NR - cols) * sizeof(float));
        }
    }
}

void sh_net_update_packed(sh_net *n, sh_optim *o, const float *grads, int which)
{
    float *params = n->params;
    size_t done = 0;
    for (int i = 0; i < n->nlayers; i++) {
        sh_layer *l = &n->layers[i];
        if (!n->packed || !l->packed_fwd) continue;
        int k = l->out_shape.c, in = (int)l->inputs;
        SH_ASSERT(l->w_off >= done && l->w_count == (size_t)k * in);
        if (l->w_off > done) sh_optim_apply(o, params, grads + done, done, l->w_off - done);
        const float *w = params + l->w_off;
        for (int r0 = 0; r0 < k; r0 += SH_PACKED_NR) { /* one forward panel: 16 rows of W */
            int r1 = k - r0 < SH_PACKED_NR ? k : r0 + SH_PACKED_NR;
            size_t lo = l->w_off + (size_t)r0 * in;
            sh_optim_apply(o, params, grads + lo, lo, (size_t)(r1 - r0) * in);
            if (which & SH_PACK_FORWARD)
                sh_packed_pack(1, in, k, w, in, r0 / SH_PACKED_NR, r0 / SH_PACKED_NR + 1, (float *)l->packed_fwd);
            if ((which & SH_PACK_BACKWARD) && l->in_delta[0]) pack_rows_backward(w, k, in, r0, r1, (float *)l->packed_bwd);
        }
        done = l->w_off + (size_t)k * in;
    }
    if (n->nparams > done) sh_optim_apply(o, params, grads + done, done, n->nparams - done);
}
