/* mp/pipeline_plan.c — where a pipeline cuts the net (stage= keys, or stages balanced by the
 * layers' estimated cost plus what crosses each cut) and what a stage reports: the start-up
 * layout lines and the --profile figures.
 * Not here: the schedule and its traffic (mp/pipeline_pass.c), the stage's hooks (mp/pipeline.c).
 * Proved by tests/train/test_pipeline.c, test_pipeline_links.c and tests/cli/test_train_pipeline.c. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/mp/pipeline_internal.h"

/* ---- the plan ---- */

static double layer_cost(const sh_net *n, int i)
{
    int c, h, w;
    sh_net_layer_shape(n, i, &c, &h, &w);
    /* backward costs about twice forward; layers without products still touch outputs */
    return 3.0 * sh_net_layer_flops(n, i) + (double)c * h * w;
}

static shoal_result plan_by_keys(const sh_net *n, int stages, int *cuts)
{
    int L = sh_net_nlayers(n), cur = 0, prev_line = 0;
    const char *path = sh_net_cfg_path(n);
    for (int k = 0; k <= stages; k++) cuts[k] = -1;
    cuts[0] = 0;
    for (int i = 0; i < L; i++) {
        int k = sh_net_layer_stage(n, i);
        if (k < 0) continue;
        if (k < cur)
            return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: stage=%d after stage=%d (line %d); stages go in "
                           "layer order", path, sh_net_layer_line(n, i), k, cur, prev_line);
        if (k >= stages)
            return SH_FAIL(SHOAL_ERR_INVALID, "%s:%d: stage=%d but --pipeline %d has stages 0..%d; "
                           "run with --pipeline %d or change the keys", path, sh_net_layer_line(n, i),
                           k, stages, stages - 1, k + 1);
        if (k > cur) {
            if (k != cur + 1)
                return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: stage=%d skips stage %d; number the stages "
                               "0, 1, 2, ... in order", path, sh_net_layer_line(n, i), k, cur + 1);
            if (!sh_net_can_cut(n, i))
                return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: stage=%d starts where the net cannot be cut: "
                               "[cost] works in place on the layer before it; move the key",
                               path, sh_net_layer_line(n, i), k);
            cuts[k] = i;
        }
        cur = k;
        prev_line = sh_net_layer_line(n, i);
    }
    if (cur != stages - 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: its stage= keys name stages 0..%d but --pipeline %d asks "
                       "for %d; run with --pipeline %d", path, cur, stages, stages, cur + 1);
    cuts[stages] = L;
    return SHOAL_OK;
}

/* Per image, the values a cut before c sends besides the layer before it (its links), twice
 * (each way): a stage copies them as its layers touch their outputs. */
static shoal_result links_cost(const sh_net *n, double *cost)
{
    int L = sh_net_nlayers(n), *links = NULL;
    SH_TRY(sh_calloc((size_t)L, sizeof *links, (void **)&links));
    for (int c = 1; c < L; c++) {
        int count = sh_net_cut_links(n, c, links);
        for (int t = 0; t < count; t++) cost[c] += 2.0 * (double)sh_net_layer_outputs(n, links[t]);
    }
    free(links);
    return SHOAL_OK;
}

/* Contiguous stages minimising the costliest one (dynamic programming over the cuts); a
 * stage's cost counts the links crossing its ends. */
static shoal_result plan_balanced(const sh_net *n, int stages, int *cuts)
{
    int L = sh_net_nlayers(n);
    shoal_result rc = SHOAL_OK;
    double *prefix = NULL, *best = NULL, *link = NULL;
    int *from = NULL;
    SH_TRY_GOTO(sh_calloc((size_t)L + 1, sizeof *prefix, (void **)&prefix), rc, done);
    SH_TRY_GOTO(sh_calloc((size_t)L + 1, sizeof *link, (void **)&link), rc, done);
    SH_TRY_GOTO(links_cost(n, link), rc, done);
    SH_TRY_GOTO(sh_calloc((size_t)(stages + 1) * (L + 1), sizeof *best, (void **)&best), rc, done);
    SH_TRY_GOTO(sh_calloc((size_t)(stages + 1) * (L + 1), sizeof *from, (void **)&from), rc, done);
    for (int i = 0; i < L; i++) prefix[i + 1] = prefix[i] + layer_cost(n, i);
#define BEST(k, j) best[(size_t)(k) * (L + 1) + (j)]
#define FROM(k, j) from[(size_t)(k) * (L + 1) + (j)]
    for (int k = 0; k <= stages; k++)
        for (int j = 0; j <= L; j++) BEST(k, j) = DBL_MAX;
    BEST(0, 0) = 0;
    for (int k = 1; k <= stages; k++)
        for (int j = 1; j <= L; j++) {
            if (j < L && !sh_net_can_cut(n, j)) continue;
            for (int i = k - 1; i < j; i++) {
                if (BEST(k - 1, i) == DBL_MAX) continue;
                double own = prefix[j] - prefix[i] + link[i] + link[j];
                double v = BEST(k - 1, i) > own ? BEST(k - 1, i) : own;
                if (v < BEST(k, j)) {
                    BEST(k, j) = v;
                    FROM(k, j) = i;
                }
            }
        }
    if (BEST(stages, L) == DBL_MAX) {
        int ncut = 0;
        for (int c = 1; c < L; c++) ncut += sh_net_can_cut(n, c);
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d: %s has %d layers and %d places where it can be "
                     "cut, so at most %d stages; use --pipeline %d or fewer", stages,
                     sh_net_cfg_path(n), L, ncut, ncut + 1, ncut + 1);
        goto done;
    }
    cuts[stages] = L;
    for (int k = stages; k > 0; k--) cuts[k - 1] = FROM(k, cuts[k]);
