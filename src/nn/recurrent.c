/* recurrent.c — helpers the recurrent layers share: common keys, initialisation, bias
 * gradient sums, the time loop shared by the threads (by streams or by columns), the order of
 * a gated layer's passes forward and through time.
 * Not here: the layers' equations (layer_rnn.c, layer_gru.c, layer_lstm.c).
 * Proved by tests/nn/test_layer_rnn.c. */
#include "nn/recurrent.h"

#include "base/err.h"
#include "nn/gemm_packed.h"

double sh_rnn_split_min_macs = 2.0 * 1024 * 1024;
int sh_rnn_rows_min_streams = 8;

#define BN_EPS 1e-5f        /* layer_batchnorm.c's, Darknet's .00001 */
#define BN_MOMENTUM 0.01f   /* Darknet: rolling = .99 rolling + .01 batch */

shoal_result sh_rnn_parse_shortcut(sh_cfg_section *s)
{
    int shortcut = 0;
    SH_TRY(sh_cfg_int(s, "shortcut", 0, 0, 1, &shortcut));
    if (shortcut)
        return sh_cfg_fail_at(s, "shortcut", SHOAL_ERR_FORMAT, "shortcut=1 (Darknet adds each step's state "
                              "into the next one's) is not supported by shoal; remove it");
    return SHOAL_OK;
}

shoal_result sh_rnn_parse_common(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx,
                                 int allow_bn)
{
    int bn = 0;
    SH_TRY(sh_cfg_int(s, "batch_normalize", 0, 0, 1, &bn));
    if (bn && !allow_bn)
        return sh_cfg_fail_at(s, "batch_normalize", SHOAL_ERR_FORMAT,
                              "batch_normalize=1 inside [%s] is not supported (only [rnn] has "
                              "it); remove it (or set 0)", sh_cfg_section_name(s));
    l->batch_normalize = bn;
    l->steps = ctx->time_steps > 0 ? ctx->time_steps : 1;
    if (ctx->batch % l->steps)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "%d rows are not whole sequences of time_steps=%d", ctx->batch,
                              l->steps);
    return SHOAL_OK;
}

void sh_rnn_uniform(float *p, size_t count, float scale, sh_rng *rng)
{
    for (size_t i = 0; i < count; i++) p[i] = scale * (2.0f * sh_rng_float(rng) - 1.0f);
}

/* Rows [r0, r1) of dL/dx = dG Wx: the gates' gradients dG (rows, ngates*H) at the start of
 * l->cache, Wx (ngates*H, I) packed. */
static void gated_input_delta(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    int g = l->ngates * l->hidden, in = (int)l->inputs;
    if (r1 <= r0) return;
    sh_packed_gemm(r1 - r0, 0, in, g, l->cache + (size_t)r0 * g, g, sh_rnn_packed(l, in, g),
                   l->accum[0], l->in_delta[0] + (size_t)r0 * in, in);
}

/* The column split: the current step function over its share of the columns, all streams. */
static void loop_columns(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    const sh_rnn_loop *lp = l->rnn_loop;
    sh_rnn_part p = {lp->t, 0, sh_rnn_streams(l, x), k0, k1};
    lp->step[lp->which](l, x, &p);
}

/* The stream split: streams [b0, b1) through every step, all columns. */
static void loop_streams(sh_layer *l, sh_exec *x, int tid, int b0, int b1)
{
    (void)tid;
    const sh_rnn_loop *lp = l->rnn_loop;
    int dir = lp->t_last >= lp->t_first ? 1 : -1;
    if (b1 <= b0) return;
    for (int t = lp->t_first;; t += dir) {
        for (int i = 0; i < 2; i++) {
            if (!lp->step[i] || (i == 1 && t == 0 && lp->skip1_at_0)) continue;
            sh_rnn_part p = {t, b0, b1, 0, lp->count[i]};
            lp->step[i](l, x, &p);
        }
        if (t == lp->t_last) break;
    }
}

void sh_rnn_run_loop(sh_layer *l, sh_exec *x, sh_rnn_loop *lp)
{
    int b = sh_rnn_streams(l, x), dir = lp->t_last >= lp->t_first ? 1 : -1;
    double pass_macs = (lp->macs[0] + lp->macs[1]) * (double)l->steps;
    l->rnn_loop = lp;
    if (x->nthreads > 1 && !l->batch_normalize &&
        b >= (long)sh_rnn_rows_min_streams * x->nthreads && pass_macs >= sh_rnn_split_min_macs)
        sh_exec_split(l, x, b, loop_streams);
    else
        for (int t = lp->t_first;; t += dir) {
            lp->t = t;
            for (int i = 0; i < 2; i++) {
                if (!lp->step[i] || (i == 1 && t == 0 && lp->skip1_at_0)) continue;
                lp->which = i;
                if (x->nthreads == 1 || lp->macs[i] < sh_rnn_split_min_macs)
                    loop_columns(l, x, 0, 0, lp->count[i]);
                else
                    sh_exec_split(l, x, lp->count[i], loop_columns);
            }
            if (t == lp->t_last) break;
        }
    l->rnn_loop = NULL; /* lp is the caller's, gone after the pass */
}

