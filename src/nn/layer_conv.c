/* layer_conv.c — [convolutional]: filters, size, stride, pad/padding, groups, batch_normalize,
 * activation, Darknet's defaults; forward and backward through im2col + sgemm, a column cache
 * or Winograd 3x3; tensor-parallel column and row shares.
 * Not here: batch norm (layer_batchnorm.c), the GEMM (gemm.c), which layers are split.
 * Proved by tests/nn/test_layer_conv.c and tests/train/test_tensor.c (shares). */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "nn/conv_winograd.h"
#include "nn/gemm.h"
#include "nn/layer.h"

/* Column floats one unrolled group may hold (1 MiB: stays in L2 with the weights). */
#ifndef SH_CONV_GROUP_SHIFT
#define SH_CONV_GROUP_SHIFT 16
#endif
#define GROUP_COL_FLOATS ((size_t)1 << SH_CONV_GROUP_SHIFT)
/* ... and at least this many columns per product when images are small (7x7, 14x14):
 * sgemm needs a few hundred columns to run near its peak. */
#ifndef SH_CONV_MIN_COLUMNS
#define SH_CONV_MIN_COLUMNS 512
#endif
#define GROUP_MIN_COLUMNS ((size_t)SH_CONV_MIN_COLUMNS)
/* Threads from which small layers use the column cache rather than per-chunk partial
 * gradients: with few threads the partials win (the cache streams the columns through
 * memory), but they cost (2T - 1) copies of the gradients, which many threads make too much. */
#ifndef SH_CONV_CACHE_MIN_THREADS
#define SH_CONV_CACHE_MIN_THREADS 4
#endif
/* Column cache budget per layer (32 MiB): LeNet-sized layers, ResNet's 14x14 and 7x7 ones. */
#define CACHE_FLOATS ((size_t)8 << 20)

int sh_conv_cache_min_threads = SH_CONV_CACHE_MIN_THREADS;
int sh_conv_winograd = 1;

static int is_pointwise(const sh_layer *l)
{
    return l->size == 1 && l->stride == 1 && l->pad == 0;
}

/* 3x3, stride 1, padding 1: forward and the input gradient can go through Winograd. */
static int is_wino_shape(const sh_layer *l)
{
    return l->size == 3 && l->stride == 1 && l->pad == 1;
}

/* Output rows per unrolled tile of one big image, so its columns (CKK, rows*OW) stay in L2
 * next to the product instead of streaming through memory. */
#ifndef SH_CONV_TILE_FLOATS
#define SH_CONV_TILE_FLOATS ((size_t)1 << 18)
#endif
/* Floats of the column cache: the whole batch's columns and gathered outputs. */
static size_t col_cache_count(const sh_layer *l, int batch)
{
    size_t ckk = (size_t)l->in_shape.c * l->size * l->size;
    size_t ohw = (size_t)l->out_shape.h * l->out_shape.w;
    return (ckk + (size_t)l->filters) * ((size_t)batch * ohw + 16);
}

static int tile_rows(const sh_layer *l)
{
    size_t ckk = (size_t)l->in_shape.c * l->size * l->size, ow = (size_t)l->out_shape.w;
    size_t rows = SH_CONV_TILE_FLOATS / (ckk * ow);
    rows = rows < 1 ? 1 : rows > (size_t)l->out_shape.h ? (size_t)l->out_shape.h : rows;
    return (int)rows;
}

