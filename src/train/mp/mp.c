/* mp/mp.c — the model-parallel strategies' shared frame and hooks (see mp/mp.h): one
 * allocation of strategy and impl, the job's rank 0 leading, the group's compressed
 * exchange and its residuals, the shares' update inside backward.
 * Not here: what a layout does (mp/pipeline.c, tensor.c, hybrid.c), the codecs (dp/compress.c).
 * Proved by tests/train/test_pipeline.c, test_tensor.c, test_hybrid.c, tests/cli/test_train_compress.c. */
#include "train/mp/mp.h"

#include <stdlib.h>

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

void sh_mp_destroy(sh_strategy *s)
{
    sh_mp *mp = sh_mp_of(s);
    sh_gradx_destroy(mp->gx);
    if (mp->fini) mp->fini(mp);
    free(mp);
    free(s);
}

int sh_mp_leads(const sh_strategy *s) { return s->job_rank == 0; }

shoal_result sh_mp_begin(sh_strategy *s, int64_t step)
{
    sh_mp *mp = sh_mp_of(s);
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
    sh_gradx_opts o = {mp->codec, 0, NULL, sum};
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
    mp->fuse = allowed && s->opt && s->lr && !mp->gx && !s->grad_sq_wanted;
    if (!mp->fuse) return;
    mp->fuse_owner = owner;
    mp->fuse_base = base;
    s->applies_update = 1;
    sh_net_set_update(net, update, s);
}