void sh_rnn_gated_forward(sh_layer *l, sh_exec *x, const sh_rnn_gated *g)
{
    int h = l->hidden, b = sh_rnn_streams(l, x), ng = l->ngates * h;
    double macs = (double)b * h * ng; /* one step's product */
    const float *wx = x->params + l->w_off, *wh = wx + (size_t)ng * l->inputs;
    if (g->input_rows) { /* else the steps do their own input part */
        if (!l->input_onehot) sh_rnn_pack(l, wx, (int)l->inputs, ng, 1);
        sh_exec_chunks(l, x, sh_rnn_chunk_rows(x), g->input_rows);
    }
    sh_rnn_pack(l, wh, h, ng, 1);
    int nblk = sh_rnn_nblocks(h);
    sh_rnn_loop lp = {{g->step_forward, NULL}, {nblk, 0}, {macs, 0}, 0, l->steps - 1, 0, 0, 0};
    sh_rnn_run_loop(l, x, &lp);
}

void sh_rnn_gated_backward(sh_layer *l, sh_exec *x, const sh_rnn_gated *g)
{
    int h = l->hidden, b = sh_rnn_streams(l, x), ng = l->ngates * h;
    double macs = (double)b * h * ng; /* one step's product */
    int nblk = sh_rnn_nblocks(h);
    const float *wx = x->params + l->w_off, *wh = wx + (size_t)ng * l->inputs;
    sh_rnn_pack(l, wh, h, ng, 0);
    sh_rnn_loop lp = {{g->step_backward, g->step_carry}, {nblk, nblk}, {macs, macs},
                      l->steps - 1, 0, 1, 0, 0};
    sh_rnn_run_loop(l, x, &lp);
    int hp = sh_packed_npanels(h), ip = sh_packed_npanels((int)l->inputs);
    sh_exec_split(l, x, hp > ip ? hp : ip, g->pack_grads);
    sh_exec_split(l, x, ng, g->param_grads);
    if (!l->in_delta[0]) return;
    sh_rnn_pack(l, wx, (int)l->inputs, ng, 0);
    sh_exec_chunks(l, x, sh_rnn_chunk_rows(x), gated_input_delta);
}

void sh_rnn_gated_pack(const sh_layer *l, const sh_exec *x, const float *h0, int p0, int p1,
                       float *hpk, float *xpk)
{
    int h = l->hidden, in = (int)l->inputs, b = sh_rnn_streams(l, x), rows = x->nimg;
    int hp = sh_packed_npanels(h), ip = sh_packed_npanels(in);
    int e = p1 < hp ? p1 : hp;
    if (p0 < e) {
        sh_packed_pack_rows(b + rows, h, 0, b, h0, h, p0, e, hpk);
        sh_packed_pack_rows(b + rows, h, b, b + rows, l->out, h, p0, e, hpk);
    }
    e = p1 < ip ? p1 : ip;
    if (!l->input_onehot && p0 < e)
        sh_packed_pack_rows(rows, in, 0, rows, l->in[0], in, p0, e, xpk);
}

void sh_rnn_gated_wgrads(const sh_layer *l, const sh_exec *x, int k0, int k1, const float *dgx,
                         const float *dgh, const float *hpk, const float *xpk, float *gwx,
                         float *gwh)
{
    int h = l->hidden, in = (int)l->inputs, g = l->ngates * h, rows = x->nimg;
    int b = sh_rnn_streams(l, x), nk = k1 - k0;
    if (nk <= 0) return;
    if (!l->input_onehot)
        sh_packed_gemm_tn(nk, 0, in, rows, dgx + k0, g, xpk, rows, 0, gwx + (size_t)k0 * in, in);
    sh_packed_gemm_tn(nk, 0, h, rows, dgh + k0, g, hpk, b + rows, 0, gwh + (size_t)k0 * h, h);
}

void sh_rnn_colsum(const float *g, int rows, int ld, int k0, int k1, float *out)
{
    int nk = k1 - k0;
    for (int k = 0; k < nk; k++) out[k] = 0.0f;
    for (int r = 0; r < rows; r++) {
        const float *row = g + (size_t)r * ld + k0;
        for (int k = 0; k < nk; k++) out[k] += row[k];
    }
}