static shoal_result conv_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int pad_flag = 0, padding = 0, groups = 1;
    SH_TRY(sh_cfg_int(s, "filters", 1, 1, 1 << 16, &l->filters));
    if (ctx->out_div > 1) l->filters /= ctx->out_div; /* a column share (the caller checked) */
    SH_TRY(sh_cfg_int(s, "size", 1, 1, 1024, &l->size));
    SH_TRY(sh_cfg_int(s, "stride", 1, 1, 1024, &l->stride));
    SH_TRY(sh_cfg_int(s, "pad", 0, 0, 1, &pad_flag));
    SH_TRY(sh_cfg_int(s, "padding", 0, 0, 1024, &padding));
    SH_TRY(sh_cfg_int(s, "groups", 1, 1, 1 << 16, &groups));
    SH_TRY(sh_cfg_int(s, "batch_normalize", 0, 0, 1, &l->batch_normalize));
    SH_TRY(sh_act_parse(s, "logistic", &l->act));
    int binary = 0, xnor = 0; /* Darknet's binarised (XNOR-Net) weights and inputs */
    SH_TRY(sh_cfg_int(s, "binary", 0, 0, 1, &binary));
    SH_TRY(sh_cfg_int(s, "xnor", 0, 0, 1, &xnor));
    if (binary || xnor)
        return sh_cfg_fail_at(s, binary ? "binary" : "xnor", SHOAL_ERR_FORMAT, "%s=1 (binarised weights) is not "
                              "supported by shoal; remove it", binary ? "binary" : "xnor");
    l->pad = pad_flag ? l->size / 2 : padding; /* Darknet: pad=1 overrides padding */
    const sh_shape *in = &l->in_shape;
    if (in->c % groups != 0 || l->filters % groups != 0)
        return sh_cfg_fail_at(s, "groups", SHOAL_ERR_FORMAT,
                              "groups=%d must divide both the %d input channels and filters=%d",
                              groups, in->c, l->filters);
    l->groups = groups;
    if (groups > 1) l->caps &= ~(unsigned)(SH_LAYER_SPLIT_COLUMN | SH_LAYER_SPLIT_CHANNELS);
    int oh = (in->h + 2 * l->pad - l->size) / l->stride + 1;
    int ow = (in->w + 2 * l->pad - l->size) / l->stride + 1;
    if (in->h + 2 * l->pad < l->size || in->w + 2 * l->pad < l->size || oh < 1 || ow < 1)
        return sh_cfg_fail_at(s, "size", SHOAL_ERR_FORMAT,
                              "size=%d with padding %d does not fit the %dx%dx%d input (C x H x "
                              "W); use a smaller size or more padding",
                              l->size, l->pad, in->c, in->h, in->w);
    l->out_shape = (sh_shape){l->filters, oh, ow};
    size_t ckk = (size_t)(in->c / groups) * l->size * l->size; /* one filter's weights */
    size_t ohw = (size_t)oh * ow;
    l->w_off = 0;
    l->w_count = (size_t)l->filters * ckk;
    l->b_off = l->w_count;
    l->b_count = (size_t)l->filters;
    l->s_off = l->b_off + l->b_count;
    l->s_count = l->batch_normalize ? (size_t)l->filters : 0;
    l->param_count = l->w_count + l->b_count + l->s_count;
    l->reduce_off = 0;
    l->reduce_count = l->w_count + (l->batch_normalize ? 0 : l->b_count);
    l->stat_count = l->batch_normalize ? 2 * (size_t)l->filters : 0;
    l->keep_fixed = l->batch_normalize ? 2 * (size_t)l->filters : 0;         /* mean, invstd */
    l->flops = (double)l->filters * (double)ckk * (double)ohw;
    if (groups > 1) { /* one image, one group at a time: columns and their gradient */
        l->group = 1;
        l->ws_count = 2 * ckk * ohw;
        if (l->batch_normalize) sh_bn_size(l);
        return SHOAL_OK;
    }
    /* Small images make small products: unroll `group` images side by side so one sgemm
     * sees (F, C*S*S) x (C*S*S, group*OH*OW). Workspace: columns, their gradient, and the
     * outputs (or deltas) of the group gathered as (F, group*OH*OW). */
    size_t g = GROUP_COL_FLOATS / (ckk * ohw);
    size_t g_wide = (GROUP_MIN_COLUMNS + ohw - 1) / ohw; /* deep layers: tiny OH*OW */
    g = g > g_wide ? g : g_wide;
    g = g < 1 ? 1 : g > (size_t)ctx->batch ? (size_t)ctx->batch : g;
    l->group = (int)g;
    if (g == 1)
        l->ws_count = is_pointwise(l) ? 0 : 2 * ckk * (size_t)tile_rows(l) * l->out_shape.w;
    else
        l->ws_count = g * (2 * ckk * ohw + (size_t)l->filters * ohw);
    /* With many threads, small layers keep the whole batch's columns from forward (and
     * gather their deltas) so backward splits dW by filters over the whole batch: no partial
     * blocks. Otherwise the columns are recomputed in backward (they stay in L2). */
    size_t cache = col_cache_count(l, ctx->batch);
    if (cache <= CACHE_FLOATS) {
        l->cache_count = cache; /* used with several threads */
        if (l->ws_count < g * ckk * ohw) l->ws_count = g * ckk * ohw; /* dcol of a group */
    }
    if (is_wino_shape(l)) { /* the cache holds Winograd's kernels when not the columns */
        size_t wino = sh_wino_ws_count(in->c, l->filters, in->h, in->w, ctx->batch);
        if (l->ws_count < wino) l->ws_count = wino;
        if (l->cache_count < 16 * l->w_count / 9) l->cache_count = 16 * l->w_count / 9;
    }
    if (l->batch_normalize) sh_bn_size(l);
    return SHOAL_OK;
}

