/* layer_rbm.c — [rbm]: a restricted Boltzmann machine of output= hidden units over the layer
 * before (visible=binary|gaussian, cd=K, persistent=1, sample_visible=1, its own learning rate,
 * momentum, decay and sparsity): a [connected] logistic layer in a net, CD-k in the net that
 * pretrains it.
 * Not here: choosing which RBM trains and what runs below it (net_unlabelled.c), the stack
 * (src/train/pretrain.c).
 * Proved by tests/nn/test_layer_rbm.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "nn/gemm.h"
#include "nn/gemm_rows.h"
#include "nn/rbm.h"
#include "nn/rbm_kernels.h"

/* In a net forward and backward are [connected]'s; the slice also holds the visible biases c,
 * after W and b: they take no gradient there. In the net that pretrains it (l->pretraining)
 * forward keeps a = v W^T + b per row and the CD-k chain's rows in the layer's keep buffer, and
 * backward is CD-k. Per row kept: a (K), the chain's hidden sample (K), h_k (K), v_k (I). The
 * persistent chain is the layer's state (batch, K): carried from batch to batch and saved in
 * checkpoints. A training pass's few-row products run on gemm_rows.c's kernels, W read as it is
 * stored, and so does CD's weight gradient, one product over 2N rows, [h_k | -h_0]^T [v_k ; v_0]
 * / N, its operands in the layer's cache. The element-wise loops: rbm_kernels.c.
 * Weights start normal(0, 0.01), biases 0 (Hinton's guide; scikit-learn's BernoulliRBM). */

static shoal_result rbm_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    SH_TRY(sh_dense_ops.parse(l, s, ctx)); /* output, activation, batch_normalize */
    if (l->batch_normalize)
        return sh_cfg_fail_at(s, "batch_normalize", SHOAL_ERR_FORMAT, "an [rbm] has no batch "
                              "normalization; remove batch_normalize=1");
    if (l->act != SH_ACT_LOGISTIC)
        return sh_cfg_fail_at(s, "activation", SHOAL_ERR_FORMAT, "activation=%s: an [rbm]'s hidden units "
                              "are logistic; remove activation=", sh_act_name(l->act));
    sh_rbm_opts *o = &l->rbm;
    const char *visible = NULL;
    SH_TRY(sh_cfg_str(s, "visible", "binary", &visible));
    if (!strcmp(visible, "gaussian")) o->gaussian = 1;
    else if (strcmp(visible, "binary") != 0)
        return sh_cfg_fail_at(s, "visible", SHOAL_ERR_FORMAT, "visible=%s: use binary (Bernoulli units) or "
                              "gaussian (real values of unit variance)", visible);
    SH_TRY(sh_cfg_int(s, "cd", 1, 1, 1000, &o->cd_k));
    SH_TRY(sh_cfg_int(s, "persistent", 0, 0, 1, &o->persistent));
    SH_TRY(sh_cfg_int(s, "sample_visible", 0, 0, 1, &o->sample_visible));
    SH_TRY(sh_cfg_float(s, "learning_rate", o->gaussian ? 0.01f : 0.1f, 0.0f, 1e3f, &o->learning_rate));
    SH_TRY(sh_cfg_float(s, "momentum", 0.5f, 0.0f, 0.999999f, &o->momentum));
    SH_TRY(sh_cfg_float(s, "decay", 0.0002f, 0.0f, 1e3f, &o->decay));
    SH_TRY(sh_cfg_float(s, "sparsity", 0.0f, 0.0f, 0.999999f, &o->sparsity));
    SH_TRY(sh_cfg_float(s, "sparsity_cost", 0.1f, 0.0f, 1e6f, &o->sparsity_cost));
    size_t k = (size_t)l->out_shape.c, in = l->inputs;
    l->param_count += in;            /* c, after W and b */
    l->keep_count = 3 * k + in;      /* a, the hidden sample, h_k, v_k */
    l->keep_fixed = 2;               /* the pass's chain seed (64 bits) */
    /* CD's gradient as one product: [h_k | -h_0]^T (K, 2N) by [v_k ; v_0] (2N, I) */
    int b = ctx->batch;
    size_t stacked = 2 * (size_t)b * (k + in) + 32;
    if (l->cache_count < stacked) l->cache_count = stacked;
    /* a thread's scratch: the batch's mean v (sparsity), a flip's moves (pseudo-likelihood) */
    size_t ws = (k > in ? k : in) + 32;
    if (l->ws_count < ws) l->ws_count = ws;
    l->state_count = o->persistent ? (size_t)ctx->batch * k : 0;
    return SHOAL_OK;
}

