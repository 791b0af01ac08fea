/* layer_rnn.c — [rnn]: output (K, default 1), hidden (H, default K), activation (Darknet
 * default logistic), batch_normalize (0). Darknet's plain recurrent layer (rnn_layer.c): three
 * connected sublayers, input (I -> H), self (H -> H) and output (H -> K).
 * Not here: the gated layers (layer_gru.c, layer_lstm.c), shared helpers (recurrent.h).
 * Proved by tests/nn/test_layer_rnn.c (finite differences, with and without batch norm) and
 * tests/nn/test_rnn_torch.c (Darknet's equations in torch). */
#include "base/err.h"
#include "nn/recurrent.h"

/* Each sublayer has a bias and the activation:
 *   s' = act(Win x + bin) + act(Wself s + bself)        y = act(Wout s' + bout)
 * over the T time steps of each batch, s of every stream carried to the next batch, gradients
 * through time truncated at the batch's first step. With batch_normalize=1 each sublayer
 * normalises its product before the bias over the streams of one time step, as Darknet's
 * connected layers inside it do (recurrent.c: sh_rnn_bn_forward), and the bias becomes the
 * normalisation's shift. Darknet as Debian ships it has no `hidden` (H is always K); earlier
 * Darknet read it, and so does shoal.
 * Parameters: Win (H, I), Wself (H, H), Wout (K, H); bin (H), bself (H), bout (K); with batch
 * norm the scales gin (H), gself (H), gout (K) and the statistics rolling means (H, H, K) then
 * rolling variances (H, H, K). Weights uniform(±sqrt(2/fan-in)) as Darknet's connected layers.
 * The products run on their weights packed once per pass (gemm_packed.c), all three per time
 * step so that each step's activations work on rows still in cache; the threads share the time
 * loop by streams, or by blocks of 16 units with batch norm or few streams (sh_rnn_run_loop). */

/* Fused multiply-adds in the cells' polynomials (σ, tanh; gemm_packed.c says why GCC needs
 * telling): the elementwise work of a step is a tenth of it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

static shoal_result rnn_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int h = 1, k = 1;
    SH_TRY(sh_cfg_int(s, "output", 1, 1, 1 << 16, &k));
    SH_TRY(sh_cfg_int(s, "hidden", k, 1, 1 << 16, &h));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    SH_TRY(sh_rnn_parse_shortcut(s));
    SH_TRY(sh_rnn_parse_common(l, s, ctx, 1));
    size_t in = l->inputs, rows = (size_t)ctx->batch, streams = rows / (size_t)l->steps;
    size_t hh = (size_t)h, kk = (size_t)k, bn = (size_t)l->batch_normalize;
    size_t units = 2 * hh + kk; /* normalised units of the three sublayers */
    l->hidden = h;
    l->out_shape = (sh_shape){k, 1, 1};
    l->w_off = 0;
    l->w_count = hh * in + hh * hh + kk * hh;
    l->b_off = l->w_count;
    l->b_count = units;
    l->s_off = l->b_off + l->b_count;
    l->s_count = bn * units;
    l->param_count = l->w_count + l->b_count + l->s_count;
    l->stat_count = 2 * bn * units;
    /* per row: act(input), act(self), s; with batch norm the x_hat of the three parts */
    l->keep_count = 3 * hh + bn * units;
    /* s0 of this batch; with batch norm 1/std of each part at each step */
    l->keep_fixed = streams * hh + bn * (size_t)l->steps * units;
    l->cache_count = 2 * rows * hh + streams * hh; /* ds / d input part, d self part, carry */
    l->cache_count += hh * in + rows;          /* one-hot inputs: Win transposed, columns */
    /* for the weight gradients: [s0; s] and the inputs packed (gemm_packed.h), aligned */
    l->cache_count += sh_packed_count((int)(rows + streams), h) +
                      sh_packed_count((int)rows, (int)in) + 3 * SH_PACKED_NR;
    /* Win, Wself and Wout packed side by side: a time step runs all three products */
    l->cache_count += sh_rnn_packed_count((int)in, h) + sh_rnn_packed_count(h, h) +
                      sh_rnn_packed_count(h, k) + SH_PACKED_NR;
    l->state_count = streams * hh;
    l->flops = (double)hh * (double)(in + hh) + (double)kk * (double)hh;
    return SHOAL_OK;
}