/* Tensor-parallel shares (tp_role): a column share keeps filters [r F/T, (r+1) F/T) and sums
 * its input's gradient over the ranks after backward; a row share reads channels
 * [r C/T, (r+1) C/T) of its input (the column share's output), keeps those channels of every
 * filter and sums its (N, F, OH, OW) output over the ranks before the bias and activation.
 * A share draws the whole layer's weights (F, C, S, S) in the whole layer's order and keeps
 * its own: the same values as one process. */
static void conv_init_share(sh_layer *l, float *params, sh_rng *rng)
{
    size_t kk = (size_t)l->size * l->size, f = (size_t)l->filters, c = (size_t)l->in_shape.c;
    size_t whole_f = l->tp_role == SH_TP_COLUMN ? l->tp_whole : f;
    size_t whole_c = l->tp_role == SH_TP_ROW ? c * (size_t)l->tp_ranks : c;
    size_t f0 = l->tp_role == SH_TP_COLUMN ? (size_t)l->tp_rank * f : 0;
    size_t c0 = l->tp_role == SH_TP_ROW ? (size_t)l->tp_rank * c : 0;
    float scale = sqrtf(2.0f / (float)(l->size * l->size * (int)whole_c));
    for (size_t r = 0; r < whole_f; r++)
        for (size_t ch = 0; ch < whole_c; ch++)
            for (size_t q = 0; q < kk; q++) {
                float v = scale * sh_rng_normal(rng);
                if (r >= f0 && r < f0 + f && ch >= c0 && ch < c0 + c)
                    params[l->w_off + ((r - f0) * c + (ch - c0)) * kk + q] = v;
            }
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
}

/* Weights: normal * sqrt(2 / (S*S*C/G)) as Darknet (He). Parameters: weights (F, C/G, S, S),
 * biases (F) [BN shift], then scales (F) with batch_normalize. */
static void conv_init(sh_layer *l, float *params, float *stats, sh_rng *rng)
{
    if (l->tp_role != SH_TP_NONE) { /* no batch norm in a split pair */
        conv_init_share(l, params, rng);
        return;
    }
    float scale = sqrtf(2.0f / (float)(l->size * l->size * l->in_shape.c / l->groups));
    for (size_t i = 0; i < l->w_count; i++) params[l->w_off + i] = scale * sh_rng_normal(rng);
    for (size_t i = 0; i < l->b_count; i++) params[l->b_off + i] = 0.0f;
    for (size_t i = 0; i < l->s_count; i++) params[l->s_off + i] = 1.0f;
    for (size_t i = 0; i < l->stat_count / 2; i++) {
        stats[l->stat_off + i] = 0.0f;                       /* rolling mean */
        stats[l->stat_off + l->stat_count / 2 + i] = 1.0f;   /* rolling variance */
    }
}

/* The output stays the raw product: batch norm follows, or (row share) the sum over the
 * ranks, then the bias and activation (conv_finish_images). */
static int raw_output(const sh_layer *l)
{
    return l->batch_normalize || l->tp_role == SH_TP_ROW;
}

static void conv_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    int ckk = in->c * l->size * l->size;
    int ohw = l->out_shape.h * l->out_shape.w, ow = l->out_shape.w;
    int rows = tile_rows(l);
    const float *w = x->params + l->w_off;
    const float *b = x->params + l->b_off;
    float *col = x->work[tid];
    for (int n = n0; n < n1; n++) {
        const float *im = l->in[0] + (size_t)n * l->inputs;
        float *y = l->out + (size_t)n * l->outputs; /* (F, OH*OW) */
        if (is_pointwise(l)) {
            sh_gemm(0, 0, l->filters, ohw, ckk, 1.0f, w, ckk, im, ohw, 0.0f, y, ohw);
        } else {
            for (int oy = 0; oy < l->out_shape.h; oy += rows) {
                int oy1 = oy + rows < l->out_shape.h ? oy + rows : l->out_shape.h;
                int nt = (oy1 - oy) * ow;
                sh_im2col_rows(im, in->c, in->h, in->w, l->size, l->stride, l->pad, oy, oy1, ow,
                               col, (size_t)nt);
                sh_gemm(0, 0, l->filters, nt, ckk, 1.0f, w, ckk, col, nt, 0.0f, y + oy * ow, ohw);
            }
        }
        if (!raw_output(l))
            for (int f = 0; f < l->filters; f++)
                sh_act_bias_forward(l->act, y + (size_t)f * ohw, (size_t)ohw, b[f]);
    }
}

/* Images [a, b) unrolled side by side: col (CKK, g*OHW), product tmp (F, g*OHW), then each
 * image's (F, OHW) block is copied out with bias and activation fused. */
