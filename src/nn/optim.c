/* optim.c — SGD with momentum, Adagrad and Adam over a flat parameter array, weight decay
 * on chosen ranges, all state in one block that a checkpoint saves as it is.
 * Not here: the learning rate (lr_policy.c), where gradients come from or how they are
 * averaged across ranks (net.c, src/train).
 * Proved by tests/nn/test_optim.c. */
#include "nn/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/hot.h"
#include "base/util.h"

/* The update rules, with g' = g + decay * w on decayed ranges (L2 regularisation as
 * PyTorch's weight_decay, not AdamW) and g' = g elsewhere:
 *   SGD      v = momentum * v + g';            w -= lr * v              (PyTorch, no dampening)
 *   Adagrad  h = h + g'^2;                     w -= lr * g' / (sqrt(h) + eps)
 *   Adam     m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;  t = t + 1;
 *            w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * State block: SGD [v (count)], Adagrad [h (count)], Adam [m (count), v (count), t]. t is a
 * float that counts steps; floats count exactly to 2^24 (16.7 million steps). */

/* Decay applies or not over [offset, offset + count); segments tile [0, count) in order. */
typedef struct {
    size_t offset, count;
    int decay;
} segment;

struct sh_optim {
    sh_optim_config cfg;
    size_t count;        /* parameters */
    float *state;        /* aligned; state_count floats */
    size_t state_count;
    int foreign_state;   /* state is the caller's (sh_optim_use_state): not freed here */
    segment *seg;
    int nseg;
    /* this step's rates, set by sh_optim_begin */
    float lr, lr_t, inv_c2;
};

/* The loops are kept plain (restrict, one pass, no branches) so that -O3 vectorises them, at
 * the CPU's width in a portable build too (SH_HOT, base/hot.h).
 * sqrtf is the exception: with errno semantics (the build's default) GCC will not vectorise
 * it, so Adagrad and Adam work in blocks: a vector loop for the moments, a square root over
 * the block with SIMD instructions where the target has them, a vector loop for the update.
 * IEEE square roots are correctly rounded, so every path gives the same bits. */
#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

enum { BLOCK = 512 }; /* floats per block: 2 KB of scratch stays in L1 */

