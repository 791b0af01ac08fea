/* layer_lrn.c — [normalization] (also [lrn]): local response normalisation across channels,
 * AlexNet's and GoogLeNet's, with Darknet's keys: size (5), alpha (.0001), beta (.75),
 * kappa (1). Vocabulary: s_c = kappa + alpha * sum of x_j^2 over the channels j of c's window
 * [c - size/2, c + (size-1)/2] (clipped to the channels), y_c = x_c * s_c^-beta. alpha is
 * Darknet's (per squared value, not divided by size as Caffe's and PyTorch's are).
 * Not here: Caffe's LRN fields (caffe/caffe_layers.c maps alpha/local_size onto alpha).
 * Proved by tests/nn/test_layer_lrn.c (PyTorch's LocalResponseNorm, finite differences). */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static shoal_result lrn_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)ctx;
    SH_TRY(sh_cfg_int(s, "size", 5, 1, 1 << 16, &l->size));
    SH_TRY(sh_cfg_float(s, "alpha", 0.0001f, 0.0f, 1e6f, &l->alpha));
    SH_TRY(sh_cfg_float(s, "beta", 0.75f, 0.0f, 1e3f, &l->beta));
    SH_TRY(sh_cfg_float(s, "kappa", 1.0f, 1e-12f, 1e6f, &l->kappa));
    l->out_shape = l->in_shape;
    l->keep_count = l->inputs;      /* s of every value, for backward */
    /* backward: t = dy x s^(-beta-1) of one image, then one channel's window sum of t */
    l->ws_count = l->inputs + (size_t)l->in_shape.h * l->in_shape.w;
    l->flops = (double)l->inputs * (l->size + 2);
    return SHOAL_OK;
}

/* Channels [lo, hi] (inclusive) of channel c's window. */
static void window(const sh_layer *l, int c, int *lo, int *hi)
{
    int nc = l->in_shape.c;
    *lo = c - l->size / 2;
    *hi = c + (l->size - 1) / 2;
    if (*lo < 0) *lo = 0;
    if (*hi > nc - 1) *hi = nc - 1;
}

static void lrn_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    int nc = l->in_shape.c;
    size_t hw = (size_t)l->in_shape.h * l->in_shape.w;
    float alpha = l->alpha, beta = l->beta, kappa = l->kappa;
    for (int n = n0; n < n1; n++) {
        const float *in = l->in[0] + (size_t)n * l->inputs;
        float *y = l->out + (size_t)n * l->outputs;
        float *sc = l->keep + (size_t)n * l->keep_count;
        for (int c = 0; c < nc; c++) {
            int lo, hi;
            window(l, c, &lo, &hi);
            float *s = sc + (size_t)c * hw;
            for (size_t i = 0; i < hw; i++) s[i] = 0.0f;
            for (int j = lo; j <= hi; j++) {
                const float *v = in + (size_t)j * hw;
                for (size_t i = 0; i < hw; i++) s[i] += v[i] * v[i];
            }
            const float *v = in + (size_t)c * hw;
            float *o = y + (size_t)c * hw;
            for (size_t i = 0; i < hw; i++) {
                s[i] = kappa + alpha * s[i];
                o[i] = v[i] * powf(s[i], -beta);
            }
        }
    }
}

static void lrn_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, lrn_forward_images);
}

/* dx_i = dy_i s_i^-beta - 2 alpha beta x_i sum over the channels c whose window holds i of
 * t_c, t_c = dy_c x_c s_c^(-beta-1); c's window holds i when c is in [i - (size-1)/2, i +
 * size/2]. */
static void lrn_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    int nc = l->in_shape.c;
    size_t hw = (size_t)l->in_shape.h * l->in_shape.w;
    float beta = l->beta, k2ab = 2.0f * l->alpha * l->beta;
    float *t = x->work[tid], *sum = t + l->inputs;
    for (int n = n0; n < n1; n++) {
        const float *in = l->in[0] + (size_t)n * l->inputs;
        const float *dy = l->delta + (size_t)n * l->outputs;
        const float *s = l->keep + (size_t)n * l->keep_count;
        float *dx = l->in_delta[0] + (size_t)n * l->inputs;
        for (size_t i = 0; i < l->inputs; i++) t[i] = dy[i] * in[i] * powf(s[i], -beta - 1.0f);
        for (int c = 0; c < nc; c++) {
            int lo = c - (l->size - 1) / 2, hi = c + l->size / 2;
            lo = lo < 0 ? 0 : lo;
            hi = hi > nc - 1 ? nc - 1 : hi;
            size_t at = (size_t)c * hw;
            memset(sum, 0, hw * sizeof *sum);
            for (int j = lo; j <= hi; j++) {
                const float *tj = t + (size_t)j * hw;
                for (size_t i = 0; i < hw; i++) sum[i] += tj[i];
            }
            for (size_t i = 0; i < hw; i++) {
                float g = dy[at + i] * powf(s[at + i], -beta) - k2ab * in[at + i] * sum[i];
                dx[at + i] = l->accum[0] ? dx[at + i] + g : g;
            }
        }
    }
}

static void lrn_backward(sh_layer *l, sh_exec *x)
{
    if (l->in_delta[0]) sh_exec_images(l, x, lrn_backward_images);
}

const sh_layer_ops sh_lrn_ops = {
    .cfg_name = "normalization",
    .short_name = "lrn",
    .parse = lrn_parse,
    .forward = lrn_forward,
    .backward = lrn_backward,
};
