/* strategy_tensor.c — tensor parallelism over T ranks (Megatron-LM, Shoeybi et al. 2019).
 * A pair A, B: rank r keeps outputs [r K/T, (r+1) K/T) of A (rows of W_A: the column split
 * of Y = X W_A^T; a [convolutional] A keeps those filters) and the same inputs of B (columns
 * of W_B, the row split; a [convolutional] B keeps those channels of every filter, a
 * [connected] B after a convolutional A those channels' inputs, a contiguous range of its
 * C*H*W); [maxpool]/[avgpool] between a convolutional A and B pool A's share. B's products
 * are partial sums over A's outputs, summed by one allreduce of B's output before its bias
 * and activation; backward, A's input gradient is a partial sum, summed by one allreduce.
 * Every other layer, and B's bias, is whole on every rank and gets the same gradient there,
 * so no other communication is needed.
 * Which pairs (plan_pairs): every pair sh_net_tp_pair_end accepts is a candidate; per image it
 * does F multiply-adds (its layers' forward products; each rank keeps F/T of them, and of the
 * backward's two products) and allreduces B bytes (B's output, and A's input gradient unless A
 * is the first layer). It is worth splitting when F > MACS_PER_BYTE * B; among the worth ones
 * a dynamic programme over the chain takes the non-overlapping set of the largest total
 * F - MACS_PER_BYTE * B (ties: fewer bytes, then the pair starting later). The start-up
 * line says which pairs were split, at what cost, and why the others were not.
 * Checkpoints hold the whole model: each rank puts its shares in place (move_share), rank 0
 * the layers every rank holds whole.
 * Not here: the split layers' math (layer_dense.c, layer_conv.c), the net's shares (net.c,
 * net_part.c), the step.
 * Proved by tests/train/test_tensor.c. */
#include "train/strategy_tensor.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/grad_compress.h"

/* Multiply-adds one core does in the time a rank sends a byte of allreduce: ~50 G/s in
 * these products against ~4 GB/s of busbw on one host (bench/README.md). A split pair saves
 * each rank 3F(T-1)/T multiply-adds (forward and two backward products) and sends 2B(T-1)/T
 * bytes (ring): worth it when 3F/50 > 2B/4, F > ~8 B. */
#define MACS_PER_BYTE 8

/* A candidate pair: layers col .. row (pooling between), its multiply-adds and allreduced
 * bytes per image; split, or why not. */
enum { CAND_SPLIT, CAND_COSTLY, CAND_OVERLAP };
typedef struct {
    int col, row;
    int col_conv, row_conv;  /* [convolutional] (else [connected]) */
    double macs, nbytes;
    int why, other;          /* CAND_OVERLAP: the split candidate it overlaps */
} tp_cand;

typedef struct {
    shoal_comm *c;           /* the job's (borrowed) */
    shoal_comm *tp, *dp;     /* this replica's T ranks, and this share's ranks in every
                                replica (owned; NULL with one replica: c is the tp group) */
    int T, R, replica;
    sh_cfg *cfg;             /* owned: the net reads it */
    unsigned char *roles;    /* [nlayers] */
    int nlayers;
    int *outputs;            /* [nlayers] the whole layers' outputs (C*H*W) */
    int *units;              /* [nlayers] their outputs (connected) or filters (conv): the
                                rows of their weights, and of a split layer, what is split */
    tp_cand *cands;          /* [ncands] the candidate pairs, for the layout line */
    int ncands;
    int rank;
    size_t *whole_off, *whole_count; /* [nlayers] each layer's slice of the whole model */
    sh_net *net;             /* this rank's share (the trainer's), for its layers' slices */
    sh_model_part part;      /* checkpoints: the whole model from the shares */
} tp_state;

static shoal_result tp_sum_floats(void *ctx, float *buf, size_t count)
{
    tp_state *p = ctx;
    return shoal_allreduce(p->tp ? p->tp : p->c, buf, buf, count, SHOAL_FLOAT32, SHOAL_SUM);
}