static void sqrt_block(float *x, size_t n)
{
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_sqrt_ps(_mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#elif defined(__SSE2__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrtf(x[i]);
}

SH_HOT static void sgd_segment(float *restrict w, const float *restrict g, float *restrict v, size_t n,
                        float lr, float momentum, float decay)
{
    if (momentum == 0.0f) { /* v would hold g' alone: the pass reads and writes w and g only */
        for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + decay * w[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float gd = g[i] + decay * w[i];
        float vi = momentum * v[i] + gd;
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

SH_HOT static void adagrad_block(float *restrict w, const float *restrict g, float *restrict h,
                          float *restrict tmp, size_t n, float lr, float decay, float eps)
{
    for (size_t i = 0; i < n; i++) {
        float gd = g[i] + decay * w[i];
        h[i] += gd * gd;
        tmp[i] = h[i];
    }
    sqrt_block(tmp, n);
    for (size_t i = 0; i < n; i++) {
        float gd = g[i] + decay * w[i];
        w[i] -= lr * gd / (tmp[i] + eps);
    }
}

static void adagrad_segment(float *w, const float *g, float *h, size_t n, float lr, float decay,
                            float eps)
{
    float tmp[BLOCK];
    for (size_t at = 0; at < n; at += BLOCK) {
        size_t len = n - at < BLOCK ? n - at : BLOCK;
        adagrad_block(w + at, g + at, h + at, tmp, len, lr, decay, eps);
    }
}

/* lr_t = lr / (1 - b1^t) and inv_c2 = 1 / (1 - b2^t) fold the bias corrections. */
SH_HOT static void adam_block(float *restrict w, const float *restrict g, float *restrict m,
                       float *restrict v, float *restrict tmp, size_t n, float lr_t, float b1,
                       float b2, float inv_c2, float decay, float eps)
{
    const float a1 = 1.0f - b1, a2 = 1.0f - b2;
    for (size_t i = 0; i < n; i++) {
        float gd = g[i] + decay * w[i];
        m[i] = b1 * m[i] + a1 * gd;
        v[i] = b2 * v[i] + a2 * gd * gd;
        tmp[i] = v[i] * inv_c2;
    }
    sqrt_block(tmp, n);
    for (size_t i = 0; i < n; i++) w[i] -= lr_t * m[i] / (tmp[i] + eps);
}

static void adam_segment(float *w, const float *g, float *m, float *v, size_t n, float lr_t,
                         float b1, float b2, float inv_c2, float decay, float eps)
{
    float tmp[BLOCK];
    for (size_t at = 0; at < n; at += BLOCK) {
        size_t len = n - at < BLOCK ? n - at : BLOCK;
        adam_block(w + at, g + at, m + at, v + at, tmp, len, lr_t, b1, b2, inv_c2, decay, eps);
    }
}

static int by_offset(const void *a, const void *b)
{
    const sh_param_range *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Sort the ranges, check they fit and do not overlap, fill gaps with no-decay segments. */
static shoal_result build_segments(sh_optim *o, const sh_param_range *ranges, int nranges)
{
    shoal_result rc = SHOAL_OK;
    sh_param_range *sorted = NULL;
    if (!ranges || nranges == 0) {
        /* no ranges given: everything decays (one plain array, as a parameter server shard) */
        SH_TRY(sh_calloc(1, sizeof *o->seg, (void **)&o->seg));
        o->seg[0] = (segment){0, o->count, 1};
        o->nseg = o->count ? 1 : 0;
        return SHOAL_OK;
    }
    SH_TRY(sh_calloc((size_t)nranges, sizeof *sorted, (void **)&sorted));
    memcpy(sorted, ranges, (size_t)nranges * sizeof *sorted);
    qsort(sorted, (size_t)nranges, sizeof *sorted, by_offset);
    SH_TRY_GOTO(sh_calloc(2 * (size_t)nranges + 1, sizeof *o->seg, (void **)&o->seg), rc, done);
    size_t at = 0;
    for (int i = 0; i < nranges; i++) {
        const sh_param_range *r = &sorted[i];
        if (r->offset > o->count || r->count > o->count - r->offset) {
            rc = SH_FAIL(SHOAL_ERR_INVALID,
                         "optimizer: parameter range [%zu, %zu) lies outside the %zu parameters",
                         r->offset, r->offset + r->count, o->count);
            goto done;
        }
        if (r->offset < at) {
            rc = SH_FAIL(SHOAL_ERR_INVALID,
                         "optimizer: parameter range [%zu, %zu) overlaps the one ending at %zu; "
                         "ranges must be disjoint",
                         r->offset, r->offset + r->count, at);
            goto done;
        }
        if (r->offset > at) o->seg[o->nseg++] = (segment){at, r->offset - at, 0};
        if (r->count) o->seg[o->nseg++] = (segment){r->offset, r->count, r->decay != 0};
        at = r->offset + r->count;
    }
    if (at < o->count) o->seg[o->nseg++] = (segment){at, o->count - at, 0};
done:
    free(sorted);
    return rc;
}

void sh_optim_destroy(sh_optim *o)
{
    if (!o) return;
    if (!o->foreign_state) sh_free_aligned(o->state);
    free(o->seg);
    free(o);
}

shoal_result sh_optim_create(const sh_optim_config *cfg, size_t count, const sh_param_range *ranges,
                             int nranges, sh_optim **out)
{
    shoal_result rc = SHOAL_OK;
    sh_optim *o = NULL;
    *out = NULL;
    if (!cfg || nranges < 0 || (nranges > 0 && !ranges))
        return SH_FAIL(SHOAL_ERR_INVALID, "sh_optim_create: config is NULL or ranges are missing");
    if (cfg->kind != SH_OPTIM_SGD && cfg->kind != SH_OPTIM_ADAGRAD && cfg->kind != SH_OPTIM_ADAM)
        return SH_FAIL(SHOAL_ERR_INVALID, "sh_optim_create: unknown optimizer kind %d",
                       (int)cfg->kind);
    if (!(cfg->momentum >= 0 && cfg->momentum < 1) || !(cfg->decay >= 0) ||
        (cfg->kind == SH_OPTIM_ADAM &&
         !(cfg->beta1 >= 0 && cfg->beta1 < 1 && cfg->beta2 >= 0 && cfg->beta2 < 1)) ||
        (cfg->kind != SH_OPTIM_SGD && !(cfg->eps > 0)))
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "sh_optim_create: momentum %g, decay %g, B1 %g, B2 %g, eps %g: want "
                       "momentum, B1, B2 in [0, 1), decay >= 0, eps > 0",
                       (double)cfg->momentum, (double)cfg->decay, (double)cfg->beta1,
                       (double)cfg->beta2, (double)cfg->eps);
    SH_TRY(sh_calloc(1, sizeof *o, (void **)&o));
    o->cfg = *cfg;
    o->count = count;
    o->state_count = cfg->kind == SH_OPTIM_ADAM ? 2 * count + 1 : count;
    SH_TRY_GOTO(build_segments(o, ranges, nranges), rc, done);
    /* at least one float so that the pointer is never NULL for count 0 */
    size_t nbytes = (o->state_count ? o->state_count : 1) * sizeof(float);
    SH_TRY_GOTO(sh_alloc_aligned(nbytes, (void **)&o->state), rc, done);
    memset(o->state, 0, nbytes);
    *out = o;
    o = NULL;
done:
    sh_optim_destroy(o);
    return rc;
}

void sh_optim_begin(sh_optim *o, float lr)
{
    const sh_optim_config *c = &o->cfg;
    o->lr = lr;
    if (c->kind == SH_OPTIM_ADAM) {
        float *tp = &o->state[2 * o->count];
        *tp += 1.0f;
        double t = *tp;
        o->lr_t = (float)(lr / (1.0 - pow(c->beta1, t)));
        o->inv_c2 = (float)(1.0 / (1.0 - pow(c->beta2, t)));
    }
}

void sh_optim_apply(sh_optim *o, float *params, const float *grads, size_t lo, size_t n)
{
    const sh_optim_config *c = &o->cfg;
    float *s = o->state;
    size_t hi = lo + n;
    for (int i = 0; i < o->nseg; i++) {
        const segment *g = &o->seg[i];
        size_t a = g->offset > lo ? g->offset : lo, b = g->offset + g->count < hi ? g->offset + g->count : hi;
        if (a >= b) continue;
        float decay = g->decay ? c->decay : 0.0f;
        const float *ga = grads + (a - lo);
        if (c->kind == SH_OPTIM_ADAM)
            adam_segment(params + a, ga, s + a, s + o->count + a, b - a, o->lr_t, c->beta1, c->beta2, o->inv_c2,
                         decay, c->eps);
        else if (c->kind == SH_OPTIM_SGD)
            sgd_segment(params + a, ga, s + a, b - a, o->lr, c->momentum, decay);
        else
            adagrad_segment(params + a, ga, s + a, b - a, o->lr, decay, c->eps);
    }
}

void sh_optim_step(sh_optim *o, float *params, const float *grads, float lr)
{
    sh_optim_begin(o, lr);
    sh_optim_apply(o, params, grads, 0, o->count);
}

size_t sh_optim_moments(const sh_optim *o) { return o->cfg.kind == SH_OPTIM_ADAM ? 2 * o->count : o->count; }

void sh_optim_state_zero(sh_optim *o, size_t lo, size_t n)
{
    size_t per = o->cfg.kind == SH_OPTIM_ADAM ? 2 : 1;
    for (size_t k = 0; k < per; k++) memset(o->state + k * o->count + lo, 0, n * sizeof(float));
}

void sh_optim_use_state(sh_optim *o, float *state)
{
    if (!o->foreign_state) sh_free_aligned(o->state);
    o->state = state;
    o->foreign_state = 1;
}

float *sh_optim_state(sh_optim *o, size_t *count)
{
    *count = o->state_count;
    return o->state;
}