size_t sh_rbm_visible_off(const sh_layer *l) { return l->b_off + l->b_count; }

static void rbm_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    (void)stats;
    for (size_t i = 0; i < l->w_count; i++) params[l->w_off + i] = 0.01f * sh_rng_normal(rng);
    memset(params + l->b_off, 0, (l->b_count + l->inputs) * sizeof(float));
}

static float sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

/* In float: an estimator's terms, summed in double by the callers. */
static double softplus(float a) { return a > 0 ? a + log1pf(expf(-a)) : log1pf(expf(a)); }

/* out (rows, K) with row stride ld = v W^T + b */
static void hidden_input(const sh_layer *l, const float *params, const float *v, size_t ldv, int rows,
                         float *out, size_t ld)
{
    int k = l->out_shape.c, in = (int)l->inputs;
    const float *b = params + l->b_off;
    sh_gemm(0, 1, rows, k, in, 1.0f, v, (int)ldv, params + l->w_off, in, 0.0f, out, (int)ld);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < k; j++) out[(size_t)r * ld + j] += b[j];
}

/* out (rows, I) with row stride ld = the visible units' means given h */
static void visible_mean(const sh_layer *l, const float *params, const float *h, size_t ldh, int rows,
                         float *out, size_t ld)
{
    int k = l->out_shape.c, in = (int)l->inputs;
    const float *c = params + sh_rbm_visible_off(l);
    sh_gemm(0, 0, rows, in, k, 1.0f, h, (int)ldh, params + l->w_off, in, 0.0f, out, (int)ld);
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * ld;
        if (l->rbm.gaussian)
            for (int i = 0; i < in; i++) o[i] += c[i];
        else
            for (int i = 0; i < in; i++) o[i] = sigmoid(o[i] + c[i]);
    }
}

void sh_rbm_hidden_mean(const sh_layer *l, const float *params, const float *v, int rows, float *h)
{
    size_t k = (size_t)l->out_shape.c;
    hidden_input(l, params, v, l->inputs, rows, h, k);
    for (size_t i = 0; i < (size_t)rows * k; i++) h[i] = sigmoid(h[i]);
}

void sh_rbm_visible_mean(const sh_layer *l, const float *params, const float *h, int rows, float *v)
{
    visible_mean(l, params, h, (size_t)l->out_shape.c, rows, v, l->inputs);
}

/* F(v) from v and its hidden input a (K). */
static double free_energy_row(const sh_layer *l, const float *params, const float *v, const float *a)
{
    const float *c = params + sh_rbm_visible_off(l);
    double f = 0;
    for (size_t i = 0; i < l->inputs; i++)
        f += l->rbm.gaussian ? 0.5 * ((double)v[i] - c[i]) * ((double)v[i] - c[i]) : -(double)v[i] * c[i];
    for (int j = 0; j < l->out_shape.c; j++) f -= softplus(a[j]);
    return f;
}

void sh_rbm_free_energy(const sh_layer *l, const float *params, const float *v, int rows, double *fe)
{
    size_t k = (size_t)l->out_shape.c;
    float *a = malloc(k * sizeof *a);
    for (int r = 0; a && r < rows; r++) {
        const float *vr = v + (size_t)r * l->inputs;
        hidden_input(l, params, vr, l->inputs, 1, a, k);
        fe[r] = free_energy_row(l, params, vr, a);
    }
    for (int r = 0; !a && r < rows; r++) fe[r] = NAN;
    free(a);
}

