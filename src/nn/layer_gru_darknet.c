/* layer_gru_darknet.c — [gru] with form=darknet: Darknet's gru_layer.c, so that its .weights
 * files load and give Darknet's outputs; backward through time as the other recurrent layers.
 * Not here: PyTorch's form and the form key (layer_gru.c), the helpers shared by the recurrent
 * layers (recurrent.h), the .weights file (darknet_weights.c).
 * Proved by tests/nn/test_layer_rnn.c and tests/nn/test_darknet_gru.c (against Darknet). */
#include "base/err.h"
#include "nn/gru.h"

/* Per time step, with σ the logistic:
 *   z = σ(Uz x + buz + Wz h + bwz)     r = σ(Ur x + bur + Wr h + bwr)
 *   n = act(Uh x + buh + Wh (r h) + bwh)   (act: σ, or tanh with tanh=1)   h' = z h + (1 - z) n
 * The reset gate multiplies h before the candidate's state product, so a step takes two
 * products, h [Wr; Wz]^T then (r h) Wh^T, the second waiting for every unit's r.
 * Weights: Wx (3H, I) = [Ur; Uz; Uh], Wh (3H, H) = [Wr; Wz; Wh], bx (3H), bh (3H), gate-major
 * (r, z, n; each gate's H rows contiguous), as six connected layers. Started as Darknet starts
 * connected layers: weights uniform(±sqrt(2 / fan-in)), biases 0. */

#define NG 3 /* gates r, z, n */

/* Floats of a packed region, with room to align it. */
static size_t region(size_t count) { return count + SH_PACKED_NR; }

static shoal_result gru_dn_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int h = 1, tanh_n = 0;
    SH_TRY(sh_cfg_int(s, "output", 1, 1, 1 << 16, &h));
    SH_TRY(sh_cfg_int(s, "tanh", 0, 0, 1, &tanh_n));
    SH_TRY(sh_rnn_parse_common(l, s, ctx, 0));
    size_t in = l->inputs, rows = (size_t)ctx->batch, streams = rows / (size_t)l->steps;
    size_t g = (size_t)NG * (size_t)h;
    int ih = (int)in, hh = h;
    l->hidden = h;
    l->ngates = NG;
    l->act = tanh_n ? SH_ACT_TANH : SH_ACT_LOGISTIC; /* the candidate's */
    l->out_shape = (sh_shape){h, 1, 1};
    l->w_off = 0;
    l->w_count = g * in + g * (size_t)h;
    l->b_off = l->w_count;
    l->b_count = 2 * g;
    l->param_count = l->w_count + l->b_count;
    l->keep_count = g + (size_t)h;       /* per row: r, z, n, then r h */
    l->keep_fixed = streams * (size_t)h; /* h0 of this batch */
    l->cache_count = rows * g;           /* input parts, then the gates' gradients */
    l->cache_count += streams * (size_t)(2 * h + h + h); /* [r z] products, n's (or dL/d(r h)), dh */
    l->cache_count += g * in + rows;                     /* one-hot: Wx transposed, columns */
    size_t rz = sh_packed_count(hh, 2 * hh), zr = sh_packed_count(2 * hh, hh);
    size_t xf = sh_packed_count(ih, (int)g), xb = sh_packed_count((int)g, ih);
    l->cache_count += region(rz > zr ? rz : zr) + region(sh_packed_count(hh, hh));
    l->cache_count += region(xf > xb ? xf : xb);
    l->cache_count += region(sh_packed_count((int)(rows + streams), hh));
    l->cache_count += region(sh_packed_count((int)rows, hh)) + region(sh_packed_count((int)rows, ih));
    l->state_count = streams * (size_t)h;
    l->flops = (double)g * (double)(in + (size_t)h);
    return SHOAL_OK;
}

static void gru_dn_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    (void)stats;
    size_t h = (size_t)l->hidden, in = l->inputs;
    float *wx = params + l->w_off;
    sh_rnn_uniform(wx, NG * h * in, sqrtf(2.0f / (float)in), rng);
    sh_rnn_uniform(wx + NG * h * in, NG * h * h, sqrtf(2.0f / (float)h), rng);
    memset(params + l->b_off, 0, l->b_count * sizeof(float));
}

