/* step.c — one training step, top to bottom: the page to read first.
 * Not here: what the strategy does with gradients (strategy_*.c), the layers (src/nn),
 * epochs, logging and checkpoints (trainer.c).
 * Proved by tests/train/test_trainer.c (loss falls, runs are bitwise repeatable). */
#include "base/err.h"
#include "base/util.h"
#include "train/trainer_internal.h"

/* Allocates nothing, reads no environment, does no I/O. */
shoal_result sh_train_step(sh_trainer *t, int64_t step, float *loss)
{
    sh_strategy *s = t->strategy;
    int n = 0;
    uint64_t t0 = t->opts.profile ? sh_now_ns() : 0, t1 = 0, t2 = 0, t3 = 0, t4 = 0;
    SH_TRY(s->ops->begin(s, step));                             /* e.g. pull fresh weights */
    SH_TRY(sh_loader_next(t->loader, t->x, t->y, &n));         /* this rank's share */
    t->last_n = n;
    if (t0) t1 = sh_now_ns();
    if (s->ops->pass) {                                         /* a pipeline's stage */
        SH_TRY(s->ops->pass(s, t->x, t->y, n, 1, loss, &t->last_correct));
        if (t0) t2 = t3 = sh_now_ns();
    } else {
        SH_TRY(sh_net_forward(t->net, t->x, n, 1));             /* keeps activations */
        *loss = sh_net_loss(t->net, t->y);
        if (t0) t2 = sh_now_ns();
        /* Last layer first; as each layer's gradients are final the strategy may start
         * sending them, overlapping the rest of backward. */
        SH_TRY(sh_net_backward(t->net, s->ops->grad_ready, s));
        if (t0) t3 = sh_now_ns();
    }
    SH_TRY(s->ops->finish(s));                                  /* gradients are final */
    if (t0) t4 = sh_now_ns();
    if (!s->applies_update) sh_optim_step(t->opt, t->params, t->grads, sh_lr_at(&t->lr, step));
    if (t0) {
        uint64_t t5 = sh_now_ns();
        t->prof_ns[0] += (double)(t1 - t0);
        t->prof_ns[1] += (double)(t2 - t1);
        t->prof_ns[2] += (double)(t3 - t2);
        t->prof_ns[3] += (double)(t4 - t3);
        t->prof_ns[4] += (double)(t5 - t4);
    }
    return SHOAL_OK;
}
