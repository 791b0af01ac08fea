/* mp/pipeline.c — pipeline parallelism: a stage's layout, its strategy hooks (the update, the
 * replicas' average, the checkpoint's shares) and its building.
 * Not here: the schedule (mp/pipeline_pass.c), the cut and layout lines (mp/pipeline_plan.c),
 * a net's parts (src/nn/net_part.c), the frame the layouts share (mp/mp.c).
 * Proved by tests/train/test_pipeline*.c and tests/cli/test_train_pipeline*.c. */

/* Vocabulary: S stages, M micro-batches of mb = batch / M images, R = world / S replicas.
 * Rank g is stage g % S of replica g / S, so a replica's stages are neighbouring ranks.
 * With R > 1 the ranks holding one stage average its gradient after each pass (allreduce on
 * their split communicator).
 * With T > 1 (--tensor-parallel T) each stage runs on T ranks: rank g is tensor rank g % T of
 * stage (g / T) % S of replica g / (S T). The stage's pairs ([connected], [convolutional])
 * are split among its T ranks as tensor parallelism splits them, chosen by mp/tensor_plan.c's
 * cost rule among the pairs inside the stage (never across a cut), their sums on the stage's
 * own communicator (sh_net_set_sum); at a cut every one of the T ranks holds the whole
 * activation, so tensor rank t of a stage talks to tensor rank t of its neighbours, and the
 * replicas average per (stage, t). Split layers never defer their weight gradients (their
 * factors are shares): they are summed in `acc`.
 * Micro-batches multiply by packed weights (sh_net_keep_packed; which copies by the machine:
 * sh_dense_stage_packs, SHOAL_PIPE_PACK); the stage then applies the optimizer step itself
 * (pipe_finish), packing each 16 rows of W as it updates them, but for the first stage's
 * backward copies, packed while its first backward waits for the stage after. */
#include "train/mp/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "train/mp/pipeline_internal.h"
#include "train/mp/tensor_plan.h"

/* The stage multiplies by packed weights (gemm_packed.c): packed as its own update writes
 * them, at any micro-batch size. Where another applies the update (--compress with momentum)
 * the pass packs them, which pays only on micro-batches of fewer rows than this
 * (bench/mp/pipe_ab.sh measures both). */
#define PIPE_PACK_ROWS 64

/* ---- the strategy hooks ---- */

/* The split layers' sum over the stage's T ranks (the net's sum hook). */
static shoal_result tp_sum_floats(void *ctx, float *buf, size_t count)
{
    pipe_state *p = ctx;
    return shoal_allreduce(p->tp, buf, buf, count, SHOAL_FLOAT32, SHOAL_SUM);
}

static shoal_result pipe_attach(sh_strategy *s, sh_net *net)
{
    pipe_state *p = s->impl;
    SH_ASSERT(net == p->inst[0]);
    for (int j = 1; j < p->K; j++) { /* the instances take turns on the first's blocks */
        sh_net_share_blocks(p->inst[j], net, 0, 0);
        sh_net_share_packed(p->inst[j], net);
    }
    for (int j = 0; j < p->K && p->packs; j++) sh_net_use_packed(p->inst[j], p->packs);
    p->stale = SH_PACK_FORWARD | SH_PACK_BACKWARD; /* the weights may come from a checkpoint */
    sh_net_rng_get(net, p->rng); /* restored from a checkpoint, or the seed's */
    memcpy(p->rng0, p->rng, sizeof p->rng0);
    /* --ps: the servers hold the stage and step it; each pull is packed as the update packs */
    if (p->mp.srv) SH_TRY(sh_mp_servers_attach(s, net));
    /* --compress: the replicas of this stage exchange its gradients compressed */
    else SH_TRY(sh_mp_attach_group(s, p->group, net, 0));
    /* Packed copies: the update refreshes them as it writes the weights (pipe_finish) */
    p->updates = p->packs && s->opt && (!s->applies_update || p->mp.srv);
    if (p->updates) s->applies_update = 1;
    else if (p->mb >= PIPE_PACK_ROWS) { /* a pack per pass would cost more than it saves */
        p->packs = 0;
        for (int j = 0; j < p->K; j++) sh_net_use_packed(p->inst[j], 0);
    }
    return SHOAL_OK;
}

/* Before a checkpoint (every rank): each stage draws dropout masks from its own copy of
 * the stream, and the checkpoint keeps the lead's net's. Give every rank's net the stream
 * of the last stage of replica 0 that drew from it, so that a net whose dropout sits in
 * one stage (the case one process reproduces) resumes bit for bit. */
