/* layer_route.c — [route]: layers=-1,-4 concatenates those layers' outputs along channels
 * (negative: relative, as Darknet); their spatial sizes must match.
 * Not here: addition (layer_shortcut.c).
 * Proved by tests/nn/test_layer_misc.c. */
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static shoal_result route_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int refs[SH_LAYER_MAX_SRC], nref = 0;
    if (!sh_cfg_has(s, "layers"))
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "layers= is missing; list the layers to concatenate (layers=-1,-4)");
    SH_TRY(sh_cfg_int_list(s, "layers", refs, SH_LAYER_MAX_SRC, &nref));
    if (nref < 1)
        return sh_cfg_fail_at(s, "layers", SHOAL_ERR_FORMAT, "layers= lists no layer");
    int c = 0;
    for (int k = 0; k < nref; k++) {
        int idx = 0;
        SH_TRY(sh_layer_ref(s, "layers", refs[k], ctx->index, &idx));
        const sh_shape *o = &ctx->layers[idx].out_shape, *first = &ctx->layers[l->src[0]].out_shape;
        if (k > 0 && (o->h != first->h || o->w != first->w))
            return sh_cfg_fail_at(s, "layers", SHOAL_ERR_FORMAT,
                                  "layer %d (%s) is %dx%d but layer %d (%s) is %dx%d (H x W); "
                                  "route concatenates channels of equal spatial size",
                                  idx, ctx->layers[idx].name, o->h, o->w, l->src[0],
                                  ctx->layers[l->src[0]].name, first->h, first->w);
        l->src[k] = idx;
        if (k == 0) l->in_shape = *o;
        c += o->c;
    }
    l->nsrc = nref;
    l->inputs = sh_shape_count(&l->in_shape);
    l->out_shape = (sh_shape){c, l->in_shape.h, l->in_shape.w};
    return SHOAL_OK;
}

static void route_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    for (int n = n0; n < n1; n++) {
        float *y = l->out + (size_t)n * l->outputs;
        for (int k = 0; k < l->nsrc; k++) {
            size_t cnt = l->src_outputs[k];
            memcpy(y, l->in[k] + (size_t)n * cnt, cnt * sizeof *y);
            y += cnt;
        }
    }
}

static void route_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, route_forward_images);
}

static void route_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    for (int n = n0; n < n1; n++) {
        const float *dy = l->delta + (size_t)n * l->outputs;
        for (int k = 0; k < l->nsrc; k++) {
            size_t cnt = l->src_outputs[k];
            float *dx = l->in_delta[k];
            if (dx) {
                dx += (size_t)n * cnt;
                if (l->accum[k])
                    for (size_t i = 0; i < cnt; i++) dx[i] += dy[i];
                else
                    memcpy(dx, dy, cnt * sizeof *dx);
            }
            dy += cnt;
        }
    }
}

static void route_backward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, route_backward_images);
}

const sh_layer_ops sh_route_ops = {
    .cfg_name = "route",
    .short_name = "route",
    .parse = route_parse,
    .forward = route_forward,
    .backward = route_backward,
};
