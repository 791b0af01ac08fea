/* layer_shortcut.c — [shortcut]: residual add of the previous layer and layer `from`
 * (negative: relative, as Darknet), then activation (default linear). The output has the
 * previous layer's shape. Shapes may differ as Darknet allows (shortcut_cpu): over the
 * smaller channel count, a larger `from` is read every stride = W_from/W pixels, a smaller
 * one is added at every sample = W/W_from pixels; the rest is the previous layer alone.
 * Not here: concatenation (layer_route.c).
 * Proved by tests/nn/test_layer_misc.c. */
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static shoal_result shortcut_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int from = 0, idx = 0;
    if (!sh_cfg_has(s, "from"))
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "from= is missing; name the layer to add (from=-3: three back)");
    SH_TRY(sh_cfg_int(s, "from", 0, -(1 << 20), 1 << 20, &from));
    SH_TRY(sh_act_parse(s, "linear", &l->act));
    float alpha = 1, beta = 1; /* Darknet: out = alpha * out + beta * from */
    SH_TRY(sh_cfg_float(s, "alpha", 1.0f, -1e6f, 1e6f, &alpha));
    SH_TRY(sh_cfg_float(s, "beta", 1.0f, -1e6f, 1e6f, &beta));
    if (alpha != 1.0f || beta != 1.0f)
        return sh_cfg_fail_at(s, alpha != 1.0f ? "alpha" : "beta", SHOAL_ERR_FORMAT, "%s=%g is not supported: "
                              "shoal's shortcut adds the two layers as they are; remove it",
                              alpha != 1.0f ? "alpha" : "beta", (double)(alpha != 1.0f ? alpha : beta));
    if (ctx->index == 0)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "cannot be the first layer: it adds the previous layer to an earlier one; put a layer before it");
    SH_TRY(sh_layer_ref(s, "from", from, ctx->index, &idx));
    const sh_shape *a = &l->in_shape, *b = &ctx->layers[idx].out_shape;
    int ok = a->w > 0 && a->h > 0 && b->w > 0 && b->h > 0;
    if (ok && b->w >= a->w) ok = b->w % a->w == 0 && b->h % a->h == 0 && b->w / a->w == b->h / a->h;
    else if (ok) ok = a->w % b->w == 0 && a->h % b->h == 0 && a->w / b->w == a->h / b->h;
    if (!ok)
        return sh_cfg_fail_at(s, "from", SHOAL_ERR_FORMAT,
                              "from=%d is layer %d (%s) with output %dx%dx%d, but the previous "
                              "layer's output is %dx%dx%d (C x H x W); shortcut needs one "
                              "to be the other scaled by the same whole factor in height and "
                              "width", from, idx, ctx->layers[idx].name, b->c, b->h, b->w, a->c,
                              a->h, a->w);
    l->nsrc = 2;
    l->src[1] = idx;
    l->from_shape = b;
    l->out_shape = *a;
    l->flops = (double)l->inputs;
    return SHOAL_OK;
}

static int same_shape(const sh_layer *l)
{
    return l->src_outputs[1] == l->outputs && l->src_outputs[0] == l->outputs;
}

/* Darknet's index walk over the shared region: out pixel (i*sample, j*sample) of channel k
 * meets from pixel (i*stride, j*stride) of channel k. fn(out_index, from_index). */
typedef struct {
    int minc, minh, minw, stride, sample, w_out, hw_out, w_from, hw_from;
} walk;

static void walk_init(const sh_layer *l, const sh_shape *from, walk *g)
{
    const sh_shape *o = &l->out_shape;
    g->stride = from->w / o->w < 1 ? 1 : from->w / o->w;
    g->sample = o->w / from->w < 1 ? 1 : o->w / from->w;
    g->minc = o->c < from->c ? o->c : from->c;
    g->minh = o->h < from->h ? o->h : from->h;
    g->minw = o->w < from->w ? o->w : from->w;
    g->w_out = o->w;
    g->hw_out = o->w * o->h;
    g->w_from = from->w;
    g->hw_from = from->w * from->h;
}

static void shortcut_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    size_t lo = (size_t)n0 * l->outputs, hi = (size_t)n1 * l->outputs;
    const float *a = l->in[0], *b = l->in[1];
    if (same_shape(l)) {
        for (size_t i = lo; i < hi; i++) l->out[i] = a[i] + b[i];
    } else {
        walk g;
        walk_init(l, l->from_shape, &g);
        memcpy(l->out + lo, a + lo, (hi - lo) * sizeof *a);
        for (int n = n0; n < n1; n++) {
            float *o = l->out + (size_t)n * l->outputs;
            const float *f = b + (size_t)n * l->src_outputs[1];
            for (int k = 0; k < g.minc; k++)
                for (int j = 0; j < g.minh; j++)
                    for (int i = 0; i < g.minw; i++)
                        o[i * g.sample + g.w_out * j * g.sample + (size_t)g.hw_out * k] +=
                            f[i * g.stride + g.w_from * j * g.stride + (size_t)g.hw_from * k];
        }
    }
    sh_act_forward(l->act, l->out + lo, hi - lo);
}

static void shortcut_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, shortcut_forward_images);
}

static void shortcut_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    size_t lo = (size_t)n0 * l->outputs, hi = (size_t)n1 * l->outputs;
    sh_act_backward(l->act, l->out + lo, l->delta + lo, hi - lo);
    if (!same_shape(l)) {
        float *da = l->in_delta[0], *db = l->in_delta[1];
        if (da) {
            if (l->accum[0])
                for (size_t i = lo; i < hi; i++) da[i] += l->delta[i];
            else
                memcpy(da + lo, l->delta + lo, (hi - lo) * sizeof *da);
        }
        if (!db) return;
        size_t nb = l->src_outputs[1];
        if (!l->accum[1]) memset(db + (size_t)n0 * nb, 0, (size_t)(n1 - n0) * nb * sizeof *db);
        walk g;
        walk_init(l, l->from_shape, &g);
        for (int n = n0; n < n1; n++) {
            const float *d = l->delta + (size_t)n * l->outputs;
            float *f = db + (size_t)n * nb;
            for (int k = 0; k < g.minc; k++)
                for (int j = 0; j < g.minh; j++)
                    for (int i = 0; i < g.minw; i++)
                        f[i * g.stride + g.w_from * j * g.stride + (size_t)g.hw_from * k] +=
                            d[i * g.sample + g.w_out * j * g.sample + (size_t)g.hw_out * k];
        }
        return;
    }
    for (int k = 0; k < 2; k++) {
        float *dx = l->in_delta[k];
        if (!dx) continue;
        if (l->accum[k])
            for (size_t i = lo; i < hi; i++) dx[i] += l->delta[i];
        else
            for (size_t i = lo; i < hi; i++) dx[i] = l->delta[i];
    }
}

static void shortcut_backward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, shortcut_backward_images);
}

const sh_layer_ops sh_shortcut_ops = {
    .cfg_name = "shortcut",
    .short_name = "shortcut",
    .caps = SH_LAYER_ACTIVATION,
    .parse = shortcut_parse,
    .forward = shortcut_forward,
    .backward = shortcut_backward,
};