static void conv_forward_grouped(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    size_t ckk = (size_t)in->c * l->size * l->size, ohw = (size_t)l->out_shape.h * l->out_shape.w;
    const float *w = x->params + l->w_off;
    const float *bias = x->params + l->b_off;
    float *col = x->work[tid];
    float *tmp = col + 2 * ckk * ohw * (size_t)l->group;
    for (int a = n0; a < n1; a += l->group) {
        int g = n1 - a < l->group ? n1 - a : l->group;
        size_t ld = (size_t)g * ohw;
        for (int j = 0; j < g; j++)
            sh_im2col(l->in[0] + (size_t)(a + j) * l->inputs, in->c, in->h, in->w, l->size,
                      l->stride, l->pad, l->out_shape.h, l->out_shape.w, col + j * ohw, ld);
        sh_gemm(0, 0, l->filters, (int)ld, (int)ckk, 1.0f, w, (int)ckk, col, (int)ld, 0.0f, tmp,
                (int)ld);
        for (int j = 0; j < g; j++)
            for (int f = 0; f < l->filters; f++) {
                float *y = l->out + (size_t)(a + j) * l->outputs + (size_t)f * ohw;
                const float *t = tmp + (size_t)f * ld + j * ohw;
                if (raw_output(l))
                    memcpy(y, t, ohw * sizeof *y);
                else
                    sh_act_bias_copy(l->act, y, t, ohw, bias[f]);
            }
    }
}

/* Row stride of the cached matrices: N*OHW plus 16 floats, so rows 2^k floats long do not
 * all map to the same cache sets. */
static size_t cache_ld(const sh_exec *x, size_t ohw) { return (size_t)x->nimg * ohw + 16; }
static size_t cache_ld_max(const sh_exec *x, size_t ohw) { return (size_t)x->batch * ohw + 16; }

/* Cached layout: the whole pass's columns as one (CKK, N*OHW) matrix and its gathered
 * deltas (or, in forward, products) as one (F, N*OHW) matrix, image n at columns
 * [n*OHW, (n+1)*OHW): backward's dW is then one product over the whole batch. */
static void conv_forward_cached(sh_layer *l, sh_exec *x, int tid, int a, int b)
{
    (void)tid;
    const sh_shape *in = &l->in_shape;
    size_t ckk = (size_t)in->c * l->size * l->size, ohw = (size_t)l->out_shape.h * l->out_shape.w;
    const float *w = x->params + l->w_off;
    const float *bias = x->params + l->b_off;
    int g = b - a;
    size_t ld = cache_ld(x, ohw);
    float *col = l->cache + (size_t)a * ohw;
    float *tmp = l->cache + ckk * cache_ld_max(x, ohw) + (size_t)a * ohw;
    for (int j = 0; j < g; j++)
        sh_im2col(l->in[0] + (size_t)(a + j) * l->inputs, in->c, in->h, in->w, l->size,
                  l->stride, l->pad, l->out_shape.h, l->out_shape.w, col + j * ohw, ld);
    sh_gemm(0, 0, l->filters, g * (int)ohw, (int)ckk, 1.0f, w, (int)ckk, col, (int)ld, 0.0f,
            tmp, (int)ld);
    for (int j = 0; j < g; j++)
        for (int f = 0; f < l->filters; f++) {
            float *y = l->out + (size_t)(a + j) * l->outputs + (size_t)f * ohw;
            const float *t = tmp + (size_t)f * ld + j * ohw;
            if (raw_output(l))
                memcpy(y, t, ohw * sizeof *y);
            else
                sh_act_bias_copy(l->act, y, t, ohw, bias[f]);
        }
}

static int use_cache(const sh_layer *l, const sh_exec *x)
{
    return l->groups == 1 && col_cache_count(l, x->batch) <= CACHE_FLOATS &&
           x->nthreads >= sh_conv_cache_min_threads;
}

/* Winograd (3x3, stride 1, pad 1) unless the column cache is in use: it needs forward's
 * columns for the weight gradient. */
static int use_wino(const sh_layer *l, const sh_exec *x)
{
    return sh_conv_winograd && l->groups == 1 && is_wino_shape(l) && !use_cache(l, x);
}

/* Winograd's chunks: the whole pass on one thread (its blocks gather tiles of several
 * images), else two chunks a thread so a busy core does not hold the others back. */
static int wino_chunk(const sh_exec *x)
{
    int parts = x->nthreads == 1 ? 1 : 2 * x->nthreads;
    return (x->nimg + parts - 1) / parts;
}

/* Winograd's kernels U (16, F, C) into the layer's cache, filters [f0, f1). */
static void conv_wino_weights(sh_layer *l, sh_exec *x, int tid, int f0, int f1)
{
    (void)tid;
    sh_wino_weights(x->params + l->w_off, l->filters, l->in_shape.c, f0, f1, l->cache);
}

