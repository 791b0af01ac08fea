/* layer_reorg.c — [reorg]: Darknet's space-to-depth rearrangement (stride, reverse) and its
 * extra=E form (the input flattened with E zero outputs after it: go.cfg's "pass" move).
 * The permutation is Darknet's reorg_cpu index for index, including its quirk: the forward
 * (non-reverse) layer runs reorg_cpu's backward direction, so weights trained by Darknet see
 * the same arrangement here.
 * Not here: flatten=1 (refused: no zoo model uses it).
 * Proved by tests/nn/test_layer_zoo.c. */
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static shoal_result reorg_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int flatten = 0;
    (void)ctx;
    SH_TRY(sh_cfg_int(s, "stride", 1, 1, 1024, &l->stride));
    SH_TRY(sh_cfg_int(s, "reverse", 0, 0, 1, &l->reverse));
    SH_TRY(sh_cfg_int(s, "flatten", 0, 0, 1, &flatten));
    SH_TRY(sh_cfg_int(s, "extra", 0, 0, 1 << 24, &l->extra));
    if (flatten)
        return sh_cfg_fail_at(s, "flatten", SHOAL_ERR_FORMAT,
                              "flatten=1 is not supported by shoal; remove it");
    const sh_shape *in = &l->in_shape;
    int st = l->stride;
    if (l->extra) {
        l->out_shape = (sh_shape){(int)l->inputs + l->extra, 1, 1};
    } else if (l->reverse) {
        if (in->c % (st * st) != 0)
            return sh_cfg_fail_at(s, "stride", SHOAL_ERR_FORMAT,
                                  "reverse=1 with stride=%d needs channels divisible by %d, but "
                                  "the input is %dx%dx%d (C x H x W)", st, st * st, in->c,
                                  in->h, in->w);
        l->out_shape = (sh_shape){in->c / (st * st), in->h * st, in->w * st};
    } else {
        /* Darknet runs reorg_cpu backward here, which divides the channels by stride^2 */
        if (in->c % (st * st) != 0)
            return sh_cfg_fail_at(s, "stride", SHOAL_ERR_FORMAT,
                                  "stride=%d needs channels divisible by %d (Darknet's reorg moves "
                                  "them in groups of stride^2), but the input is %dx%dx%d (C x H x W)",
                                  st, st * st, in->c, in->h, in->w);
        if (in->h % st != 0 || in->w % st != 0)
            return sh_cfg_fail_at(s, "stride", SHOAL_ERR_FORMAT,
                                  "stride=%d must divide the input's height and width, but the "
                                  "input is %dx%dx%d (C x H x W)", st, in->c, in->h, in->w);
        l->out_shape = (sh_shape){in->c * st * st, in->h / st, in->w / st};
    }
    return SHOAL_OK;
}

/* Darknet's reorg_cpu(x, w, h, c, batch, stride, forward, out) for one image with the
 * input's (c, h, w): forward=1 sets out[b] = x[a], forward=0 sets out[a] = x[b], where a
 * walks (c, h, w) in order and b is the pixel a lands on in (c/s^2, h*s, w*s). add: +=. */
static void reorg_image(const float *x, int w, int h, int c, int st, int fwd, float *out, int add)
{
    int out_c = c / (st * st);
    for (int k = 0; k < c; k++)
        for (int j = 0; j < h; j++)
            for (int i = 0; i < w; i++) {
                size_t a = (size_t)i + (size_t)w * ((size_t)j + (size_t)h * k);
                int c2 = k % out_c, off = k / out_c;
                int w2 = i * st + off % st, h2 = j * st + off / st;
                size_t b = (size_t)w2 + (size_t)w * st * ((size_t)h2 + (size_t)h * st * c2);
                size_t to = fwd ? b : a, from = fwd ? a : b;
                out[to] = add ? out[to] + x[from] : x[from];
            }
}

static void reorg_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *in = &l->in_shape;
    for (int n = n0; n < n1; n++) {
        const float *src = l->in[0] + (size_t)n * l->inputs;
        float *dst = l->out + (size_t)n * l->outputs;
        if (l->extra) {
            memcpy(dst, src, l->inputs * sizeof *dst);
            memset(dst + l->inputs, 0, (size_t)l->extra * sizeof *dst);
        } else {
            /* Darknet: reverse runs reorg_cpu forward, the plain layer runs it backward */
            reorg_image(src, in->w, in->h, in->c, l->stride, l->reverse, dst, 0);
        }
    }
}

static void reorg_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, reorg_forward_images);
}

static void reorg_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    const sh_shape *in = &l->in_shape;
    for (int n = n0; n < n1; n++) {
        const float *d = l->delta + (size_t)n * l->outputs;
        float *dx = l->in_delta[0] + (size_t)n * l->inputs;
        if (l->extra) {
            for (size_t i = 0; i < l->inputs; i++) dx[i] = l->accum[0] ? dx[i] + d[i] : d[i];
        } else if (l->reverse) {
            /* forward set out[b] = x[a]: dx[a] = d[b], with d seen from its (c, h, w) side */
            reorg_image(d, in->w, in->h, in->c, l->stride, 0, dx, l->accum[0]);
        } else {
            reorg_image(d, in->w, in->h, in->c, l->stride, 1, dx, l->accum[0]);
        }
    }
}

static void reorg_backward(sh_layer *l, sh_exec *x)
{
    if (l->in_delta[0]) sh_exec_images(l, x, reorg_backward_images);
}

const sh_layer_ops sh_reorg_ops = {
    .cfg_name = "reorg",
    .short_name = "reorg",
    .parse = reorg_parse,
    .forward = reorg_forward,
    .backward = reorg_backward,
};
