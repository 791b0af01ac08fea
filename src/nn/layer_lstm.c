/* layer_lstm.c — [lstm]: output (H, default 1). Long short-term memory over the T time steps of
 * each batch, the state (h, c) of every stream carried to the next batch as Darknet carries it,
 * gradients through time truncated at the batch's first step.
 * Not here: the layout helpers and fast σ/tanh (recurrent.h), the order of the passes forward
 * and through time (recurrent.c: sh_rnn_gated_*), the text data (src/data/text.c).
 * Proved by tests/nn/test_layer_rnn.c (finite differences; PyTorch's nn.LSTM when present). */
#include "base/err.h"
#include "base/hot.h"
#include "nn/recurrent.h"

/*   i = σ(Wxi x + bxi + Whi h + bhi)   f = σ(Wxf x + .. + Whf h + ..)
 *   g = tanh(Wxg x + .. + Whg h + ..)  o = σ(Wxo x + .. + Who h + ..)
 *   c' = f c + i g                     h' = o tanh(c')
 * the equations of Darknet's lstm_layer.c and of PyTorch's nn.LSTM (two biases per gate).
 * Weights: Wx (4H, I) then Wh (4H, H), then bx (4H), bh (4H); gate rows in blocks of 16 units
 * (recurrent.h: sh_rnn_gate_col, gates i, f, g, o). Initialised uniform(±1/sqrt(H)) as PyTorch.
 * Per step a (B, I) x (I, 4H) product for the input part and a (B, H) x (H, 4H) one for the
 * recurrent part, Wx and Wh packed once per pass (gemm_packed.c); the threads share the time
 * loop by streams or by gate blocks (recurrent.h: sh_rnn_run_loop). */

/* Fused multiply-adds in the cells' polynomials (σ, tanh; gemm_packed.c says why GCC needs
 * telling): the elementwise work of a step is a tenth of it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define NG 4 /* gates i, f, g, o */

static shoal_result lstm_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
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
    l->keep_count = g + 2 * (size_t)h;          /* per row: activated gates, c, tanh(c) */
    l->keep_fixed = 2 * streams * (size_t)h;    /* h0, c0 of this batch */
    l->cache_count = rows * g + 2 * streams * (size_t)h; /* gates / their gradients, dh, dc */
    l->cache_count += g * in + rows;             /* one-hot inputs: Wx transposed, columns */
    l->cache_count += sh_rnn_gated_pack_count((int)rows, (int)streams, h, (int)in);
    size_t pk_h = sh_rnn_packed_count(h, (int)g), pk_x = sh_rnn_packed_count((int)in, (int)g);
    l->cache_count += pk_x;                      /* Wx^T packed beside Wh^T, forward */
    l->cache_count += pk_h > pk_x ? pk_h : pk_x; /* Wh or Wx packed */
    l->state_count = 2 * streams * (size_t)h;   /* h, c carried to the next batch */
    l->flops = (double)g * (double)(in + (size_t)h);
    return SHOAL_OK;
}

static void lstm_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    (void)stats;
    sh_rnn_uniform(params + l->w_off, l->w_count + l->b_count, 1.0f / sqrtf((float)l->hidden), rng);
}

typedef struct {
    int h, g, in, b, rows;
    float *wx, *bx, *bh;
    float *h0, *c0;   /* (B, H) this batch's starting state */
    float *gates;     /* (rows, 4H) cache: pre-activations, then their gradients */
    float *dh, *dc;   /* (B, H) gradients carried to the step before */
    float *wt;        /* (I, 4H) one-hot inputs: Wx transposed plus bx + bh, then the gradient's
                         scratch */
    int32_t *idx;     /* (rows) one-hot inputs: each row's column */
    float *hpk, *xpk; /* the weight gradients' operands packed (sh_rnn_gated_pack) */
    float *pwx;       /* Wx^T packed for the steps' input parts (sh_rnn_packed holds Wh^T) */
} lstm_view;