static void conv_forward_wino(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    sh_wino_conv(l->cache, 0, l->in[0] + (size_t)n0 * l->inputs, n1 - n0, in->c,
                 in->h, in->w, l->filters, l->out + (size_t)n0 * l->outputs, 0, x->work[tid]);
    if (raw_output(l)) return;
    size_t ohw = (size_t)l->out_shape.h * l->out_shape.w;
    const float *b = x->params + l->b_off;
    for (int n = n0; n < n1; n++)
        for (int f = 0; f < l->filters; f++)
            sh_act_bias_forward(l->act, l->out + (size_t)n * l->outputs + (size_t)f * ohw, ohw,
                                b[f]);
}

/* dL/d(input) by Winograd: the output gradient convolved with the turned kernels. */
static void conv_backward_wino_dx(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    sh_wino_conv(l->cache, 1, l->delta + (size_t)n0 * l->outputs, n1 - n0,
                 l->filters, in->h, in->w, in->c, l->in_delta[0] + (size_t)n0 * l->inputs,
                 l->accum[0], x->work[tid]);
}

/* The input's delta when this pass computes it through the columns (not Winograd). */
static float *col_in_delta(const sh_layer *l, const sh_exec *x)
{
    return use_wino(l, x) ? NULL : l->in_delta[0];
}

/* Grouped convolution (groups=G): input channels [g*C/G, (g+1)*C/G) feed filters
 * [g*F/G, (g+1)*F/G), whose weights are the rows (F/G, C/G*S*S) of W from g*F/G, as Darknet
 * lays them out. One image and one group per product. */
static void conv_forward_groups(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    int cg = in->c / l->groups, fg = l->filters / l->groups;
    int ckk = cg * l->size * l->size, ohw = l->out_shape.h * l->out_shape.w;
    size_t in_hw = (size_t)in->h * in->w;
    const float *b = x->params + l->b_off;
    float *col = x->work[tid];
    for (int n = n0; n < n1; n++) {
        float *y = l->out + (size_t)n * l->outputs;
        for (int g = 0; g < l->groups; g++) {
            const float *im = l->in[0] + (size_t)n * l->inputs + (size_t)g * cg * in_hw;
            const float *w = x->params + l->w_off + (size_t)g * fg * ckk;
            const float *a = im;
            if (!is_pointwise(l)) {
                sh_im2col(im, cg, in->h, in->w, l->size, l->stride, l->pad, l->out_shape.h,
                          l->out_shape.w, col, (size_t)ohw);
                a = col;
            }
            sh_gemm(0, 0, fg, ohw, ckk, 1.0f, w, ckk, a, ohw, 0.0f, y + (size_t)g * fg * ohw,
                    ohw);
        }
        if (!raw_output(l))
            for (int f = 0; f < l->filters; f++)
                sh_act_bias_forward(l->act, y + (size_t)f * ohw, (size_t)ohw, b[f]);
    }
}

static void conv_backward_groups(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    int cg = in->c / l->groups, fg = l->filters / l->groups;
    int ckk = cg * l->size * l->size, ohw = l->out_shape.h * l->out_shape.w;
    size_t in_hw = (size_t)in->h * in->w;
    float *gw = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->w_off);
    float *gb = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->b_off);
    float *col = x->work[tid], *dcol = col + (size_t)ckk * ohw;
    for (int n = n0; n < n1; n++) {
        float *dy = l->delta + (size_t)n * l->outputs;
        int first = n == n0;
        if (!l->batch_normalize) {
            sh_act_backward(l->act, l->out + (size_t)n * l->outputs, dy, l->outputs);
            for (int f = 0; f < l->filters; f++) {
                float sum = sh_sum(dy + (size_t)f * ohw, (size_t)ohw);
                gb[f] = first ? sum : gb[f] + sum;
            }
        }
        float *dx = l->in_delta[0] ? l->in_delta[0] + (size_t)n * l->inputs : NULL;
        if (dx && !l->accum[0] && !is_pointwise(l)) memset(dx, 0, l->inputs * sizeof *dx);
        for (int g = 0; g < l->groups; g++) {
            const float *im = l->in[0] + (size_t)n * l->inputs + (size_t)g * cg * in_hw;
            const float *w = x->params + l->w_off + (size_t)g * fg * ckk;
            const float *dyg = dy + (size_t)g * fg * ohw;
            float *gwg = gw + (size_t)g * fg * ckk;
            float *dxg = dx ? dx + (size_t)g * cg * in_hw : NULL;
            if (is_pointwise(l)) {
                sh_gemm(0, 1, fg, ckk, ohw, 1.0f, dyg, ohw, im, ohw, first ? 0.0f : 1.0f, gwg,
                        ckk);
                if (dxg)
                    sh_gemm(1, 0, ckk, ohw, fg, 1.0f, w, ckk, dyg, ohw,
                            l->accum[0] ? 1.0f : 0.0f, dxg, ohw);
                continue;
            }
            sh_im2col(im, cg, in->h, in->w, l->size, l->stride, l->pad, l->out_shape.h,
                      l->out_shape.w, col, (size_t)ohw);
            sh_gemm(0, 1, fg, ckk, ohw, 1.0f, dyg, ohw, col, ohw, first ? 0.0f : 1.0f, gwg, ckk);
            if (!dxg) continue;
            sh_gemm(1, 0, ckk, ohw, fg, 1.0f, w, ckk, dyg, ohw, 0.0f, dcol, ohw);
            sh_col2im(dcol, (size_t)ohw, cg, in->h, in->w, l->size, l->stride, l->pad,
                      l->out_shape.h, l->out_shape.w, dxg);
        }
    }
}

