/* mp/tensor_plan.c — the tensor-parallel planner: the candidate pairs of a net or a pipeline
 * stage, the cost rule and the dynamic programme that choose among them, the layout lines,
 * and the shares' place in the whole model (checkpoints, --weights, --save-darknet).
 * Not here: which pairs may be split at all (sh_net_tp_pair_end, src/nn/net_tensor.c), the traffic (mp/tensor.c, pipeline.c).
 * Proved by tests/train/test_tensor.c and tests/train/test_pipeline_tp.c. */
#include "train/mp/tensor_plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"

/* Multiply-adds one core does in the time a rank sends a byte of allreduce on one host,
 * rounded from a core's product rate over shared memory's allreduce busbw. A split pair saves
 * each rank 3F(T-1)/T multiply-adds (forward and two backward products) and sends 2B(T-1)/T
 * bytes (ring): worth it when F > MACS_PER_BYTE x B. */
#define MACS_PER_BYTE 8

shoal_result sh_tp_plan_init(sh_tp_plan *pl, const sh_net *plan, int T)
{
    memset(pl, 0, sizeof *pl);
    pl->T = T;
    pl->nlayers = sh_net_nlayers(plan);
    size_t n = (size_t)pl->nlayers;
    if (sh_calloc(n, 1, (void **)&pl->roles) != SHOAL_OK ||
        sh_calloc(n, sizeof *pl->outputs, (void **)&pl->outputs) != SHOAL_OK ||
        sh_calloc(n, sizeof *pl->units, (void **)&pl->units) != SHOAL_OK ||
        sh_calloc(n, sizeof *pl->whole_off, (void **)&pl->whole_off) != SHOAL_OK ||
        sh_calloc(n, sizeof *pl->whole_count, (void **)&pl->whole_count) != SHOAL_OK ||
        sh_calloc(n, sizeof *pl->cands, (void **)&pl->cands) != SHOAL_OK)
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    size_t off = 0;
    for (int i = 0; i < pl->nlayers; i++) {
        int c, h, w;
        size_t o_unused;
        sh_net_layer_shape(plan, i, &c, &h, &w);
        pl->outputs[i] = c * h * w;
        pl->units[i] = c;
        sh_net_layer_params(plan, i, &o_unused, &pl->whole_count[i]);
        pl->whole_off[i] = off;
        off += pl->whole_count[i];
    }
    pl->nparams_whole = off;
    return SHOAL_OK;
}

void sh_tp_plan_fini(sh_tp_plan *pl)
{
    free(pl->roles);
    free(pl->outputs);
    free(pl->units);
    free(pl->whole_off);
    free(pl->whole_count);
    free(pl->cands);
    memset(pl, 0, sizeof *pl);
}

/* Candidate c's own worth: multiply-adds it keeps off the wire, net of its bytes. */
static double cand_worth(const sh_tp_cand *c) { return c->macs - MACS_PER_BYTE * c->nbytes; }

/* best[k] is the largest total worth of non-overlapping worthy pairs within layers [k, hi),
 * fewer bytes on a tie. */