int sh_rbm_flip_unit(const float *v, size_t count)
{
    enum { LANES = 8 }; /* FNV-1a over the values' bits, 8 interleaved chains, then folded */
    const uint64_t basis = 14695981039346656037ull, prime = 1099511628211ull;
    uint64_t lane[LANES], h = basis;
    for (int q = 0; q < LANES; q++) lane[q] = basis + (uint64_t)q;
    size_t i = 0;
    for (; i + LANES <= count; i += LANES)
        for (int q = 0; q < LANES; q++) {
            uint32_t bits;
            memcpy(&bits, &v[i + q], sizeof bits);
            lane[q] = (lane[q] ^ bits) * prime;
        }
    for (; i < count; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        h = (h ^ bits) * prime;
    }
    for (int q = 0; q < LANES; q++) h = (h ^ lane[q]) * prime;
    return (int)((h ^ (h >> 29)) % count);
}

/* I log sigmoid(F(v') - F(v)) from a = v W^T + b: flipping unit i moves a by (1 - 2 v_i) W[:, i]
 * and the visible term by (1 - 2 v_i) c_i, so v' costs O(K). d: room for K floats. */
static double pseudo_likelihood_row(const sh_layer *l, const float *params, const float *v, const float *a, int i,
                                    float *d)
{
    size_t in = l->inputs, k = (size_t)l->out_shape.c;
    const float *w = params + l->w_off, *c = params + sh_rbm_visible_off(l);
    float flip = 1.0f - 2.0f * v[i];
    for (size_t j = 0; j < k; j++) d[j] = flip * w[j * in + i];
    /* F(v') - F(v): Bernoulli's visible term, then the hidden units' */
    double diff = -(double)flip * c[i] - sh_rbm_kernels_softplus_diff(a, d, k);
    return -(double)in * softplus((float)-diff);
}

void sh_rbm_pseudo_likelihood(const sh_layer *l, const float *params, const float *v, int rows,
                              const int *flip, double *pl)
{
    size_t k = (size_t)l->out_shape.c;
    float *a = malloc(2 * k * sizeof *a); /* a, then the flip's moves */
    for (int r = 0; !a && r < rows; r++) pl[r] = NAN;
    for (int r = 0; a && r < rows; r++) {
        const float *vr = v + (size_t)r * l->inputs;
        hidden_input(l, params, vr, l->inputs, 1, a, k);
        pl[r] = pseudo_likelihood_row(l, params, vr, a, flip ? flip[r] : sh_rbm_flip_unit(vr, l->inputs), a + k);
    }
    free(a);
}

/* ---- the layer in a net ---- */

/* The cache: ht (K, 2N) = [h_k | -h_0]^T, then [v_k ; v_0] (2N, I) (stack_rows). */
static float *align64(float *p) { return (float *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }
static float *stacked_h(const sh_layer *l) { return align64(l->cache); }
static float *stacked_v(const sh_layer *l, const sh_exec *x)
{
    return align64(stacked_h(l) + 2 * (size_t)x->batch * (size_t)l->out_shape.c);
}

/* The few-row products of a training pass, W read as it is stored with no copy
 * (gemm_rows.c): a (rows, K) = v W^T and the visible means from h W. */
static void hidden_input_rows(const sh_layer *l, const sh_exec *x, const float *v, size_t ldv, int rows,
                              float *out, size_t ld)
{
    int k = l->out_shape.c, in = (int)l->inputs;
    const float *b = x->params + l->b_off;
    sh_rows_gemm_nt(rows, k, in, v, (int)ldv, x->params + l->w_off, in, out, (int)ld);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < k; j++) out[(size_t)r * ld + j] += b[j];
}

static void visible_mean_rows(const sh_layer *l, const sh_exec *x, const float *h, size_t ldh, int rows, float *out,
                              size_t ld)
{
    int k = l->out_shape.c, in = (int)l->inputs;
    const float *c = x->params + sh_rbm_visible_off(l);
    sh_rows_gemm_nn(rows, in, k, h, (int)ldh, x->params + l->w_off, in, out, (int)ld);
    for (int r = 0; r < rows; r++) {
        float *o = out + (size_t)r * ld;
        for (int i = 0; i < in; i++) o[i] += c[i];
        if (!l->rbm.gaussian) sh_rbm_kernels_sigmoid(o, (size_t)in);
    }
}

static void pretrain_forward_rows(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    size_t k = (size_t)l->out_shape.c, kc = l->keep_count;
    float *a = l->keep + (size_t)n0 * kc;
    hidden_input_rows(l, x, l->in[0] + (size_t)n0 * l->inputs, l->inputs, n1 - n0, a, kc);
    for (int n = n0; n < n1; n++) {
        memcpy(l->out + (size_t)n * k, l->keep + (size_t)n * kc, k * sizeof(float));
        sh_rbm_kernels_sigmoid(l->out + (size_t)n * k, k);
    }
}

