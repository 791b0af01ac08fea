/* dp/hogwild.c — lock-free data parallelism on one host (Niu et al., "Hogwild!", 2011;
 * Project Adam's multi-threaded workers): one copy of the weights in a shared window, every
 * rank applying its own gradient there as soon as backward made it, never waiting.
 * Not here: the window (src/comm/transport/window.c), the optimizer (src/nn/optim.c).
 * Proved by tests/train/test_stragglers.c and tests/cli/test_train_stragglers.c. */

/* The window's common block holds a control area (the update counter, then one cache line
 * per rank for its figures) and, from HW_PARAMS_AT on, the weights; each rank's block holds
 * its gradients. A step reads the counter before its forward (the version it reads), and
 * after backward steps the shared weights with its own optimizer (its own momentum: shared
 * moments would race too and mix every rank's velocity into every other's), then takes the
 * counter's next value: what it passed over since the read is its staleness, the other
 * ranks' updates that landed between its read and its write.
 * No allreduce, no per-step agreement: each rank acts on its own stop and save requests
 * (the launcher signals all), rank 0 writes the checkpoint from the window (the weights as
 * they are then; other ranks' momentum goes to their own files), and a barrier after the
 * last step lets every update land before the final evaluation. */
#include "train/dp/hogwild.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "nn/net.h"
#include "train/dp/allreduce.h"
#include "train/dp/shared.h"

enum { HW_LINE = SH_DP_SHARED_LINE };

typedef struct {
    int64_t updates, staleness_sum, staleness_max;
    uint64_t first_ns, last_ns; /* its first and last update (one clock for the host) */
} hw_rank_line;

typedef struct {
    shoal_comm *c;
    int batch;
    unsigned char *ctl;    /* the window's control area */
    float *params, *grads; /* the shared weights, this rank's gradients */
    uint64_t read_at;      /* the counter when this step's forward began */
    float lr;
    int64_t last_staleness;
} hw_state;

static uint64_t *counter(const hw_state *h) { return (uint64_t *)h->ctl; }

static hw_rank_line *line_of(const hw_state *h, int rank) { return (hw_rank_line *)(h->ctl + HW_LINE * (1 + rank)); }

static shoal_result attach(sh_strategy *s, sh_net *net)
{
    hw_state *h = s->impl;
    int world = shoal_comm_world(h->c), rank = shoal_comm_rank(h->c);
    SH_TRY(sh_dp_check_same(h->c, net, h->batch));
    size_t nparams = sh_net_nparams(net), at = sh_dp_shared_ctl_nbytes(world);
    shoal_window *w = NULL;
    SH_TRY(sh_dp_shared_window(h->c, at + nparams * sizeof(float) + 64, nparams * sizeof(float) + 64, "--hogwild",
                               "--hogwild", "sharing one copy of the weights",
                               "data parallelism, or --ps --consistency async", &w));
    h->ctl = shoal_window_common(w);
    sh_net_use_blocks(net, (float *)(h->ctl + at), shoal_window_block(w, rank), rank == 0);
    h->params = sh_net_params(net);
    h->grads = sh_net_grads(net);
    SH_TRY(sh_dp_shared_start(h->c, net)); /* nobody reads the weights before rank 0 put them there */
    s->applies_update = 1;
    SH_LOG_I("train", "hogwild over %d ranks: %zu parameters in one shared copy, each rank updating it on its own",
             world, nparams);
    return SHOAL_OK;
}

static shoal_result begin(sh_strategy *s, int64_t step)
{
    hw_state *h = s->impl;
    h->lr = sh_lr_at(s->lr, step);
    h->read_at = __atomic_load_n(counter(h), __ATOMIC_ACQUIRE);
    return SHOAL_OK;
}

/* This rank's gradient into the shared weights, racing the others' (the point of it). */
static shoal_result finish(sh_strategy *s)
{
    hw_state *h = s->impl;
    uint64_t t0 = sh_now_ns();
    sh_optim_step(s->opt, h->params, h->grads, h->lr);
    uint64_t c = __atomic_fetch_add(counter(h), 1, __ATOMIC_ACQ_REL);
    s->update_in_finish_ns += sh_now_ns() - t0;
    hw_rank_line *me = line_of(h, s->rank);
    int64_t stale = (int64_t)(c - h->read_at);
    h->last_staleness = stale;
    me->updates++;
    if (!me->first_ns) me->first_ns = t0;
    me->last_ns = t0;
    me->staleness_sum += stale;
    if (stale > me->staleness_max) me->staleness_max = stale;
    return SHOAL_OK;
}

static shoal_result end(sh_strategy *s)
{
    hw_state *h = s->impl;
    return shoal_barrier(h->c);
}

static void destroy(sh_strategy *s)
{
    free(s->impl);
    free(s);
}

/* Each rank's optimizer state (its momentum) is its own: it goes to its own file. */
static size_t rank_state_count(const sh_strategy *s)
{
    size_t n = 0;
    (void)sh_optim_state(s->opt, &n);
    return n;
}

static void rank_state_get(sh_strategy *s, float *out)
{
    size_t n = 0;
    const float *st = sh_optim_state(s->opt, &n);
    memcpy(out, st, n * sizeof(float));
}

/* No file of its own: the state the checkpoint holds (rank 0's) stays. */
static void rank_state_set(sh_strategy *s, const float *in)
{
    size_t n = 0;
    float *st = sh_optim_state(s->opt, &n);
    if (in) memcpy(st, in, n * sizeof(float));
}

static int figures(const sh_strategy *s, sh_figure *out, int max)
{
    const hw_state *h = s->impl;
    const hw_rank_line *me = line_of(h, s->rank);
    if (max < 2) return 0;
    out[0] = (sh_figure){"hogwild/staleness", (double)h->last_staleness};
    out[1] = (sh_figure){"hogwild/staleness_mean", me->updates ? (double)me->staleness_sum / me->updates : 0};
    return 2;
}

static const sh_strategy_ops hogwild_ops = {
    .name = "hogwild",
    .attach = attach,
    .begin = begin,
    .finish = finish,
    .destroy = destroy,
    .rank_state_count = rank_state_count,
    .rank_state_get = rank_state_get,
    .rank_state_set = rank_state_set,
    .figures = figures,
    .end = end,
};

shoal_result sh_strategy_hogwild_create(shoal_comm *c, int batch, sh_strategy **out)
{
    SH_TRY(sh_dp_shared_create(c, &hogwild_ops, sizeof(hw_state), out));
    hw_state *h = (*out)->impl;
    h->c = c;
    h->batch = batch;
    return SHOAL_OK;
}

void sh_strategy_hogwild_stats(const sh_strategy *s, sh_hogwild_stats *out)
{
    const hw_state *h = s->impl;
    memset(out, 0, sizeof *out);
    for (int r = 0; h->ctl && r < s->world; r++) {
        const hw_rank_line *l = line_of(h, r);
        out->updates += l->updates;
        if (l->updates > 1 && l->last_ns > l->first_ns) /* each rank's rate between its first and last update */
            out->images_per_s += (double)(l->updates - 1) * h->batch / ((double)(l->last_ns - l->first_ns) * 1e-9);
        out->staleness_sum += (double)l->staleness_sum;
        if (l->staleness_max > out->staleness_max) out->staleness_max = l->staleness_max;
    }
}
