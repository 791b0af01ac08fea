/* layer_gru.c — [gru]: output (H, default 1), form=pytorch (the default; form=darknet hands
 * the layer to layer_gru_darknet.c): gated recurrent units as PyTorch's nn.GRU, and the two
 * forms' shared input part (gru.h: sh_gru_begin, sh_gru_input_part).
 * Not here: the layout helpers and fast σ/tanh (recurrent.h), the order of the passes forward
 * and through time (recurrent.c: sh_rnn_gated_*).
 * Proved by tests/nn/test_layer_rnn.c (finite differences; PyTorch's nn.GRU when present). */
#include "base/err.h"
#include "base/hot.h"
#include "nn/gru.h"

/* Over the T time steps of each batch, h of every stream carried to the next batch, gradients
 * through time truncated at the batch's first step:
 *   r = σ(Wxr x + bxr + Whr h + bhr)    z = σ(Wxz x + bxz + Whz h + bhz)
 *   n = tanh(Wxn x + bxn + r (Whn h + bhn))      h' = (1 - z) n + z h
 * Darknet's gru_layer.c has the same weights but multiplies r into h before Whn and uses σ for
 * n; applying r after the product, as PyTorch and cuDNN do, makes the three recurrent products
 * of a step one (B, H) x (H, 3H) product.
 * Weights: Wx (3H, I), Wh (3H, H), bx (3H), bh (3H); gate rows in blocks of 16 units
 * (recurrent.h: sh_rnn_gate_col, gates r, z, n). Initialised uniform(±1/sqrt(H)) as PyTorch. */

#define NG 3 /* gates r, z, n */

static shoal_result gru_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    const char *form = "pytorch";
    SH_TRY(sh_cfg_str(s, "form", "pytorch", &form));
    if (strcmp(form, "darknet") == 0) { /* Darknet's equations: another layer */
        l->ops = &sh_gru_darknet_ops;
        l->caps = sh_gru_darknet_ops.caps;
        return sh_gru_darknet_ops.parse(l, s, ctx);
    }
    if (strcmp(form, "pytorch") != 0)
        return sh_cfg_fail_at(s, "form", SHOAL_ERR_FORMAT, "form=%s is not a GRU form; use "
                              "form=pytorch (the default: PyTorch's nn.GRU) or form=darknet "
                              "(Darknet's gru_layer.c, which its .weights files need)", form);
    if (sh_cfg_has(s, "tanh"))
        return sh_cfg_fail_at(s, "tanh", SHOAL_ERR_FORMAT, "tanh= picks the candidate's "
                              "activation of Darknet's GRU; add form=darknet to use it "
                              "(PyTorch's form always uses tanh)");
    int h = 1;
    SH_TRY(sh_cfg_int(s, "output", 1, 1, 1 << 16, &h));
    SH_TRY(sh_rnn_parse_common(l, s, ctx, 0));
    size_t in = l->inputs, rows = (size_t)ctx->batch, streams = rows / (size_t)l->steps;
    size_t g = (size_t)NG * (size_t)h;
    l->hidden = h;
    l->ngates = NG;
    l->out_shape = (sh_shape){h, 1, 1};
    l->w_off = 0;
    l->w_count = g * in + g * (size_t)h;
    l->b_off = l->w_count;
    l->b_count = 2 * g;
    l->param_count = l->w_count + l->b_count;
    l->keep_count = g + (size_t)h;              /* per row: r, z, n, then Whn h + bhn */
    l->keep_fixed = streams * (size_t)h;        /* h0 of this batch */
    l->cache_count = 2 * rows * g + streams * (size_t)h; /* input gates, state gates, dh */
    l->cache_count += g * in + rows;             /* one-hot inputs: Wx transposed, columns */
    l->cache_count += sh_rnn_gated_pack_count((int)rows, (int)streams, h, (int)in);
    size_t pk_h = sh_rnn_packed_count(h, (int)g), pk_x = sh_rnn_packed_count((int)in, (int)g);
    l->cache_count += pk_h > pk_x ? pk_h : pk_x; /* Wh or Wx packed */
    l->state_count = streams * (size_t)h;
    l->flops = (double)g * (double)(in + (size_t)h);
    return SHOAL_OK;
}

