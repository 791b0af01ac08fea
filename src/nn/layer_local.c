/* layer_local.c — [local]: Darknet's locally connected layer, a convolution whose filters differ
 * at each of the L = OH*OW output locations: filters (F), size, stride, pad, activation (default
 * logistic); output side as Darknet's local_out_height.
 * Not here: im2col / col2im (im2col.c).
 * Proved by tests/nn/test_layer_local.c (a plain loop, finite differences, Darknet's classifier). */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "nn/layer.h"

/* Output side: (in - size) / stride + 1 without padding, (in - 1) / stride + 1 with it, so the
 * padding must be what that side needs (refused otherwise).
 * Parameters as Darknet lays them out: weights (L, F, C*S*S), location by location, then one
 * bias per output (F, OH, OW); its .weights file holds the biases first.
 * Per image: the columns of im2col turned to (L, C*S*S) rows, each location's F outputs a product
 * of its filters with its row; backward the same turned around, summed per chunk of images into
 * partial slots, and the columns' gradient folded back by col2im.
 * Weights start uniform(-1, 1) * sqrt(2 / (C*S*S)) everywhere (Darknet draws only the first
 * location's and leaves the others 0). */

/* Darknet's local_out_height / width */
static int local_side(int in, int size, int stride, int pad)
{
    return (pad ? in - 1 : in - size) / stride + 1;
}

static shoal_result local_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    (void)ctx;
    SH_TRY(sh_cfg_int(s, "filters", 1, 1, 1 << 16, &l->filters));
    SH_TRY(sh_cfg_int(s, "size", 1, 1, 1024, &l->size));
    SH_TRY(sh_cfg_int(s, "stride", 1, 1, 1024, &l->stride));
    SH_TRY(sh_cfg_int(s, "pad", 0, 0, 1024, &l->pad));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    const sh_shape *in = &l->in_shape;
    if (in->h < 1 || in->w < 1 || in->c < 1)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT, "the layer before must output an image");
    int oh = local_side(in->h, l->size, l->stride, l->pad), ow = local_side(in->w, l->size, l->stride, l->pad);
    int col_h = (in->h + 2 * l->pad - l->size) / l->stride + 1;
    int col_w = (in->w + 2 * l->pad - l->size) / l->stride + 1;
    if (in->h + 2 * l->pad < l->size || in->w + 2 * l->pad < l->size || oh < 1 || ow < 1)
        return sh_cfg_fail_at(s, "size", SHOAL_ERR_FORMAT, "size=%d does not fit the %dx%dx%d input "
                              "(C x H x W) with pad=%d", l->size, in->c, in->h, in->w, l->pad);
    if (col_h != oh || col_w != ow)
        return sh_cfg_fail_at(s, "pad", SHOAL_ERR_FORMAT,
                              "pad=%d with size=%d: Darknet sizes the output %dx%d as if the padding "
                              "were (size - 1) / 2, but its windows make %dx%d; use pad=0 or pad=%d",
                              l->pad, l->size, oh, ow, col_h, col_w, (l->size - 1) / 2);
    l->out_shape = (sh_shape){l->filters, oh, ow};
    size_t loc = (size_t)oh * ow, ckk = (size_t)in->c * l->size * l->size;
    l->w_off = 0;
    l->w_count = loc * (size_t)l->filters * ckk;
    l->b_off = l->w_count;
    l->b_count = sh_shape_count(&l->out_shape);
    l->param_count = l->w_count + l->b_count;
    l->reduce_off = 0;
    l->reduce_count = l->param_count;
    l->ws_count = 3 * loc * ckk; /* the columns, turned, and their gradient */
    l->flops = (double)l->w_count;
    return SHOAL_OK;
}

static void local_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    (void)stats;
    float scale = sqrtf(2.0f / (float)(l->size * l->size * l->in_shape.c));
    for (size_t i = 0; i < l->w_count; i++) params[l->w_off + i] = scale * (2.0f * sh_rng_float(rng) - 1.0f);
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
}

