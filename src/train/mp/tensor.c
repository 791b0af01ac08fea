/* mp/tensor.c — tensor parallelism over T ranks (Megatron-LM, Shoeybi et al. 2019): pairs of
 * layers split by columns then rows, one allreduce each way, replicas averaging the shares.
 * Not here: the split layers' math (src/nn/dense_share.c, layer_conv.c, net_tensor.c), choosing
 * the pairs and placing the shares (mp/tensor_plan.c), the shared frame (mp/mp.c), the step.
 * Proved by tests/train/test_tensor.c and tests/cli/test_train_tensor.c. */

/* A pair A, B: rank r keeps outputs [r K/T, (r+1) K/T) of A (rows of W_A: the column split
 * of Y = X W_A^T; a [convolutional] A keeps those filters) and the same inputs of B (columns
 * of W_B, the row split; a [convolutional] B keeps those channels of every filter, a
 * [connected] B after a convolutional A those channels' inputs, a contiguous range of its
 * C*H*W); [maxpool]/[avgpool] between a convolutional A and B pool A's share. B's products
 * are partial sums over A's outputs, summed by one allreduce of B's output before its bias
 * and activation; backward, A's input gradient is a partial sum, summed by one allreduce.
 * Every other layer, and B's bias, is whole on every rank and gets the same gradient there,
 * so no other communication is needed.
 * Which pairs: mp/tensor_plan.c's cost rule (F multiply-adds against B allreduced bytes per
 * image, a dynamic programme over the chain); the start-up line says which pairs were split,
 * at what cost, and why the others were not.
 * The update: with one replica every gradient is final on its rank as backward makes it (a
 * share's from its own products, a whole layer's the same on every rank), so the [connected]
 * shares step each block of rows of dW while it is in cache (sh_mp_fuse), dW never written
 * whole, and finish steps the rest. Replicas (the shares' sum comes first), --compress and a
 * job that logs the gradient norm (it reads the whole gradient) keep the trainer's step.
 * Checkpoints hold the whole model: each rank puts its shares in place (sh_tp_plan_move),
 * rank 0 the layers every rank holds whole. */
#include "train/mp/tensor.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/mp/mp.h"
#include "train/mp/tensor_plan.h"

typedef struct {
    sh_mp mp;                /* first: the job's communicator, the part, the exchange */
    shoal_comm *tp, *dp;     /* this replica's T ranks, and this share's ranks in every
                                replica (owned; NULL with one replica: c is the tp group) */
    int T, R, replica;
    sh_cfg *cfg;             /* owned: the net reads it */
    sh_tp_plan plan;         /* the pairs, and each layer's slice of the whole model */
    int rank;
    sh_net *net;             /* this rank's share (the trainer's), for its layers' slices */
} tp_state;

static shoal_result tp_sum_floats(void *ctx, float *buf, size_t count)
{
    tp_state *p = ctx;
    return shoal_allreduce(p->tp ? p->tp : p->mp.c, buf, buf, count, SHOAL_FLOAT32, SHOAL_SUM);
}

static shoal_result tp_attach(sh_strategy *s, sh_net *net)
{
    tp_state *p = s->impl;
    sh_net_set_sum(net, tp_sum_floats, p);
    /* replica r trains on images [r b, (r+1) b) of the R b a step takes (the loader's
     * contiguous shards): dropout draws for all of them, as one process, and keeps its own */
    int b = sh_net_batch(net);
    if (p->R > 1 && sh_net_time_steps(net) <= 1) sh_net_set_rows(net, p->R * b, b, p->R * b, p->replica * b);
    if (p->mp.srv) return sh_mp_servers_attach(s, net); /* --ps: the servers hold the shares */
    /* --compress: the replicas of this share exchange its gradients compressed */
    SH_TRY(sh_mp_attach_group(s, p->dp, net, 0));
    sh_mp_fuse(s, p->R == 1, net, p->net, 0);
    return SHOAL_OK;
}

/* Replica 0's shares make the whole model. */
static void move_share(tp_state *p, float *mine, float *whole, int to_whole)
{
    if (to_whole && p->replica != 0) return;
    sh_tp_plan_move(&p->plan, p->net, p->rank, mine, whole, to_whole);
}

static void tp_put(sh_strategy *s, const float *mine, float *whole)
{
    move_share(s->impl, (float *)mine, whole, 1);
}

static void tp_take(sh_strategy *s, const float *whole, float *mine)
{
    move_share(s->impl, mine, (float *)whole, 0);
}

/* One replica: the parameters the shares did not step. Replicas average each share's
 * gradients (the shares' ranks alone hold them alike). */