static void gru_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    (void)stats;
    sh_rnn_uniform(params + l->w_off, l->w_count + l->b_count, 1.0f / sqrtf((float)l->hidden), rng);
}

typedef struct {
    int h, g, in, b, rows;
    float *wx, *bx, *bh;
    float *h0;        /* (B, H) */
    float *gx, *gh;   /* (rows, 3H) each: input and state parts, then their gradients */
    float *dh;        /* (B, H) carried to the step before */
    float *wt;        /* (I, 3H) one-hot inputs: Wx transposed plus bx, then the gradient's
                         scratch */
    int32_t *idx;     /* (rows) one-hot inputs: each row's column */
    float *hpk, *xpk; /* the weight gradients' operands packed (sh_rnn_gated_pack) */
} gru_view;

static gru_view view(sh_layer *l, const sh_exec *x)
{
    gru_view v;
    v.h = l->hidden;
    v.g = NG * v.h;
    v.in = (int)l->inputs;
    v.b = sh_rnn_streams(l, x);
    v.rows = x->nimg;
    v.wx = x->params + l->w_off;
    v.bx = x->params + l->b_off;
    v.bh = v.bx + v.g;
    v.h0 = l->keep + (size_t)x->batch * l->keep_count;
    v.gx = l->cache;
    v.gh = l->cache + (size_t)x->batch * v.g;
    v.dh = v.gh + (size_t)x->batch * v.g;
    v.wt = v.dh + (size_t)(x->batch / l->steps) * v.h;
    v.idx = (int32_t *)(v.wt + (size_t)v.g * v.in);
    v.hpk = sh_rnn_align((float *)(v.idx + x->batch));
    v.xpk = sh_rnn_align(v.hpk + sh_packed_count(x->batch + x->batch / l->steps, v.h));
    return v;
}

static void gru_input_rows(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    gru_view v = view(l, x);
    sh_gru_input_part(l, r0, r1, v.g, v.wt, v.idx, sh_rnn_packed(l, v.in, v.g), v.bx, v.gx);
}

void sh_gru_input_part(const sh_layer *l, int r0, int r1, int g, const float *wt,
                       const int32_t *idx, const float *pk, const float *bx, float *dst)
{
    int nr = r1 - r0, in = (int)l->inputs;
    if (nr <= 0) return;
    float *gr = dst + (size_t)r0 * g;
    if (l->input_onehot) { /* the rows of wt hold the biases already */
        for (int r = 0; r < nr; r++)
            memcpy(gr + (size_t)r * g, wt + (size_t)idx[r0 + r] * g, (size_t)g * sizeof(float));
        return;
    }
    sh_packed_gemm(nr, 0, g, in, l->in[0] + (size_t)r0 * in, in, pk, 0, gr, g);
    for (int r = 0; r < nr; r++) {
        float *row = gr + (size_t)r * g;
        for (int k = 0; k < g; k++) row[k] += bx[k];
    }
}

/* One gate block of w units, forward: ax and ah the input and state parts (r, z, n, w
 * each), bh the state biases; gates to ka, Whn h + bhn to khn, h to hout. Separate restrict
 * pointers let the compiler vectorise σ and tanh across the units. */
static inline void cell_forward(int w, const float *restrict ax, const float *restrict ah,
                                const float *restrict bh, const float *restrict hp,
                                float *restrict ka, float *restrict khn, float *restrict hout)
{
    for (int u = 0; u < w; u++) {
        float rg = sh_rnn_sigmoid(ax[u] + ah[u] + bh[u]);
        float zg = sh_rnn_sigmoid(ax[w + u] + ah[w + u] + bh[w + u]);
        float hn = ah[2 * w + u] + bh[2 * w + u];
        float ng = sh_rnn_tanh(ax[2 * w + u] + rg * hn);
        ka[u] = rg;
        ka[w + u] = zg;
        ka[2 * w + u] = ng;
        khn[u] = hn;
        hout[u] = (1.0f - zg) * ng + zg * hp[u];
    }
}