static lstm_view view(sh_layer *l, const sh_exec *x)
{
    lstm_view v;
    v.h = l->hidden;
    v.g = NG * v.h;
    v.in = (int)l->inputs;
    v.b = sh_rnn_streams(l, x);
    v.rows = x->nimg;
    v.wx = x->params + l->w_off;
    v.bx = x->params + l->b_off;
    v.bh = v.bx + v.g;
    v.h0 = l->keep + (size_t)x->batch * l->keep_count;
    v.c0 = v.h0 + (size_t)(x->batch / l->steps) * v.h;
    v.gates = l->cache;
    v.dh = l->cache + (size_t)x->batch * v.g;
    v.dc = v.dh + (size_t)(x->batch / l->steps) * v.h;
    v.wt = v.dc + (size_t)(x->batch / l->steps) * v.h;
    v.idx = (int32_t *)(v.wt + (size_t)v.g * v.in);
    v.hpk = sh_rnn_align((float *)(v.idx + x->batch));
    v.xpk = sh_rnn_align(v.hpk + sh_packed_count(x->batch + x->batch / l->steps, v.h));
    v.pwx = sh_rnn_align(v.xpk + sh_packed_count(x->batch, v.in));
    return v;
}

/* Step p->t's input part of streams [b0, b1), gate columns [c0, c1): G = X_t Wx^T + bx + bh
 * (Wx^T packed), or with one-hot inputs the rows of wt (which hold the biases already). Done
 * by the step, just before the recurrent part adds into the same rows, so that they are
 * still in cache. */
static void lstm_input_step(sh_layer *l, const lstm_view *v, const sh_rnn_part *p, int c0,
                            int c1)
{
    size_t r0 = (size_t)p->t * v->b + (size_t)p->b0;
    int nb = p->b1 - p->b0;
    float *gt = v->gates + r0 * v->g;
    if (l->input_onehot) {
        for (int b = 0; b < nb; b++)
            memcpy(gt + (size_t)b * v->g + c0, v->wt + (size_t)v->idx[r0 + b] * v->g + c0,
                   (size_t)(c1 - c0) * sizeof(float));
        return;
    }
    sh_packed_gemm(nb, c0, c1, v->in, l->in[0] + r0 * v->in, v->in, v->pwx, 0, gt, v->g);
    for (int b = 0; b < nb; b++) {
        float *row = gt + (size_t)b * v->g;
        for (int k = c0; k < c1; k++) row[k] += v->bx[k] + v->bh[k];
    }
}

/* One gate block of w units, forward: a holds the block's pre-activations (i, f, g, o, w
 * each); the activated gates go to ka, the cell to kcell, its tanh to ktc (backward reads
 * it), h to hout. Separate restrict pointers let the compiler vectorise σ and tanh across
 * the units. */
static inline void cell_forward(int w, const float *restrict a, const float *restrict cprev,
                                float *restrict ka, float *restrict kcell, float *restrict ktc,
                                float *restrict hout)
{
    for (int u = 0; u < w; u++) {
        float ig = sh_rnn_sigmoid(a[u]), fg = sh_rnn_sigmoid(a[w + u]);
        float gg = sh_rnn_tanh(a[2 * w + u]), og = sh_rnn_sigmoid(a[3 * w + u]);
        float c = fg * cprev[u] + ig * gg;
        ka[u] = ig;
        ka[w + u] = fg;
        ka[2 * w + u] = gg;
        ka[3 * w + u] = og;
        float tc = sh_rnn_tanh(c);
        kcell[u] = c;
        ktc[u] = tc;
        hout[u] = og * tc;
    }
}

/* Its backward: d gets the gate pre-activations' gradients from dL/dh (dy from above plus dh
 * from the next step) and dL/dc (dc, replaced by the gradient for the step before). */
static inline void cell_backward(int w, const float *restrict ka, const float *restrict ktc,
                                 const float *restrict cprev, const float *restrict dy,
                                 const float *restrict dh, float *restrict dc, float *restrict d)
{
    for (int u = 0; u < w; u++) {
        float ig = ka[u], fg = ka[w + u], gg = ka[2 * w + u], og = ka[3 * w + u];
        float tc = ktc[u];
        float dhu = dy[u] + dh[u];
        float dcu = dhu * og * (1.0f - tc * tc) + dc[u];
        d[u] = dcu * gg * ig * (1.0f - ig);
        d[w + u] = dcu * cprev[u] * fg * (1.0f - fg);
        d[2 * w + u] = dcu * ig * (1.0f - gg * gg);
        d[3 * w + u] = dhu * tc * og * (1.0f - og);
        dc[u] = dcu * fg;
    }
}

