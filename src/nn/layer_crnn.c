/* layer_crnn.c — [crnn]: output (K filters, default 1), hidden (H filters, default 1),
 * activation (Darknet default logistic). Darknet's convolutional recurrent layer (crnn_layer.c):
 * [rnn] with 3x3, stride-1, pad-1 convolutions for its three connected sublayers.
 * Not here: the dense recurrent layers (layer_rnn.c), im2col (im2col.c).
 * Proved by tests/nn/test_layer_rnn.c (finite differences, state carried). */
#include "base/err.h"
#include "nn/gemm.h"
#include "nn/recurrent.h"

/* Each sublayer has a bias per filter and the activation:
 *   s' = act(conv_in(x) + bin) + act(conv_self(s) + bself)      y = act(conv_out(s') + bout)
 * over the T time steps of each batch, s (H, height, width) of every stream carried to the next
 * batch, gradients through time truncated at the batch's first step.
 * Weights: Win (H, C*9), Wself (H, H*9), Wout (K, H*9) as Darknet's convolutions, then bin (H),
 * bself (H), bout (K); uniform(±sqrt(2/(9*channels))) as Darknet.
 * Each image goes through im2col and one product; the layer runs on the calling thread (its
 * weight gradients are summed over images and steps in one fixed order), so results do not
 * depend on the thread count. batch_normalize=1 is refused. */

#define KS 3 /* Darknet's make_crnn_layer: size 3, stride 1, padding 1 */

static shoal_result crnn_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int k = 1, h = 1;
    /* Darknet spells them output_filters and hidden_filters */
    int dn_out = sh_cfg_has(s, "output_filters"), dn_hid = sh_cfg_has(s, "hidden_filters");
    if ((dn_out && sh_cfg_has(s, "output")) || (dn_hid && sh_cfg_has(s, "hidden")))
        return sh_cfg_fail_at(s, dn_out && sh_cfg_has(s, "output") ? "output" : "hidden", SHOAL_ERR_FORMAT,
                              "give either output= and hidden= or Darknet's output_filters= and hidden_filters=, "
                              "not both spellings of one");
    SH_TRY(sh_cfg_int(s, dn_out ? "output_filters" : "output", 1, 1, 1 << 16, &k));
    SH_TRY(sh_cfg_int(s, dn_hid ? "hidden_filters" : "hidden", 1, 1, 1 << 16, &h));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    SH_TRY(sh_rnn_parse_shortcut(s));
    SH_TRY(sh_rnn_parse_common(l, s, ctx, 0));
    size_t c = (size_t)l->in_shape.c, hw = (size_t)l->in_shape.h * (size_t)l->in_shape.w;
    size_t rows = (size_t)ctx->batch, streams = rows / (size_t)l->steps;
    size_t hh = (size_t)h, kk = (size_t)k, kern = KS * KS;
    l->hidden = h;
    l->filters = k;
    l->size = KS;
    l->stride = 1;
    l->pad = KS / 2;
    l->out_shape = (sh_shape){k, l->in_shape.h, l->in_shape.w};
    l->w_off = 0;
    l->w_count = hh * c * kern + hh * hh * kern + kk * hh * kern;
    l->b_off = l->w_count;
    l->b_count = 2 * hh + kk;
    l->param_count = l->w_count + l->b_count;
    l->keep_count = 3 * hh * hw;                   /* per image: act(input), act(self), s */
    l->keep_fixed = streams * hh * hw;             /* s0 of this batch */
    l->cache_count = 2 * rows * hh * hw + streams * hh * hw; /* ds / d input, d self, carry */
    size_t cmax = c > hh ? c : hh;
    /* im2col columns, their gradient, an input gradient before it is added */
    l->ws_count = 2 * cmax * kern * hw + c * hw;
    l->state_count = streams * hh * hw;
    l->flops = (double)kern * hw * (double)(hh * c + hh * hh + kk * hh);
    return SHOAL_OK;
}

static void crnn_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    (void)stats;
    size_t c = (size_t)l->in_shape.c, h = (size_t)l->hidden, k = (size_t)l->out_shape.c;
    size_t kern = KS * KS;
    float *w = params + l->w_off;
    sh_rnn_uniform(w, h * c * kern, sqrtf(2.0f / (float)(kern * c)), rng);
    sh_rnn_uniform(w + h * c * kern, h * h * kern, sqrtf(2.0f / (float)(kern * h)), rng);
    sh_rnn_uniform(w + h * c * kern + h * h * kern, k * h * kern, sqrtf(2.0f / (float)(kern * h)), rng);
    memset(params + l->b_off, 0, l->b_count * sizeof(float));
}