static shoal_result pipe_sync_state(sh_strategy *s)
{
    pipe_state *p = s->impl;
    int world = p->S * p->R * p->T;
    uint64_t mine[5] = {memcmp(p->rng, p->rng0, sizeof p->rng) != 0, p->rng[0], p->rng[1], p->rng[2], p->rng[3]};
    uint64_t *all = NULL;
    SH_TRY(sh_calloc((size_t)world * 5, sizeof *all, (void **)&all));
    shoal_result rc = shoal_allgather(p->mp.c, mine, all, 5, SHOAL_INT64);
    int pick = -1;
    for (int k = 0; rc == SHOAL_OK && k < p->S; k++) /* replica 0's stage k: rank k T */
        if (all[5 * k * p->T]) pick = k * p->T;
    if (pick >= 0) sh_net_rng_set(p->inst[0], all + 5 * pick + 1);
    free(all);
    return rc;
}

/* --ps: the pulled weights packed as the stage's own update packs them (pipe_finish), so that
 * the passes run the same kernels on the same copies as without servers. */
static void pack_pulled(pipe_state *p)
{
    if (!p->mp.srv || !p->packs || !p->pulled_packs) return;
    int lazy = p->S > 1 && p->stage == 0 ? SH_PACK_BACKWARD : 0;
    sh_net_pack_weights(p->inst[0], p->packs & ~lazy);
    p->stale = lazy;
}

static shoal_result pipe_begin(sh_strategy *s, int64_t step)
{
    pipe_state *p = s->impl;
    p->step = step;
    SH_TRY(sh_mp_begin(s, step));
    if (step > 0) pack_pulled(p);
    return SHOAL_OK;
}

static shoal_result pipe_end(sh_strategy *s)
{
    SH_TRY(sh_mp_end(s));
    pack_pulled(s->impl);
    return SHOAL_OK;
}

static shoal_result pipe_finish(sh_strategy *s)
{
    pipe_state *p = s->impl;
    float *g = sh_net_grads(p->inst[0]);
    if (p->mp.srv) { /* the servers average the replicas and step */
        p->pulled_packs = 1;
        return sh_mp_servers_push(s);
    }
    if (p->group) {
        uint64_t t0 = sh_now_ns();
        if (p->mp.gx) SH_TRY(sh_mp_finish_group(s, p->inst[0]));
        else SH_TRY(shoal_allreduce(p->group, g, g, p->nparams, SHOAL_FLOAT32, SHOAL_AVG));
        p->ns[3] += (double)(sh_now_ns() - t0);
    }
    if (p->updates) { /* the step's own update (applies_update), the copies packed with it */
        /* but for the first stage's backward ones: its update is on every step's critical
         * path, and its first backward waits for the stage after (idle), where the pass packs
         * them (backward_one) at no cost to its pass. A later stage's forward ones are packed
         * by the update: packing them before its first wait for the activations takes longer
         * than that wait. */
        int lazy = p->S > 1 && p->stage == 0 ? SH_PACK_BACKWARD : 0;
        sh_optim_begin(s->opt, sh_lr_at(s->lr, p->step));
        sh_net_update_packed(p->inst[0], s->opt, g, p->packs & ~lazy);
        p->stale |= lazy;
    }
    return SHOAL_OK;
}

/* The gradient norm's shares: replica 0's stages each count their part (S T times, as
 * pipe_sum divides the job's sum by S T), a stage's tensor ranks what they alone hold; the
 * replicas hold the same averaged gradients. */
static double pipe_grad_sq(const sh_strategy *s)
{
    const pipe_state *p = s->impl;
    if (p->replica != 0) return 0;
    if (p->T > 1) return sh_tp_plan_sum_squares(&p->plan, p->inst[0], p->t, sh_net_grads(p->inst[0])) * p->S * p->T;
    return sh_sum_squares(sh_net_grads(p->inst[0]), p->nparams) * p->S;
}

/* Over the replicas; every rank of a replica (S stages x T tensor ranks) holds the same
 * figures, so the sum over all ranks is S T times theirs. */
static shoal_result pipe_sum(sh_strategy *s, double *v, int n)
{
    pipe_state *p = s->impl;
    SH_TRY(shoal_allreduce(p->mp.c, v, v, (size_t)n, SHOAL_FLOAT64, SHOAL_SUM));
    for (int i = 0; i < n; i++) v[i] /= p->S * p->T;
    return SHOAL_OK;
}