/* col (CKK, L) -> rows (L, CKK), or back. */
static void turn(const float *a, float *b, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) b[c * rows + r] = a[r * cols + c];
}

static void local_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    size_t loc = (size_t)l->out_shape.h * l->out_shape.w, ckk = (size_t)in->c * l->size * l->size;
    size_t f = (size_t)l->filters;
    const float *w = x->params + l->w_off, *b = x->params + l->b_off;
    float *col = x->work[tid], *rows = col + loc * ckk;
    for (int n = n0; n < n1; n++) {
        float *y = l->out + (size_t)n * l->outputs;
        sh_im2col(l->in[0] + (size_t)n * l->inputs, in->c, in->h, in->w, l->size, l->stride, l->pad,
                  l->out_shape.h, l->out_shape.w, col, loc);
        turn(col, rows, ckk, loc);
        for (size_t j = 0; j < loc; j++)
            for (size_t k = 0; k < f; k++)
                y[k * loc + j] = b[k * loc + j] + sh_dot(w + (j * f + k) * ckk, rows + j * ckk, ckk);
        sh_act_forward(l->act, y, l->outputs);
    }
}

static void local_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, local_forward_images);
}

static void local_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    size_t loc = (size_t)l->out_shape.h * l->out_shape.w, ckk = (size_t)in->c * l->size * l->size;
    size_t f = (size_t)l->filters;
    const float *w = x->params + l->w_off;
    float *gw = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->w_off);
    float *gb = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->b_off);
    float *col = x->work[tid], *rows = col + loc * ckk, *drows = rows + loc * ckk;
    for (int n = n0; n < n1; n++) {
        float *dy = l->delta + (size_t)n * l->outputs;
        int first = n == n0;
        sh_act_backward(l->act, l->out + (size_t)n * l->outputs, dy, l->outputs);
        for (size_t i = 0; i < l->b_count; i++) gb[i] = first ? dy[i] : gb[i] + dy[i];
        sh_im2col(l->in[0] + (size_t)n * l->inputs, in->c, in->h, in->w, l->size, l->stride, l->pad,
                  l->out_shape.h, l->out_shape.w, col, loc);
        turn(col, rows, ckk, loc);
        if (l->in_delta[0]) memset(drows, 0, loc * ckk * sizeof *drows);
        for (size_t j = 0; j < loc; j++)
            for (size_t k = 0; k < f; k++) {
                float d = dy[k * loc + j];
                float *g = gw + (j * f + k) * ckk;
                const float *r = rows + j * ckk;
                if (first)
                    for (size_t q = 0; q < ckk; q++) g[q] = d * r[q];
                else
                    for (size_t q = 0; q < ckk; q++) g[q] += d * r[q];
                if (l->in_delta[0]) {
                    const float *wk = w + (j * f + k) * ckk;
                    float *dr = drows + j * ckk;
                    for (size_t q = 0; q < ckk; q++) dr[q] += d * wk[q];
                }
            }
        if (!l->in_delta[0]) continue;
        float *dx = l->in_delta[0] + (size_t)n * l->inputs;
        turn(drows, col, loc, ckk);
        if (!l->accum[0]) memset(dx, 0, l->inputs * sizeof *dx);
        sh_col2im(col, loc, in->c, in->h, in->w, l->size, l->stride, l->pad, l->out_shape.h, l->out_shape.w, dx);
    }
}

static void local_backward(sh_layer *l, sh_exec *x)
{
    sh_exec_partials(l, x, local_backward_images);
}

/* Darknet: biases (F, OH, OW), then weights (L, F, C*S*S). */
static int local_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    b[0] = (sh_dn_blob){.off = l->b_off, .count = l->b_count};
    b[1] = (sh_dn_blob){.off = l->w_off, .count = l->w_count};
    return 2;
}

const sh_layer_ops sh_local_ops = {
    .cfg_name = "local",
    .short_name = "local",
    .parse = local_parse,
    .init = local_init,
    .forward = local_forward,
    .backward = local_backward,
    .darknet_blobs = local_darknet_blobs,
};