static void rnn_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    size_t in = l->inputs, h = (size_t)l->hidden, k = (size_t)l->out_shape.c;
    float *w = params + l->w_off;
    sh_rnn_uniform(w, h * in, sqrtf(2.0f / (float)in), rng);
    sh_rnn_uniform(w + h * in, h * h, sqrtf(2.0f / (float)h), rng);
    sh_rnn_uniform(w + h * in + h * h, k * h, sqrtf(2.0f / (float)h), rng);
    memset(params + l->b_off, 0, l->b_count * sizeof(float));
    for (size_t i = 0; i < l->s_count; i++) params[l->s_off + i] = 1.0f;
    for (size_t i = 0; i < l->stat_count / 2; i++) {
        stats[l->stat_off + i] = 0.0f;
        stats[l->stat_off + l->stat_count / 2 + i] = 1.0f;
    }
}

/* The three sublayers' batch-norm pieces: part 0 input, 1 self, 2 output. */
typedef struct {
    int n, col;              /* units; column of its x_hat in a keep row */
    const float *gamma, *beta;
    float *rmean, *rvar;
    float *invstd;           /* (T, n) */
    float *ggamma, *gbeta;
} rnn_bn;

typedef struct {
    int h, k, in, b, rows, kc;
    float *win, *wself, *wout, *bin, *bself, *bout;
    float *s0;        /* (B, H) */
    float *din;       /* (rows, H): dL/ds, then the input part's pre-activation gradient */
    float *dself;     /* (rows, H): the self part's pre-activation gradient */
    float *ds;        /* (B, H) carried to the step before */
    float *wt;        /* (I, H) one-hot inputs: Win transposed (activated, with bin, unless
                         batch norm), then the gradient's scratch */
    int32_t *idx;     /* (rows) one-hot inputs: each row's column */
    float *spk;       /* [s0; s] (B + rows, H) packed: rows [0, rows) the self products'
                         inputs, rows [B, B + rows) the output products' */
    float *xpk;       /* the inputs (rows, I) packed, unless one-hot */
    float *pin, *pself, *pout; /* Win, Wself, Wout packed (transposed in forward) */
    rnn_bn bn[3];     /* with batch_normalize */
} rnn_view;

static rnn_view view(sh_layer *l, const sh_exec *x)
{
    rnn_view v;
    v.h = l->hidden;
    v.k = l->out_shape.c;
    v.in = (int)l->inputs;
    v.kc = (int)l->keep_count;
    v.b = sh_rnn_streams(l, x);
    v.rows = x->nimg;
    v.win = x->params + l->w_off;
    v.wself = v.win + (size_t)v.h * v.in;
    v.wout = v.wself + (size_t)v.h * v.h;
    v.bin = x->params + l->b_off;
    v.bself = v.bin + v.h;
    v.bout = v.bself + v.h;
    v.s0 = l->keep + (size_t)x->batch * l->keep_count;
    v.din = l->cache;
    v.dself = v.din + (size_t)x->batch * v.h;
    v.ds = v.dself + (size_t)x->batch * v.h;
    v.wt = v.ds + (size_t)(x->batch / l->steps) * v.h;
    v.idx = (int32_t *)(v.wt + (size_t)v.h * v.in);
    v.spk = sh_rnn_align((float *)(v.idx + x->batch));
    v.xpk = sh_rnn_align(v.spk + sh_packed_count(x->batch + x->batch / l->steps, v.h));
    v.pin = sh_rnn_align(v.xpk + sh_packed_count(x->batch, v.in));
    v.pself = sh_rnn_align(v.pin + sh_rnn_packed_count(v.in, v.h));
    v.pout = sh_rnn_align(v.pself + sh_rnn_packed_count(v.h, v.h));
    if (l->batch_normalize) {
        int n[3] = {v.h, v.h, v.k}, units = 2 * v.h + v.k, off = 0;
        float *inv = v.s0 + (size_t)(x->batch / l->steps) * v.h;
        for (int p = 0; p < 3; p++) {
            rnn_bn *q = &v.bn[p];
            q->n = n[p];
            q->col = 3 * v.h + off;
            q->beta = x->params + l->b_off + off;
            q->gamma = x->params + l->s_off + off;
            q->rmean = x->stats + l->stat_off + off;
            q->rvar = q->rmean + units;
            q->invstd = inv + (size_t)l->steps * off;
            q->gbeta = x->grad[0] + l->b_off + off;
            q->ggamma = x->grad[0] + l->s_off + off;
            off += n[p];
        }
    }
    return v;
}