/* Row share, after the sum over the ranks: bias and activation. */
static void conv_finish_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)tid;
    size_t ohw = (size_t)l->out_shape.h * l->out_shape.w;
    const float *b = x->params + l->b_off;
    for (int n = n0; n < n1; n++)
        for (int f = 0; f < l->filters; f++)
            sh_act_bias_forward(l->act, l->out + (size_t)n * l->outputs + (size_t)f * ohw, ohw, b[f]);
}

/* Forward: im2col (skipped for 1x1 stride-1 kernels) then sgemm (F, C*S*S) x (C*S*S, OH*OW),
 * small images unrolled `group` at a time so the product has enough columns; bias and
 * activation fused into the copy out. Backward: dW += dY col^T, dcol = W^T dY, col2im into
 * the input's delta; it recomputes the columns (they stay in L2) and sums per-chunk partial
 * gradients (sh_exec_partials); from SH_CONV_CACHE_MIN_THREADS threads, layers whose
 * whole-batch columns fit CACHE_FLOATS keep them from forward and split dW by filters.
 * 3x3 stride-1 pad-1 layers run forward and the input gradient through Winograd F(2x2, 3x3)
 * (conv_winograd.c: 2.25x fewer multiplies), keeping im2col for the weight gradient.
 * groups=G splits the channels into G independent convolutions (ResNeXt), one product each. */
static void conv_forward(sh_layer *l, sh_exec *x)
{
    if (l->groups > 1)
        sh_exec_images(l, x, conv_forward_groups);
    else if (use_wino(l, x)) {
        sh_exec_split(l, x, l->filters, conv_wino_weights);
        sh_exec_chunks(l, x, wino_chunk(x), conv_forward_wino);
    }
    else if (use_cache(l, x))
        sh_exec_chunks(l, x, l->group, conv_forward_cached);
    else
        sh_exec_images(l, x, l->group > 1 ? conv_forward_grouped : conv_forward_images);
    if (l->tp_role == SH_TP_ROW) { /* each rank's product covers its share of the channels */
        if (x->sum_rc == SHOAL_OK) x->sum_rc = x->sum(x->sum_ctx, l->out, (size_t)x->nimg * l->outputs);
        sh_exec_images(l, x, conv_finish_images);
    }
    if (l->batch_normalize) sh_bn_forward(l, x, l->out);
}

static void conv_backward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    int ckk = in->c * l->size * l->size;
    int ohw = l->out_shape.h * l->out_shape.w, ow = l->out_shape.w;
    int rows = tile_rows(l);
    const float *w = x->params + l->w_off;
    float *gw = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->w_off);
    float *gb = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->b_off);
    float *col = x->work[tid];
    float *dcol = col + (size_t)ckk * rows * ow;
    for (int n = n0; n < n1; n++) {
        const float *im = l->in[0] + (size_t)n * l->inputs;
        float *dy = l->delta + (size_t)n * l->outputs;
        int first = n == n0;
        if (!l->batch_normalize) {
            sh_act_backward(l->act, l->out + (size_t)n * l->outputs, dy, l->outputs);
            for (int f = 0; f < l->filters; f++) {
                float sum = sh_sum(dy + (size_t)f * ohw, (size_t)ohw);
                gb[f] = first ? sum : gb[f] + sum;
            }
        }
        float *dx = col_in_delta(l, x) ? l->in_delta[0] + (size_t)n * l->inputs : NULL;
        if (is_pointwise(l)) {
            sh_gemm(0, 1, l->filters, ckk, ohw, 1.0f, dy, ohw, im, ohw, first ? 0.0f : 1.0f, gw,
                    ckk);
            if (dx)
                sh_gemm(1, 0, ckk, ohw, l->filters, 1.0f, w, ckk, dy, ohw,
                        l->accum[0] ? 1.0f : 0.0f, dx, ohw);
            continue;
        }
        if (dx && !l->accum[0]) memset(dx, 0, l->inputs * sizeof *dx);
        for (int oy = 0; oy < l->out_shape.h; oy += rows) {
            int oy1 = oy + rows < l->out_shape.h ? oy + rows : l->out_shape.h;
            int nt = (oy1 - oy) * ow;
            sh_im2col_rows(im, in->c, in->h, in->w, l->size, l->stride, l->pad, oy, oy1, ow, col,
                           (size_t)nt);
            sh_gemm(0, 1, l->filters, ckk, nt, 1.0f, dy + oy * ow, ohw, col, nt,
                    first && oy == 0 ? 0.0f : 1.0f, gw, ckk);
            if (!dx) continue;
            sh_gemm(1, 0, ckk, nt, l->filters, 1.0f, w, ckk, dy + oy * ow, ohw, 0.0f, dcol, nt);
            sh_col2im_rows(dcol, (size_t)nt, in->c, in->h, in->w, l->size, l->stride, l->pad, oy,
                           oy1, ow, dx);
        }
    }
}

