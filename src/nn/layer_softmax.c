/* layer_softmax.c — [softmax] (groups=1, temperature, tree=FILE: Darknet's WordTree softmax,
 * forward only) and [cost]: after [softmax] read as its cross-entropy, adding no computation;
 * after another layer type=sse|L1|smooth (scale=), a regression against targets.
 * Not here: the losses, labels and targets (net.c's sh_net_loss, net_unlabelled.c).
 * Proved by tests/nn/test_layer_misc.c (softmax + cross-entropy gradient). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "nn/layer.h"

/* Darknet's read_tree (tree.c): one "name parent" line per output; a group is a run of
 * consecutive lines with the same parent, and the softmax runs within each group. */
static shoal_result read_tree(sh_layer *l, sh_cfg_section *s, const char *path)
{
    struct stat st;
    FILE *f = NULL;
    errno = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || !(f = fopen(path, "r")))
        return sh_cfg_fail_at(s, "tree", SHOAL_ERR_FORMAT, "tree=%s: cannot open: %s; give the "
                              "WordTree file's path (Darknet's data/9k.tree)", path,
                              errno ? strerror(errno) : "not a regular file");
    shoal_result rc = SHOAL_OK;
    char line[1024], name[256];
    int n = 0, last_parent = -1, run = 0, cap = 0;
    while (fgets(line, sizeof line, f)) {
        int parent = -1;
        if (sscanf(line, "%255s %d", name, &parent) < 1) continue;
        if (parent != last_parent) { /* close the run before this line (Darknet's rule) */
            if (l->tree_groups == cap) {
                cap = cap ? 2 * cap : 256;
                int *grown = realloc(l->tree_group_size, (size_t)cap * sizeof *grown);
                if (!grown) {
                    rc = SH_FAIL(SHOAL_ERR_NOMEM, "tree=%s: out of memory", path);
                    goto done;
                }
                l->tree_group_size = grown;
            }
            l->tree_group_size[l->tree_groups++] = run;
            run = 0;
            last_parent = parent;
        }
        n++;
        run++;
    }
    if (l->tree_groups == cap) {
        int *grown = realloc(l->tree_group_size, (size_t)(cap + 1) * sizeof *grown);
        if (!grown) {
            rc = SH_FAIL(SHOAL_ERR_NOMEM, "tree=%s: out of memory", path);
            goto done;
        }
        l->tree_group_size = grown;
    }
    l->tree_group_size[l->tree_groups++] = run;
    if ((size_t)n != l->inputs)
        rc = sh_cfg_fail_at(s, "tree", SHOAL_ERR_FORMAT, "tree=%s names %d classes, but the "
                            "softmax has %zu inputs; the tree and the layer before must agree",
                            path, n, l->inputs);
done:
    fclose(f);
    return rc;
}

static void softmax_fini(sh_layer *l)
{
    free(l->tree_group_size);
    l->tree_group_size = NULL;
    l->tree_groups = 0;
}

static shoal_result softmax_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    int groups = 1;
    (void)ctx;
    const char *tree = NULL;
    SH_TRY(sh_cfg_str(s, "tree", "", &tree));
    if (tree[0]) SH_TRY(read_tree(l, s, tree));
    SH_TRY(sh_cfg_int(s, "groups", 1, 1, 1 << 20, &groups));
    if (groups != 1)
        return sh_cfg_fail_at(s, "groups", SHOAL_ERR_FORMAT,
                              "groups=%d is not supported; shoal's softmax covers all %zu "
                              "inputs (groups=1)", groups, l->inputs);
    SH_TRY(sh_cfg_float(s, "temperature", 1.0f, 1e-3f, 1e3f, &l->temperature));
    int noloss = 0;
    SH_TRY(sh_cfg_int(s, "noloss", 0, 0, 1, &noloss));
    if (noloss)
        return sh_cfg_fail_at(s, "noloss", SHOAL_ERR_FORMAT, "noloss=1 (a softmax without a loss) is not "
                              "supported: shoal's loss is this softmax's cross-entropy; remove it");
    l->out_shape = (sh_shape){(int)l->inputs, 1, 1};
    l->flops = (double)l->inputs;
    return SHOAL_OK;
}

