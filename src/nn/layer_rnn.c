/* layer_rnn.c — [rnn]: output (K, default 1), hidden (H, default K), activation (Darknet
 * default logistic). Darknet's plain recurrent layer (rnn_layer.c): three connected layers,
 * input (I -> H), self (H -> H) and output (H -> K), each with a bias and the activation.
 * Darknet as Debian ships it has no `hidden` (H is always K); earlier Darknet read it, and
 * so does shoal:
 *   s' = act(Win x + bin) + act(Wself s + bself)        y = act(Wout s' + bout)
 * over the T time steps of each batch, s of every stream carried to the next batch, gradients
 * through time truncated at the batch's first step.
 * Weights: Win (H, I), Wself (H, H), Wout (K, H), then bin (H), bself (H), bout (K);
 * uniform(±sqrt(2/fan-in)) as Darknet's connected layers.
 * Not here: the gated layers (layer_gru.c, layer_lstm.c), shared helpers (recurrent.h).
 * Proved by tests/nn/test_layer_rnn.c (finite differences; the same equations in PyTorch). */
#include "base/err.h"
#include "nn/gemm.h"
#include "nn/recurrent.h"

static shoal_result rnn_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int h = 1, k = 1;
    SH_TRY(sh_cfg_int(s, "output", 1, 1, 1 << 16, &k));
    SH_TRY(sh_cfg_int(s, "hidden", k, 1, 1 << 16, &h));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    SH_TRY(sh_rnn_parse_common(l, s, ctx));
    size_t in = l->inputs, rows = (size_t)ctx->batch, streams = rows / (size_t)l->steps;
    size_t hh = (size_t)h, kk = (size_t)k;
    l->hidden = h;
    l->out_shape = (sh_shape){k, 1, 1};
    l->w_off = 0;
    l->w_count = hh * in + hh * hh + kk * hh;
    l->b_off = l->w_count;
    l->b_count = 2 * hh + kk;
    l->param_count = l->w_count + l->b_count;
    l->keep_count = 3 * hh;                    /* per row: act(input), act(self), s */
    l->keep_fixed = streams * hh;              /* s0 of this batch */
    l->cache_count = 2 * rows * hh + streams * hh; /* ds / d input part, d self part, carry */
    l->cache_count += hh * in + rows;          /* one-hot inputs: Win transposed, columns */
    l->state_count = streams * hh;
    l->flops = (double)hh * (double)(in + hh) + (double)kk * (double)hh;
    return SHOAL_OK;
}

static void rnn_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    (void)stats;
    size_t in = l->inputs, h = (size_t)l->hidden, k = (size_t)l->out_shape.c;
    float *w = params + l->w_off;
    sh_rnn_uniform(w, h * in, sqrtf(2.0f / (float)in), rng);
    sh_rnn_uniform(w + h * in, h * h, sqrtf(2.0f / (float)h), rng);
    sh_rnn_uniform(w + h * in + h * h, k * h, sqrtf(2.0f / (float)h), rng);
    memset(params + l->b_off, 0, l->b_count * sizeof(float));
}

typedef struct {
    int h, k, in, b, rows, kc;
    float *win, *wself, *wout, *bin, *bself, *bout;
    float *s0;        /* (B, H) */
    float *din;       /* (rows, H): dL/ds, then the input part's pre-activation gradient */
    float *dself;     /* (rows, H): the self part's pre-activation gradient */
    float *ds;        /* (B, H) carried to the step before */
    float *wt;        /* (I, H) one-hot inputs: Win transposed, then the gradient's scratch */
    int32_t *idx;     /* (rows) one-hot inputs: each row's column */
} rnn_view;

static rnn_view view(sh_layer *l, const sh_exec *x)
{
    rnn_view v;
    v.h = l->hidden;
    v.k = l->out_shape.c;
    v.in = (int)l->inputs;
    v.kc = 3 * v.h;
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
    return v;
}

static void act_rows(sh_act a, float *p, int rows, int ld, int count, const float *bias)
{
    for (int r = 0; r < rows; r++) {
        float *row = p + (size_t)r * ld;
        for (int j = 0; j < count; j++) row[j] += bias[j];
        sh_act_forward(a, row, (size_t)count);
    }
}