/* A stage split across T ranks: each rank's shares into the whole model, and back. */
static void pipe_put(sh_strategy *s, const float *mine, float *whole)
{
    pipe_state *p = s->impl;
    if (p->replica == 0) /* replica 0's shares make the whole model */
        sh_tp_plan_move(&p->plan, p->inst[0], p->t, (float *)mine, whole, 1);
}

static void pipe_take(sh_strategy *s, const float *whole, float *mine)
{
    pipe_state *p = s->impl;
    sh_tp_plan_move(&p->plan, p->inst[0], p->t, mine, (float *)whole, 0);
}

/* Every stage's counts (allgather over the job; rank k T < S T is replica 0's stage k). */
static shoal_result place_part(pipe_state *p)
{
    int world = shoal_comm_world(p->mp.c);
    size_t nstats = 0;
    (void)sh_net_stats(p->inst[0], &nstats);
    int64_t mine[2] = {(int64_t)p->nparams, (int64_t)nstats}, *all = NULL;
    SH_TRY(sh_calloc((size_t)world * 2, sizeof *all, (void **)&all));
    shoal_result rc = shoal_allgather(p->mp.c, mine, all, 2, SHOAL_INT64);
    sh_model_part *m = &p->mp.part;
    /* stage k's whole counts: its plan's; its statistics (never split) from its rank t = 0 */
    for (int k = 0; rc == SHOAL_OK && k < p->S; k++) {
        if (k < p->stage) {
            m->params_off += p->stage_nparams[k];
            m->stats_off += (size_t)all[2 * k * p->T + 1];
        }
        m->nparams_whole += p->stage_nparams[k];
        m->nstats_whole += (size_t)all[2 * k * p->T + 1];
    }
    free(all);
    m->contributes = p->replica == 0 && p->t == 0;
    m->carries_scalars = p->replica == 0 && p->stage == 0 && p->t == 0;
    if (p->T > 1) {
        m->put = pipe_put;
        m->take = pipe_take;
    }
    return rc;
}

static void pipe_fini(void *impl)
{
    pipe_state *p = impl;
    for (int j = 0; j < p->K; j++) {
        if (p->act_req) (void)sh_pipe_wait_req(&p->act_req[j]);
        if (p->grad_req) (void)sh_pipe_wait_req(&p->grad_req[j]);
        if (j > 0 && p->inst) sh_net_destroy(p->inst[j]);
        if (p->in_buf) sh_free_aligned(p->in_buf[j]);
    }
    if (p->link_act_req) (void)sh_pipe_wait_links(p->link_act_req, p->K * p->nlink_out);
    if (p->link_grad_req) (void)sh_pipe_wait_links(p->link_grad_req, p->K * p->nlink_in);
    free(p->link_act_req);
    free(p->link_grad_req);
    free(p->link_in);
    free(p->link_out);
    free(p->inst);
    free(p->in_buf);
    free(p->act_req);
    free(p->grad_req);
    sh_free_aligned(p->acc);
    free(p->sum_off);
    free(p->sum_count);
    for (int d = 0; d < p->ndefer; d++) {
        sh_free_aligned(p->defer_x[d]);
        sh_free_aligned(p->defer_dy[d]);
    }
    free(p->defer_layer);
    free(p->defer_x);
    free(p->defer_dy);
    free(p->cuts);
    free(p->stage_nparams);
    shoal_comm_destroy(p->group);
    shoal_comm_destroy(p->tp);
    sh_tp_plan_fini(&p->plan);
    free(p->pairs);
    for (int k = 0; k < 2; k++) {
        shoal_comm_destroy(p->act[k]);
        shoal_comm_destroy(p->grad[k]);
    }
    sh_cfg_destroy(p->cfg);
}

static const sh_strategy_ops pipe_ops = {
    .name = "pipeline",
    .attach = pipe_attach,
    .begin = pipe_begin,
    .finish = pipe_finish,
    .destroy = sh_mp_destroy,
    .pass = sh_pipe_pass,
    .sum = pipe_sum,
    .leads = sh_mp_leads,
    .sync_state = pipe_sync_state,
    .rank_state_count = sh_mp_rank_state_count,
    .rank_state_get = sh_mp_rank_state_get,
    .rank_state_set = sh_mp_rank_state_set,
    .comm_stats = sh_mp_comm_stats,
    .grad_sq_part = pipe_grad_sq,
    .end = pipe_end,
};

