/* layer_maxpool.c — [maxpool]: stride (default 1), size (default stride), padding (default
 * size-1), all as Darknet: OH = (H + padding - size) / stride + 1, windows start at
 * -padding/2, positions outside the image are skipped. Forward remembers each output's
 * argmax (as an int index into the input image) for backward.
 * Not here: global average pooling (layer_avgpool.c).
 * Proved by tests/nn/test_layer_pool.c. */
#include <float.h>
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static shoal_result maxpool_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)ctx;
    SH_TRY(sh_cfg_int(s, "stride", 1, 1, 1024, &l->stride));
    SH_TRY(sh_cfg_int(s, "size", l->stride, 1, 1024, &l->size));
    SH_TRY(sh_cfg_int(s, "padding", l->size - 1, 0, 1024, &l->pad));
    const sh_shape *in = &l->in_shape;
    int oh = (in->h + l->pad - l->size) / l->stride + 1;
    int ow = (in->w + l->pad - l->size) / l->stride + 1;
    if (in->h + l->pad < l->size || in->w + l->pad < l->size)
        return sh_cfg_fail_at(s, "size", SHOAL_ERR_FORMAT,
                              "size=%d with padding %d does not fit the %dx%dx%d input (C x H x "
                              "W); use a smaller size",
                              l->size, l->pad, in->c, in->h, in->w);
    l->out_shape = (sh_shape){in->c, oh, ow};
    l->keep_count = sh_shape_count(&l->out_shape); /* argmax indices */
    l->flops = (double)l->keep_count * l->size * l->size;
    return SHOAL_OK;
}

static void maxpool_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *in = &l->in_shape;
    int oh = l->out_shape.h, ow = l->out_shape.w, off = -l->pad / 2;
    for (int n = n0; n < n1; n++) {
        for (int c = 0; c < in->c; c++) {
            const float *plane = l->in[0] + (size_t)n * l->inputs + (size_t)c * in->h * in->w;
            float *y = l->out + (size_t)n * l->outputs + (size_t)c * oh * ow;
            int32_t *idx = (int32_t *)l->keep + (size_t)n * l->keep_count + (size_t)c * oh * ow;
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    float best = -FLT_MAX;
                    int best_i = -1;
                    for (int ky = 0; ky < l->size; ky++) {
                        int iy = off + oy * l->stride + ky;
                        if (iy < 0 || iy >= in->h) continue;
                        for (int kx = 0; kx < l->size; kx++) {
                            int ix = off + ox * l->stride + kx;
                            if (ix < 0 || ix >= in->w) continue;
                            float v = plane[iy * in->w + ix];
                            if (v > best || best_i < 0) {
                                best = v;
                                best_i = iy * in->w + ix;
                            }
                        }
                    }
                    y[oy * ow + ox] = best_i < 0 ? 0.0f : best;
                    idx[oy * ow + ox] = best_i;
                }
        }
    }
}

static void maxpool_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, maxpool_forward_images);
}

static void maxpool_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *in = &l->in_shape;
    size_t ohw = (size_t)l->out_shape.h * l->out_shape.w, hw = (size_t)in->h * in->w;
    for (int n = n0; n < n1; n++) {
        float *dx = l->in_delta[0] + (size_t)n * l->inputs;
        if (!l->accum[0]) memset(dx, 0, l->inputs * sizeof *dx);
        for (int c = 0; c < in->c; c++) {
            const float *dy = l->delta + (size_t)n * l->outputs + (size_t)c * ohw;
            const int32_t *idx = (const int32_t *)l->keep + (size_t)n * l->keep_count +
                                 (size_t)c * ohw;
            float *dplane = dx + (size_t)c * hw;
            for (size_t i = 0; i < ohw; i++)
                if (idx[i] >= 0) dplane[idx[i]] += dy[i];
        }
    }
}

static void maxpool_backward(sh_layer *l, sh_exec *x)
{
    if (l->in_delta[0]) sh_exec_images(l, x, maxpool_backward_images);
}

const sh_layer_ops sh_maxpool_ops = {
    .cfg_name = "maxpool",
    .short_name = "maxpool",
    .parse = maxpool_parse,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};