static void rnn_input_rows(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    rnn_view v = view(l, x);
    int nr = r1 - r0;
    if (nr <= 0) return;
    float *a = l->keep + (size_t)r0 * v.kc;
    if (l->input_onehot)
        for (int r = 0; r < nr; r++)
            memcpy(a + (size_t)r * v.kc, v.wt + (size_t)v.idx[r0 + r] * v.h, (size_t)v.h * sizeof(float));
    else
        sh_gemm(0, 1, nr, v.h, v.in, 1.0f, l->in[0] + (size_t)r0 * v.in, v.in, v.win, v.in, 0.0f,
                a, v.kc);
    act_rows(l->act, a, nr, v.kc, v.h, v.bin);
}

static void rnn_output_rows(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    rnn_view v = view(l, x);
    int nr = r1 - r0;
    if (nr <= 0) return;
    float *y = l->out + (size_t)r0 * v.k;
    sh_gemm(0, 1, nr, v.k, v.h, 1.0f, l->keep + (size_t)r0 * v.kc + 2 * v.h, v.kc, v.wout, v.h,
            0.0f, y, v.k);
    act_rows(l->act, y, nr, v.k, v.k, v.bout);
}

/* Step t, units [j0, j1): the self part from s of step t-1, then s. */
static void rnn_step_forward(sh_layer *l, sh_exec *x, int tid, int j0, int j1)
{
    (void)tid;
    rnn_view v = view(l, x);
    int t = l->cur_step, nj = j1 - j0;
    if (nj <= 0) return;
    const float *sprev = t ? l->keep + (size_t)(t - 1) * v.b * v.kc + 2 * v.h : v.s0;
    int ldp = t ? v.kc : v.h;
    float *kt = l->keep + (size_t)t * v.b * v.kc;
    sh_gemm(0, 1, v.b, nj, v.h, 1.0f, sprev, ldp, v.wself + (size_t)j0 * v.h, v.h, 0.0f,
            kt + v.h + j0, v.kc);
    act_rows(l->act, kt + v.h + j0, v.b, v.kc, nj, v.bself + j0);
    for (int b = 0; b < v.b; b++) {
        float *row = kt + (size_t)b * v.kc;
        for (int j = j0; j < j1; j++) row[2 * v.h + j] = row[j] + row[v.h + j];
    }
}

static int chunk_rows(const sh_exec *x)
{
    int parts = x->nthreads == 1 ? 1 : 2 * x->nthreads;
    return (x->nimg + parts - 1) / parts;
}

static void rnn_forward(sh_layer *l, sh_exec *x)
{
    rnn_view v = view(l, x);
    double macs = (double)v.b * v.h * v.h; /* one step's product */
    size_t bh = (size_t)v.b * v.h;
    memcpy(v.s0, l->state, bh * sizeof(float));
    l->input_onehot = l->src[0] < 0 && sh_rnn_onehot(l->in[0], v.rows, v.in, v.idx);
    if (l->input_onehot) sh_rnn_transpose(v.win, v.h, v.in, v.wt);
    sh_exec_chunks(l, x, chunk_rows(x), rnn_input_rows);
    for (int t = 0; t < l->steps; t++) sh_rnn_split_step(l, x, t, v.h, macs, rnn_step_forward);
    sh_exec_chunks(l, x, chunk_rows(x), rnn_output_rows);
    const float *last = l->keep + (size_t)(l->steps - 1) * v.b * v.kc + 2 * v.h;
    for (int b = 0; b < v.b; b++)
        memcpy(l->state + (size_t)b * v.h, last + (size_t)b * v.kc, (size_t)v.h * sizeof(float));
}

/* Rows [r0, r1): the output activation's gradient, then dL/ds = dY Wout. */
static void rnn_output_back(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    rnn_view v = view(l, x);
    int nr = r1 - r0;
    if (nr <= 0) return;
    float *dy = l->delta + (size_t)r0 * v.k;
    sh_act_backward(l->act, l->out + (size_t)r0 * v.k, dy, (size_t)nr * v.k);
    sh_gemm(0, 0, nr, v.h, v.k, 1.0f, dy, v.k, v.wout, v.h, 0.0f, v.din + (size_t)r0 * v.h, v.h);
}

static void rnn_step_backward(sh_layer *l, sh_exec *x, int tid, int j0, int j1)
{
    (void)tid;
    rnn_view v = view(l, x);
    int t = l->cur_step, nj = j1 - j0;
    if (nj <= 0) return;
    for (int b = 0; b < v.b; b++) {
        size_t r = (size_t)t * v.b + b;
        const float *kr = l->keep + r * v.kc;
        float *din = v.din + r * v.h + j0, *dself = v.dself + r * v.h + j0;
        const float *carry = v.ds + (size_t)b * v.h + j0;
        for (int j = 0; j < nj; j++) din[j] += carry[j];
        memcpy(dself, din, (size_t)nj * sizeof(float));
        sh_act_backward(l->act, kr + j0, din, (size_t)nj);
        sh_act_backward(l->act, kr + v.h + j0, dself, (size_t)nj);
    }
}

