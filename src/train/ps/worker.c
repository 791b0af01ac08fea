/* ps/worker.c — a parameter-server worker as a strategy: pull before a step, push gradients
 * after backward (--pull-every/--push-every); the servers apply the optimizer. With --sfb the
 * connected layers trade sufficient factors among workers instead; a last pull after the last step.
 * Not here: the servers and the protocol (ps/server.c, ps/client.c), the factors (dp/compress.c).
 * Proved by tests/train/test_strategy_ps.c, tests/cli/test_train_ps_layouts.c (--sfb) and
 * tests/cli/test_train_compress.c (compressed pushes). */
#include "train/ps/worker.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "train/dp/compress.h"
#include "train/ps/layout.h"

typedef struct {
    sh_ps_client *cl;
    sh_net *net;
    float *params, *grads, *acc; /* acc: (nparams) gradients summed over push_every steps */
    size_t nparams;
    size_t served;          /* floats the servers hold (--sfb: fewer than nparams) */
    int pull_every, push_every, nacc;
    int64_t steps;          /* steps finished (pushes are fewer with push_every > 1) */
    int closed; /* said goodbye through sh_strategy_ps_close */
    int compressed;         /* pushes go through a codec (--compress) */
    int quorum;             /* sync rounds close without every worker: a late one skips ahead */
    shoal_result failed;
    sh_step_comm last;      /* the last step's pull and push */
    /* --sfb: the workers' communicator (owned), the factors' exchange over it, the pieces the
     * servers hold (staged: packed, pulls land and pushes leave there), the factors' slices */
    shoal_comm *workers;
    sh_gradx *gx;
    sh_ps_pieces pieces;
    float *staged;
    size_t *fac_off, *fac_n;
    int nfac;
    float lr;
} ps_state;

/* The servers' weights into the net (through the staged pieces under --sfb). */
static shoal_result pull(ps_state *p)
{
    if (!p->gx) return sh_ps_client_pull(p->cl, p->params);
    SH_TRY(sh_ps_client_pull(p->cl, p->staged));
    sh_ps_pieces_scatter(&p->pieces, p->staged, p->params);
    return SHOAL_OK;
}

/* --sfb: the factors' exchange and the slices it steps here. */
static shoal_result attach_sfb(ps_state *p, sh_net *net)
{
    SH_TRY(sh_ps_pieces_sfb(net, &p->pieces));
    if (p->pieces.total != p->served)
        return SH_FAIL(SHOAL_ERR_INTERNAL, "--sfb: the servers hold %zu parameters, this worker %zu", p->served,
                       p->pieces.total);
    int nl = sh_net_nlayers(net);
    SH_TRY(sh_calloc(p->pieces.total + 1, sizeof(float), (void **)&p->staged));
    SH_TRY(sh_calloc((size_t)nl + 1, sizeof(size_t), (void **)&p->fac_off));
    SH_TRY(sh_calloc((size_t)nl + 1, sizeof(size_t), (void **)&p->fac_n));
    for (int i = 0; i < nl; i++) {
        size_t off, n;
        if (!sh_gradx_sends_factors(net, i, &off, &n) || !n) continue;
        p->fac_off[p->nfac] = off;
        p->fac_n[p->nfac++] = n;
    }
    shoal_codec_opts none;
    shoal_codec_opts_default(&none);
    sh_gradx_opts go = {none, 1, NULL, 0, 1};
    return sh_gradx_create(p->workers, net, &go, &p->gx);
}