/* Its backward: the input and state parts' gradients into dx and dhh, and dh (dL/dh from
 * the next step, in) replaced by the direct path to the step before (the carry adds the
 * products). */
static inline void cell_backward(int w, const float *restrict ka, const float *restrict khn,
                                 const float *restrict hp, const float *restrict dy,
                                 float *restrict dh, float *restrict dx, float *restrict dhh)
{
    for (int u = 0; u < w; u++) {
        float rg = ka[u], zg = ka[w + u], ng = ka[2 * w + u];
        float dhu = dy[u] + dh[u];
        float dan = dhu * (1.0f - zg) * (1.0f - ng * ng);
        float dar = dan * khn[u] * rg * (1.0f - rg);
        float daz = dhu * (hp[u] - ng) * zg * (1.0f - zg);
        dx[u] = dar;
        dhh[u] = dar;
        dx[w + u] = daz;
        dhh[w + u] = daz;
        dx[2 * w + u] = dan;
        dhh[2 * w + u] = dan * rg;
        dh[u] = dhu * zg;
    }
}

/* Step t, streams [b0, b1), gate blocks [k0, k1): the recurrent part, then the cells. */
SH_HOT static void gru_step_forward(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    gru_view v = view(l, x);
    int t = p->t, k0 = p->k0, k1 = p->k1, j0 = k0 * SH_RNN_BLOCK, j1 = k1 * SH_RNN_BLOCK;
    if (j1 > v.h) j1 = v.h;
    if (j1 <= j0) return;
    size_t kc = l->keep_count;
    const float *hprev = t ? l->out + (size_t)(t - 1) * v.b * v.h : v.h0;
    size_t r0 = (size_t)t * v.b + (size_t)p->b0;
    sh_packed_gemm(p->b1 - p->b0, NG * j0, NG * j1, v.h, hprev + (size_t)p->b0 * v.h, v.h,
                   sh_rnn_packed(l, v.h, v.g), 0, v.gh + r0 * v.g, v.g);
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = (size_t)t * v.b + b;
        float *keep = l->keep + r * kc;
        const float *hp = hprev + (size_t)b * v.h;
        float *hout = l->out + r * v.h;
        for (int blk = k0; blk < k1; blk++) {
            int w = sh_rnn_block_width(v.h, blk), base = blk * SH_RNN_BLOCK * NG;
            int j = blk * SH_RNN_BLOCK;
            cell_forward(w, v.gx + r * v.g + base, v.gh + r * v.g + base, v.bh + base,
                         hp + j, keep + base, keep + v.g + j, hout + j);
        }
    }
}

/* Step t, streams [b0, b1), gate blocks [k0, k1): the gates' gradients from dL/dh (from
 * above and from step t+1). */
SH_HOT static void gru_step_backward(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    gru_view v = view(l, x);
    int t = p->t, k0 = p->k0, k1 = p->k1;
    size_t kc = l->keep_count;
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = (size_t)t * v.b + b;
        const float *keep = l->keep + r * kc;
        const float *hp = t ? l->out + (r - (size_t)v.b) * v.h : v.h0 + (size_t)b * v.h;
        const float *dy = l->delta + r * v.h;
        float *dh = v.dh + (size_t)b * v.h;
        for (int blk = k0; blk < k1; blk++) {
            int w = sh_rnn_block_width(v.h, blk), base = blk * SH_RNN_BLOCK * NG;
            int j = blk * SH_RNN_BLOCK;
            cell_backward(w, keep + base, keep + v.g + j, hp + j, dy + j, dh + j,
                          v.gx + r * v.g + base, v.gh + r * v.g + base);
        }
    }
}

/* dL/dh of step t-1, streams [b0, b1), units of blocks [k0, k1): the direct path (in dh)
 * plus dG_t Wh. */