typedef struct {
    int h, g, in, b, rows;
    size_t kc;
    const float *wx, *wh, *bx, *bh;
    float *h0;             /* (B, H) */
    float *dg;             /* (rows, 3H): input parts (+ bx), then the gates' gradients */
    float *arz, *an, *dh;  /* (B, 2H), (B, H) (backward: dL/d(r h)), (B, H) carried */
    float *wt;             /* (I, 3H) one-hot: Wx transposed plus bx; gradient scratch */
    int32_t *idx;          /* (rows) one-hot columns */
    float *pk_rz, *pk_n;   /* [Wr; Wz] and Wh packed (forward: transposed) */
    float *pk_x;           /* Wx packed */
    float *hpk, *qpk, *xpk; /* [h0; h], r h, x packed for the weight gradients */
} dn_view;

static dn_view view(const sh_layer *l, const sh_exec *x)
{
    dn_view v;
    v.h = l->hidden;
    v.g = NG * v.h;
    v.in = (int)l->inputs;
    v.b = sh_rnn_streams(l, x);
    v.rows = x->nimg;
    v.kc = l->keep_count;
    int rmax = x->batch, bmax = x->batch / l->steps;
    v.wx = x->params + l->w_off;
    v.wh = v.wx + (size_t)v.g * v.in;
    v.bx = x->params + l->b_off;
    v.bh = v.bx + v.g;
    v.h0 = l->keep + (size_t)rmax * v.kc;
    v.dg = l->cache;
    v.arz = v.dg + (size_t)rmax * v.g;
    v.an = v.arz + (size_t)bmax * 2 * v.h;
    v.dh = v.an + (size_t)bmax * v.h;
    v.wt = v.dh + (size_t)bmax * v.h;
    v.idx = (int32_t *)(v.wt + (size_t)v.g * v.in);
    size_t rz = sh_packed_count(v.h, 2 * v.h), zr = sh_packed_count(2 * v.h, v.h);
    size_t xf = sh_packed_count(v.in, v.g), xb = sh_packed_count(v.g, v.in);
    v.pk_rz = sh_rnn_align((float *)(v.idx + rmax));
    v.pk_n = sh_rnn_align(v.pk_rz + (rz > zr ? rz : zr));
    v.pk_x = sh_rnn_align(v.pk_n + sh_packed_count(v.h, v.h));
    v.hpk = sh_rnn_align(v.pk_x + (xf > xb ? xf : xb));
    v.qpk = sh_rnn_align(v.hpk + sh_packed_count(rmax + bmax, v.h));
    v.xpk = sh_rnn_align(v.qpk + sh_packed_count(rmax, v.h));
    return v;
}

/* h of the step before t for stream b's row (t*B + b). */
static const float *hprev(const sh_layer *l, const dn_view *v, int t)
{
    return t ? l->out + (size_t)(t - 1) * v->b * v->h : v->h0;
}

/* Columns [16 p0, 16 p1) of n columns, clipped. */
static int col_end(int p1, int n) { return p1 * SH_PACKED_NR < n ? p1 * SH_PACKED_NR : n; }

/* Rows [r0, r1): the input parts X Wx^T + bx. */
static void input_rows(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    dn_view v = view(l, x);
    sh_gru_input_part(l, r0, r1, v.g, v.wt, v.idx, v.pk_x, v.bx, v.dg);
}

/* The loops over a row's units, on restrict pointers so that σ and tanh vectorise: gates
 * σ(ax + ah + bias) into g; r h into q; the candidate act(ax + an + bias) into n and
 * h' = z h + (1 - z) n into out. */
static inline void gates_row(int w, const float *restrict ax, const float *restrict ah,
                             const float *restrict bias, float *restrict g)
{
    for (int u = 0; u < w; u++) g[u] = sh_rnn_sigmoid(ax[u] + ah[u] + bias[u]);
}
static inline void reset_row(int w, const float *restrict r, const float *restrict h,
                             float *restrict q)
{
    for (int u = 0; u < w; u++) q[u] = r[u] * h[u];
}
static inline void cand_row(int w, int is_tanh, const float *restrict ax, const float *restrict an,
                            const float *restrict bias, const float *restrict z,
                            const float *restrict h, float *restrict n, float *restrict out)
{
    if (is_tanh)
        for (int u = 0; u < w; u++) n[u] = sh_rnn_tanh(ax[u] + an[u] + bias[u]);
    else
        gates_row(w, ax, an, bias, n);
    for (int u = 0; u < w; u++) out[u] = z[u] * h[u] + (1.0f - z[u]) * n[u];
}