static shoal_result attach(sh_strategy *s, sh_net *net)
{
    ps_state *p = s->impl;
    p->net = net;
    p->params = sh_net_params(net);
    p->grads = sh_net_grads(net);
    p->nparams = sh_net_nparams(net);
    if (p->push_every > 1) {
        p->acc = calloc(p->nparams, sizeof(float));
        if (!p->acc) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    if (p->workers) SH_TRY(attach_sfb(p, net));
    return pull(p); /* every worker starts from the servers' (the factors' layers from the seed or
                       the checkpoint, alike on every worker) */
}

static shoal_result begin(sh_strategy *s, int64_t step)
{
    ps_state *p = s->impl;
    memset(&p->last, 0, sizeof p->last);
    p->lr = sh_lr_at(s->lr, step);
    if (p->gx) sh_gradx_begin(p->gx, p->grads);
    if (step > 0 && step % p->pull_every == 0) {
        uint64_t t0 = sh_now_ns();
        SH_TRY(pull(p));
        p->last.comm_s += (double)(sh_now_ns() - t0) * 1e-9;
        p->last.nbytes += (double)p->nparams * sizeof(float);
    }
    return SHOAL_OK;
}

static shoal_result push(ps_state *p, const float *g)
{
    uint64_t t0 = sh_now_ns();
    double before, after, residual;
    sh_ps_client_push_stats(p->cl, &before, &residual);
    if (p->gx) {
        sh_ps_pieces_gather(&p->pieces, g, p->staged);
        g = p->staged;
    }
    shoal_result rc = sh_ps_client_push(p->cl, g);
    sh_ps_client_push_stats(p->cl, &after, &residual);
    p->last.comm_s += (double)(sh_now_ns() - t0) * 1e-9;
    p->last.nbytes += (double)p->nparams * sizeof(float);
    p->last.sent_nbytes += after - before; /* compressed when a codec is on */
    return rc;
}

/* --sfb: the factors' layers averaged over the workers, then stepped here (the same on each). */
static shoal_result step_factors(sh_strategy *s, ps_state *p)
{
    uint64_t t0 = sh_now_ns();
    SH_TRY(sh_gradx_reduce(p->gx, p->grads));
    sh_optim_begin(s->opt, p->lr);
    for (int k = 0; k < p->nfac; k++) sh_optim_apply(s->opt, p->params, p->grads + p->fac_off[k], p->fac_off[k], p->fac_n[k]);
    s->update_in_finish_ns += sh_now_ns() - t0;
    return SHOAL_OK;
}

static void grad_ready(void *ctx, int layer, size_t offset, size_t count)
{
    sh_strategy *s = ctx;
    ps_state *p = s->impl;
    (void)offset, (void)count;
    if (p->gx) sh_gradx_layer_ready(p->gx, layer); /* its factors travel during backward */
}

static shoal_result end(sh_strategy *s) { return pull(s->impl); }

static shoal_result finish(sh_strategy *s)
{
    ps_state *p = s->impl;
    if (p->gx) SH_TRY(step_factors(s, p));
    p->steps++;
    if (p->quorum) s->job_steps = sh_ps_client_rounds(p->cl);
    if (p->push_every <= 1) return push(p, p->grads);
    for (size_t i = 0; i < p->nparams; i++) p->acc[i] += p->grads[i];
    if (++p->nacc < p->push_every) return SHOAL_OK;
    float inv = 1.0f / (float)p->nacc;
    for (size_t i = 0; i < p->nparams; i++) p->acc[i] *= inv;
    shoal_result rc = push(p, p->acc);
    memset(p->acc, 0, p->nparams * sizeof(float));
    p->nacc = 0;
    return rc;
}

static void destroy(sh_strategy *s)
{
    ps_state *p = s->impl;
    if (p) {
        if (!p->closed) sh_ps_client_leave(p->cl); /* gave up: no answer to wait for */
        sh_ps_client_destroy(p->cl);
        sh_gradx_destroy(p->gx); /* its thread first, then the communicator it uses */
        shoal_comm_destroy(p->workers);
        sh_ps_pieces_fini(&p->pieces);
        free(p->staged);
        free(p->fac_off);
        free(p->fac_n);
        free(p->acc);
        free(p);
    }
    free(s);
}

static void step_comm(const sh_strategy *s, sh_step_comm *out)
{
    const ps_state *p = s->impl;
    *out = p->last;
}

/* Compressed pushes: bytes sent per step against what float32 pushes would send (with
 * --push-every a step sends a share of a push), and this worker's residuals. */
static int comm_stats(const sh_strategy *s, double *wire, double *dense, double *residual)
{
    const ps_state *p = s->impl;
    if (!p->compressed) return 0;
    double pushed = 0;
    sh_ps_client_push_stats(p->cl, &pushed, residual);
    int64_t pushes = sh_ps_client_clock(p->cl);
    double per_step = p->steps > 0 ? (double)pushes / (double)p->steps : 1;
    *wire = p->steps > 0 ? pushed / (double)p->steps : 0;
    *dense = (double)p->nparams * sizeof(float) * per_step;
    return 1;
}

/* The residuals of this worker's compressed pushes: each worker keeps them in a file of
 * its own at a checkpoint (workers never wait for each other). */
static size_t rank_state_count(const sh_strategy *s)
{
    const ps_state *p = s->impl;
    return sh_ps_client_state_count(p->cl);
}

static void rank_state_get(sh_strategy *s, float *out)
{
    ps_state *p = s->impl;
    sh_ps_client_state_get(p->cl, out);
}

static void rank_state_set(sh_strategy *s, const float *in)
{
    ps_state *p = s->impl;
    sh_ps_client_state_set(p->cl, in);
}

/* The lead prints progress: it moves to the next worker when the servers drop a frozen one. */
static int leads(const sh_strategy *s)
{
    const ps_state *p = s->impl;
    return sh_ps_client_lead(p->cl) == s->rank;
}

/* Before this worker writes a checkpoint: it is whole only with the shards the servers write
 * when every worker has said goodbye, so a worker whose job is failing (a server gone; in sync
 * mode another worker gone), as when the launcher stops the job because of it, writes nothing. */
static shoal_result sync_state(sh_strategy *s)
{
    ps_state *p = s->impl;
    return sh_ps_client_check_job(p->cl, "no checkpoint written (the servers will not save their shards)");
}

static const sh_strategy_ops ps_ops = {
    .name = "ps",
    .rank_noun = "worker",
    .attach = attach,
    .begin = begin,
    .finish = finish,
    .destroy = destroy,
    .leads = leads,
    .sync_state = sync_state,
    .grad_ready = grad_ready,
    .end = end,
    .rank_state_count = rank_state_count,
    .rank_state_get = rank_state_get,
    .rank_state_set = rank_state_set,
    .step_comm = step_comm,
    .comm_stats = comm_stats,
};

void sh_strategy_ps_sfb(sh_strategy *s, shoal_comm *workers)
{
    ps_state *p = s->impl;
    p->workers = workers;
}

shoal_result sh_strategy_ps_close(sh_strategy *s, int *is_lead)
{
    ps_state *p = s->impl;
    *is_lead = 0;
    p->closed = 1;
    SH_TRY(sh_ps_client_close(p->cl));
    *is_lead = leads(s);
    return SHOAL_OK;
}

shoal_result sh_strategy_ps_create(shoal_comm *c, const sh_ps_config *cfg, const sh_ps_worker_opts *o,
                                   sh_strategy **out)
{
    *out = NULL;
    sh_strategy *s = calloc(1, sizeof *s);
    ps_state *p = calloc(1, sizeof *p);
    if (!s || !p) {
        free(s);
        free(p);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    shoal_result rc = sh_ps_client_create(c, cfg, &p->cl);
    if (rc != SHOAL_OK) {
        free(s);
        free(p);
        return rc;
    }
    int async = cfg->consistency == SH_PS_ASYNC;
    p->pull_every = async && o->pull_every > 1 ? o->pull_every : 1;
    p->push_every = async && o->push_every > 1 ? o->push_every : 1;
    s->ops = &ps_ops;
    s->rank = s->job_rank = shoal_comm_rank(c) - cfg->nservers;
    s->world = s->job_world = shoal_comm_world(c) - cfg->nservers;
    s->applies_update = 1;
    p->nparams = p->served = cfg->nparams;
    p->compressed = cfg->codec.codec != SHOAL_CODEC_NONE;
    p->quorum = cfg->quorum > 0 && cfg->consistency == SH_PS_SYNC;
    s->impl = p;
    *out = s;
    return SHOAL_OK;
}