/* ---- building ---- */

/* With T > 1: the pairs of each stage (mp/tensor_plan.c's rule inside its layers), and every
 * layer's place in the whole model. */
static shoal_result plan_shares(pipe_state *p, const sh_net *plan)
{
    char layout[96];
    SH_TRY(sh_calloc((size_t)p->S, sizeof *p->pairs, (void **)&p->pairs));
    SH_TRY(sh_tp_plan_init(&p->plan, plan, p->T));
    for (int k = 0; k < p->S; k++) SH_TRY(sh_tp_plan_choose(&p->plan, plan, p->cuts[k], p->cuts[k + 1], &p->pairs[k]));
    snprintf(layout, sizeof layout, "--pipeline %d --tensor-parallel %d", p->S, p->T);
    return sh_tp_plan_refuse(&p->plan, plan, layout, p->S);
}

/* The cut, from a plan-only part (layer 0 alone, one image), and each stage's size. */
static shoal_result plan_stages(pipe_state *p, uint64_t seed)
{
    sh_net *plan = NULL;
    SH_TRY(sh_net_create_part(p->cfg, 1, seed, 0, 1, &plan));
    shoal_result rc = sh_pipe_plan(plan, p->S, p->cuts);
    if (rc == SHOAL_OK && p->T > 1) rc = plan_shares(p, plan);
    for (int k = 0; rc == SHOAL_OK && k < p->S; k++)
        for (int i = p->cuts[k]; i < p->cuts[k + 1]; i++) {
            size_t off, count;
            sh_net_layer_params(plan, i, &off, &count);
            p->stage_nparams[k] += count;
        }
    if (rc == SHOAL_OK && p->batch == 0) p->batch = sh_net_get_config(plan)->batch;
    sh_net_destroy(plan);
    return rc;
}

/* Which layers defer their weight gradients (and their factor buffers), and the gradient
 * slices of the others, summed over micro-batches. */
static shoal_result plan_deferred(pipe_state *p, int lo, int hi)
{
    sh_net *net = p->inst[0];
    int L = hi - lo;
    SH_TRY(sh_calloc((size_t)L, sizeof *p->defer_layer, (void **)&p->defer_layer));
    SH_TRY(sh_calloc((size_t)L, sizeof *p->defer_x, (void **)&p->defer_x));
    SH_TRY(sh_calloc((size_t)L, sizeof *p->defer_dy, (void **)&p->defer_dy));
    SH_TRY(sh_calloc((size_t)L, sizeof *p->sum_off, (void **)&p->sum_off));
    SH_TRY(sh_calloc((size_t)L, sizeof *p->sum_count, (void **)&p->sum_count));
    for (int i = lo; i < hi; i++) {
        size_t off, count;
        sh_net_layer_params(net, i, &off, &count);
        if (!count) continue;
        if (!p->defer || !sh_net_layer_defers(net, i)) {
            int r = p->nsums;
            if (r > 0 && p->sum_off[r - 1] + p->sum_count[r - 1] == off) p->sum_count[r - 1] += count;
            else {
                p->sum_off[r] = off;
                p->sum_count[r] = count;
                p->nsums++;
            }
            continue;
        }
        const float *x, *dy;
        int in, out, d = p->ndefer++;
        sh_net_layer_factors(net, i, &x, &dy, &in, &out);
        p->defer_layer[d] = i;
        if (p->stage > 0 || i > lo) /* else X is the pass's input, whole already */
            SH_TRY(sh_alloc_aligned(((size_t)p->batch * in + 16) * sizeof(float), (void **)&p->defer_x[d]));
        SH_TRY(sh_alloc_aligned(((size_t)p->batch * out + 16) * sizeof(float), (void **)&p->defer_dy[d]));
    }
    return SHOAL_OK;
}

/* The links this stage receives at its start and sends at its end, and their requests. */
static shoal_result plan_links(pipe_state *p)
{
    const sh_net *net = p->inst[0];
    int L = sh_net_nlayers(net), lo = p->cuts[p->stage], hi = p->cuts[p->stage + 1];
    SH_TRY(sh_calloc((size_t)L, sizeof *p->link_in, (void **)&p->link_in));
    SH_TRY(sh_calloc((size_t)L, sizeof *p->link_out, (void **)&p->link_out));
    if (p->stage > 0) p->nlink_in = sh_net_cut_links(net, lo, p->link_in);
    if (p->stage < p->S - 1) p->nlink_out = sh_net_cut_links(net, hi, p->link_out);
    SH_TRY(sh_calloc((size_t)p->K * p->nlink_out + 1, sizeof *p->link_act_req, (void **)&p->link_act_req));
    SH_TRY(sh_calloc((size_t)p->K * p->nlink_in + 1, sizeof *p->link_grad_req, (void **)&p->link_grad_req));
    return SHOAL_OK;
}