shoal_result sh_tp_plan_choose(sh_tp_plan *pl, const sh_net *plan, int lo, int hi, int *npairs)
{
    int n = pl->nlayers, first = pl->ncands;
    int *at = NULL, *take = NULL;
    double *best = NULL, *bytes = NULL;
    shoal_result rc = SHOAL_OK;
    *npairs = 0;
    if (sh_calloc((size_t)n + 1, sizeof *at, (void **)&at) != SHOAL_OK ||
        sh_calloc((size_t)n + 1, sizeof *take, (void **)&take) != SHOAL_OK ||
        sh_calloc((size_t)n + 1, sizeof *best, (void **)&best) != SHOAL_OK ||
        sh_calloc((size_t)n + 1, sizeof *bytes, (void **)&bytes) != SHOAL_OK) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = lo; i < hi; i++) {
        at[i] = -1;
        int j = sh_net_tp_pair_end(plan, i, pl->T);
        if (j < 0 || j >= hi) continue; /* never across a pipeline's cut */
        sh_tp_cand *c = &pl->cands[pl->ncands];
        memset(c, 0, sizeof *c);
        c->col = i;
        c->row = j;
        c->col_conv = sh_net_tp_by_channels(plan, i);
        c->row_conv = sh_net_tp_by_channels(plan, j);
        for (int k = i; k <= j; k++) c->macs += sh_net_layer_flops(plan, k);
        /* the net's first layer's input gradient is not computed: nothing to sum; a later
         * stage's first layer's is (it goes back to the stage before) */
        c->nbytes = sizeof(float) * ((double)pl->outputs[j] + (i > 0 ? pl->outputs[i - 1] : 0));
        c->why = SH_TP_CAND_COSTLY;
        c->other = -1;
        at[i] = pl->ncands++;
    }
    for (int k = hi - 1; k >= lo; k--) {
        best[k] = best[k + 1];
        bytes[k] = bytes[k + 1];
        take[k] = 0;
        const sh_tp_cand *c = at[k] >= 0 ? &pl->cands[at[k]] : NULL;
        if (!c || cand_worth(c) <= 0) continue;
        double v = cand_worth(c) + best[c->row + 1], b = c->nbytes + bytes[c->row + 1];
        if (v > best[k] || (v == best[k] && b < bytes[k])) {
            best[k] = v;
            bytes[k] = b;
            take[k] = 1;
        }
    }
    for (int k = lo; k < hi;) {
        if (!take[k]) {
            k++;
            continue;
        }
        sh_tp_cand *c = &pl->cands[at[k]];
        c->why = SH_TP_CAND_SPLIT;
        pl->roles[c->col] = SH_TP_COLUMN;
        pl->roles[c->row] = SH_TP_ROW;
        (*npairs)++;
        k = c->row + 1;
    }
    for (int a = first; a < pl->ncands; a++) /* why a worthy candidate stayed whole */
        for (int b = first; b < pl->ncands && pl->cands[a].why == SH_TP_CAND_COSTLY && cand_worth(&pl->cands[a]) > 0;
             b++)
            if (pl->cands[b].why == SH_TP_CAND_SPLIT && pl->cands[b].col <= pl->cands[a].row &&
                pl->cands[a].col <= pl->cands[b].row) {
                pl->cands[a].why = SH_TP_CAND_OVERLAP;
                pl->cands[a].other = b;
            }
done:
    free(at);
    free(take);
    free(best);
    free(bytes);
    return rc;
}

shoal_result sh_tp_plan_refuse(const sh_tp_plan *pl, const sh_net *plan, const char *layout, int stages)
{
    for (int a = 0; a < pl->ncands; a++)
        if (pl->cands[a].why == SH_TP_CAND_SPLIT) return SHOAL_OK;
    const char *path = sh_net_cfg_path(plan);
    if (!pl->ncands)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: %s%s has %s pair of layers to split%s: two consecutive [connected], "
                       "or a [convolutional] (groups=1) then another or a [connected] ([maxpool]/[avgpool] between "
                       "allowed), without batch_normalize, whose first has an output count (filters) divisible by "
                       "%d; use another T%s", layout, stages > 1 ? "no stage of " : "", path, stages > 1 ? "a" : "no",
                       stages > 1 ? " inside it" : "", pl->T,
                       stages > 1 ? ", other stages (stage= keys) or --pipeline alone" : " or data parallelism");
    const sh_tp_cand *c = &pl->cands[0];
    for (int a = 1; a < pl->ncands; a++)
        if (cand_worth(&pl->cands[a]) > cand_worth(c)) c = &pl->cands[a];
    return SH_FAIL(SHOAL_ERR_INVALID, "%s: no pair of %s is worth splitting: the best, layers %d + %d, does %.0f "
                   "multiply-adds per image against %.0f bytes per image allreduced (split above %d per byte); use "
                   "%s", layout, path, c->col, c->row, c->macs, c->nbytes, MACS_PER_BYTE,
                   stages > 1 ? "--pipeline alone" : "data parallelism");
}

/* "0 (32 outputs, 16 per rank, by output columns)": a split layer's share. */
static void describe_layer(const sh_tp_plan *pl, const sh_tp_cand *c, int i, FILE *out)
{
    int conv = i == c->col ? c->col_conv : c->row_conv;
    if (i == c->col)
        fprintf(out, "%d (%d %s, %d per rank, by output %s)", i, pl->units[i], conv ? "filters" : "outputs",
                pl->units[i] / pl->T, conv ? "channels" : "columns");
    else
        fprintf(out, "%d (%d %s, by input %s)", i, pl->units[i], conv ? "filters" : "outputs",
                conv ? "channels" : "rows");
}

