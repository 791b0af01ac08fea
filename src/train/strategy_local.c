/* strategy_local.c — the single-process strategy: one rank, gradients stay where backward
 * wrote them, so every hook is a no-op.
 * Not here: the step (step.c); strategies that talk to other ranks.
 * Proved by tests/train/test_trainer.c. */
#include "train/strategy.h"

#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"

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

static void local_grad_ready(void *ctx, int layer, size_t offset, size_t count)
{
    (void)ctx, (void)layer, (void)offset, (void)count;
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
    .grad_ready = local_grad_ready,
    .finish = local_finish,
    .destroy = local_destroy,
};

shoal_result sh_strategy_local_create(sh_strategy **out)
{
    *out = NULL;
    sh_strategy *s = NULL;
    SH_TRY(sh_calloc(1, sizeof *s, (void **)&s));
    s->ops = &local_ops;
    s->rank = 0;
    s->world = 1;
    *out = s;
    return SHOAL_OK;
}

void sh_strategy_destroy(sh_strategy *s)
{
    if (s) s->ops->destroy(s);
}
