/* layer_maxpool.c — [maxpool]: stride (default 1), size (default stride), padding (default
 * size-1) as Darknet: OH = (H + padding - size) / stride + 1, windows from -padding/2, outside
 * positions skipped; ceil=1 rounds OH up as Caffe does; forward keeps each argmax for backward.
 * Not here: global average pooling (layer_avgpool.c).
 * Proved by tests/nn/test_layer_pool.c. */
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

/* Caffe's size with ceil=1: ceil((in + 2 pad - size) / stride) + 1, less a last window that
 * would start in the padding (pad: each side's, the windows' offset). */
static int ceil_pooled(int in, int size, int stride, int pad)
{
    int out = (in + 2 * pad - size + stride - 1) / stride + 1;
    if (pad > 0 && (out - 1) * stride >= in + pad) out--;
    return out;
}

static shoal_result maxpool_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)ctx;
    SH_TRY(sh_cfg_int(s, "stride", 1, 1, 1024, &l->stride));
    SH_TRY(sh_cfg_int(s, "size", l->stride, 1, 1024, &l->size));
    SH_TRY(sh_cfg_int(s, "padding", l->size - 1, 0, 1024, &l->pad));
    int ceil_mode = 0; /* shoal's key for Caffe's pooled size (caffe/caffe_layers.c) */
    SH_TRY(sh_cfg_int(s, "ceil", 0, 0, 1, &ceil_mode));
    const sh_shape *in = &l->in_shape;
    int oh = (in->h + l->pad - l->size) / l->stride + 1;
    int ow = (in->w + l->pad - l->size) / l->stride + 1;
    if (ceil_mode) {
        oh = ceil_pooled(in->h, l->size, l->stride, l->pad / 2);
        ow = ceil_pooled(in->w, l->size, l->stride, l->pad / 2);
    }
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

/* One output: the max over the window clipped to the image; Darknet's first-max wins ties. */
static inline void pool_window(const float *plane, int w, int y0, int y1, int x0, int x1,
                               float *out, int32_t *idx)
{
    float best = plane[y0 * w + x0];
    int best_i = y0 * w + x0;
    for (int iy = y0; iy < y1; iy++)
        for (int ix = x0; ix < x1; ix++) {
            float v = plane[iy * w + ix];
            int m = v > best; /* arithmetic select: no data-dependent branch */
            best_i += m * (iy * w + ix - best_i);
            best = v > best ? v : best;
        }
    *out = best;
    *idx = best_i;
}

static inline void pool3(const float *plane, int w, int y0, int x0, float *out, int32_t *idx)
{
    int best_i = y0 * w + x0;
    float best = plane[best_i];
    for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++) {
            int i = (y0 + ky) * w + x0 + kx;
            float v = plane[i];
            int m = v > best;
            best_i += m * (i - best_i);
            best = v > best ? v : best;
        }
    *out = best;
    *idx = best_i;
}

static void maxpool_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *in = &l->in_shape;
    int h = in->h, w = in->w, oh = l->out_shape.h, ow = l->out_shape.w, off = -l->pad / 2;
    int size = l->size, stride = l->stride;
    for (int n = n0; n < n1; n++) {
        for (int c = 0; c < in->c; c++) {
            const float *plane = l->in[0] + (size_t)n * l->inputs + (size_t)c * h * w;
            float *y = l->out + (size_t)n * l->outputs + (size_t)c * oh * ow;
            int32_t *idx = (int32_t *)l->keep + (size_t)n * l->keep_count + (size_t)c * oh * ow;
            for (int oy = 0; oy < oh; oy++) {
                int y0 = off + oy * stride, y1 = y0 + size;
                y0 = y0 < 0 ? 0 : y0;
                y1 = y1 > h ? h : y1;
                if (size == 2 && stride == 2 && y1 - y0 == 2 && off == 0) {
                    /* the common 2x2/2 window, fully inside: two rows, no clipping */
                    const float *r0 = plane + y0 * w, *r1 = r0 + w;
                    int full = w / 2 < ow ? w / 2 : ow, base = y0 * w;
                    float *yo = y + oy * ow;
                    int32_t *io = idx + oy * ow;
                    /* branch-free selects: data-dependent branches mispredict on real data */
                    for (int ox = 0; ox < full; ox++) {
                        float v0 = r0[2 * ox], v1 = r0[2 * ox + 1];
                        float v2 = r1[2 * ox], v3 = r1[2 * ox + 1];
                        int k = v1 > v0;
                        float b = v1 > v0 ? v1 : v0;
                        int m = v2 > b;
                        k += m * (w - k);
                        b = v2 > b ? v2 : b;
                        m = v3 > b;
                        k += m * (w + 1 - k);
                        b = v3 > b ? v3 : b;
                        yo[ox] = b;
                        io[ox] = base + 2 * ox + k;
                    }
                    for (int ox = full; ox < ow; ox++)
                        pool_window(plane, w, y0, y1, 2 * ox, w, &yo[ox], &io[ox]);
                    continue;
                }
                for (int ox = 0; ox < ow; ox++) {
                    int x0 = off + ox * stride, x1 = x0 + size;
                    if (size == 3 && y1 - y0 == 3 && x0 >= 0 && x1 <= w) {
                        /* interior 3x3 window (ResNet's stem): unrolled, no clipping */
                        pool3(plane, w, y0, x0, &y[oy * ow + ox], &idx[oy * ow + ox]);
                        continue;
                    }
                    x0 = x0 < 0 ? 0 : x0;
                    x1 = x1 > w ? w : x1;
                    if (y0 >= y1 || x0 >= x1) { /* window entirely in the padding */
                        y[oy * ow + ox] = 0.0f;
                        idx[oy * ow + ox] = -1;
                        continue;
                    }
                    pool_window(plane, w, y0, y1, x0, x1, &y[oy * ow + ox], &idx[oy * ow + ox]);
                }
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
    .caps = SH_LAYER_PER_CHANNEL,
    .parse = maxpool_parse,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};
