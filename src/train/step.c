/* step.c — one training step, top to bottom: the page to read first.
 * Not here: what the strategy does with gradients (strategy_*.c), the layers (src/nn),
 * epochs, logging and checkpoints (trainer.c).
 * Proved by tests/train/test_trainer.c (loss falls, runs are bitwise repeatable). */
#include "base/err.h"
#include "train/trainer_internal.h"

/* Allocates nothing, reads no environment, does no I/O. */
shoal_result sh_train_step(sh_trainer *t, int64_t step, float *loss)
{
    sh_strategy *s = t->strategy;
    int n = 0;
    SH_TRY(s->ops->begin(s, step));                             /* e.g. pull fresh weights */
    SH_TRY(sh_loader_next(t->loader, t->x, t->y, &n));         /* this rank's share */
    t->last_n = n;
    SH_TRY(sh_net_forward(t->net, t->x, n, 1));                 /* keeps activations */
    *loss = sh_net_loss(t->net, t->y);
    /* Last layer first; as each layer's gradients are final the strategy may start sending
     * them, overlapping the rest of backward. */
    SH_TRY(sh_net_backward(t->net, s->ops->grad_ready, s));
    SH_TRY(s->ops->finish(s));                                  /* gradients are final */
    if (!s->applies_update) sh_optim_step(t->opt, t->params, t->grads, sh_lr_at(&t->cfg->lr, step));
    return SHOAL_OK;
}