static shoal_result tp_attach(sh_strategy *s, sh_net *net)
{
    tp_state *p = s->impl;
    sh_net_set_sum(net, tp_sum_floats, p);
    /* replica r trains on images [r b, (r+1) b) of the R b a step takes (the loader's
     * contiguous shards): dropout draws for all of them, as one process, and keeps its own */
    int b = sh_net_batch(net);
    if (p->R > 1 && sh_net_time_steps(net) <= 1) sh_net_set_rows(net, p->R * b, b, p->R * b, p->replica * b);
    /* --compress: the replicas of this share exchange its gradients compressed */
    return sh_gradx_group_attach(s, p->dp, net, 0, p->replica * p->T + p->rank, p->R * p->T);
}

/* Layer i's share: local slice [mo, mo + mc) of a parameter-shaped block; whole slice
 * [wo, wo + wc). W is (K, I) with K its units (connected outputs, filters) and I each unit's
 * weights (inputs, or channels x S x S, channel-major). A column share is rows
 * [r k, (r+1) k) of W and those biases; a row share columns [r i, (r+1) i) of W (its
 * channels of every filter, or a connected layer's inputs from those channels), its biases
 * whole. to_whole: copy that way, else back; shares every rank holds whole go to the whole
 * model from rank 0 only. */
static void move_share(tp_state *p, float *mine, float *whole, int to_whole)
{
    if (to_whole && p->replica != 0) return; /* replica 0's shares make the whole model */
    for (int i = 0; i < p->nlayers; i++) {
        size_t mo, mc, wo = p->whole_off[i], wc = p->whole_count[i];
        sh_net_layer_params(p->net, i, &mo, &mc);
        float *m = mine + mo, *w = whole + wo;
        size_t K = (size_t)p->units[i], r = (size_t)p->rank;
        if (p->roles[i] == SH_TP_NONE) {
            if (!to_whole) memcpy(m, w, mc * sizeof(float));
            else if (p->rank == 0) memcpy(w, m, mc * sizeof(float));
            continue;
        }
        if (p->roles[i] == SH_TP_COLUMN) {
            size_t k = K / p->T, in = (wc - K) / K;
            float *wr = w + r * k * in, *wb = w + K * in + r * k;
            memcpy(to_whole ? wr : m, to_whole ? m : wr, k * in * sizeof(float));
            memcpy(to_whole ? wb : m + k * in, to_whole ? m + k * in : wb, k * sizeof(float));
            continue;
        }
        size_t I = (wc - K) / K, in = I / p->T;
        for (size_t row = 0; row < K; row++) {
            float *wr = w + row * I + r * in, *mr = m + row * in;
            memcpy(to_whole ? wr : mr, to_whole ? mr : wr, in * sizeof(float));
        }
        if (!to_whole) memcpy(m + K * in, w + K * I, K * sizeof(float));
        else if (p->rank == 0) memcpy(w + K * I, m + K * in, K * sizeof(float));
    }
}

static void tp_put(sh_strategy *s, const float *mine, float *whole)
{
    move_share(s->impl, (float *)mine, whole, 1);
}

static void tp_take(sh_strategy *s, const float *whole, float *mine)
{
    move_share(s->impl, mine, (float *)whole, 0);
}

static shoal_result tp_sum_model(sh_strategy *s, float *v, size_t n)
{
    tp_state *p = s->impl;
    return shoal_allreduce(p->c, v, v, n, SHOAL_FLOAT32, SHOAL_SUM);
}

static shoal_result tp_begin(sh_strategy *s, int64_t step)
{
    sh_gradx_group_begin(s, step);
    return SHOAL_OK;
}

static void tp_grad_ready(void *ctx, int layer, size_t offset, size_t count)
{
    (void)ctx, (void)layer, (void)offset, (void)count;
}

/* Replicas average each share's gradients (the shares' ranks alone hold them alike). */
static shoal_result tp_finish(sh_strategy *s)
{
    tp_state *p = s->impl;
    if (!p->dp) return SHOAL_OK;
    if (s->gx) return sh_gradx_group_finish(s, p->net);
    float *g = sh_net_grads(p->net);
    return shoal_allreduce(p->dp, g, g, sh_net_nparams(p->net), SHOAL_FLOAT32, SHOAL_AVG);
}