typedef struct {
    int c, h, k, ih, iw, hw, b, rows;
    size_t part;      /* floats of one image's hidden maps: H * hw */
    float *win, *wself, *wout, *bin, *bself, *bout;
    float *gwin, *gwself, *gwout, *gbin, *gbself, *gbout;
    float *s0;        /* (B, H, hw) */
    float *ds;        /* (rows, H, hw): dL/ds, then the input part's pre-activation gradient */
    float *dself;     /* (rows, H, hw) */
    float *carry;     /* (B, H, hw) */
    float *col, *dcol, *dx;
} crnn_view;

static crnn_view view(sh_layer *l, const sh_exec *x)
{
    crnn_view v;
    v.c = l->in_shape.c;
    v.h = l->hidden;
    v.k = l->out_shape.c;
    v.ih = l->in_shape.h;
    v.iw = l->in_shape.w;
    v.hw = v.ih * v.iw;
    v.b = sh_rnn_streams(l, x);
    v.rows = x->nimg;
    v.part = (size_t)v.h * v.hw;
    size_t kern = KS * KS;
    v.win = x->params + l->w_off;
    v.wself = v.win + (size_t)v.h * v.c * kern;
    v.wout = v.wself + (size_t)v.h * v.h * kern;
    v.bin = x->params + l->b_off;
    v.bself = v.bin + v.h;
    v.bout = v.bself + v.h;
    v.gwin = x->grad[0] + l->w_off;
    v.gwself = v.gwin + (size_t)v.h * v.c * kern;
    v.gwout = v.gwself + (size_t)v.h * v.h * kern;
    v.gbin = x->grad[0] + l->b_off;
    v.gbself = v.gbin + v.h;
    v.gbout = v.gbself + v.h;
    v.s0 = l->keep + (size_t)x->batch * l->keep_count;
    v.ds = l->cache;
    v.dself = v.ds + (size_t)x->batch * v.part;
    v.carry = v.dself + (size_t)x->batch * v.part;
    size_t cols = (size_t)(v.c > v.h ? v.c : v.h) * KS * KS * v.hw;
    v.col = x->work[0];
    v.dcol = v.col + cols;
    v.dx = v.dcol + cols;
    return v;
}

/* out (f, hw) = act(w (f, ch*9) im2col(im) + bias) */
static void conv(const crnn_view *v, sh_act act, const float *im, int ch, const float *w,
                 const float *bias, int f, float *out)
{
    sh_im2col(im, ch, v->ih, v->iw, KS, 1, KS / 2, v->ih, v->iw, v->col, (size_t)v->hw);
    sh_gemm(0, 0, f, v->hw, ch * KS * KS, 1.0f, w, ch * KS * KS, v->col, v->hw, 0.0f, out, v->hw);
    for (int j = 0; j < f; j++) sh_act_bias_forward(act, out + (size_t)j * v->hw, (size_t)v->hw, bias[j]);
}

/* Gradients of one convolution from d (f, hw) at input im: gw += d im2col(im)^T, gb += sums,
 * and (din != NULL) din = col2im(w^T d). */
static void conv_back(const crnn_view *v, const float *im, int ch, const float *w, int f,
                      const float *d, float *gw, float *gb, float *din)
{
    int kc = ch * KS * KS;
    sh_im2col(im, ch, v->ih, v->iw, KS, 1, KS / 2, v->ih, v->iw, v->col, (size_t)v->hw);
    sh_gemm(0, 1, f, kc, v->hw, 1.0f, d, v->hw, v->col, v->hw, 1.0f, gw, kc);
    for (int j = 0; j < f; j++) gb[j] += sh_sum(d + (size_t)j * v->hw, (size_t)v->hw);
    if (!din) return;
    sh_gemm(1, 0, kc, v->hw, f, 1.0f, w, kc, d, v->hw, 0.0f, v->dcol, v->hw);
    memset(din, 0, (size_t)ch * v->hw * sizeof(float));
    sh_col2im(v->dcol, (size_t)v->hw, ch, v->ih, v->iw, KS, 1, KS / 2, v->ih, v->iw, din);
}