/* Grouped backward: gather the group's deltas as dy (F, g*OHW); dW += dy col^T,
 * dcol = W^T dy, then col2im image by image. */
static void conv_backward_grouped(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    const sh_shape *in = &l->in_shape;
    size_t ckk = (size_t)in->c * l->size * l->size, ohw = (size_t)l->out_shape.h * l->out_shape.w;
    const float *w = x->params + l->w_off;
    float *gw = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->w_off);
    float *gb = sh_exec_grad(x, l, sh_exec_slot(x, n0), l->b_off);
    float *col = x->work[tid];
    float *dcol = col + ckk * ohw * (size_t)l->group;
    float *dy = dcol + ckk * ohw * (size_t)l->group;
    if (!l->batch_normalize) memset(gb, 0, (size_t)l->filters * sizeof *gb);
    for (int a = n0; a < n1; a += l->group) {
        int g = n1 - a < l->group ? n1 - a : l->group;
        size_t ld = (size_t)g * ohw;
        for (int j = 0; j < g; j++) {
            float *d = l->delta + (size_t)(a + j) * l->outputs;
            if (!l->batch_normalize)
                sh_act_backward(l->act, l->out + (size_t)(a + j) * l->outputs, d, l->outputs);
            for (int f = 0; f < l->filters; f++) {
                const float *src = d + (size_t)f * ohw;
                memcpy(dy + (size_t)f * ld + j * ohw, src, ohw * sizeof *src);
                if (!l->batch_normalize) gb[f] += sh_sum(src, ohw);
            }
            sh_im2col(l->in[0] + (size_t)(a + j) * l->inputs, in->c, in->h, in->w, l->size,
                      l->stride, l->pad, l->out_shape.h, l->out_shape.w, col + j * ohw, ld);
        }
        sh_gemm(0, 1, l->filters, (int)ckk, (int)ld, 1.0f, dy, (int)ld, col, (int)ld,
                a == n0 ? 0.0f : 1.0f, gw, (int)ckk);
        if (!col_in_delta(l, x)) continue;
        sh_gemm(1, 0, (int)ckk, (int)ld, l->filters, 1.0f, w, (int)ckk, dy, (int)ld, 0.0f, dcol,
                (int)ld);
        for (int j = 0; j < g; j++) {
            float *dx = l->in_delta[0] + (size_t)(a + j) * l->inputs;
            if (!l->accum[0]) memset(dx, 0, l->inputs * sizeof *dx);
            sh_col2im(dcol + j * ohw, ld, in->c, in->h, in->w, l->size, l->stride, l->pad,
                      l->out_shape.h, l->out_shape.w, dx);
        }
    }
}

/* Cached backward, phase 1 (chunks of one group): activation gradient, gather the deltas
 * into the (F, N*OHW) matrix, dcol = W^T dy and col2im into the input's delta. */
