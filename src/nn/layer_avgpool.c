/* layer_avgpool.c — [avgpool]: global average pooling as Darknet, (C, H, W) -> (C, 1, 1).
 * Not here: windowed max pooling (layer_maxpool.c).
 * Proved by tests/nn/test_layer_pool.c. */
#include "base/err.h"
#include "nn/layer.h"

static shoal_result avgpool_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)s;
    (void)ctx;
    l->out_shape = (sh_shape){l->in_shape.c, 1, 1};
    l->flops = (double)l->inputs;
    return SHOAL_OK;
}

static void avgpool_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    size_t hw = (size_t)l->in_shape.h * l->in_shape.w;
    for (int n = n0; n < n1; n++)
        for (int c = 0; c < l->in_shape.c; c++) {
            const float *v = l->in[0] + (size_t)n * l->inputs + (size_t)c * hw;
            l->out[(size_t)n * l->outputs + c] = sh_sum(v, hw) / (float)hw;
        }
}

static void avgpool_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, avgpool_forward_images);
}

static void avgpool_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    size_t hw = (size_t)l->in_shape.h * l->in_shape.w;
    for (int n = n0; n < n1; n++)
        for (int c = 0; c < l->in_shape.c; c++) {
            float *d = l->in_delta[0] + (size_t)n * l->inputs + (size_t)c * hw;
            float g = l->delta[(size_t)n * l->outputs + c] / (float)hw;
            if (l->accum[0])
                for (size_t i = 0; i < hw; i++) d[i] += g;
            else
                for (size_t i = 0; i < hw; i++) d[i] = g;
        }
}

static void avgpool_backward(sh_layer *l, sh_exec *x)
{
    if (l->in_delta[0]) sh_exec_images(l, x, avgpool_backward_images);
}

const sh_layer_ops sh_avgpool_ops = {
    .cfg_name = "avgpool",
    .short_name = "avgpool",
    .caps = SH_LAYER_PER_CHANNEL,
    .parse = avgpool_parse,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};