/* Step t, streams [b0, b1), panels [k0, k1) of the 2H columns r, z: their gates, and r h. */
static void step_rz(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    dn_view v = view(l, x);
    int t = p->t, c0 = p->k0 * SH_PACKED_NR, c1 = col_end(p->k1, 2 * v.h);
    if (c1 <= c0) return;
    const float *hp = hprev(l, &v, t);
    sh_packed_gemm(p->b1 - p->b0, c0, c1, v.h, hp + (size_t)p->b0 * v.h, v.h, v.pk_rz, 0,
                   v.arz + (size_t)p->b0 * 2 * v.h, 2 * v.h);
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = (size_t)t * v.b + b;
        const float *ax = v.dg + r * v.g, *ah = v.arz + (size_t)b * 2 * v.h;
        const float *hb = hp + (size_t)b * v.h;
        float *keep = l->keep + r * v.kc;
        gates_row(c1 - c0, ax + c0, ah + c0, v.bh + c0, keep + c0);
        if (c0 < v.h)
            reset_row((c1 < v.h ? c1 : v.h) - c0, keep + c0, hb + c0, keep + v.g + c0);
    }
}

/* Step t, streams [b0, b1), panels [k0, k1) of the H units: the candidate from r h, then h'. */
static void step_n(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    dn_view v = view(l, x);
    int t = p->t, j0 = p->k0 * SH_PACKED_NR, j1 = col_end(p->k1, v.h);
    if (j1 <= j0) return;
    const float *hp = hprev(l, &v, t);
    float *keep0 = l->keep + ((size_t)t * v.b + (size_t)p->b0) * v.kc;
    sh_packed_gemm(p->b1 - p->b0, j0, j1, v.h, keep0 + v.g, (int)v.kc, v.pk_n, 0,
                   v.an + (size_t)p->b0 * v.h, v.h);
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = (size_t)t * v.b + b;
        const float *ax = v.dg + r * v.g + 2 * v.h, *an = v.an + (size_t)b * v.h;
        const float *hb = hp + (size_t)b * v.h, *bn = v.bh + 2 * v.h;
        float *keep = l->keep + r * v.kc, *out = l->out + r * v.h;
        cand_row(j1 - j0, l->act == SH_ACT_TANH, ax + j0, an + j0, bn + j0, keep + v.h + j0,
                 hb + j0, keep + 2 * v.h + j0, out + j0);
    }
}

static void gru_dn_forward(sh_layer *l, sh_exec *x)
{
    dn_view v = view(l, x);
    size_t bh = (size_t)v.b * v.h;
    sh_gru_begin(l, x, v.h0, v.wx, v.bx, v.g, v.idx, v.wt);
    if (!l->input_onehot) sh_packed_pack(1, v.in, v.g, v.wx, v.in, 0, sh_packed_npanels(v.g), v.pk_x);
    sh_exec_chunks(l, x, sh_rnn_chunk_rows(x), input_rows);
    sh_packed_pack(1, v.h, 2 * v.h, v.wh, v.h, 0, sh_packed_npanels(2 * v.h), v.pk_rz);
    sh_packed_pack(1, v.h, v.h, v.wh + (size_t)2 * v.h * v.h, v.h, 0, sh_packed_npanels(v.h),
                   v.pk_n);
    double macs = (double)v.b * v.h * v.h;
    sh_rnn_loop lp = {{step_rz, step_n}, {sh_packed_npanels(2 * v.h), sh_packed_npanels(v.h)},
                      {2 * macs, macs}, 0, l->steps - 1, 0, 0, 0};
    sh_rnn_run_loop(l, x, &lp);
    memcpy(l->state, l->out + (size_t)(l->steps - 1) * bh, bh * sizeof(float));
}

/* One row's units: dAz and dAn from dL/dh' (dy + dh); dh becomes z dh'. */
static inline void zn_row(int w, int is_tanh, const float *restrict z, const float *restrict n,
                          const float *restrict h, const float *restrict dy, float *restrict dh,
                          float *restrict daz, float *restrict dan)
{
    for (int u = 0; u < w; u++) {
        float d = dy[u] + dh[u];
        float slope = is_tanh ? 1.0f - n[u] * n[u] : n[u] * (1.0f - n[u]);
        dan[u] = d * (1.0f - z[u]) * slope;
        daz[u] = d * (h[u] - n[u]) * z[u] * (1.0f - z[u]);
        dh[u] = d * z[u];
    }
}

/* Backward, step t, streams [b0, b1), units [j0, j1): the update gate's and the candidate's
 * gradients from dL/dh' (from above and the step after); dh becomes the direct path z dh'. */
