/* layer_deconv.c — [deconvolutional] ([deconv]): Darknet's transposed convolution, filters,
 * size, stride, pad=1 (padding size/2) or padding=P, batch_normalize, activation (default
 * logistic); output side (in - 1) * stride + size - 2 * padding, as Darknet and ConvTranspose2d.
 * Not here: batch norm's arithmetic (layer_batchnorm.c), im2col / col2im (im2col.c).
 * Proved by tests/nn/test_layer_deconv.c (PyTorch, finite differences, Darknet's shapes). */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "nn/gemm.h"
#include "nn/layer.h"

/* Weights (C, F, S, S) as Darknet (and PyTorch) store them: forward is col = W^T x
 * (F*S*S, H*W) per image, then col2im onto the (F, OH, OW) output; backward is
 * dcol = im2col(dY), dW += x dcol^T (partial slots per chunk of images), dX = W dcol.
 * Weights start as Darknet's: 0.02 * normal, times OH*OW / (H*W). */

static shoal_result deconv_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)ctx;
    int pad_flag = 0, padding = 0;
    SH_TRY(sh_cfg_int(s, "filters", 1, 1, 1 << 16, &l->filters));
    SH_TRY(sh_cfg_int(s, "size", 1, 1, 1024, &l->size));
    SH_TRY(sh_cfg_int(s, "stride", 1, 1, 1024, &l->stride));
    SH_TRY(sh_cfg_int(s, "pad", 0, 0, 1, &pad_flag));
    SH_TRY(sh_cfg_int(s, "padding", 0, 0, 1024, &padding));
    SH_TRY(sh_cfg_int(s, "batch_normalize", 0, 0, 1, &l->batch_normalize));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    l->pad = pad_flag ? l->size / 2 : padding; /* Darknet: pad=1 overrides padding */
    const sh_shape *in = &l->in_shape;
    if (in->h < 1 || in->w < 1 || in->c < 1)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT, "the layer before must output an image");
    long oh = (long)(in->h - 1) * l->stride + l->size - 2L * l->pad;
    long ow = (long)(in->w - 1) * l->stride + l->size - 2L * l->pad;
    if (oh < 1 || ow < 1)
        return sh_cfg_fail_at(s, "size", SHOAL_ERR_FORMAT,
                              "size=%d, stride=%d and padding %d make a %ldx%ld output from the %dx%dx%d "
                              "input (C x H x W); use less padding", l->size, l->stride, l->pad, oh, ow,
                              in->c, in->h, in->w);
    if (oh * ow * (long)l->filters > (1L << 30))
        return sh_cfg_fail_at(s, "filters", SHOAL_ERR_FORMAT, "the output %dx%ldx%ld is too large",
                              l->filters, oh, ow);
    l->out_shape = (sh_shape){l->filters, (int)oh, (int)ow};
    size_t fss = (size_t)l->filters * l->size * l->size, hw = (size_t)in->h * in->w;
    l->w_off = 0;
    l->w_count = (size_t)in->c * fss;
    l->b_off = l->w_count;
    l->b_count = (size_t)l->filters;
    l->s_off = l->b_off + l->b_count;
    l->s_count = l->batch_normalize ? (size_t)l->filters : 0;
    l->param_count = l->w_count + l->b_count + l->s_count;
    l->reduce_off = 0;
    l->reduce_count = l->w_count + (l->batch_normalize ? 0 : l->b_count);
    l->stat_count = l->batch_normalize ? 2 * (size_t)l->filters : 0;
    l->keep_fixed = l->batch_normalize ? 2 * (size_t)l->filters : 0;         /* mean, invstd */
    l->ws_count = fss * hw;                                                   /* the columns */
    l->flops = (double)in->c * (double)fss * (double)hw;
    if (l->batch_normalize) sh_bn_size(l);
    return SHOAL_OK;
}

static void deconv_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    /* make_deconvolutional_layer: .02 * rand_normal, then scaled by the output's pixels per
     * input pixel */
    float scale = 0.02f * (float)((double)l->out_shape.h * l->out_shape.w /
                                  ((double)l->in_shape.h * l->in_shape.w));
    for (size_t i = 0; i < l->w_count; i++) params[l->w_off + i] = scale * sh_rng_normal(rng);
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
    for (size_t i = 0; i < l->s_count; i++) params[l->s_off + i] = 1.0f;
    for (size_t i = 0; i < l->stat_count / 2; i++) {
        stats[l->stat_off + i] = 0.0f;
        stats[l->stat_off + l->stat_count / 2 + i] = 1.0f;
    }
}