/* Row r's input part, act(Win x + bin): with one-hot inputs and no batch norm the row of wt
 * that its input picks (activated once per input, and small enough to stay in cache) rather
 * than a copy in keep, which would cost a write and two reads of (rows, H) in memory. */
static const float *input_part(const sh_layer *l, const rnn_view *v, size_t r)
{
    if (l->input_onehot && !l->batch_normalize) return v->wt + (size_t)v->idx[r] * v->h;
    return l->keep + r * v->kc;
}

static void act_rows(sh_act a, float *p, int rows, int ld, int count, const float *bias)
{
    for (int r = 0; r < rows; r++) sh_rnn_act(a, p + (size_t)r * ld, bias, count);
}

/* Batch norm then the activation of units [u0, u1) of part p at step t; v holds the B rows of
 * that step (ld apart) and keep_row0 the keep row of the step's first stream. */
static void bn_act(sh_layer *l, sh_exec *x, const rnn_view *v, int p, int t, float *vals, int ld,
                   int u0, int u1)
{
    const rnn_bn *q = &v->bn[p];
    float *xh = l->keep + (size_t)t * v->b * v->kc + q->col + u0;
    sh_rnn_bn_forward(vals + u0, ld, v->b, u1 - u0, q->gamma + u0, q->beta + u0, q->rmean + u0,
                      q->rvar + u0, x->training, xh, v->kc, q->invstd + (size_t)t * q->n + u0);
    act_rows(l->act, vals + u0, v->b, ld, u1 - u0, NULL);
}

/* The elementwise work of a step runs right after the product that made its rows, while they
 * are in L1/L2: a pass over all (rows, H) at once would find them in memory (keep is 3 KiB a
 * row). Each product's sums run over k in order whatever the rows and columns taken at a
 * time (gemm_packed.h), so the results are those of whole-batch products. */

/* Blocks [k0, k1) of n1 blocks scaled to n2 blocks: the same threads' share of another width
 * (disjoint, and [0, n2) over all threads). */
static void scale_blocks(int k0, int k1, int n1, int n2, int *b0, int *b1)
{
    *b0 = (int)((long)k0 * n2 / n1);
    *b1 = (int)((long)k1 * n2 / n1);
}

/* Step p->t's input part, streams [b0, b1), units [j0, j1): X_t Win^T (packed) with bin and
 * the activation, or batch norm (all streams); one-hot inputs without batch norm have none
 * (input_part reads wt). The inputs' panels [x0, x1) are packed for the weight gradient
 * while they are in cache. */
static void input_step(sh_layer *l, sh_exec *x, const rnn_view *v, const sh_rnn_part *p,
                       int j0, int j1, int x0, int x1)
{
    size_t r0 = (size_t)p->t * v->b + (size_t)p->b0;
    int nb = p->b1 - p->b0;
    float *kt = l->keep + r0 * v->kc;
    if (l->input_onehot) {
        if (!l->batch_normalize) return;
        for (int b = 0; b < nb; b++)
            memcpy(kt + (size_t)b * v->kc + j0, v->wt + (size_t)v->idx[r0 + b] * v->h + j0,
                   (size_t)(j1 - j0) * sizeof(float));
    } else {
        const float *xt = l->in[0] + r0 * v->in;
        sh_packed_gemm(nb, j0, j1, v->in, xt, v->in, v->pin, 0, kt, v->kc);
        if (x1 > x0)
            sh_packed_pack_rows(v->rows, v->in, (int)r0, (int)r0 + nb, xt, v->in, x0, x1, v->xpk);
        if (!l->batch_normalize) {
            act_rows(l->act, kt + j0, nb, v->kc, j1 - j0, v->bin + j0);
            return;
        }
    }
    bn_act(l, x, v, 0, p->t, kt, v->kc, j0, j1);
}