static void zn_grads(sh_layer *l, const dn_view *vp, int t, int b0, int b1, int j0, int j1)
{
    dn_view v = *vp;
    const float *hp = hprev(l, &v, t);
    int is_tanh = l->act == SH_ACT_TANH;
    for (int b = b0; b < b1; b++) {
        size_t r = (size_t)t * v.b + b;
        const float *keep = l->keep + r * v.kc, *dy = l->delta + r * v.h;
        const float *hb = hp + (size_t)b * v.h;
        float *dg = v.dg + r * v.g, *dh = v.dh + (size_t)b * v.h;
        zn_row(j1 - j0, is_tanh, keep + v.h + j0, keep + 2 * v.h + j0, hb + j0, dy + j0, dh + j0,
               dg + v.h + j0, dg + 2 * v.h + j0);
    }
}

/* One row's units: dAr from dL/d(r h) (dq), and the path through r h added to dh. */
static inline void reset_back_row(int w, const float *restrict r, const float *restrict h,
                                  const float *restrict dq, float *restrict dar,
                                  float *restrict dh)
{
    for (int u = 0; u < w; u++) {
        dar[u] = dq[u] * h[u] * r[u] * (1.0f - r[u]);
        dh[u] += dq[u] * r[u];
    }
}

/* Streams [b0, b1), units [16 k0, 16 k1): dL/d(r h) = dAn Wh, then the reset gate's
 * gradient and the path through r h into dh. */
static void back_r(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    dn_view v = view(l, x);
    int t = p->t, j0 = p->k0 * SH_PACKED_NR, j1 = col_end(p->k1, v.h);
    if (j1 <= j0) return;
    const float *hp = hprev(l, &v, t);
    float *dgt = v.dg + ((size_t)t * v.b + (size_t)p->b0) * v.g, *dq = v.an;
    sh_packed_gemm(p->b1 - p->b0, j0, j1, v.h, dgt + 2 * v.h, v.g, v.pk_n, 0,
                   dq + (size_t)p->b0 * v.h, v.h);
    for (int b = p->b0; b < p->b1; b++) {
        size_t r = (size_t)t * v.b + b;
        const float *keep = l->keep + r * v.kc, *hb = hp + (size_t)b * v.h;
        const float *dqb = dq + (size_t)b * v.h;
        float *dg = v.dg + r * v.g, *dh = v.dh + (size_t)b * v.h;
        reset_back_row(j1 - j0, keep + j0, hb + j0, dqb + j0, dg + j0, dh + j0);
    }
}

/* Streams [b0, b1), units [16 k0, 16 k1) of dL/dh of the step before t: the paths above
 * plus [dAr dAz] [Wr; Wz]; then that step's zn_grads, which need only these units of it (one
 * wait for the threads per step saved). */
static void back_carry_zn(sh_layer *l, sh_exec *x, const sh_rnn_part *p)
{
    dn_view v = view(l, x);
    int j0 = p->k0 * SH_PACKED_NR, j1 = col_end(p->k1, v.h);
    if (j1 <= j0) return;
    const float *dgt = v.dg + ((size_t)p->t * v.b + (size_t)p->b0) * v.g;
    sh_packed_gemm(p->b1 - p->b0, j0, j1, 2 * v.h, dgt, v.g, v.pk_rz, 1,
                   v.dh + (size_t)p->b0 * v.h, v.h);
    zn_grads(l, &v, p->t - 1, p->b0, p->b1, j0, j1);
}

/* Panels [p0, p1) of the weight gradients' operands: [h0; h], r h, x. */
static void pack_grads(sh_layer *l, sh_exec *x, int tid, int p0, int p1)
{
    (void)tid;
    dn_view v = view(l, x);
    int hp = sh_packed_npanels(v.h), ip = sh_packed_npanels(v.in), e = p1 < hp ? p1 : hp;
    if (p0 < e) {
        sh_packed_pack_rows(v.b + v.rows, v.h, 0, v.b, v.h0, v.h, p0, e, v.hpk);
        sh_packed_pack_rows(v.b + v.rows, v.h, v.b, v.b + v.rows, l->out, v.h, p0, e, v.hpk);
        sh_packed_pack_rows(v.rows, v.h, 0, v.rows, l->keep + v.g, (int)v.kc, p0, e, v.qpk);
    }
    e = p1 < ip ? p1 : ip;
    if (!l->input_onehot && p0 < e)
        sh_packed_pack_rows(v.rows, v.in, 0, v.rows, l->in[0], v.in, p0, e, v.xpk);
}

/* Gate rows [k0, k1): weight gradients over every row (r and z on h, n on r h) and biases
 * (the input and state biases of a gate have the same gradient). */
