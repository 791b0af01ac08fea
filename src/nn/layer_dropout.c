/* layer_dropout.c — [dropout]: probability p (Darknet default 0.5). Training: each value
 * is dropped when a uniform draw from the network's generator is below p and the rest are
 * scaled by 1/(1-p); inference is the identity. The draws are made in one fixed order on
 * the calling thread, so the mask depends only on the generator state (sh_net_rng_set); a
 * share of a larger batch (sh_net_set_rows) draws for the whole batch and keeps its rows'.
 * Not here: the generator (base/util.c).
 * Proved by tests/nn/test_layer_misc.c. */
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

static shoal_result dropout_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)ctx;
    SH_TRY(sh_cfg_float(s, "probability", 0.5f, 0.0f, 0.999f, &l->probability));
    l->scale = 1.0f / (1.0f - l->probability);
    l->out_shape = l->in_shape;
    l->keep_count = l->inputs; /* the uniform draw of each value */
    return SHOAL_OK;
}

/* The pass's images are groups of rows of a batch of rows_total rows (sh_net_set_rows): the
 * draws go row after row through the whole batch, as one process makes them, and each of our
 * images keeps its row's. */
static void dropout_rows(sh_layer *l, sh_exec *x)
{
    const float *in = l->in[0];
    float p = l->probability, sc = l->scale;
    size_t per = l->inputs, row = 0, img = 0;
    for (int g = 0; img < (size_t)x->nimg; g++) {
        size_t first = (size_t)g * (size_t)x->rows_stride + (size_t)x->rows_offset;
        for (; row < first; row++)
            for (size_t k = 0; k < per; k++) (void)sh_rng_float(x->rng);
        for (int j = 0; j < x->rows_group && img < (size_t)x->nimg; j++, img++, row++)
            for (size_t k = 0; k < per; k++) {
                size_t i = img * per + k;
                float r = sh_rng_float(x->rng);
                l->keep[i] = r;
                l->out[i] = r < p ? 0.0f : in[i] * sc;
            }
    }
    for (; row < (size_t)x->rows_total; row++)
        for (size_t k = 0; k < per; k++) (void)sh_rng_float(x->rng);
}

static void dropout_forward(sh_layer *l, sh_exec *x)
{
    size_t count = (size_t)x->nimg * l->inputs;
    const float *in = l->in[0];
    if (!x->training) {
        memcpy(l->out, in, count * sizeof *in);
        return;
    }
    float p = l->probability, sc = l->scale;
    if (x->rows_total > 0) { /* a share of a larger batch: draw for every row, keep ours */
        dropout_rows(l, x);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        float r = sh_rng_float(x->rng);
        l->keep[i] = r;
        l->out[i] = r < p ? 0.0f : in[i] * sc;
    }
}

static void dropout_backward(sh_layer *l, sh_exec *x)
{
    float *dx = l->in_delta[0];
    if (!dx) return;
    size_t count = (size_t)x->nimg * l->inputs;
    float p = l->probability, sc = l->scale;
    for (size_t i = 0; i < count; i++) {
        float g = l->keep[i] < p ? 0.0f : l->delta[i] * sc;
        dx[i] = l->accum[0] ? dx[i] + g : g;
    }
}

const sh_layer_ops sh_dropout_ops = {
    .cfg_name = "dropout",
    .short_name = "dropout",
    .parse = dropout_parse,
    .forward = dropout_forward,
    .backward = dropout_backward,
};