static float *keep_row(sh_layer *l, size_t r) { return l->keep + r * l->keep_count; }

static void crnn_forward(sh_layer *l, sh_exec *x)
{
    crnn_view v = view(l, x);
    size_t in_n = (size_t)v.c * v.hw;
    memcpy(v.s0, l->state, (size_t)v.b * v.part * sizeof(float));
    for (int r = 0; r < v.rows; r++)
        conv(&v, l->act, l->in[0] + (size_t)r * in_n, v.c, v.win, v.bin, v.h, keep_row(l, (size_t)r));
    for (int t = 0; t < l->steps; t++)
        for (int b = 0; b < v.b; b++) {
            size_t r = (size_t)t * v.b + b;
            float *kr = keep_row(l, r), *a_self = kr + v.part, *s = kr + 2 * v.part;
            const float *sprev = t ? keep_row(l, r - (size_t)v.b) + 2 * v.part : v.s0 + (size_t)b * v.part;
            conv(&v, l->act, sprev, v.h, v.wself, v.bself, v.h, a_self);
            for (size_t i = 0; i < v.part; i++) s[i] = kr[i] + a_self[i];
        }
    for (int r = 0; r < v.rows; r++)
        conv(&v, l->act, keep_row(l, (size_t)r) + 2 * v.part, v.h, v.wout, v.bout, v.k,
             l->out + (size_t)r * v.k * v.hw);
    for (int b = 0; b < v.b; b++)
        memcpy(l->state + (size_t)b * v.part,
               keep_row(l, (size_t)(l->steps - 1) * v.b + b) + 2 * v.part, v.part * sizeof(float));
}

static void crnn_backward(sh_layer *l, sh_exec *x)
{
    crnn_view v = view(l, x);
    size_t in_n = (size_t)v.c * v.hw, out_n = (size_t)v.k * v.hw;
    memset(x->grad[0] + l->param_off, 0, l->param_count * sizeof(float));
    memset(v.carry, 0, (size_t)v.b * v.part * sizeof(float));
    for (int r = 0; r < v.rows; r++) {
        float *dy = l->delta + (size_t)r * out_n;
        sh_act_backward(l->act, l->out + (size_t)r * out_n, dy, out_n);
        conv_back(&v, keep_row(l, (size_t)r) + 2 * v.part, v.h, v.wout, v.k, dy, v.gwout, v.gbout,
                  v.ds + (size_t)r * v.part);
    }
    for (int t = l->steps - 1; t >= 0; t--)
        for (int b = 0; b < v.b; b++) {
            size_t r = (size_t)t * v.b + b;
            const float *kr = keep_row(l, r);
            float *din = v.ds + r * v.part, *dself = v.dself + r * v.part;
            float *carry = v.carry + (size_t)b * v.part;
            for (size_t i = 0; i < v.part; i++) din[i] += carry[i];
            memcpy(dself, din, v.part * sizeof(float));
            sh_act_backward(l->act, kr, din, v.part);
            sh_act_backward(l->act, kr + v.part, dself, v.part);
            const float *sprev = t ? keep_row(l, r - (size_t)v.b) + 2 * v.part : v.s0 + (size_t)b * v.part;
            conv_back(&v, sprev, v.h, v.wself, v.h, dself, v.gwself, v.gbself, t ? carry : NULL);
        }
    for (int r = 0; r < v.rows; r++) {
        float *din = l->in_delta[0] ? l->in_delta[0] + (size_t)r * in_n : NULL;
        float *dx = din && l->accum[0] ? v.dx : din; /* accumulate: go through scratch */
        conv_back(&v, l->in[0] + (size_t)r * in_n, v.c, v.win, v.h, v.ds + (size_t)r * v.part,
                  v.gwin, v.gbin, dx);
        if (din && l->accum[0])
            for (size_t i = 0; i < in_n; i++) din[i] += dx[i];
    }
}

const sh_layer_ops sh_crnn_ops = {
    .cfg_name = "crnn",
    .short_name = "crnn",
    .caps = SH_LAYER_ACTIVATION,
    .parse = crnn_parse,
    .init = crnn_init,
    .forward = crnn_forward,
    .backward = crnn_backward,
};