static void param_grads(sh_layer *l, sh_exec *x, int tid, int k0, int k1)
{
    (void)tid;
    dn_view v = view(l, x);
    if (k1 <= k0) return;
    float *gwx = x->grad[0] + l->w_off, *gwh = gwx + (size_t)v.g * v.in;
    float *gb = x->grad[0] + l->b_off;
    if (l->input_onehot)
        sh_rnn_onehot_grad(v.dg, v.rows, v.g, v.idx, v.in, k0, k1, v.wt, gwx);
    else
        sh_packed_gemm_tn(k1 - k0, 0, v.in, v.rows, v.dg + k0, v.g, v.xpk, v.rows, 0,
                          gwx + (size_t)k0 * v.in, v.in);
    int split = 2 * v.h, a1 = k1 < split ? k1 : split, n0 = k0 > split ? k0 : split;
    if (a1 > k0)
        sh_packed_gemm_tn(a1 - k0, 0, v.h, v.rows, v.dg + k0, v.g, v.hpk, v.b + v.rows, 0,
                          gwh + (size_t)k0 * v.h, v.h);
    if (k1 > n0)
        sh_packed_gemm_tn(k1 - n0, 0, v.h, v.rows, v.dg + n0, v.g, v.qpk, v.rows, 0,
                          gwh + (size_t)n0 * v.h, v.h);
    sh_rnn_colsum(v.dg, v.rows, v.g, k0, k1, gb + k0);
    memcpy(gb + v.g + k0, gb + k0, (size_t)(k1 - k0) * sizeof(float));
}

/* Rows [r0, r1) of dL/dx = dG Wx. */
static void input_delta(sh_layer *l, sh_exec *x, int tid, int r0, int r1)
{
    (void)tid;
    dn_view v = view(l, x);
    if (r1 <= r0) return;
    sh_packed_gemm(r1 - r0, 0, v.in, v.g, v.dg + (size_t)r0 * v.g, v.g, v.pk_x, l->accum[0],
                   l->in_delta[0] + (size_t)r0 * v.in, v.in);
}

static void gru_dn_backward(sh_layer *l, sh_exec *x)
{
    dn_view v = view(l, x);
    memset(v.dh, 0, (size_t)v.b * v.h * sizeof(float));
    sh_packed_pack(0, 2 * v.h, v.h, v.wh, v.h, 0, sh_packed_npanels(v.h), v.pk_rz);
    sh_packed_pack(0, v.h, v.h, v.wh + (size_t)2 * v.h * v.h, v.h, 0, sh_packed_npanels(v.h),
                   v.pk_n);
    int np = sh_packed_npanels(v.h);
    double macs = (double)v.b * v.h * v.h;
    zn_grads(l, &v, l->steps - 1, 0, v.b, 0, v.h); /* the other steps' in back_carry_zn */
    sh_rnn_loop lp = {{back_r, back_carry_zn}, {np, np}, {macs, 2 * macs}, l->steps - 1, 0, 1,
                      0, 0};
    sh_rnn_run_loop(l, x, &lp);
    int hp = sh_packed_npanels(v.h), ip = sh_packed_npanels(v.in);
    sh_exec_split(l, x, hp > ip ? hp : ip, pack_grads);
    sh_exec_split(l, x, v.g, param_grads);
    if (!l->in_delta[0]) return;
    sh_packed_pack(0, v.g, v.in, v.wx, v.in, 0, sh_packed_npanels(v.in), v.pk_x);
    sh_exec_chunks(l, x, sh_rnn_chunk_rows(x), input_delta);
}

/* Darknet's order (parser.c save_weights_upto): wz, wr, wh on h, then uz, ur, uh on x, each
 * a connected layer: biases (H), weights (H rows). */
static int gru_dn_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    static const int order[NG] = {1, 0, 2}; /* z, r, n in shoal's gate order */
    size_t h = (size_t)l->hidden, g = NG * h, in = l->inputs;
    int n = 0;
    for (int part = 0; part < 2; part++) { /* 0: state (Wh, bh), 1: input (Wx, bx) */
        size_t w = l->w_off + (part ? 0 : g * in), bias = l->b_off + (part ? 0 : g);
        size_t cols = part ? in : h;
        for (int k = 0; k < NG; k++) {
            size_t q = (size_t)order[k];
            b[n++] = (sh_dn_blob){.off = bias + q * h, .count = h};
            b[n++] = (sh_dn_blob){.off = w + q * h * cols, .count = h * cols, .rows = h};
        }
    }
    return n;
}

const sh_layer_ops sh_gru_darknet_ops = {
    .cfg_name = "gru",
    .short_name = "gru",
    .form = "darknet",
    .caps = SH_LAYER_ACTIVATION,
    .parse = gru_dn_parse,
    .init = gru_dn_init,
    .forward = gru_dn_forward,
    .backward = gru_dn_backward,
    .darknet_blobs = gru_dn_darknet_blobs,
};