static void gru_step_carry(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    gru_view v = view(l, x);
    int c0 = p->k0 * SH_RNN_BLOCK, c1 = p->k1 * SH_RNN_BLOCK < v.h ? p->k1 * SH_RNN_BLOCK : v.h;
    if (c1 <= c0) return;
    const float *dgt = v.gh + ((size_t)p->t * v.b + (size_t)p->b0) * v.g;
    sh_packed_gemm(p->b1 - p->b0, c0, c1, v.g, dgt, v.g, sh_rnn_packed(l, v.h, v.g), 1,
                   v.dh + (size_t)p->b0 * v.h, v.h);
}

/* Panels [p0, p1) of the weight gradients' operands. */
static void gru_pack_grads(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    gru_view v = view(l, x);
    sh_rnn_gated_pack(l, x, v.h0, p0, p1, v.hpk, v.xpk);
}

/* Weight and bias gradients of gate rows [k0, k1) over all rows (X and h_prev packed:
 * sh_rnn_gated_wgrads). */
static void gru_param_grads(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    gru_view v = view(l, x);
    int nk = k1 - k0;
    if (nk <= 0) return;
    float *g = x->grad[0];
    if (l->input_onehot)
        sh_rnn_onehot_grad(v.gx, v.rows, v.g, v.idx, v.in, k0, k1, v.wt, g + l->w_off);
    sh_rnn_gated_wgrads(l, x, k0, k1, v.gx, v.gh, v.hpk, v.xpk, g + l->w_off,
                        g + l->w_off + (size_t)v.g * v.in);
    sh_rnn_colsum(v.gx, v.rows, v.g, k0, k1, g + l->b_off + k0);
    sh_rnn_colsum(v.gh, v.rows, v.g, k0, k1, g + l->b_off + v.g + k0);
}

static const sh_rnn_gated gru_passes = {gru_input_rows, gru_step_forward,
                                          gru_step_backward, gru_step_carry,
                                          gru_pack_grads, gru_param_grads};

static void gru_forward(sh_layer *l, sh_exec *x)
{
    gru_view v = view(l, x);
    size_t bh = (size_t)v.b * v.h;
    sh_gru_begin(l, x, v.h0, v.wx, v.bx, v.g, v.idx, v.wt);
    sh_rnn_gated_forward(l, x, &gru_passes);
    memcpy(l->state, l->out + (size_t)(l->steps - 1) * bh, bh * sizeof(float));
}

void sh_gru_begin(sh_layer *l, const sh_exec *x, float *h0, const float *wx, const float *bx,
                  int g, int32_t *idx, float *wt)
{
    int in = (int)l->inputs;
    memcpy(h0, l->state, (size_t)sh_rnn_streams(l, x) * l->hidden * sizeof(float));
    l->input_onehot = l->src[0] < 0 && sh_rnn_onehot(l->in[0], x->nimg, in, idx);
    if (!l->input_onehot) return;
    sh_rnn_transpose(wx, g, in, wt); /* row c: the input part of every row whose input is c */
    for (int c = 0; c < in; c++) {
        float *row = wt + (size_t)c * g;
        for (int k = 0; k < g; k++) row[k] += bx[k];
    }
}

static void gru_backward(sh_layer *l, sh_exec *x)
{
    gru_view v = view(l, x);
    memset(v.dh, 0, (size_t)v.b * v.h * sizeof(float));
    sh_rnn_gated_backward(l, x, &gru_passes);
}

const sh_layer_ops sh_gru_ops = {
    .cfg_name = "gru",
    .short_name = "gru",
    .parse = gru_parse,
    .init = gru_init,
    .forward = gru_forward,
    .backward = gru_backward,
    /* Darknet's six sublayers (wz, wr, wh, uz, ur, uh) would map onto Wh, Wx, bh, bx exactly,
     * but the candidate's equation differs (see the top of this file): form=darknet
     * (layer_gru_darknet.c) computes Darknet's. */
    .darknet_refusal = "this [gru] has PyTorch's form, whose weights mean another function "
                       "in Darknet (the reset gate's place, the candidate's activation); add "
                       "form=darknet to its section for Darknet's GRU",
};