/* Every rank holds the same figures: the sum over the ranks is T times theirs. */
static shoal_result tp_sum(sh_strategy *s, double *v, int n)
{
    tp_state *p = s->impl;
    SH_TRY(shoal_allreduce(p->c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM));
    for (int i = 0; i < n; i++) v[i] /= p->T;
    return SHOAL_OK;
}

static int tp_leads(const sh_strategy *s)
{
    const tp_state *p = s->impl;
    return shoal_comm_rank(p->c) == 0;
}

static void tp_destroy(sh_strategy *s)
{
    tp_state *p = s->impl;
    sh_gradx_destroy(s->gx); /* its thread uses the replicas' communicator */
    if (p) {
        shoal_comm_destroy(p->tp);
        shoal_comm_destroy(p->dp);
        sh_cfg_destroy(p->cfg);
        free(p->roles);
        free(p->outputs);
        free(p->units);
        free(p->cands);
        free(p->whole_off);
        free(p->whole_count);
        free(p);
    }
    free(s);
}

static const sh_strategy_ops tp_ops = {
    .name = "tensor",
    .attach = tp_attach,
    .begin = tp_begin,
    .grad_ready = tp_grad_ready,
    .finish = tp_finish,
    .destroy = tp_destroy,
    .sum = tp_sum,
};

/* Candidate c's own worth: multiply-adds it keeps off the wire, net of its bytes. */
static double cand_worth(const tp_cand *c) { return c->macs - MACS_PER_BYTE * c->nbytes; }

/* The candidates (one at most per first layer) and the split set: best[k] is the largest
 * total worth of non-overlapping worthy pairs within layers [k, nlayers), fewer bytes on a
 * tie. */
static shoal_result choose_pairs(tp_state *p, const sh_net *plan)
{
    int n = p->nlayers;
    int *at = NULL, *take = NULL;
    double *best = NULL, *bytes = NULL;
    shoal_result rc = SHOAL_OK;
    if (sh_calloc((size_t)n, sizeof *p->cands, (void **)&p->cands) != SHOAL_OK ||
        sh_calloc((size_t)n + 1, sizeof *at, (void **)&at) != SHOAL_OK ||
        sh_calloc((size_t)n + 1, sizeof *take, (void **)&take) != SHOAL_OK ||
        sh_calloc((size_t)n + 1, sizeof *best, (void **)&best) != SHOAL_OK ||
        sh_calloc((size_t)n + 1, sizeof *bytes, (void **)&bytes) != SHOAL_OK) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        at[i] = -1;
        int j = sh_net_tp_pair_end(plan, i, p->T);
        if (j < 0) continue;
        tp_cand *c = &p->cands[p->ncands];
        c->col = i;
        c->row = j;
        c->col_conv = strncmp(sh_net_layer_name(plan, i), "conv", 4) == 0;
        c->row_conv = strncmp(sh_net_layer_name(plan, j), "conv", 4) == 0;
        for (int k = i; k <= j; k++) c->macs += sh_net_layer_flops(plan, k);
        /* the first layer's input gradient is not computed: nothing to sum */
        c->nbytes = sizeof(float) * ((double)p->outputs[j] + (i > 0 ? p->outputs[i - 1] : 0));
        c->why = CAND_COSTLY;
        c->other = -1;
        at[i] = p->ncands++;
    }
    for (int k = n - 1; k >= 0; k--) {
        best[k] = best[k + 1];
        bytes[k] = bytes[k + 1];
        take[k] = 0;
        const tp_cand *c = at[k] >= 0 ? &p->cands[at[k]] : NULL;
        if (!c || cand_worth(c) <= 0) continue;
        double v = cand_worth(c) + best[c->row + 1], b = c->nbytes + bytes[c->row + 1];
        if (v > best[k] || (v == best[k] && b < bytes[k])) {
            best[k] = v;
            bytes[k] = b;
            take[k] = 1;
        }
    }
    for (int k = 0; k < n;) {
        if (!take[k]) {
            k++;
            continue;
        }
        tp_cand *c = &p->cands[at[k]];
        c->why = CAND_SPLIT;
        p->roles[c->col] = SH_TP_COLUMN;
        p->roles[c->row] = SH_TP_ROW;
        k = c->row + 1;
    }
    for (int a = 0; a < p->ncands; a++) /* why a worthy candidate stayed whole */
        for (int b = 0; b < p->ncands && p->cands[a].why == CAND_COSTLY && cand_worth(&p->cands[a]) > 0; b++)
            if (p->cands[b].why == CAND_SPLIT && p->cands[b].col <= p->cands[a].row &&
                p->cands[a].col <= p->cands[b].row) {
                p->cands[a].why = CAND_OVERLAP;
                p->cands[a].other = b;
            }
    if (!p->ncands)
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--tensor-parallel %d: %s has no pair of layers to split: two "
                     "consecutive [connected], or a [convolutional] (groups=1) then another or a [connected] "
                     "([maxpool]/[avgpool] between allowed), without batch_normalize, whose first has an output "
                     "count (filters) divisible by %d; use another T or data parallelism", p->T,
                     sh_net_cfg_path(plan), p->T);
    else if (best[0] <= 0) {
        const tp_cand *c = &p->cands[0];
        for (int a = 1; a < p->ncands; a++)
            if (cand_worth(&p->cands[a]) > cand_worth(c)) c = &p->cands[a];
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--tensor-parallel %d: no pair of %s is worth splitting: the best, "
                     "layers %d + %d, does %.0f multiply-adds per image against %.0f bytes per image allreduced "
                     "(split above %d per byte); use data parallelism", p->T, sh_net_cfg_path(plan), c->col,
                     c->row, c->macs, c->nbytes, MACS_PER_BYTE);
    }