static void rnn_step_carry(sh_layer *l, sh_exec *x, int tid, int c0, int c1)
{
    (void)tid;
    rnn_view v = view(l, x);
    if (c1 <= c0) return;
    const float *d = v.dself + (size_t)l->cur_step * v.b * v.h;
    sh_gemm(0, 0, v.b, c1 - c0, v.h, 1.0f, d, v.h, v.wself + c0, v.h, 0.0f, v.ds + c0, v.h);
}

/* Gradients of weight rows [k0, k1) of the stacked (2H + K) rows: Win, Wself, Wout. */
static void rnn_param_grads(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    rnn_view v = view(l, x);
    float *g = x->grad[0];
    float *gw = g + l->w_off, *gb = g + l->b_off;
    for (int k = k0; k < k1;) {
        if (k < v.h) { /* input rows */
            int e = k1 < v.h ? k1 : v.h;
            if (l->input_onehot)
                sh_rnn_onehot_grad(v.din, v.rows, v.h, v.idx, v.in, k, e, v.wt, gw);
            else
                sh_gemm(1, 0, e - k, v.in, v.rows, 1.0f, v.din + k, v.h, l->in[0], v.in, 0.0f,
                        gw + (size_t)k * v.in, v.in);
            sh_rnn_colsum(v.din, v.rows, v.h, k, e, gb + k);
            k = e;
        } else if (k < 2 * v.h) { /* self rows */
            int e = k1 < 2 * v.h ? k1 : 2 * v.h, a = k - v.h;
            float *gs = gw + (size_t)v.h * v.in + (size_t)a * v.h;
            int later = v.rows - v.b;
            if (later > 0)
                sh_gemm(1, 0, e - k, v.h, later, 1.0f, v.dself + (size_t)v.b * v.h + a, v.h,
                        l->keep + 2 * v.h, v.kc, 0.0f, gs, v.h);
            sh_gemm(1, 0, e - k, v.h, v.b, 1.0f, v.dself + a, v.h, v.s0, v.h,
                    later > 0 ? 1.0f : 0.0f, gs, v.h);
            sh_rnn_colsum(v.dself, v.rows, v.h, a, a + e - k, gb + v.h + a);
            k = e;
        } else { /* output rows */
            int a = k - 2 * v.h, e = k1;
            float *go = gw + (size_t)v.h * v.in + (size_t)v.h * v.h + (size_t)a * v.h;
            sh_gemm(1, 0, e - k, v.h, v.rows, 1.0f, l->delta + a, v.k, l->keep + 2 * v.h, v.kc,
                    0.0f, go, v.h);
            sh_rnn_colsum(l->delta, v.rows, v.k, a, a + e - k, gb + 2 * v.h + a);
            k = e;
        }
    }
}

static void rnn_input_delta(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    rnn_view v = view(l, x);
    if (r1 <= r0) return;
    sh_gemm(0, 0, r1 - r0, v.in, v.h, 1.0f, v.din + (size_t)r0 * v.h, v.h, v.win, v.in,
            l->accum[0] ? 1.0f : 0.0f, l->in_delta[0] + (size_t)r0 * v.in, v.in);
}

static void rnn_backward(sh_layer *l, sh_exec *x)
{
    rnn_view v = view(l, x);
    double macs = (double)v.b * v.h * v.h; /* one step's product */
    memset(v.ds, 0, (size_t)v.b * v.h * sizeof(float));
    sh_exec_chunks(l, x, chunk_rows(x), rnn_output_back);
    for (int t = l->steps - 1; t >= 0; t--) {
        sh_rnn_split_step(l, x, t, v.h, macs, rnn_step_backward);
        if (t > 0) sh_rnn_split_step(l, x, t, v.h, macs, rnn_step_carry);
    }
    sh_exec_split(l, x, 2 * v.h + v.k, rnn_param_grads);
    if (l->in_delta[0]) sh_exec_chunks(l, x, chunk_rows(x), rnn_input_delta);
}

const sh_layer_ops sh_rnn_ops = {
    .cfg_name = "rnn",
    .short_name = "rnn",
    .parse = rnn_parse,
    .init = rnn_init,
    .forward = rnn_forward,
    .backward = rnn_backward,
};