/* Step t's outputs, streams [b0, b1), columns [o0, o1): act(s_t Wout^T + bout) (Wout^T
 * packed), or batch norm (all streams). */
static void output_step(sh_layer *l, sh_exec *x, const rnn_view *v, int t, int b0, int b1,
                        int o0, int o1)
{
    if (o1 <= o0) return;
    size_t r0 = (size_t)t * v->b + (size_t)b0;
    float *y = l->out + r0 * v->k;
    sh_packed_gemm(b1 - b0, o0, o1, v->h, l->keep + r0 * v->kc + 2 * v->h, v->kc, v->pout, 0, y,
                   v->k);
    if (l->batch_normalize)
        bn_act(l, x, v, 2, t, y, v->k, o0, o1);
    else
        act_rows(l->act, y + o0, b1 - b0, v->k, o1 - o0, v->bout + o0);
}

/* Step t, streams [b0, b1), units of blocks [k0, k1): the input part, the self part from s
 * of step t-1 (Wself^T packed), then s, packed as well for the weight gradients; and the
 * outputs of step t-1 (its s is whole now), the same share of their columns. Step T:
 * outputs only. */
static void rnn_step_forward(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    rnn_view v = view(l, x);
    int t = p->t, k0 = p->k0, k1 = p->k1, nblk = sh_rnn_nblocks(v.h), o0, o1, x0, x1;
    int b0 = p->b0, nb = p->b1 - p->b0;
    scale_blocks(k0, k1, nblk, sh_packed_npanels(v.k), &o0, &o1);
    if (t > 0)
        output_step(l, x, &v, t - 1, b0, p->b1, o0 * SH_PACKED_NR,
                    o1 * SH_PACKED_NR < v.k ? o1 * SH_PACKED_NR : v.k);
    int j0 = k0 * SH_RNN_BLOCK, j1 = k1 * SH_RNN_BLOCK;
    if (j1 > v.h) j1 = v.h;
    if (t == l->steps || j1 <= j0) return;
    scale_blocks(k0, k1, nblk, sh_packed_npanels(v.in), &x0, &x1);
    input_step(l, x, &v, p, j0, j1, x0, x1);
    const float *sprev = t ? l->keep + ((size_t)(t - 1) * v.b + b0) * v.kc + 2 * v.h
                           : v.s0 + (size_t)b0 * v.h;
    int ldp = t ? v.kc : v.h;
    float *kt = l->keep + ((size_t)t * v.b + b0) * v.kc;
    sh_packed_gemm(nb, j0, j1, v.h, sprev, ldp, v.pself, 0, kt + v.h, v.kc);
    if (l->batch_normalize)
        bn_act(l, x, &v, 1, t, kt + v.h, v.kc, j0, j1);
    else
        act_rows(l->act, kt + v.h + j0, nb, v.kc, j1 - j0, v.bself + j0);
    for (int b = 0; b < nb; b++) {
        float *row = kt + (size_t)b * v.kc;
        const float *yi = input_part(l, &v, (size_t)t * v.b + b0 + b);
        for (int j = j0; j < j1; j++) row[2 * v.h + j] = yi[j] + row[v.h + j];
    }
    int r0 = v.b + t * v.b + b0; /* [s0; s]: s of step t is rows B + tB .. */
    sh_packed_pack_rows(v.b + v.rows, v.h, r0, r0 + nb, kt + 2 * v.h, v.kc, k0, k1, v.spk);
}

/* W (n, h) packed at dst for the forward products (transposed: 1) or the backward ones. */
static void pack_w(const float *w, int h, int n, int transposed, float *dst)
{
    if (transposed)
        sh_packed_pack(1, h, n, w, h, 0, sh_packed_npanels(n), dst);
    else
        sh_packed_pack(0, n, h, w, h, 0, sh_packed_npanels(h), dst);
}