int sh_rnn_onehot(const float *x, int rows, int in, int32_t *idx)
{
    for (int r = 0; r < rows; r++) {
        const float *row = x + (size_t)r * in;
        /* counts without branches, so the scan vectorises (it reads every input of a batch) */
        int ones = 0, others = 0, hot = 0;
        for (int i = 0; i < in; i++) {
            int one = row[i] == 1.0f;
            ones += one;
            others += row[i] != 0.0f && !one;
            hot += one ? i : 0;
        }
        if (ones != 1 || others) return 0;
        idx[r] = hot;
    }
    return 1;
}

void sh_rnn_transpose(const float *w, int g, int in, float *wt)
{
    enum { TILE = 16 }; /* a 16 x 16 tile: reads and writes stay within 16 cache lines each */
    for (int k0 = 0; k0 < g; k0 += TILE) {
        int k1 = k0 + TILE < g ? k0 + TILE : g;
        for (int c0 = 0; c0 < in; c0 += TILE) {
            int c1 = c0 + TILE < in ? c0 + TILE : in;
            for (int c = c0; c < c1; c++)
                for (int k = k0; k < k1; k++) wt[(size_t)c * g + k] = w[(size_t)k * in + c];
        }
    }
}

void sh_rnn_onehot_grad(const float *dg, int rows, int g, const int32_t *idx, int in, int k0,
                        int k1, float *acc, float *gw)
{
    int nk = k1 - k0;
    if (nk <= 0) return;
    for (int c = 0; c < in; c++) memset(acc + (size_t)c * g + k0, 0, (size_t)nk * sizeof(float));
    for (int r = 0; r < rows; r++) {
        float *dst = acc + (size_t)idx[r] * g + k0;
        const float *src = dg + (size_t)r * g + k0;
        for (int k = 0; k < nk; k++) dst[k] += src[k];
    }
    for (int k = k0; k < k1; k++)
        for (int c = 0; c < in; c++) gw[(size_t)k * in + c] = acc[(size_t)c * g + k];
}

void sh_rnn_bn_forward(float *v, int ld, int b, int n, const float *gamma, const float *beta,
                       float *rmean, float *rvar, int training, float *xh, int ldxh,
                       float *invstd)
{
    for (int u = 0; u < n; u++) {
        float mu, is;
        if (training) {
            double sum = 0, sq = 0;
            for (int r = 0; r < b; r++) sum += v[(size_t)r * ld + u];
            double dmu = sum / b;
            for (int r = 0; r < b; r++) {
                double d = v[(size_t)r * ld + u] - dmu;
                sq += d * d;
            }
            double var = sq / b, unbiased = b > 1 ? sq / (b - 1) : var;
            mu = (float)dmu;
            is = (float)(1.0 / sqrt(var + BN_EPS));
            invstd[u] = is;
            rmean[u] = (1.0f - BN_MOMENTUM) * rmean[u] + BN_MOMENTUM * mu;
            rvar[u] = (1.0f - BN_MOMENTUM) * rvar[u] + BN_MOMENTUM * (float)unbiased;
        } else {
            mu = rmean[u];
            is = 1.0f / sqrtf(rvar[u] + BN_EPS);
        }
        for (int r = 0; r < b; r++) {
            float *p = v + (size_t)r * ld + u, h = (*p - mu) * is;
            if (training) xh[(size_t)r * ldxh + u] = h;
            *p = gamma[u] * h + beta[u];
        }
    }
}

void sh_rnn_bn_backward(float *d, int ld, int b, int n, const float *gamma, const float *xh,
                        int ldxh, const float *invstd, float *ggamma, float *gbeta)
{
    for (int u = 0; u < n; u++) {
        double sum_d = 0, sum_dx = 0;
        for (int r = 0; r < b; r++) {
            float dv = d[(size_t)r * ld + u];
            sum_d += dv;
            sum_dx += (double)dv * xh[(size_t)r * ldxh + u];
        }
        gbeta[u] += (float)sum_d;
        ggamma[u] += (float)sum_dx;
        /* dx = gamma invstd (dy - mean(dy) - x_hat mean(dy x_hat)) */
        float k = gamma[u] * invstd[u], md = (float)(sum_d / b), mdx = (float)(sum_dx / b);
        for (int r = 0; r < b; r++) {
            float *p = d + (size_t)r * ld + u;
            *p = k * (*p - md - xh[(size_t)r * ldxh + u] * mdx);
        }
    }
}