void sh_tp_plan_describe(const sh_tp_plan *pl, int lo, int hi, const char *indent, FILE *out)
{
    for (int a = 0; a < pl->ncands; a++) {
        const sh_tp_cand *c = &pl->cands[a];
        if (c->why != SH_TP_CAND_SPLIT || c->col < lo || c->col >= hi) continue;
        fprintf(out, "%slayers ", indent);
        describe_layer(pl, c, c->col, out);
        fprintf(out, " + ");
        describe_layer(pl, c, c->row, out);
        if (c->row == c->col + 2) fprintf(out, " (layer %d between pools the share)", c->col + 1);
        if (c->row > c->col + 2) fprintf(out, " (layers %d-%d between pool the share)", c->col + 1, c->row - 1);
        fprintf(out, ": one allreduce of its output forward, one of its input's gradient backward; %.0f bytes "
                "per image allreduced, %.0f multiply-adds per image split\n", c->nbytes, c->macs);
    }
    for (int a = 0; a < pl->ncands; a++) {
        const sh_tp_cand *c = &pl->cands[a];
        if (c->why == SH_TP_CAND_SPLIT || c->col < lo || c->col >= hi) continue;
        fprintf(out, "%snot split: layers %d + %d (%.0f bytes per image for %.0f multiply-adds): ", indent, c->col,
                c->row, c->nbytes, c->macs);
        if (c->why == SH_TP_CAND_OVERLAP)
            fprintf(out, "overlaps layers %d + %d, split as worth more\n", pl->cands[c->other].col,
                    pl->cands[c->other].row);
        else
            fprintf(out, "costs more than it saves (split above %d multiply-adds per byte)\n", MACS_PER_BYTE);
    }
}

void sh_tp_plan_move(const sh_tp_plan *pl, const sh_net *net, int t, float *mine, float *whole, int to_whole)
{
    int lo, hi;
    sh_net_part(net, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        size_t mo, mc, wc = pl->whole_count[i];
        sh_net_layer_params(net, i, &mo, &mc);
        float *m = mine + mo, *w = whole + pl->whole_off[i];
        size_t K = (size_t)pl->units[i], r = (size_t)t;
        if (pl->roles[i] == SH_TP_NONE) {
            if (!to_whole) memcpy(m, w, mc * sizeof(float));
            else if (t == 0) memcpy(w, m, mc * sizeof(float));
            continue;
        }
        if (pl->roles[i] == SH_TP_COLUMN) {
            size_t k = K / pl->T, in = (wc - K) / K;
            float *wr = w + r * k * in, *wb = w + K * in + r * k;
            memcpy(to_whole ? wr : m, to_whole ? m : wr, k * in * sizeof(float));
            memcpy(to_whole ? wb : m + k * in, to_whole ? m + k * in : wb, k * sizeof(float));
            continue;
        }
        size_t I = (wc - K) / K, in = I / pl->T;
        for (size_t row = 0; row < K; row++) {
            float *wr = w + row * I + r * in, *mr = m + row * in;
            memcpy(to_whole ? wr : mr, to_whole ? mr : wr, in * sizeof(float));
        }
        if (!to_whole) memcpy(m + K * in, w + K * I, K * sizeof(float));
        else if (t == 0) memcpy(w + K * I, m + K * in, K * sizeof(float));
    }
}

double sh_tp_plan_sum_squares(const sh_tp_plan *pl, const sh_net *net, int t, const float *g)
{
    if (t == 0) return sh_sum_squares(g, sh_net_nparams(net));
    int lo, hi;
    double sq = 0;
    sh_net_part(net, &lo, &hi);
    for (int i = lo; i < hi; i++) {
        size_t mo, mc;
        if (pl->roles[i] == SH_TP_NONE) continue;
        sh_net_layer_params(net, i, &mo, &mc);
        size_t K = (size_t)pl->units[i];
        sq += sh_sum_squares(g + mo, pl->roles[i] == SH_TP_ROW ? mc - K : mc); /* a row share's biases are whole */
    }
    return sq;
}