/* p = softmax(z / T) over k values. */
static void softmax_run(const float *z, float *p, size_t k, float inv_t)
{
    if (k == 0) return;
    float mx = z[0];
    for (size_t i = 1; i < k; i++) mx = z[i] > mx ? z[i] : mx;
    float sum = 0.0f;
    for (size_t i = 0; i < k; i++) {
        p[i] = expf((z[i] - mx) * inv_t);
        sum += p[i];
    }
    float inv = 1.0f / sum;
    for (size_t i = 0; i < k; i++) p[i] *= inv;
}

/* exp(x) for x <= 0 to about 2 ulp without a library call, so that a row's loop
 * vectorises (libm's expf was a tenth of a character model's step): x = n ln2 + r with
 * |r| <= ln2 / 2 (ln2 in two parts), exp(r) by its Taylor polynomial, times 2^n; below -87
 * it gives exp(-87) (1.6e-38, a probability of nothing) rather than 0. */
static inline float exp_nonpos(float x)
{
    x = x < -87.0f ? -87.0f : x;
    float n = __builtin_rintf(x * 1.44269504088896341f);
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float r = x - n * 0.693145751953125f - n * 1.42860682030941723e-6f;
    float e = 1.0f / 720.0f;
    e = e * r + 1.0f / 120.0f;
    e = e * r + 1.0f / 24.0f;
    e = e * r + 1.0f / 6.0f;
    e = e * r + 0.5f;
    e = e * r + 1.0f;
    e = e * r + 1.0f;
    return e * scale;
}

/* softmax_run for k a multiple of LANES: the maximum and the sum kept in LANES partial
 * values (added in a fixed order, so the result does not depend on the threads) and the
 * exponentials through exp_nonpos: every loop vectorises. */
enum { LANES = 16 };
static void softmax_lanes(const float *restrict z, float *restrict p, size_t k, float inv_t)
{
    float m[LANES], s[LANES];
    for (int j = 0; j < LANES; j++) m[j] = z[j];
    for (size_t i = LANES; i < k; i += LANES)
        for (int j = 0; j < LANES; j++) m[j] = z[i + j] > m[j] ? z[i + j] : m[j];
    float mx = m[0];
    for (int j = 1; j < LANES; j++) mx = m[j] > mx ? m[j] : mx;
    for (size_t i = 0; i < k; i++) p[i] = exp_nonpos((z[i] - mx) * inv_t);
    for (int j = 0; j < LANES; j++) s[j] = 0.0f;
    for (size_t i = 0; i < k; i += LANES)
        for (int j = 0; j < LANES; j++) s[j] += p[i + j];
    float sum = 0.0f;
    for (int j = 0; j < LANES; j++) sum += s[j];
    float inv = 1.0f / sum;
    for (size_t i = 0; i < k; i++) p[i] *= inv;
}

static void softmax_forward_images(sh_layer *l, sh_exec *x, int tid, int n0, int n1)
{
    (void)x;
    (void)tid;
    size_t k = l->inputs;
    float inv_t = 1.0f / l->temperature;
    for (int n = n0; n < n1; n++) {
        const float *z = l->in[0] + (size_t)n * k;
        float *p = l->out + (size_t)n * k;
        if (l->tree_groups) { /* Darknet: one softmax per WordTree group, in order */
            size_t at = 0;
            for (int g = 0; g < l->tree_groups; g++) {
                softmax_run(z + at, p + at, (size_t)l->tree_group_size[g], inv_t);
                at += (size_t)l->tree_group_size[g];
            }
            continue;
        }
        if (k % LANES) {
            softmax_run(z, p, k, inv_t);
            continue;
        }
        softmax_lanes(z, p, k, inv_t);
    }
}