#undef BEST
#undef FROM
done:
    free(prefix);
    free(link);
    free(best);
    free(from);
    return rc;
}

shoal_result sh_pipe_plan(const sh_net *n, int stages, int *cuts)
{
    int L = sh_net_nlayers(n), keyed = 0;
    if (stages < 1) return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d: give at least 1 stage", stages);
    if (stages > L)
        return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d: %s has only %d layers; use at most %d stages",
                       stages, sh_net_cfg_path(n), L, L);
    for (int i = 0; i < L; i++) keyed |= sh_net_layer_stage(n, i) >= 0;
    return keyed ? plan_by_keys(n, stages, cuts) : plan_balanced(n, stages, cuts);
}

void sh_strategy_pipeline_profile(const sh_strategy *s, sh_pipe_profile *out)
{
    const pipe_state *p = s->impl;
    memset(out, 0, sizeof *out);
    out->stage = p->stage;
    out->replica = p->replica;
    out->lo = p->cuts[p->stage];
    out->hi = p->cuts[p->stage + 1];
    double k = p->passes ? 1e-9 / (double)p->passes : 0;
    out->forward = p->ns[0] * k;
    out->backward = p->ns[1] * k;
    out->bubble = p->ns[2] * k;
    out->comm = p->ns[3] * k;
    out->step = p->ns[4] * k;
    out->deferred_layers = p->ndefer;
}

/* "; also receives layer 2's output (for route 5)": what crosses the cut before c besides the
 * layer before it, and the last layer that reads it (this stage's, or a later one's). */
static void describe_links(const sh_net *n, int c, FILE *out)
{
    int L = sh_net_nlayers(n);
    for (int s = 0, t = 0; s < c - 1; s++) {
        if (!sh_net_crosses(n, s, c)) continue;
        int reader = c;
        while (reader + 1 < L && sh_net_crosses(n, s, reader + 1)) reader++;
        fprintf(out, "%s layer %d's output (for %s)", t++ ? "," : "; also receives", s, sh_net_layer_name(n, reader));
    }
}

static void describe_split(const pipe_state *p, FILE *out)
{
    fprintf(out, "pipeline x tensor parallel: %d replica%s x %d stages x %d tensor ranks on %d ranks, %d micro-batch%s "
            "of %d image%s (batch %d per replica), 1F1B\n", p->R, p->R == 1 ? "" : "s", p->S, p->T, p->R * p->S * p->T,
            p->M, p->M == 1 ? "" : "es", p->mb, p->mb == 1 ? "" : "s", p->batch);
    for (int k = 0; k < p->S; k++) {
        fprintf(out, "  stage %d: layers %d-%d, %zu parameters, ranks", k, p->cuts[k], p->cuts[k + 1] - 1,
                p->stage_nparams[k]);
        for (int r = 0; r < p->R; r++)
            for (int t = 0; t < p->T; t++)
                fprintf(out, "%s%d", t ? "," : r ? " | " : " ", (r * p->S + k) * p->T + t);
        if (k > 0) describe_links(p->inst[0], p->cuts[k], out);
        if (!p->pairs[k]) fprintf(out, "; no pair split: its layers run whole on each tensor rank");
        fputc('\n', out);
        sh_tp_plan_describe(&p->plan, p->cuts[k], p->cuts[k + 1], "    ", out);
    }
}

void sh_strategy_pipeline_describe(const sh_strategy *s, FILE *out)
{
    const pipe_state *p = s->impl;
    if (p->T > 1) {
        describe_split(p, out);
        return;
    }
    fprintf(out, "pipeline: %d stage%s x %d replica%s on %d ranks, %d micro-batch%s of %d image%s "
            "(batch %d per replica), 1F1B\n", p->S, p->S == 1 ? "" : "s", p->R, p->R == 1 ? "" : "s",
            p->S * p->R, p->M, p->M == 1 ? "" : "es", p->mb, p->mb == 1 ? "" : "s", p->batch);
    for (int k = 0; k < p->S; k++) {
        fprintf(out, "  stage %d: layers %d-%d, %zu parameters, ranks", k, p->cuts[k], p->cuts[k + 1] - 1,
                p->stage_nparams[k]);
        for (int r = 0; r < p->R; r++) fprintf(out, "%s%d", r ? "," : " ", r * p->S + k);
        if (k > 0) describe_links(p->inst[0], p->cuts[k], out);
        fputc('\n', out);
    }
}
