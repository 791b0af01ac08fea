/* strategy.c — what the trainer asks a strategy (strategy.h's queries), and the
 * single-process strategy: one rank, gradients stay where backward wrote them.
 * Not here: strategies that talk to other ranks (dp/, ps/, mp/); the step (step.c).
 * Proved by tests/train/test_trainer.c. */
#include "train/strategy.h"

#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"

int sh_strategy_leads(const sh_strategy *s) { return s->ops->leads ? s->ops->leads(s) : s->rank == 0; }

int sh_strategy_writes(const sh_strategy *s) { return s->part ? sh_strategy_leads(s) : s->rank == 0; }

int sh_strategy_splits_eval(const sh_strategy *s) { return s->ops->sum && s->world > 1; }

int sh_strategy_agrees(const sh_strategy *s) { return s->ops->sum && (s->world > 1 || s->part); }

size_t sh_strategy_rank_state_count(const sh_strategy *s)
{
    return s->ops->rank_state_count ? s->ops->rank_state_count(s) : 0;
}

const char *sh_strategy_rank_noun(const sh_strategy *s) { return s->ops->rank_noun ? s->ops->rank_noun : "rank"; }

static shoal_result local_attach(sh_strategy *s, sh_net *net)
{
    (void)s, (void)net;
    return SHOAL_OK;
}

static shoal_result local_begin(sh_strategy *s, int64_t step)
{
    (void)s, (void)step;
    return SHOAL_OK;
}

static shoal_result local_finish(sh_strategy *s)
{
    (void)s;
    return SHOAL_OK;
}

static void local_destroy(sh_strategy *s) { free(s); }

static const sh_strategy_ops local_ops = {
    .name = "local",
    .attach = local_attach,
    .begin = local_begin,
    .finish = local_finish,
    .destroy = local_destroy,
};

shoal_result sh_strategy_local_create(sh_strategy **out)
{
    *out = NULL;
    sh_strategy *s = NULL;
    SH_TRY(sh_calloc(1, sizeof *s, (void **)&s));
    s->ops = &local_ops;
    s->world = s->job_world = 1;
    *out = s;
    return SHOAL_OK;
}

void sh_strategy_destroy(sh_strategy *s)
{
    if (s) s->ops->destroy(s);
}