/* Ranks started with different layouts stop here, before any split, naming who differs. */
static shoal_result same_layout(shoal_comm *c, const sh_pipe_opts *o, int T)
{
    int world = shoal_comm_world(c);
    enum { NV = 4 };
    int64_t mine[NV] = {o->stages, o->micro_batches, o->batch, T}, *all = NULL;
    SH_TRY(sh_calloc((size_t)world * NV, sizeof *all, (void **)&all));
    shoal_result rc = shoal_allgather(c, mine, all, NV, SHOAL_INT64);
    for (int r = 1; rc == SHOAL_OK && r < world; r++)
        if (memcmp(all + NV * r, all, NV * sizeof *all)) {
            const int64_t *a = all + NV * r;
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d runs --pipeline %lld --micro-batches %lld --batch %lld "
                         "--tensor-parallel %lld but rank 0 runs --pipeline %lld --micro-batches %lld --batch %lld "
                         "--tensor-parallel %lld; start every rank with the same layout", r, (long long)a[0],
                         (long long)a[1], (long long)a[2], (long long)a[3], (long long)all[0], (long long)all[1],
                         (long long)all[2], (long long)all[3]);
        }
    free(all);
    return rc;
}

shoal_result sh_strategy_pipeline_create(shoal_comm *c, const sh_pipe_opts *o, sh_strategy **out,
                                         sh_net **net_out)
{
    return sh_strategy_pipeline_tp_create(c, o, 1, out, net_out);
}