static void rbm_forward(sh_layer *l, sh_exec *x)
{
    if (!l->pretraining) {
        sh_dense_ops.forward(l, x); /* a sigmoid [connected] layer */
        return;
    }
    sh_exec_images(l, x, pretrain_forward_rows);
}

static void rbm_backward(sh_layer *l, sh_exec *x)
{
    sh_dense_ops.backward(l, x);
    memset(x->grad[0] + sh_rbm_visible_off(l), 0, l->inputs * sizeof(float)); /* c is not in the net */
}

/* ---- pretraining ---- */

float sh_rbm_loss(sh_layer *l, sh_exec *x)
{
    size_t k = (size_t)l->out_shape.c, kc = l->keep_count, in = l->inputs;
    double sum = 0;
    for (int n = 0; n < x->nimg; n++) {
        const float *v = l->in[0] + (size_t)n * in, *a = l->keep + (size_t)n * kc;
        if (!l->rbm.gaussian) {
            sum -= pseudo_likelihood_row(l, x->params, v, a, sh_rbm_flip_unit(v, in), x->work[0]);
            continue;
        }
        float *vm = l->keep + (size_t)n * kc + 3 * k; /* v_k's room: backward overwrites it */
        visible_mean(l, x->params, l->out + (size_t)n * k, k, 1, vm, in);
        for (size_t i = 0; i < in; i++) sum += ((double)v[i] - vm[i]) * ((double)v[i] - vm[i]);
    }
    return x->nimg ? (float)(sum / x->nimg) : 0.0f;
}

static uint64_t row_seed(uint64_t base, int row) { return base ^ (0x9e3779b97f4a7c15ull * (uint64_t)(row + 1)); }

/* The pass's seed, after the kept rows (keep_fixed). */
static float *chain_seed(const sh_layer *l, const sh_exec *x)
{
    return l->keep + l->keep_count * (size_t)x->batch;
}

/* The chain of rows [n0, n1): each row's own stream from the pass's seed. */
static void cd_chain_rows(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_rbm_opts *o = &l->rbm;
    size_t k = (size_t)l->out_shape.c, kc = l->keep_count, in = l->inputs;
    int rows = n1 - n0;
    float *hs = l->keep + (size_t)n0 * kc + k, *hk = hs + k, *vk = hs + 2 * k;
    uint64_t base;
    memcpy(&base, chain_seed(l, x), sizeof base);
    for (int n = n0; n < n1; n++) { /* the chain starts from h_0's sample, or the persistent one */
        float *h = hs + (size_t)(n - n0) * kc;
        if (o->persistent) {
            memcpy(h, l->state + (size_t)n * k, k * sizeof *h);
            continue;
        }
        memcpy(h, l->out + (size_t)n * k, k * sizeof *h);
        sh_rbm_kernels_sample(h, k, row_seed(base, n));
    }
    for (int step = 1; step <= o->cd_k; step++) {
        visible_mean_rows(l, x, hs, kc, rows, vk, kc);
        for (int n = n0; n < n1 && o->sample_visible; n++) {
            uint64_t seed = row_seed(base, n) ^ (uint64_t)step << 40 ^ 0x5151;
            float *v = vk + (size_t)(n - n0) * kc;
            if (!o->gaussian) {
                sh_rbm_kernels_sample(v, in, seed);
                continue;
            }
            sh_rng r;
            sh_rng_seed(&r, seed);
            for (size_t i = 0; i < in; i++) v[i] += sh_rng_normal(&r);
        }
        hidden_input_rows(l, x, vk, kc, rows, hk, kc);
        for (int n = n0; n < n1; n++) {
            float *h = hk + (size_t)(n - n0) * kc;
            sh_rbm_kernels_sigmoid(h, k);
            if (step == o->cd_k && !o->persistent) continue;
            float *next = step < o->cd_k ? hs + (size_t)(n - n0) * kc : l->state + (size_t)n * k;
            memcpy(next, h, k * sizeof *h);
            /* the next step's, or the persistent chain's */
            sh_rbm_kernels_sample(next, k, row_seed(base, n) ^ (uint64_t)step << 40 ^ 0xa5a5);
        }
    }
}