static void rnn_forward(sh_layer *l, sh_exec *x)
{
    rnn_view v = view(l, x);
    /* one step's products: the input part, the self part, the outputs */
    double macs = (double)v.b * v.h * (v.h + v.in + v.k);
    size_t bh = (size_t)v.b * v.h;
    memcpy(v.s0, l->state, bh * sizeof(float));
    l->input_onehot = l->src[0] < 0 && sh_rnn_onehot(l->in[0], v.rows, v.in, v.idx);
    if (l->input_onehot) {
        /* row c of wt: the input part of every row whose input is c; activated here, once per
         * input rather than once per row, unless batch norm comes between */
        sh_rnn_transpose(v.win, v.h, v.in, v.wt);
        if (!l->batch_normalize) act_rows(l->act, v.wt, v.in, v.h, v.h, v.bin);
    } else {
        pack_w(v.win, v.in, v.h, 1, v.pin);
    }
    pack_w(v.wself, v.h, v.h, 1, v.pself);
    pack_w(v.wout, v.h, v.k, 1, v.pout);
    sh_packed_pack_rows(v.b + v.rows, v.h, 0, v.b, v.s0, v.h, 0, sh_packed_npanels(v.h), v.spk);
    int nblk = sh_rnn_nblocks(v.h);
    sh_rnn_loop lp = {{rnn_step_forward, NULL}, {nblk, 0}, {macs, 0}, 0, l->steps, 0, 0, 0};
    sh_rnn_run_loop(l, x, &lp);
    const float *last = l->keep + (size_t)(l->steps - 1) * v.b * v.kc + 2 * v.h;
    for (int b = 0; b < v.b; b++)
        memcpy(l->state + (size_t)b * v.h, last + (size_t)b * v.kc, (size_t)v.h * sizeof(float));
}

/* The output part's activation and batch-norm gradients, units [j0, j1), step by step. */
static void rnn_output_bn_back(sh_layer *l, sh_exec *x, int tid, int j0, int j1)
{
    (void)tid;
    rnn_view v = view(l, x);
    const rnn_bn *q = &v.bn[2];
    for (int t = 0; t < l->steps && j1 > j0; t++) {
        size_t r0 = (size_t)t * v.b;
        for (int b = 0; b < v.b; b++)
            sh_act_backward(l->act, l->out + (r0 + b) * v.k + j0, l->delta + (r0 + b) * v.k + j0,
                            (size_t)(j1 - j0));
        sh_rnn_bn_backward(l->delta + r0 * v.k + j0, v.k, v.b, j1 - j0, q->gamma + j0,
                           l->keep + r0 * v.kc + q->col + j0, v.kc, q->invstd + (size_t)t * q->n + j0,
                           q->ggamma + j0, q->gbeta + j0);
    }
}

/* Without batch norm: the output activation's gradient of step t's rows of streams [b0, b1),
 * columns [o0, o1). */
static void output_act_back(sh_layer *l, const rnn_view *v, int t, int b0, int b1, int o0,
                            int o1)
{
    if (l->batch_normalize || o1 <= o0) return;
    size_t r0 = (size_t)t * v->b;
    for (int b = b0; b < b1; b++)
        sh_act_backward(l->act, l->out + (r0 + b) * v->k + o0, l->delta + (r0 + b) * v->k + o0,
                        (size_t)(o1 - o0));
}

/* dL/ds (din + carry) through tanh into both parts in one pass: din of the input part (yi
 * its activation), dself of the self part (ys). */
static inline void tanh_back2(int n, float *restrict din, const float *restrict carry,
                              const float *restrict yi, const float *restrict ys,
                              float *restrict dself)
{
    for (int j = 0; j < n; j++) {
        float d = din[j] + carry[j];
        din[j] = d * (1.0f - yi[j] * yi[j]);
        dself[j] = d * (1.0f - ys[j] * ys[j]);
    }
}

/* Step t, streams [b0, b1), units of blocks [k0, k1): dL/ds from above (dY_t Wout, Wout
 * packed) and from the step after (the carry), through the activation into both parts. */