static void deconv_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape, *out = &l->out_shape;
    int fss = l->filters * l->size * l->size, hw = in->h * in->w;
    size_t ohw = (size_t)out->h * out->w;
    const float *w = x->params + l->w_off, *b = x->params + l->b_off;
    float *col = x->work[tid];
    for (int n = n0; n < n1; n++) {
        const float *im = l->in[0] + (size_t)n * l->inputs;
        float *y = l->out + (size_t)n * l->outputs;
        sh_gemm(1, 0, fss, hw, in->c, 1.0f, w, fss, im, hw, 0.0f, col, hw);
        memset(y, 0, l->outputs * sizeof *y);
        sh_col2im(col, (size_t)hw, out->c, out->h, out->w, l->size, l->stride, l->pad, in->h, in->w, y);
        if (!l->batch_normalize)
            for (int f = 0; f < l->filters; f++) sh_act_bias_forward(l->act, y + (size_t)f * ohw, ohw, b[f]);
    }
}

static void deconv_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, deconv_forward_images);
    if (l->batch_normalize) sh_bn_forward(l, x, l->out);
}

/* Images [n0, n1) of one slot: the activation's gradient (unless batch norm applied it), the
 * bias and weight gradients into the slot, the input's gradient. */
static void deconv_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape, *out = &l->out_shape;
    int fss = l->filters * l->size * l->size, hw = in->h * in->w;
    size_t ohw = (size_t)out->h * out->w;
    const float *w = x->params + l->w_off;
    float *gw = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->w_off);
    float *gb = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->b_off);
    float *dcol = x->work[tid];
    for (int n = n0; n < n1; n++) {
        float *dy = l->delta + (size_t)n * l->outputs;
        const float *im = l->in[0] + (size_t)n * l->inputs;
        int first = n == n0;
        if (!l->batch_normalize) {
            sh_act_backward(l->act, l->out + (size_t)n * l->outputs, dy, l->outputs);
            for (int f = 0; f < l->filters; f++) {
                float sum = sh_sum(dy + (size_t)f * ohw, ohw);
                gb[f] = first ? sum : gb[f] + sum;
            }
        }
        sh_im2col(dy, out->c, out->h, out->w, l->size, l->stride, l->pad, in->h, in->w, dcol, (size_t)hw);
        sh_gemm(0, 1, in->c, fss, hw, 1.0f, im, hw, dcol, hw, first ? 0.0f : 1.0f, gw, fss);
        if (l->in_delta[0])
            sh_gemm(0, 0, in->c, hw, fss, 1.0f, w, fss, dcol, hw, l->accum[0] ? 1.0f : 0.0f,
                    l->in_delta[0] + (size_t)n * l->inputs, hw);
    }
}

static void deconv_backward(sh_layer *l, sh_exec *x)
{
    if (l->batch_normalize) sh_bn_backward(l, x); /* activation's gradient, gamma and beta */
    sh_exec_partials(l, x, deconv_backward_images);
}

/* Darknet saves [deconvolutional] as a convolutional layer: biases, [scales, rolling mean,
 * rolling variance], weights (C, F, S, S). */
static int deconv_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    int k = 0;
    size_t f = (size_t)l->filters;
    b[k++] = (sh_dn_blob){.off = l->b_off, .count = l->b_count};
    if (l->batch_normalize) {
        b[k++] = (sh_dn_blob){.off = l->s_off, .count = l->s_count};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off, .count = f};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off + f, .count = f};
    }
    b[k++] = (sh_dn_blob){.off = l->w_off, .count = l->w_count};
    return k;
}

const sh_layer_ops sh_deconv_ops = {
    .cfg_name = "deconvolutional",
    .short_name = "deconv",
    .parse = deconv_parse,
    .init = deconv_init,
    .forward = deconv_forward,
    .backward = deconv_backward,
    .darknet_blobs = deconv_darknet_blobs,
};