static void stack_rows(sh_layer *l, sh_exec *x)
{
    int n = x->nimg, k = l->out_shape.c;
    size_t in = l->inputs, kc = l->keep_count;
    float *ht = stacked_h(l), *vs = stacked_v(l, x), inv = 1.0f / (float)n; /* the mean over rows */
    for (int r = 0; r < n; r++) {
        const float *hk = l->keep + (size_t)r * kc + 2 * (size_t)k, *h0 = l->out + (size_t)r * k;
        for (int j = 0; j < k; j++) {
            ht[(size_t)j * 2 * n + r] = hk[j] * inv;
            ht[(size_t)j * 2 * n + n + r] = -h0[j] * inv;
        }
    }
    /* [v_k ; v_0] (2N, I): v_k's rows (kc apart), then v_0's */
    for (int r = 0; r < n; r++) memcpy(vs + (size_t)r * in, l->keep + (size_t)r * kc + 3 * (size_t)k, in * sizeof *vs);
    memcpy(vs + (size_t)n * in, l->in[0], (size_t)n * in * sizeof *vs);
}

/* dW rows [k0, k1) = (h_k^T v_k - h_0^T v_0) / N (+ sparsity); b and c's gradients with them. */
static void cd_grad_rows(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    const sh_rbm_opts *o = &l->rbm;
    int n = x->nimg, in = (int)l->inputs, k = l->out_shape.c, kc = (int)l->keep_count;
    if (k1 <= k0) return;
    float *gw = x->grad[0] + l->w_off + (size_t)k0 * in, *gb = x->grad[0] + l->b_off;
    const float *vk = l->keep + 3 * (size_t)k;
    sh_rows_gemm_nn(k1 - k0, in, 2 * n, stacked_h(l) + (size_t)k0 * 2 * n, 2 * n, stacked_v(l, x), in, gw, in);
    float *mv = x->work[tid]; /* the batch's mean v, for the sparsity term */
    for (int i = 0; o->sparsity > 0.0f && i < in; i++) {
        double m = 0;
        for (int r = 0; r < n; r++) m += l->in[0][(size_t)r * in + i];
        mv[i] = (float)(m / n);
    }
    for (int j = k0; j < k1; j++) {
        double d = 0, q = 0;
        for (int r = 0; r < n; r++) {
            d += (double)l->keep[(size_t)r * kc + 2 * (size_t)k + j] - l->out[(size_t)r * k + j];
            q += l->out[(size_t)r * k + j];
        }
        gb[j] = (float)(d / n);
        if (o->sparsity <= 0.0f) continue;
        /* the cross-entropy between the target p and the batch's mean activation q: its
         * derivative by unit j's input is q - p (Hinton's guide, 11.1), on b and on W by v */
        float s = o->sparsity_cost * (float)(q / n - o->sparsity);
        gb[j] += s;
        float *g = gw + (size_t)(j - k0) * in;
        for (int i = 0; i < in; i++) g[i] += s * mv[i];
    }
    if (k0 != 0) return; /* one thread takes c */
    float *gc = x->grad[0] + sh_rbm_visible_off(l);
    for (int i = 0; i < in; i++) {
        double d = 0;
        for (int r = 0; r < n; r++) d += (double)vk[(size_t)r * kc + i] - l->in[0][(size_t)r * in + i];
        gc[i] = (float)(d / n);
    }
}

void sh_rbm_cd(sh_layer *l, sh_exec *x)
{
    uint64_t base = sh_rng_u64(x->rng);
    memcpy(chain_seed(l, x), &base, sizeof base);
    sh_exec_images(l, x, cd_chain_rows);
    stack_rows(l, x);
    sh_exec_split(l, x, l->out_shape.c, cd_grad_rows);
}

/* [rbm] is not one of Darknet's sections: no .weights layout. */
const sh_layer_ops sh_rbm_ops = {
    .cfg_name = "rbm",
    .short_name = "rbm",
    .parse = rbm_parse,
    .init = rbm_init,
    .forward = rbm_forward,
    .backward = rbm_backward,
};