static void conv_backward_cached_images(sh_layer *l, sh_exec *x, int tid, int a, int b)
{
    const sh_shape *in = &l->in_shape;
    size_t ckk = (size_t)in->c * l->size * l->size, ohw = (size_t)l->out_shape.h * l->out_shape.w;
    int g = b - a;
    size_t ld = cache_ld(x, ohw), ldg = (size_t)g * ohw;
    float *dy = l->cache + ckk * cache_ld_max(x, ohw) + (size_t)a * ohw;
    for (int j = 0; j < g; j++) {
        float *d = l->delta + (size_t)(a + j) * l->outputs;
        if (!l->batch_normalize)
            sh_act_backward(l->act, l->out + (size_t)(a + j) * l->outputs, d, l->outputs);
        for (int f = 0; f < l->filters; f++)
            memcpy(dy + (size_t)f * ld + j * ohw, d + (size_t)f * ohw, ohw * sizeof *d);
    }
    if (!l->in_delta[0]) return;
    float *dcol = x->work[tid];
    sh_gemm(1, 0, (int)ckk, (int)ldg, l->filters, 1.0f, x->params + l->w_off, (int)ckk, dy,
            (int)ld, 0.0f, dcol, (int)ldg);
    for (int j = 0; j < g; j++) {
        float *dx = l->in_delta[0] + (size_t)(a + j) * l->inputs;
        if (!l->accum[0]) memset(dx, 0, l->inputs * sizeof *dx);
        sh_col2im(dcol + j * ohw, ldg, in->c, in->h, in->w, l->size, l->stride, l->pad,
                  l->out_shape.h, l->out_shape.w, dx);
    }
}

/* Phase 2 (filters [f0, f1) per thread): dW rows = dy[f0:f1] col^T in one product over the
 * whole batch; bias gradients sum the same rows. */
static void conv_backward_cached_filters(sh_layer *l, sh_exec *x, int tid, int f0, int f1)
{
    (void)tid;
    if (f0 >= f1) return;
    size_t ckk = (size_t)l->in_shape.c * l->size * l->size;
    size_t ohw = (size_t)l->out_shape.h * l->out_shape.w;
    size_t ld = cache_ld(x, ohw);
    const float *dy = l->cache + ckk * cache_ld_max(x, ohw);
    sh_gemm(0, 1, f1 - f0, (int)ckk, (int)ld, 1.0f, dy + (size_t)f0 * ld, (int)ld, l->cache,
            (int)ld, 0.0f, x->grad[0] + l->w_off + (size_t)f0 * ckk, (int)ckk);
    if (l->batch_normalize) return;
    float *gb = x->grad[0] + l->b_off;
    for (int f = f0; f < f1; f++) {
        gb[f] = sh_sum(dy + (size_t)f * ld, (size_t)x->nimg * ohw);
    }
}

static void conv_backward_local(sh_layer *l, sh_exec *x)
{
    if (l->batch_normalize) sh_bn_backward(l, x);
    if (l->groups > 1) {
        sh_exec_partials(l, x, conv_backward_groups);
        return;
    }
    if (use_cache(l, x)) {
        sh_exec_chunks(l, x, l->group, conv_backward_cached_images);
        sh_exec_split(l, x, l->filters, conv_backward_cached_filters);
        return;
    }
    sh_exec_partials(l, x, l->group > 1 ? conv_backward_grouped : conv_backward_images);
    /* forward's kernels: the weights do not change before this layer's backward is done */
    if (use_wino(l, x) && l->in_delta[0]) sh_exec_chunks(l, x, wino_chunk(x), conv_backward_wino_dx);
}

/* A row share's output and its delta are whole (its bias and activation ran after the sum),
 * so its backward is the plain one over its channels; a column share's input gradient covers
 * its filters only, summed over the ranks. */
static void conv_backward(sh_layer *l, sh_exec *x)
{
    conv_backward_local(l, x);
    if (l->tp_role == SH_TP_COLUMN && l->in_delta[0] && x->sum_rc == SHOAL_OK)
        x->sum_rc = x->sum(x->sum_ctx, l->in_delta[0], (size_t)x->nimg * l->inputs);
}

/* Darknet: biases, [scales, rolling mean, rolling variance], weights (F, C/G, S, S). */
static int conv_darknet_blobs(const sh_layer *l, sh_dn_blob *b, int max)
{
    (void)max;
    int k = 0;
    size_t f = (size_t)l->filters;
    b[k++] = (sh_dn_blob){.off = l->b_off, .count = l->b_count};
    if (l->batch_normalize) {
        b[k++] = (sh_dn_blob){.off = l->s_off, .count = l->s_count};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off, .count = f};
        b[k++] = (sh_dn_blob){.stats = 1, .off = l->stat_off + f, .count = f};
    }
    b[k++] = (sh_dn_blob){.off = l->w_off, .count = l->w_count};
    return k;
}

const sh_layer_ops sh_conv_ops = {
    .cfg_name = "convolutional",
    .short_name = "conv",
    .caps = SH_LAYER_SPLIT_COLUMN | SH_LAYER_SPLIT_CHANNELS | SH_LAYER_ACTIVATION, /* splits: groups=1 only (parse) */
    .parse = conv_parse,
    .init = conv_init,
    .forward = conv_forward,
    .backward = conv_backward,
    .darknet_blobs = conv_darknet_blobs,
};