shoal_result sh_strategy_pipeline_tp_create(shoal_comm *c, const sh_pipe_opts *o, int T, sh_strategy **out,
                                            sh_net **net_out)
{
    shoal_result rc = SHOAL_OK;
    sh_strategy *s = NULL;
    pipe_state *p = NULL;
    *out = NULL;
    *net_out = NULL;
    int world = shoal_comm_world(c), rank = shoal_comm_rank(c);
    if (T < 1) T = 1;
    SH_TRY(same_layout(c, o, T));
    if (o->stages < 1 || world % o->stages)
        return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d does not divide the %d ranks into replicas of "
                       "%d stages; run -n with a multiple of %d (replicas x stages)", o->stages, world,
                       o->stages, o->stages < 1 ? 1 : o->stages);
    if (world % (o->stages * T))
        return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d --tensor-parallel %d does not divide the %d ranks into "
                       "replicas of %d stages x %d tensor ranks; run -n with a multiple of %d (replicas x S x T)",
                       o->stages, T, world, o->stages, T, o->stages * T);
    if (o->micro_batches < 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "--micro-batches %d: give at least 1", o->micro_batches);
    SH_TRY(sh_mp_create(c, &pipe_ops, sizeof *p, pipe_fini, &s));
    p = s->impl;
    p->S = o->stages;
    p->M = o->micro_batches;
    p->T = T;
    p->R = world / (o->stages * T);
    p->t = rank % T;
    p->stage = rank / T % p->S;
    p->replica = rank / (p->S * T);
    p->batch = o->batch;
    SH_TRY_GOTO(sh_calloc((size_t)p->S + 1, sizeof *p->cuts, (void **)&p->cuts), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)p->S, sizeof *p->stage_nparams, (void **)&p->stage_nparams), rc, fail);
    SH_TRY_GOTO(sh_cfg_load(o->cfg_path, &p->cfg), rc, fail);
    SH_TRY_GOTO(plan_stages(p, o->seed), rc, fail);
    if (p->batch < 1 || p->batch % p->M) {
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--micro-batches %d does not divide the batch of %d images per "
                     "replica; choose a divisor of %d (or --batch a multiple of %d)", p->M, p->batch,
                     p->batch, p->M);
        goto fail;
    }
    p->mb = p->batch / p->M;
    s->rank = p->replica;
    s->world = p->R;
    s->batch = p->batch;
    /* Collective: R is the same on every rank, so all split or none does. */
    if (p->R > 1) SH_TRY_GOTO(shoal_comm_split(c, p->stage * T + p->t, p->replica, &p->group), rc, fail);
    if (T > 1) SH_TRY_GOTO(shoal_comm_split(c, p->replica * p->S + p->stage, p->t, &p->tp), rc, fail);
    /* The links: pairs (stage 2k, 2k+1), then pairs (2k+1, 2k+2), one per tensor rank t; a
     * rank outside every pair of one split passes color -1. */
    for (int split = 0; split < 4; split++) {
        int odd = split / 2, is_grad = split % 2;
        /* the pair's first stage: this one when its parity is the split's, else the one before */
        int first = (p->stage - odd) % 2 == 0 ? p->stage : p->stage - 1;
        int color = first >= 0 && first + 1 < p->S ? (p->replica * p->S + first) * T + p->t : -1;
        shoal_comm *pair = NULL;
        SH_TRY_GOTO(shoal_comm_split(c, color, p->stage, &pair), rc, fail);
        if (!pair) continue;
        shoal_comm **slot = is_grad ? p->grad : p->act;
        slot[first == p->stage ? 1 : 0] = pair;
    }
    p->K = p->S - p->stage < p->M ? p->S - p->stage : p->M;
    SH_TRY_GOTO(sh_calloc((size_t)p->K, sizeof *p->inst, (void **)&p->inst), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)p->K, sizeof *p->in_buf, (void **)&p->in_buf), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)p->K, sizeof *p->act_req, (void **)&p->act_req), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)p->K, sizeof *p->grad_req, (void **)&p->grad_req), rc, fail);
    int lo = p->cuts[p->stage], hi = p->cuts[p->stage + 1];
    for (int j = 0; j < p->K; j++) {
        /* Instances after the first draw the same weights, then drop them for the first's
         * (sh_net_use_blocks in attach). */
        if (T > 1) {
            SH_TRY_GOTO(sh_net_create_part_tensor(p->cfg, p->mb, o->seed, lo, hi, p->t, T, p->plan.roles, &p->inst[j]),
                        rc, fail);
            sh_net_set_sum(p->inst[j], tp_sum_floats, p); /* every instance's splits sum over the stage */
        } else {
            SH_TRY_GOTO(sh_net_create_part(p->cfg, p->mb, o->seed, lo, hi, &p->inst[j]), rc, fail);
        }
        sh_net_want_input_delta(p->inst[j], p->stage > 0);
    }
    p->nparams = sh_net_nparams(p->inst[0]);
    p->in_count = sh_net_part_input_count(p->inst[0]);
    p->out_count = sh_net_part_output_count(p->inst[0]);
    SH_TRY_GOTO(sh_alloc_aligned((p->nparams + 16) * sizeof(float), (void **)&p->acc), rc, fail);
    long defer = 1;
    SH_TRY_GOTO(sh_env_long("SHOAL_PIPE_DEFER", &defer), rc, fail);
    p->defer = (int)defer;
    SH_TRY_GOTO(plan_deferred(p, lo, hi), rc, fail);
    /* OpenBLAS would re-pack each weight matrix for every one of the M products; keep them
     * packed instead (while the copies take at most 64 MiB), the copies the machine's rule
     * says pay at this micro-batch size (sh_dense_stage_packs: none, W for dX, or W and W^T;
     * an update that packs both costs several plain ones). SHOAL_PIPE_PACK: 2 that rule,
     * 1 both, 3 W alone, 0 none. */
    long pack = 2;
    SH_TRY_GOTO(sh_env_long("SHOAL_PIPE_PACK", &pack), rc, fail);
    int both = SH_PACK_FORWARD | SH_PACK_BACKWARD;
    p->packs = pack == 2 ? sh_dense_stage_packs(p->mb) : pack == 1 ? both : pack == 3 ? SH_PACK_BACKWARD : 0;
    if (p->packs) SH_TRY_GOTO(sh_net_keep_packed(p->inst[0], (size_t)64 << 20), rc, fail);
    SH_TRY_GOTO(plan_links(p), rc, fail);
    if (p->stage > 0)
        for (int j = 0; j < p->K; j++)
            SH_TRY_GOTO(sh_alloc_aligned(((size_t)p->mb * p->in_count + 16) * sizeof(float),
                                         (void **)&p->in_buf[j]), rc, fail);
    SH_TRY_GOTO(place_part(p), rc, fail);
    *net_out = p->inst[0];
    *out = s;
    return SHOAL_OK;
fail:
    if (p->inst && p->inst[0]) sh_net_destroy(p->inst[0]); /* not handed out */
    sh_strategy_destroy(s);
    return rc;
}
