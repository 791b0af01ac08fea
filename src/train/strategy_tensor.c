/* strategy_tensor.c — tensor parallelism over T ranks (Megatron-LM, Shoeybi et al. 2019).
 * A pair of [connected] layers A, B: rank r keeps outputs [r K/T, (r+1) K/T) of A (rows of
 * W_A: the column split of Y = X W_A^T) and the same columns of W_B (the row split); B's
 * products are partial sums over A's outputs, summed by one allreduce of (N, K_B) before
 * B's bias and activation; backward, A's input gradient is a partial sum, summed by one
 * allreduce of (N, I_A). Every other layer, and B's bias, is whole on every rank and gets
 * the same gradient there, so no other communication is needed. Pairs are chosen greedily
 * from the first layer (sh_net_tp_pair_ok). Checkpoints hold the whole model: each rank puts
 * its shares in place (move_share), rank 0 the layers every rank holds whole.
 * Not here: the split layers' math (layer_dense.c), the net's shares (net.c), the step.
 * Proved by tests/train/test_tensor.c. */
#include "train/strategy_tensor.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/grad_compress.h"

typedef struct {
    shoal_comm *c;           /* the job's (borrowed) */
    shoal_comm *tp, *dp;     /* this replica's T ranks, and this share's ranks in every
                                replica (owned; NULL with one replica: c is the tp group) */
    int T, R, replica;
    sh_cfg *cfg;             /* owned: the net reads it */
    unsigned char *roles;    /* [nlayers] */
    int nlayers;
    int *outputs;            /* [nlayers] the whole layers' outputs, for the layout line */
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
    /* --compress: the replicas of this share exchange its gradients compressed */
    return sh_gradx_group_attach(s, p->dp, net, 0, p->replica * p->T + p->rank, p->R * p->T);
}

/* Layer i's share: local slice [mo, mo + mc) of a parameter-shaped block; whole slice
 * [wo, wo + wc). A column share is rows [r k, (r+1) k) of W (K, I) and those biases; a row
 * share columns [r i, (r+1) i) of W (K, I), its biases whole. to_whole: copy that way, else
 * back; shares every rank holds whole go to the whole model from rank 0 only. */
static void move_share(tp_state *p, float *mine, float *whole, int to_whole)
{
    if (to_whole && p->replica != 0) return; /* replica 0's shares make the whole model */
    for (int i = 0; i < p->nlayers; i++) {
        size_t mo, mc, wo = p->whole_off[i], wc = p->whole_count[i];
        sh_net_layer_params(p->net, i, &mo, &mc);
        float *m = mine + mo, *w = whole + wo;
        size_t K = (size_t)p->outputs[i], r = (size_t)p->rank;
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

static shoal_result plan_pairs(tp_state *p, uint64_t seed, int *batch)
{
    sh_net *plan = NULL;
    SH_TRY(sh_net_create_part(p->cfg, 1, seed, 0, 1, &plan));
    shoal_result rc = SHOAL_OK;
    p->nlayers = sh_net_nlayers(plan);
    if (!*batch) *batch = sh_net_get_config(plan)->batch;
    int npairs = 0;
    if (sh_calloc((size_t)p->nlayers, 1, (void **)&p->roles) != SHOAL_OK ||
        sh_calloc((size_t)p->nlayers, sizeof *p->outputs, (void **)&p->outputs) != SHOAL_OK ||
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
        sh_net_layer_params(plan, i, &o_unused, &p->whole_count[i]);
        p->whole_off[i] = off;
        off += p->whole_count[i];
    }
    p->part.nparams_whole = off;
    for (int i = 0; i + 1 < p->nlayers; i++)
        if (sh_net_tp_pair_ok(plan, i, p->T)) {
            p->roles[i] = SH_TP_COLUMN;
            p->roles[i + 1] = SH_TP_ROW;
            npairs++;
            i++;
        }
    if (!npairs)
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--tensor-parallel %d: %s has no two consecutive [connected] layers "
                     "(without batch_normalize) whose first has an output count divisible by %d; use "
                     "another T or data parallelism", p->T, sh_net_cfg_path(plan), p->T);
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

void sh_strategy_tensor_describe(const sh_strategy *s, FILE *out)
{
    const tp_state *p = s->impl;
    fprintf(out, "tensor parallel: %d ranks x %d replica%s, each replica's ranks on its whole batch\n", p->T, p->R,
            p->R == 1 ? "" : "s");
    for (int i = 0; i < p->nlayers; i++) {
        if (p->roles[i] != SH_TP_COLUMN) continue;
        fprintf(out, "  layers %d (%d outputs, %d per rank, by output columns) + %d (%d outputs, by input rows): "
                "one allreduce of its output forward, one of its input's gradient backward\n", i, p->outputs[i],
                p->outputs[i] / p->T, i + 1, p->outputs[i + 1]);
    }
}
