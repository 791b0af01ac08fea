/* layer_crop.c — [crop]: crop_height x crop_width window of the input, scaled to [-1, 1]
 * (x*2 - 1; noadjust=1 keeps x), as Darknet's CPU forward_crop_layer: training takes one
 * random offset (and, with flip=1, a random mirror) for the whole batch; inference takes
 * the centre. angle, saturation, exposure and shift are read as Darknet reads them and, as
 * in Darknet's CPU path, not applied (Darknet uses them only on the GPU).
 * Not here: the random generator (base/util.c; the net's dropout stream).
 * Proved by tests/nn/test_layer_zoo.c. */
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static shoal_result crop_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int ch = 1, cw = 1, noadjust = 0;
    float ignored = 0.0f;
    (void)ctx;
    SH_TRY(sh_cfg_int(s, "crop_height", 1, 1, 1 << 16, &ch));
    SH_TRY(sh_cfg_int(s, "crop_width", 1, 1, 1 << 16, &cw));
    SH_TRY(sh_cfg_int(s, "flip", 0, 0, 1, &l->flip));
    SH_TRY(sh_cfg_int(s, "noadjust", 0, 0, 1, &noadjust));
    SH_TRY(sh_cfg_float(s, "angle", 0.0f, -360.0f, 360.0f, &ignored));
    SH_TRY(sh_cfg_float(s, "saturation", 1.0f, 0.0f, 100.0f, &ignored));
    SH_TRY(sh_cfg_float(s, "exposure", 1.0f, 0.0f, 100.0f, &ignored));
    SH_TRY(sh_cfg_float(s, "shift", 0.0f, -100.0f, 100.0f, &ignored));
    const sh_shape *in = &l->in_shape;
    if (ch > in->h || cw > in->w)
        return sh_cfg_fail_at(s, ch > in->h ? "crop_height" : "crop_width", SHOAL_ERR_FORMAT,
                              "the %dx%d crop does not fit the %dx%dx%d input (C x H x W); crop "
                              "at most the input's height and width", ch, cw, in->c, in->h,
                              in->w);
    l->scale = noadjust ? 1.0f : 2.0f;
    l->out_shape = (sh_shape){in->c, ch, cw};
    l->keep_fixed = 3; /* this pass's row and column offsets and mirror */
    return SHOAL_OK;
}

/* Input index of the window's pixel (channel c, row i, column j) of image n: input row
 * i + dh, column flip ? W - dw - j - 1 : j + dw. */
static size_t crop_src(const sh_layer *l, int n, int c, int i, int j)
{
    const sh_shape *in = &l->in_shape;
    int dh = (int)l->keep[0], dw = (int)l->keep[1], flip = (int)l->keep[2];
    int col = flip ? in->w - dw - j - 1 : j + dw;
    return (size_t)n * l->inputs + (size_t)col +
           (size_t)in->w * ((size_t)(i + dh) + (size_t)in->h * c);
}

static void crop_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *o = &l->out_shape;
    float trans = l->scale == 2.0f ? -1.0f : 0.0f;
    float *y = l->out + (size_t)n0 * l->outputs;
    for (int n = n0; n < n1; n++)
        for (int c = 0; c < o->c; c++)
            for (int i = 0; i < o->h; i++)
                for (int j = 0; j < o->w; j++) *y++ = l->in[0][crop_src(l, n, c, i, j)] * l->scale + trans;
}

static void crop_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *o = &l->out_shape;
    const float *d = l->delta + (size_t)n0 * l->outputs;
    for (int n = n0; n < n1; n++)
        for (int c = 0; c < o->c; c++)
            for (int i = 0; i < o->h; i++)
                for (int j = 0; j < o->w; j++)
                    l->in_delta[0][crop_src(l, n, c, i, j)] += *d++ * l->scale;
}

static void crop_forward(sh_layer *l, sh_exec *x)
{
    const sh_shape *in = &l->in_shape, *o = &l->out_shape;
    if (x->training) {
        l->keep[0] = (float)sh_rng_below(x->rng, (uint64_t)(in->h - o->h + 1));
        l->keep[1] = (float)sh_rng_below(x->rng, (uint64_t)(in->w - o->w + 1));
        l->keep[2] = l->flip ? (float)sh_rng_below(x->rng, 2) : 0.0f;
    } else {
        l->keep[0] = (float)((in->h - o->h) / 2);
        l->keep[1] = (float)((in->w - o->w) / 2);
        l->keep[2] = 0.0f;
    }
    sh_exec_images(l, x, crop_forward_images);
}

static void crop_backward(sh_layer *l, sh_exec *x)
{
    if (!l->in_delta[0]) return;
    if (!l->accum[0]) memset(l->in_delta[0], 0, (size_t)x->nimg * l->inputs * sizeof(float));
    sh_exec_images(l, x, crop_backward_images);
}

const sh_layer_ops sh_crop_ops = {
    .cfg_name = "crop",
    .short_name = "crop",
    .parse = crop_parse,
    .forward = crop_forward,
    .backward = crop_backward,
};