/* Step t, streams [b0, b1), gate blocks [k0, k1): the input part of the gates, the recurrent
 * part, then the cell. */
SH_HOT static void lstm_step_forward(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    lstm_view v = view(l, x);
    int t = p->t, k0 = p->k0, k1 = p->k1, j0 = k0 * SH_RNN_BLOCK, j1 = k1 * SH_RNN_BLOCK;
    if (j1 > v.h) j1 = v.h;
    if (j1 <= j0) return;
    size_t kc = l->keep_count;
    const float *hprev = (t ? l->out + (size_t)(t - 1) * v.b * v.h : v.h0) + (size_t)p->b0 * v.h;
    float *gt = v.gates + ((size_t)t * v.b + (size_t)p->b0) * v.g;
    lstm_input_step(l, &v, p, NG * j0, NG * j1);
    sh_packed_gemm(p->b1 - p->b0, NG * j0, NG * j1, v.h, hprev, v.h, sh_rnn_packed(l, v.h, v.g),
                   1, gt, v.g);
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = (size_t)t * v.b + b;
        float *keep = l->keep + r * kc;
        const float *cprev = t ? l->keep + (r - (size_t)v.b) * kc + v.g : v.c0 + (size_t)b * v.h;
        float *hout = l->out + r * v.h;
        for (int blk = k0; blk < k1; blk++) {
            int w = sh_rnn_block_width(v.h, blk), base = blk * SH_RNN_BLOCK * NG;
            int j = blk * SH_RNN_BLOCK;
            cell_forward(w, v.gates + r * v.g + base, cprev + j, keep + base, keep + v.g + j,
                         keep + v.g + v.h + j, hout + j);
        }
    }
}

/* Step t, streams [b0, b1), gate blocks [k0, k1): gradients of the gates' pre-activations
 * from dL/dh (from above and from step t+1) and dL/dc (from step t+1). */
SH_HOT static void lstm_step_backward(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    lstm_view v = view(l, x);
    int t = p->t, k0 = p->k0, k1 = p->k1;
    size_t kc = l->keep_count;
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = (size_t)t * v.b + b;
        const float *keep = l->keep + r * kc;
        const float *cprev = t ? l->keep + (r - (size_t)v.b) * kc + v.g : v.c0 + (size_t)b * v.h;
        const float *dy = l->delta + r * v.h;
        float *dh = v.dh + (size_t)b * v.h, *dc = v.dc + (size_t)b * v.h;
        float *dg = v.gates + r * v.g;
        for (int blk = k0; blk < k1; blk++) {
            int w = sh_rnn_block_width(v.h, blk), base = blk * SH_RNN_BLOCK * NG;
            int j = blk * SH_RNN_BLOCK;
            cell_backward(w, keep + base, keep + v.g + v.h + j, cprev + j, dy + j, dh + j, dc + j,
                          dg + base);
        }
    }
}

/* dL/dh of step t-1 through the recurrent weights, streams [b0, b1), units of blocks
 * [k0, k1): dh = dG_t Wh. */
static void lstm_step_carry(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    lstm_view v = view(l, x);
    int c0 = p->k0 * SH_RNN_BLOCK, c1 = p->k1 * SH_RNN_BLOCK < v.h ? p->k1 * SH_RNN_BLOCK : v.h;
    if (c1 <= c0) return;
    const float *dgt = v.gates + ((size_t)p->t * v.b + (size_t)p->b0) * v.g;
    sh_packed_gemm(p->b1 - p->b0, c0, c1, v.g, dgt, v.g, sh_rnn_packed(l, v.h, v.g), 0,
                   v.dh + (size_t)p->b0 * v.h, v.h);
}

/* Panels [p0, p1) of the weight gradients' operands. */
static void lstm_pack_grads(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    lstm_view v = view(l, x);
    sh_rnn_gated_pack(l, x, v.h0, p0, p1, v.hpk, v.xpk);
}

/* Weight and bias gradients of gate rows [k0, k1), each over all rows at full depth (X and
 * h_prev packed: sh_rnn_gated_wgrads). */