static void rnn_step_backward(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    rnn_view v = view(l, x);
    int t = p->t, j0 = p->k0 * SH_RNN_BLOCK;
    int j1 = p->k1 * SH_RNN_BLOCK < v.h ? p->k1 * SH_RNN_BLOCK : v.h, nj = j1 - j0;
    if (nj <= 0) return;
    size_t r0 = (size_t)t * v.b, rb = r0 + (size_t)p->b0;
    sh_packed_gemm(p->b1 - p->b0, j0, j1, v.k, l->delta + rb * v.k, v.k, v.pout, 0,
                   v.din + rb * v.h, v.h);
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = r0 + b;
        const float *kr = l->keep + r * v.kc, *yi = input_part(l, &v, r) + j0;
        float *din = v.din + r * v.h + j0, *dself = v.dself + r * v.h + j0;
        const float *carry = v.ds + (size_t)b * v.h + j0;
        if (l->act == SH_ACT_TANH)
            tanh_back2(nj, din, carry, yi, kr + v.h + j0, dself);
        else {
            for (int j = 0; j < nj; j++) din[j] += carry[j];
            memcpy(dself, din, (size_t)nj * sizeof(float));
            sh_act_backward(l->act, yi, din, (size_t)nj);
            sh_act_backward(l->act, kr + v.h + j0, dself, (size_t)nj);
        }
    }
    if (!l->batch_normalize) return;
    for (int part = 0; part < 2; part++) { /* batch norm: all streams (sh_rnn_run_loop) */
        const rnn_bn *q = &v.bn[part];
        float *d = (part == 0 ? v.din : v.dself) + r0 * v.h + j0;
        sh_rnn_bn_backward(d, v.h, v.b, nj, q->gamma + j0, l->keep + r0 * v.kc + q->col + j0, v.kc,
                           q->invstd + (size_t)t * q->n + j0, q->ggamma + j0, q->gbeta + j0);
    }
}

/* After step t's backward, streams [b0, b1), blocks [k0, k1) of: dL/dx of step t's rows
 * (when wanted), the output activation's gradient of step t-1's rows and dL/ds of step t-1
 * through the self weights (packed), each a share of its own columns. */
static void rnn_step_carry(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    rnn_view v = view(l, x);
    int k0 = p->k0, k1 = p->k1, o0, o1, nblk = sh_rnn_nblocks(v.h);
    scale_blocks(k0, k1, nblk, sh_packed_npanels(v.k), &o0, &o1);
    int t = p->t, i0, i1, nb = p->b1 - p->b0;
    size_t rb = (size_t)t * v.b + (size_t)p->b0;
    scale_blocks(k0, k1, nblk, sh_packed_npanels(v.in), &i0, &i1);
    i0 *= SH_PACKED_NR;
    i1 = i1 * SH_PACKED_NR < v.in ? i1 * SH_PACKED_NR : v.in;
    if (l->in_delta[0] && i1 > i0) /* dL/dx of step t: dG_in Win (packed) */
        sh_packed_gemm(nb, i0, i1, v.h, v.din + rb * v.h, v.h, v.pin, l->accum[0],
                       l->in_delta[0] + rb * v.in, v.in);
    int c0 = k0 * SH_RNN_BLOCK, c1 = k1 * SH_RNN_BLOCK < v.h ? k1 * SH_RNN_BLOCK : v.h;
    if (t == 0 || c1 <= c0) return;
    output_act_back(l, &v, t - 1, p->b0, p->b1, o0 * SH_PACKED_NR,
                    o1 * SH_PACKED_NR < v.k ? o1 * SH_PACKED_NR : v.k);
    sh_packed_gemm(nb, c0, c1, v.h, v.dself + rb * v.h, v.h, v.pself, 0,
                   v.ds + (size_t)p->b0 * v.h, v.h);
}

/* Gradients of weight rows [k0, k1) of the stacked (2H + K) rows: Win, Wself, Wout (and,
 * without batch norm, their biases: with it the shifts' gradients came from the steps), each
 * dG^T X over every row with X packed (rnn_pack_grads). */
