/* layer_shortcut.c — [shortcut]: residual add of the previous layer and layer `from`
 * (negative: relative, as Darknet), then activation (default linear). The two shapes must
 * be equal; Darknet's resampling of mismatched shapes is not supported.
 * Not here: concatenation (layer_route.c).
 * Proved by tests/nn/test_layer_misc.c. */
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
    if (ctx->index == 0)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "[shortcut] cannot be the first layer: it adds the previous layer");
    SH_TRY(sh_layer_ref(s, "from", from, ctx->index, &idx));
    const sh_shape *a = &l->in_shape, *b = &ctx->layers[idx].out_shape;
    if (a->c != b->c || a->h != b->h || a->w != b->w)
        return sh_cfg_fail_at(s, "from", SHOAL_ERR_FORMAT,
                              "from=%d is layer %d (%s) with output %dx%dx%d, but the previous "
                              "layer's output is %dx%dx%d (C x H x W); shortcut needs equal "
                              "shapes", from, idx, ctx->layers[idx].name, b->c, b->h, b->w, a->c,
                              a->h, a->w);
    l->nsrc = 2;
    l->src[1] = idx;
    l->out_shape = *a;
    l->flops = (double)l->inputs;
    return SHOAL_OK;
}

static void shortcut_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    size_t lo = (size_t)n0 * l->outputs, hi = (size_t)n1 * l->outputs;
    const float *a = l->in[0], *b = l->in[1];
    for (size_t i = lo; i < hi; i++) l->out[i] = a[i] + b[i];
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
    .parse = shortcut_parse,
    .forward = shortcut_forward,
    .backward = shortcut_backward,
};