static void lstm_param_grads(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    lstm_view v = view(l, x);
    int nk = k1 - k0;
    if (nk <= 0) return;
    float *g = x->grad[0];
    float *gbx = g + l->b_off + k0, *gbh = g + l->b_off + v.g + k0;
    if (l->input_onehot)
        sh_rnn_onehot_grad(v.gates, v.rows, v.g, v.idx, v.in, k0, k1, v.wt, g + l->w_off);
    sh_rnn_gated_wgrads(l, x, k0, k1, v.gates, v.gates, v.hpk, v.xpk, g + l->w_off,
                        g + l->w_off + (size_t)v.g * v.in);
    sh_rnn_colsum(v.gates, v.rows, v.g, k0, k1, gbx);
    memcpy(gbh, gbx, (size_t)nk * sizeof(float));
}

static const sh_rnn_gated lstm_passes = {NULL, lstm_step_forward,
                                           lstm_step_backward, lstm_step_carry,
                                           lstm_pack_grads, lstm_param_grads};

static void lstm_forward(sh_layer *l, sh_exec *x)
{
    lstm_view v = view(l, x);
    size_t bh = (size_t)v.b * v.h;
    memcpy(v.h0, l->state, bh * sizeof(float));
    memcpy(v.c0, l->state + (size_t)(x->batch / l->steps) * v.h, bh * sizeof(float));
    l->input_onehot = l->src[0] < 0 && sh_rnn_onehot(l->in[0], v.rows, v.in, v.idx);
    if (l->input_onehot) { /* row c of wt: the input part of every row whose input is c */
        sh_rnn_transpose(v.wx, v.g, v.in, v.wt);
        for (int c = 0; c < v.in; c++) {
            float *row = v.wt + (size_t)c * v.g;
            for (int k = 0; k < v.g; k++) row[k] += v.bx[k] + v.bh[k];
        }
    } else {
        sh_packed_pack(1, v.in, v.g, v.wx, v.in, 0, sh_packed_npanels(v.g), v.pwx);
    }
    sh_rnn_gated_forward(l, x, &lstm_passes);
    /* the last step's h and c start the next batch */
    size_t last = (size_t)(l->steps - 1) * v.b;
    memcpy(l->state, l->out + last * v.h, bh * sizeof(float));
    float *cstate = l->state + (size_t)(x->batch / l->steps) * v.h;
    for (int b = 0; b < v.b; b++)
        memcpy(cstate + (size_t)b * v.h, l->keep + (last + b) * l->keep_count + v.g,
               (size_t)v.h * sizeof(float));
}

static void lstm_backward(sh_layer *l, sh_exec *x)
{
    lstm_view v = view(l, x);
    memset(v.dh, 0, (size_t)v.b * v.h * sizeof(float));
    memset(v.dc, 0, (size_t)v.b * v.h * sizeof(float));
    sh_rnn_gated_backward(l, x, &lstm_passes);
}

/* Darknet's .weights (parser.c save_weights_upto, LSTM): eight connected sublayers, each its
 * biases (H) then weights (H rows), in the order wi, wf, wo, wg (the state products, H -> H)
 * then ui, uf, uo, ug (the input products, I -> H). Darknet adds a gate's two products and
 * their two biases as shoal does, so its w* biases are shoal's bh and its u* biases bx. */
static int lstm_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    static const int order[NG] = {0, 1, 3, 2}; /* Darknet's i, f, o, g in shoal's gates */
    size_t h = (size_t)l->hidden, g = NG * h, in = l->inputs;
    int n = 0;
    for (int part = 0; part < 2; part++) { /* 0: state (Wh, bh), 1: input (Wx, bx) */
        size_t w = l->w_off + (part ? 0 : g * in), bias = l->b_off + (part ? 0 : g);
        size_t cols = part ? in : h;
        for (int k = 0; k < NG; k++) {
            b[n++] = (sh_dn_blob){.off = bias, .count = h, .ngates = NG, .gate = order[k],
                                  .units = h};
            b[n++] = (sh_dn_blob){.off = w, .count = h * cols, .rows = h, .ngates = NG,
                                  .gate = order[k], .units = h};
        }
    }
    return n;
}

const sh_layer_ops sh_lstm_ops = {
    .cfg_name = "lstm",
    .short_name = "lstm",
    .parse = lstm_parse,
    .init = lstm_init,
    .forward = lstm_forward,
    .backward = lstm_backward,
    .darknet_blobs = lstm_darknet_blobs,
};