static void rnn_param_grads(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    rnn_view v = view(l, x);
    float *g = x->grad[0];
    float *gw = g + l->w_off, *gb = g + l->b_off;
    int biases = !l->batch_normalize, kp = v.b + v.rows;
    for (int k = k0; k < k1;) {
        if (k < v.h) { /* input rows */
            int e = k1 < v.h ? k1 : v.h;
            if (l->input_onehot)
                sh_rnn_onehot_grad(v.din, v.rows, v.h, v.idx, v.in, k, e, v.wt, gw);
            else
                sh_packed_gemm_tn(e - k, 0, v.in, v.rows, v.din + k, v.h, v.xpk, v.rows, 0,
                                  gw + (size_t)k * v.in, v.in);
            if (biases) sh_rnn_colsum(v.din, v.rows, v.h, k, e, gb + k);
            k = e;
        } else if (k < 2 * v.h) { /* self rows */
            int e = k1 < 2 * v.h ? k1 : 2 * v.h, a = k - v.h;
            float *gs = gw + (size_t)v.h * v.in + (size_t)a * v.h;
            sh_packed_gemm_tn(e - k, 0, v.h, v.rows, v.dself + a, v.h, v.spk, kp, 0, gs, v.h);
            if (biases) sh_rnn_colsum(v.dself, v.rows, v.h, a, a + e - k, gb + v.h + a);
            k = e;
        } else { /* output rows */
            int a = k - 2 * v.h, e = k1;
            float *go = gw + (size_t)v.h * v.in + (size_t)v.h * v.h + (size_t)a * v.h;
            sh_packed_gemm_tn(e - k, 0, v.h, v.rows, l->delta + a, v.k,
                              v.spk + (size_t)v.b * SH_PACKED_NR, kp, 0, go, v.h);
            if (biases) sh_rnn_colsum(l->delta, v.rows, v.k, a, a + e - k, gb + 2 * v.h + a);
            k = e;
        }
    }
}

static void rnn_backward(sh_layer *l, sh_exec *x)
{
    rnn_view v = view(l, x);
    /* one step's products: dY Wout, the carry and dL/dx */
    double macs = (double)v.b * v.h * (v.k + v.h + (l->in_delta[0] ? v.in : 0));
    memset(v.ds, 0, (size_t)v.b * v.h * sizeof(float));
    if (l->batch_normalize) { /* the steps add into the shifts' and scales' gradients */
        memset(x->grad[0] + l->b_off, 0, l->b_count * sizeof(float));
        memset(x->grad[0] + l->s_off, 0, l->s_count * sizeof(float));
        sh_exec_split(l, x, v.k, rnn_output_bn_back);
    }
    output_act_back(l, &v, l->steps - 1, 0, v.b, 0, v.k); /* the others in rnn_step_carry */
    pack_w(v.wout, v.h, v.k, 0, v.pout);
    pack_w(v.wself, v.h, v.h, 0, v.pself);
    if (l->in_delta[0]) pack_w(v.win, v.in, v.h, 0, v.pin);
    int nblk = sh_rnn_nblocks(v.h);
    sh_rnn_loop lp = {{rnn_step_backward, rnn_step_carry}, {nblk, nblk}, {macs, macs},
                      l->steps - 1, 0, 0, 0, 0};
    sh_rnn_run_loop(l, x, &lp);
    sh_exec_split(l, x, 2 * v.h + v.k, rnn_param_grads);
}

/* Darknet's .weights (parser.c save_weights_upto, RNN): its input, self and output connected
 * layers in turn, each as a [connected] one: biases, weights (rows = outputs), and with batch
 * norm the scales, rolling means and rolling variances. */
static int rnn_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    size_t in = l->inputs, h = (size_t)l->hidden, k = (size_t)l->out_shape.c, units = 2 * h + k;
    const size_t rows[3] = {h, h, k}, cols[3] = {in, h, h};
    size_t w = l->w_off, u = 0;
    int n = 0;
    for (int p = 0; p < 3; p++) {
        b[n++] = (sh_dn_blob){.off = l->b_off + u, .count = rows[p]};
        b[n++] = (sh_dn_blob){.off = w, .count = rows[p] * cols[p], .rows = rows[p]};
        if (l->batch_normalize) {
            b[n++] = (sh_dn_blob){.off = l->s_off + u, .count = rows[p]};
            b[n++] = (sh_dn_blob){.stats = 1, .off = l->stat_off + u, .count = rows[p]};
            b[n++] = (sh_dn_blob){.stats = 1, .off = l->stat_off + units + u, .count = rows[p]};
        }
        w += rows[p] * cols[p];
        u += rows[p];
    }
    return n;
}

const sh_layer_ops sh_rnn_ops = {
    .cfg_name = "rnn",
    .short_name = "rnn",
    .caps = SH_LAYER_ACTIVATION,
    .parse = rnn_parse,
    .init = rnn_init,
    .forward = rnn_forward,
    .backward = rnn_backward,
    .darknet_blobs = rnn_darknet_blobs,
};