done:
    free(at);
    free(take);
    free(best);
    free(bytes);
    return rc;
}

static shoal_result plan_pairs(tp_state *p, uint64_t seed, int *batch)
{
    sh_net *plan = NULL;
    SH_TRY(sh_net_create_part(p->cfg, 1, seed, 0, 1, &plan));
    shoal_result rc = SHOAL_OK;
    p->nlayers = sh_net_nlayers(plan);
    if (!*batch) *batch = sh_net_get_config(plan)->batch;
    if (sh_calloc((size_t)p->nlayers, 1, (void **)&p->roles) != SHOAL_OK ||
        sh_calloc((size_t)p->nlayers, sizeof *p->outputs, (void **)&p->outputs) != SHOAL_OK ||
        sh_calloc((size_t)p->nlayers, sizeof *p->units, (void **)&p->units) != SHOAL_OK ||
        sh_calloc((size_t)p->nlayers, sizeof *p->whole_off, (void **)&p->whole_off) != SHOAL_OK ||
        sh_calloc((size_t)p->nlayers, sizeof *p->whole_count, (void **)&p->whole_count) != SHOAL_OK) {
        sh_net_destroy(plan);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    size_t off = 0;
    for (int i = 0; i < p->nlayers; i++) {
        int c, h, w;
        size_t o_unused;
        sh_net_layer_shape(plan, i, &c, &h, &w);
        p->outputs[i] = c * h * w;
        p->units[i] = c;
        sh_net_layer_params(plan, i, &o_unused, &p->whole_count[i]);
        p->whole_off[i] = off;
        off += p->whole_count[i];
    }
    p->part.nparams_whole = off;
    rc = choose_pairs(p, plan);
    sh_net_destroy(plan);
    return rc;
}

shoal_result sh_strategy_tensor_create(shoal_comm *c, const sh_tp_opts *o, sh_strategy **out, sh_net **net_out)
{
    shoal_result rc = SHOAL_OK;
    sh_strategy *s = NULL;
    tp_state *p = NULL;
    *out = NULL;
    *net_out = NULL;
    int world = shoal_comm_world(c), rank = shoal_comm_rank(c);
    if (o->ranks < 2 || world % o->ranks)
        return SH_FAIL(SHOAL_ERR_INVALID, "--tensor-parallel %d does not divide the %d ranks into replicas of "
                       "%d; run -n with a multiple of %d (replicas x T)", o->ranks, world, o->ranks,
                       o->ranks < 2 ? 2 : o->ranks);
    SH_TRY_GOTO(sh_calloc(1, sizeof *s, (void **)&s), rc, fail);
    SH_TRY_GOTO(sh_calloc(1, sizeof *p, (void **)&p), rc, fail);
    s->ops = &tp_ops;
    s->impl = p;
    s->leads = tp_leads;
    p->T = o->ranks;
    p->R = world / o->ranks;
    p->replica = rank / p->T;
    s->rank = p->replica; /* a replica's ranks all train on its whole share of the batch */
    s->world = p->R;
    s->many_ranks = 1;
    s->has_drill_rank = 1;
    s->drill_rank = rank;
    p->c = c;
    int batch = o->batch;
    if (p->R > 1) { /* collective: R is the same on every rank */
        SH_TRY_GOTO(shoal_comm_split(c, p->replica, rank % p->T, &p->tp), rc, fail);
        SH_TRY_GOTO(shoal_comm_split(c, rank % p->T, p->replica, &p->dp), rc, fail);
    }
    SH_TRY_GOTO(sh_cfg_load(o->cfg_path, &p->cfg), rc, fail);
    SH_TRY_GOTO(plan_pairs(p, o->seed, &batch), rc, fail);
    SH_TRY_GOTO(sh_net_create_tensor(p->cfg, batch, o->seed, rank % p->T, p->T, p->roles, net_out), rc, fail);
    p->rank = rank % p->T;
    p->net = *net_out;
    /* statistics (batch norm outside the pairs) are whole on every rank: rank 0's go */
    (void)sh_net_stats(p->net, &p->part.nstats_whole);
    p->part.contributes = rank == 0;
    p->part.carries_scalars = rank == 0;
    p->part.sum_floats = tp_sum_model;
    p->part.put = tp_put;
    p->part.take = tp_take;
    s->part = &p->part;
    *out = s;
    return SHOAL_OK;
fail:
    if (s) tp_destroy(s);
    else free(p);
    return rc;
}

/* "0 (32 outputs, 16 per rank, by output columns)": a split layer's share. */
static void describe_layer(const tp_state *p, const tp_cand *c, int i, FILE *out)
{
    int conv = i == c->col ? c->col_conv : c->row_conv;
    if (i == c->col)
        fprintf(out, "%d (%d %s, %d per rank, by output %s)", i, p->units[i], conv ? "filters" : "outputs",
                p->units[i] / p->T, conv ? "channels" : "columns");
    else
        fprintf(out, "%d (%d %s, by input %s)", i, p->units[i], conv ? "filters" : "outputs",
                conv ? "channels" : "rows");
}

void sh_strategy_tensor_describe(const sh_strategy *s, FILE *out)
{
    const tp_state *p = s->impl;
    fprintf(out, "tensor parallel: %d ranks x %d replica%s, each replica's ranks on its whole batch\n", p->T, p->R,
            p->R == 1 ? "" : "s");
    for (int a = 0; a < p->ncands; a++) {
        const tp_cand *c = &p->cands[a];
        if (c->why != CAND_SPLIT) continue;
        fprintf(out, "  layers ");
        describe_layer(p, c, c->col, out);
        fprintf(out, " + ");
        describe_layer(p, c, c->row, out);
        if (c->row == c->col + 2) fprintf(out, " (layer %d between pools the share)", c->col + 1);
        if (c->row > c->col + 2) fprintf(out, " (layers %d-%d between pool the share)", c->col + 1, c->row - 1);
        fprintf(out, ": one allreduce of its output forward, one of its input's gradient backward; %.0f bytes "
                "per image allreduced, %.0f multiply-adds per image split\n", c->nbytes, c->macs);
    }
    for (int a = 0; a < p->ncands; a++) {
        const tp_cand *c = &p->cands[a];
        if (c->why == CAND_SPLIT) continue;
        fprintf(out, "  not split: layers %d + %d (%.0f bytes per image for %.0f multiply-adds): ", c->col, c->row,
                c->nbytes, c->macs);
        if (c->why == CAND_OVERLAP)
            fprintf(out, "overlaps layers %d + %d, split as worth more\n", p->cands[c->other].col,
                    p->cands[c->other].row);
        else
            fprintf(out, "costs more than it saves (split above %d multiply-adds per byte)\n", MACS_PER_BYTE);
    }
}