static void softmax_forward(sh_layer *l, sh_exec *x)
{
    sh_exec_images(l, x, softmax_forward_images);
}

static void softmax_backward(sh_layer *l, sh_exec *x)
{
    float *dx = l->in_delta[0];
    if (!dx) return;
    size_t count = (size_t)x->nimg * l->inputs;
    float inv_t = 1.0f / l->temperature;
    for (size_t i = 0; i < count; i++) {
        float g = l->delta[i] * inv_t;
        dx[i] = l->accum[0] ? dx[i] + g : g;
    }
}

const sh_layer_ops sh_softmax_ops = {
    .cfg_name = "softmax",
    .short_name = "softmax",
    .caps = SH_LAYER_SOFTMAX,
    .parse = softmax_parse,
    .forward = softmax_forward,
    .backward = softmax_backward,
    .fini = softmax_fini,
};

/* The loss of a network is the cross-entropy of its softmax, so a [cost] after [softmax]
 * (whose Darknet default type is sse) is read as that cross-entropy: its buffers are the
 * softmax's. */
/* Darknet's cost types (cost_layer.c get_cost_type) that shoal computes after a layer other
 * than [softmax]; "L1" is Darknet's spelling, "l1" accepted too. */
static int regression_type(const char *type)
{
    if (!strcmp(type, "sse")) return SH_COST_SSE;
    if (!strcmp(type, "L1") || !strcmp(type, "l1")) return SH_COST_L1;
    if (!strcmp(type, "smooth")) return SH_COST_SMOOTH;
    return -1;
}

static shoal_result cost_parse(sh_layer *l, sh_cfg_section *s, const sh_parse_ctx *ctx)
{
    const char *type = NULL;
    SH_TRY(sh_cfg_str(s, "type", "sse", &type));
    SH_TRY(sh_cfg_float(s, "scale", 1.0f, 0.0f, 1e6f, &l->scale));
    if (ctx->index == 0)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT, "[cost] needs a layer before it to compare");
    const sh_layer *prev = &ctx->layers[ctx->index - 1];
    l->out_shape = l->in_shape;
    l->alias_input = 1;
    if (!sh_layer_can(prev, SH_LAYER_SOFTMAX)) { /* a regression of the layer before against targets */
        int kind = regression_type(type);
        if (kind < 0)
            return sh_cfg_fail_at(s, "type", SHOAL_ERR_FORMAT, "type=%s is not supported after [%s]; use sse, "
                                  "L1 or smooth (a regression against targets)", type, prev->ops->cfg_name);
        l->cost = kind;
        return SHOAL_OK;
    }
    /* masked: Darknet's cost for a WordTree softmax (darknet9000); shoal only runs it forward */
    int tree = prev->tree_groups > 0;
    if (strcmp(type, "sse") != 0 && !(tree && strcmp(type, "masked") == 0))
        return sh_cfg_fail_at(s, "type", SHOAL_ERR_FORMAT,
                              "type=%s is not supported: shoal trains with the cross-entropy of "
                              "the softmax before [cost]; remove type= (or use type=sse)", type);
    if (l->scale != 1.0f)
        return sh_cfg_fail_at(s, "scale", SHOAL_ERR_FORMAT, "scale=%g after [softmax] is not supported: the "
                              "loss there is the softmax's cross-entropy; remove scale=", (double)l->scale);
    return SHOAL_OK;
}

static void cost_noop(sh_layer *l, sh_exec *x)
{
    (void)l;
    (void)x;
}

const sh_layer_ops sh_cost_ops = {
    .cfg_name = "cost",
    .short_name = "cost",
    .caps = SH_LAYER_LOSS,
    .parse = cost_parse,
    .forward = cost_noop,
    .backward = cost_noop,
};