static shoal_result tp_finish(sh_strategy *s)
{
    tp_state *p = s->impl;
    if (p->mp.srv) return sh_mp_servers_push(s); /* the servers average the replicas and step */
    if (p->mp.fuse) {
        uint64_t t0 = sh_now_ns();
        sh_net_step_unfused(p->net, s->opt, sh_net_params(p->net), sh_net_grads(p->net), 0);
        s->update_in_finish_ns += sh_now_ns() - t0;
    }
    if (!p->dp) return SHOAL_OK;
    if (p->mp.gx) return sh_mp_finish_group(s, p->net);
    float *g = sh_net_grads(p->net);
    return shoal_allreduce(p->dp, g, g, sh_net_nparams(p->net), SHOAL_FLOAT32, SHOAL_AVG);
}

/* Every rank holds the same figures: the sum over the ranks is T times theirs. */
static shoal_result tp_sum(sh_strategy *s, double *v, int n)
{
    tp_state *p = s->impl;
    SH_TRY(shoal_allreduce(p->mp.c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM));
    for (int i = 0; i < n; i++) v[i] /= p->T;
    return SHOAL_OK;
}

static void tp_fini(void *impl)
{
    tp_state *p = impl;
    shoal_comm_destroy(p->tp);
    shoal_comm_destroy(p->dp);
    sh_cfg_destroy(p->cfg);
    sh_tp_plan_fini(&p->plan);
}

static const sh_strategy_ops tp_ops = {
    .name = "tensor",
    .attach = tp_attach,
    .begin = sh_mp_begin,
    .finish = tp_finish,
    .destroy = sh_mp_destroy,
    .sum = tp_sum,
    .leads = sh_mp_leads,
    .rank_state_count = sh_mp_rank_state_count,
    .rank_state_get = sh_mp_rank_state_get,
    .rank_state_set = sh_mp_rank_state_set,
    .comm_stats = sh_mp_comm_stats,
    .end = sh_mp_end,
};

static shoal_result plan_pairs(tp_state *p, uint64_t seed, int *batch)
{
    sh_net *plan = NULL;
    SH_TRY(sh_net_create_part(p->cfg, 1, seed, 0, 1, &plan));
    if (!*batch) *batch = sh_net_get_config(plan)->batch;
    char layout[64];
    int npairs = 0;
    snprintf(layout, sizeof layout, "--tensor-parallel %d", p->T);
    shoal_result rc = sh_tp_plan_init(&p->plan, plan, p->T);
    if (rc == SHOAL_OK) rc = sh_tp_plan_choose(&p->plan, plan, 0, p->plan.nlayers, &npairs);
    if (rc == SHOAL_OK) rc = sh_tp_plan_refuse(&p->plan, plan, layout, 1);
    p->mp.part.nparams_whole = p->plan.nparams_whole;
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
    SH_TRY(sh_mp_create(c, &tp_ops, sizeof *p, tp_fini, &s));
    p = s->impl;
    p->T = o->ranks;
    p->R = world / o->ranks;
    p->replica = rank / p->T;
    s->rank = p->replica; /* a replica's ranks all train on its whole share of the batch */
    s->world = p->R;
    int batch = o->batch;
    if (p->R > 1) { /* collective: R is the same on every rank */
        SH_TRY_GOTO(shoal_comm_split(c, p->replica, rank % p->T, &p->tp), rc, fail);
        SH_TRY_GOTO(shoal_comm_split(c, rank % p->T, p->replica, &p->dp), rc, fail);
    }
    SH_TRY_GOTO(sh_cfg_load(o->cfg_path, &p->cfg), rc, fail);
    SH_TRY_GOTO(plan_pairs(p, o->seed, &batch), rc, fail);
    SH_TRY_GOTO(sh_net_create_tensor(p->cfg, batch, o->seed, rank % p->T, p->T, p->plan.roles, net_out), rc, fail);
    p->rank = rank % p->T;
    p->net = *net_out;
    /* statistics (batch norm outside the pairs) are whole on every rank: rank 0's go */
    (void)sh_net_stats(p->net, &p->mp.part.nstats_whole);
    p->mp.part.put = tp_put;
    p->mp.part.take = tp_take;
    *out = s;
    return SHOAL_OK;
fail:
    sh_strategy_destroy(s);
    return rc;
}

void sh_strategy_tensor_describe(const sh_strategy *s, FILE *out)
{
    const tp_state *p = s->impl;
    fprintf(out, "tensor parallel: %d ranks x %d replica%s, each replica's ranks on its whole batch\n", p->T, p->R,
            p->R == 1 ? "" : "s");
    sh_tp_plan_describe(&p->plan, 0, p->plan.nlayers, "  ", out);
}
