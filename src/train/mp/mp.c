/* mp/mp.c — the model-parallel strategies' shared frame and hooks (see mp/mp.h): one
 * allocation of strategy and impl, the job's rank 0 leading, the group's compressed
 * exchange and its residuals, the shares' update inside backward.
 * Not here: what a layout does (mp/pipeline.c, tensor.c, hybrid.c), the codecs (dp/compress.c).
 * Proved by tests/train/test_pipeline.c, test_tensor.c, test_hybrid.c, tests/cli/test_train_compress.c. */
#include "train/mp/mp.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"

sh_mp *sh_mp_of(const sh_strategy *s) { return s->impl; }

static shoal_result sum_model(sh_strategy *s, float *v, size_t n)
{
    return shoal_allreduce(sh_mp_of(s)->c, v, v, n, SHOAL_FLOAT32, SHOAL_SUM);
}

shoal_result sh_mp_create(shoal_comm *c, const sh_strategy_ops *ops, size_t impl_nbytes, void (*fini)(void *impl),
                          sh_strategy **out)
{
    *out = NULL;
    sh_strategy *s = NULL;
    sh_mp *mp = NULL;
    SH_TRY(sh_calloc(1, sizeof *s, (void **)&s));
    if (sh_calloc(1, impl_nbytes, (void **)&mp) != SHOAL_OK) {
        free(s);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    s->ops = ops;
    s->impl = mp;
    s->job_rank = shoal_comm_rank(c);
    s->job_world = shoal_comm_world(c);
    mp->c = c;
    mp->fini = fini;
    shoal_codec_opts_default(&mp->codec);
    mp->part.contributes = s->job_rank == 0;
    mp->part.carries_scalars = s->job_rank == 0;
    mp->part.sum_floats = sum_model;
    s->part = &mp->part;
    *out = s;
    return SHOAL_OK;
}

struct sh_mp_servers {
    sh_ps_client *cl;
    shoal_comm *job;      /* the job's communicator, servers first (borrowed) */
    shoal_comm *workers;  /* the one the layout runs on (owned) */
    sh_ps_layout layout;
    int contributes;      /* replica 0's rank of this part: its weights start the servers' */
    sh_net *net;          /* this part's net, whose blocks travel */
    int closed;
};

void sh_mp_destroy(sh_strategy *s)
{
    sh_mp *mp = sh_mp_of(s);
    sh_mp_servers *v = mp->srv;
    sh_gradx_destroy(mp->gx);
    if (mp->fini) mp->fini(mp);
    if (v) {
        if (v->cl && !v->closed) sh_ps_client_leave(v->cl); /* gave up: no answer to wait for */
        sh_ps_client_destroy(v->cl);
        sh_ps_layout_fini(&v->layout);
        shoal_comm_destroy(v->workers); /* after fini: the layout's groups were split from it */
        free(v);
    }
    free(mp);
    free(s);
}

shoal_result sh_mp_servers_create(sh_strategy *s, shoal_comm *job, shoal_comm *workers, const sh_ps_config *cfg,
                                  sh_ps_layout *l, int contributes)
{
    sh_mp *mp = sh_mp_of(s);
    sh_mp_servers *v = NULL;
    if (sh_calloc(1, sizeof *v, (void **)&v) != SHOAL_OK) {
        shoal_comm_destroy(workers);
        sh_ps_layout_fini(l);
        return SHOAL_ERR_NOMEM;
    }
    v->job = job;
    v->workers = workers;
    v->layout = *l;
    memset(l, 0, sizeof *l);
    v->contributes = contributes;
    mp->srv = v;
    sh_ps_config c = *cfg;
    c.nparams = v->layout.nparams;
    c.worker_lo = v->layout.worker_lo;
    c.worker_count = v->layout.worker_count;
    return sh_ps_client_create(job, &c, &v->cl);
}

shoal_result sh_mp_servers_attach(sh_strategy *s, sh_net *net)
{
    sh_mp_servers *v = sh_mp_of(s)->srv;
    v->net = net;
    s->applies_update = 1; /* the servers step */
    SH_ASSERT(sh_net_nparams(net) == v->layout.part_count);
    SH_TRY(sh_ps_layout_start(v->job, &v->layout, v->contributes, sh_net_params(net), NULL));
    return sh_ps_client_pull(v->cl, sh_net_params(net));
}

shoal_result sh_mp_servers_push(sh_strategy *s)
{
    sh_mp_servers *v = sh_mp_of(s)->srv;
    return sh_ps_client_push(v->cl, sh_net_grads(v->net));
}

shoal_result sh_mp_end(sh_strategy *s)
{
    sh_mp_servers *v = sh_mp_of(s)->srv;
    return v ? sh_ps_client_pull(v->cl, sh_net_params(v->net)) : SHOAL_OK;
}

shoal_result sh_mp_servers_close(sh_strategy *s)
{
    sh_mp_servers *v = sh_mp_of(s)->srv;
    v->closed = 1;
    return sh_ps_client_close(v->cl);
}

int sh_mp_leads(const sh_strategy *s) { return s->job_rank == 0; }

shoal_result sh_mp_begin(sh_strategy *s, int64_t step)
{
    sh_mp *mp = sh_mp_of(s);
    if (mp->srv && step > 0) SH_TRY(sh_ps_client_pull(mp->srv->cl, sh_net_params(mp->srv->net)));
    if (mp->gx && s->applies_update) mp->gx_lr = sh_lr_at(s->lr, step);
    if (mp->fuse) sh_optim_begin(s->opt, sh_lr_at(s->lr, step));
    return SHOAL_OK;
}

size_t sh_mp_rank_state_count(const sh_strategy *s)
{
    const sh_mp *mp = sh_mp_of(s);
    return mp->gx ? sh_gradx_state_count(mp->gx) : 0;
}

void sh_mp_rank_state_get(sh_strategy *s, float *out) { sh_gradx_state_get(sh_mp_of(s)->gx, out); }

void sh_mp_rank_state_set(sh_strategy *s, const float *in)
{
    sh_mp *mp = sh_mp_of(s);
    if (in) sh_gradx_state_set(mp->gx, in);
    else sh_gradx_state_reset(mp->gx);
}

int sh_mp_comm_stats(const sh_strategy *s, double *wire, double *dense, double *residual)
{
    const sh_mp *mp = sh_mp_of(s);
    if (!mp->gx) return 0;
    sh_gradx_stats st;
    sh_gradx_get_stats(mp->gx, &st);
    *wire = st.wire_nbytes;
    *dense = st.dense_nbytes;
    *residual = st.residual_norm;
    return 1;
}

void sh_mp_compress(sh_strategy *s, const shoal_codec_opts *codec) { sh_mp_of(s)->codec = *codec; }

shoal_result sh_mp_attach_group(sh_strategy *s, shoal_comm *group, sh_net *net, int sum)
{
    sh_mp *mp = sh_mp_of(s);
    if (mp->codec.codec == SHOAL_CODEC_NONE || !group) return SHOAL_OK;
    sh_gradx_opts o = {mp->codec, 0, NULL, sum, 0};
    SH_TRY(sh_gradx_create(group, net, &o, &mp->gx));
    s->applies_update = s->opt != NULL && sh_gradx_applies_update(mp->gx);
    return SHOAL_OK;
}

shoal_result sh_mp_finish_group(sh_strategy *s, sh_net *net)
{
    sh_mp *mp = sh_mp_of(s);
    float *grads = sh_net_grads(net);
    SH_TRY(sh_gradx_reduce(mp->gx, grads));
    if (s->applies_update) sh_gradx_apply(mp->gx, s->opt, sh_net_params(net), grads, sh_net_nparams(net), mp->gx_lr);
    return SHOAL_OK;
}

/* The shares' update hook (ctx: the strategy); the kernel threads call it at once on
 * disjoint rows. */
static void update(void *ctx, size_t offset, const float *g, size_t count)
{
    sh_strategy *s = ctx;
    sh_mp *mp = sh_mp_of(s);
    uint64_t t0 = sh_now_ns();
    sh_optim_apply(s->opt, sh_net_params(mp->fuse_owner), g, mp->fuse_base + offset, count);
    __atomic_fetch_add(&s->update_in_backward_ns, sh_now_ns() - t0, __ATOMIC_RELAXED);
}

void sh_mp_fuse(sh_strategy *s, int allowed, sh_net *net, sh_net *owner, size_t base)
{
    sh_mp *mp = sh_mp_of(s);
    mp->fuse = allowed && s->opt && s->lr && !mp->gx && !mp->srv && !s->grad_sq_wanted;
    if (!mp->fuse) return;
    mp->fuse_owner = owner;
    mp->fuse_base = base;
    s->applies_update = 1;
    sh_net_set_update(net, update, s);
}
