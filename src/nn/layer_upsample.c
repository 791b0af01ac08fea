/* layer_upsample.c — [upsample]: Darknet's nearest-neighbour upsampling by stride=S (default
 * 2), each output pixel scale= (default 1) times its input pixel; a negative stride is
 * Darknet's reverse form, which sums each SxS block (times scale) into one output pixel
 * (the input's sides must be multiples of S). The index arithmetic is upsample_cpu's (blas.c), so weights trained
 * by Darknet see the same arrangement.
 * Not here: bilinear or other modes (Darknet has none).
 * Proved by tests/nn/test_layer_upsample.c (PyTorch's nn.Upsample, finite differences). */
#include "base/err.h"
#include "nn/layer.h"

static shoal_result upsample_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)ctx;
    int stride = 2;
    SH_TRY(sh_cfg_int(s, "stride", 2, -1024, 1024, &stride));
    SH_TRY(sh_cfg_float(s, "scale", 1.0f, -1e6f, 1e6f, &l->scale));
    if (stride == 0)
        return sh_cfg_fail_at(s, "stride", SHOAL_ERR_FORMAT, "stride=0 makes no image; use S > 0 to "
                              "upsample S times, or -S to sum SxS blocks (Darknet's reverse form)");
    const sh_shape *in = &l->in_shape;
    l->reverse = stride < 0;
    l->stride = stride < 0 ? -stride : stride;
    if (l->reverse) {
        /* Darknet walks the input as if its rows were out_w * S long: other sides misread it */
        if (in->h % l->stride || in->w % l->stride)
            return sh_cfg_fail_at(s, "stride", SHOAL_ERR_FORMAT, "stride=%d sums %dx%d blocks, which must "
                                  "tile the %dx%dx%d input (C x H x W) exactly; make its sides multiples of %d",
                                  stride, l->stride, l->stride, in->c, in->h, in->w, l->stride);
        l->out_shape = (sh_shape){in->c, in->h / l->stride, in->w / l->stride};
    } else {
        if ((long long)in->h * l->stride * in->w * l->stride * in->c > (1LL << 30))
            return sh_cfg_fail_at(s, "stride", SHOAL_ERR_FORMAT, "stride=%d makes the %dx%dx%d input (C x H x W) "
                                  "more than 2^30 values; upsample less", stride, in->c, in->h, in->w);
        l->out_shape = (sh_shape){in->c, in->h * l->stride, in->w * l->stride};
    }
    l->flops = (double)sh_shape_count(&l->out_shape) * (l->reverse ? (double)l->stride * l->stride : 1.0);
    return SHOAL_OK;
}

/* upsample_cpu for one image: `small` is (c, h, w), `big` (c, h*s, w*s); to_big: big (+)=
 * scale * small, else small (+)= scale * the sum of its block (add: adds to what the
 * destination holds, else overwrites it). */
static void blocks(float *small, float *big, int c, int h, int w, int s, float scale, int to_big, int add)
{
    size_t bw = (size_t)w * s;
    for (int k = 0; k < c; k++) {
        float *sm = small + (size_t)k * h * w;
        float *bg = big + (size_t)k * h * w * s * s;
        if (!to_big && !add)
            for (int i = 0; i < h * w; i++) sm[i] = 0.0f;
        for (int j = 0; j < h * s; j++) {
            float *srow = sm + (size_t)(j / s) * w;
            float *brow = bg + (size_t)j * bw;
            if (to_big && add)
                for (size_t i = 0; i < bw; i++) brow[i] += scale * srow[i / (size_t)s];
            else if (to_big)
                for (size_t i = 0; i < bw; i++) brow[i] = scale * srow[i / (size_t)s];
            else
                for (size_t i = 0; i < bw; i++) srow[i / (size_t)s] += scale * brow[i];
        }
    }
}

static void upsample_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    for (int n = n0; n < n1; n++) {
        float *in = (float *)l->in[0] + (size_t)n * l->inputs, *out = l->out + (size_t)n * l->outputs;
        if (l->reverse) /* Darknet: the output's blocks of the input summed */
            blocks(out, in, l->out_shape.c, l->out_shape.h, l->out_shape.w, l->stride, l->scale, 0, 0);
        else
            blocks(in, out, l->in_shape.c, l->in_shape.h, l->in_shape.w, l->stride, l->scale, 1, 0);
    }
}

static void upsample_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, upsample_forward_images);
}

static void upsample_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *in = &l->in_shape, *out = &l->out_shape;
    for (int n = n0; n < n1; n++) {
        float *dx = l->in_delta[0] + (size_t)n * l->inputs, *dy = l->delta + (size_t)n * l->outputs;
        if (l->reverse) /* each input pixel fed one output pixel */
            blocks(dy, dx, out->c, out->h, out->w, l->stride, l->scale, 1, l->accum[0]);
        else
            blocks(dx, dy, in->c, in->h, in->w, l->stride, l->scale, 0, l->accum[0]);
    }
}

static void upsample_backward(sh_layer *l, sh_exec *x)
{
    if (l->in_delta[0]) sh_exec_images(l, x, upsample_backward_images);
}

const sh_layer_ops sh_upsample_ops = {
    .cfg_name = "upsample",
    .short_name = "upsample",
    .parse = upsample_parse,
    .forward = upsample_forward,
    .backward = upsample_backward,
};
