/* step.c — one training step, top to bottom: the page to read first.
 * Not here: what the strategy does with gradients (strategy.h; dp/, ps/, mp/), a batch
 * method's step (solver/sandblaster.c), the layers
 * (src/nn), epochs, logging and checkpoints (trainer.c).
 * Proved by tests/train/test_trainer.c (loss falls, runs repeat bit for bit), tests/cli/test_timeline.c. */
#include "base/err.h"
#include "base/trace.h"
#include "base/util.h"
#include "train/trainer_internal.h"

/* Allocates nothing, reads no environment, does no I/O. The stage times feed --profile,
 * TensorBoard and the timeline (sh_trace_on: recorded only inside --timeline-steps). */
shoal_result sh_train_step(sh_trainer *t, int64_t step, float *loss)
{
    sh_strategy *s = t->strategy;
    int n = 0;
    if (s->ops->step) /* a batch method (L-BFGS): its own passes over the training set */
        return s->ops->step(s, step, loss, &t->last_correct, &t->last_n);
    int timed = t->opts.profile || t->tb || sh_trace_on();
    uint64_t t0 = timed ? sh_now_ns() : 0, t1 = 0, t2 = 0, t3 = 0, t4 = 0;
    SH_TRY(s->ops->begin(s, step));                             /* e.g. pull fresh weights */
    uint64_t tb = timed ? sh_now_ns() : 0;
    SH_TRY(sh_loader_take(t->loader, &t->x, t->x_cap, t->y, &n)); /* this rank's share */
    t->last_n = n;
    if (timed) t1 = sh_now_ns();
    if (s->ops->pass) {                                         /* a pipeline's stage */
        SH_TRY(s->ops->pass(s, t->x, t->y, n, 1, loss, &t->last_correct));
        if (timed) t2 = t3 = sh_now_ns();
    } else {
        SH_TRY(sh_net_forward(t->net, t->x, n, 1));             /* keeps activations */
        *loss = sh_net_loss(t->net, t->y);
        if (timed) t2 = sh_now_ns();
        /* Last layer first; as each layer's gradients are final the strategy may start
         * sending them, overlapping the rest of backward. */
        SH_TRY(sh_net_backward(t->net, s->ops->grad_ready, s));
        if (timed) t3 = sh_now_ns();
    }
    SH_TRY(s->ops->finish(s));                                  /* gradients are final */
    if (timed) t4 = sh_now_ns();
    if (!s->applies_update) sh_optim_step(t->opt, t->params, t->grads, sh_lr_at(&t->lr, step));
    if (timed) {
        uint64_t t5 = sh_now_ns();
        double d[5] = {(double)(t1 - t0), (double)(t2 - t1), (double)(t3 - t2), (double)(t4 - t3),
                       (double)(t5 - t4)};
        for (int i = 0; i < 5; i++) {
            t->prof_ns[i] += d[i];
            t->last_ns[i] = d[i];
        }
        if (sh_trace_on()) {
            sh_trace_span(SH_TRACK_STEP, "step", t0, t5, "images", n, NULL, 0);
            sh_trace_span(SH_TRACK_DATA, "data", tb, t1, "images", n, NULL, 0);
            if (s->ops->pass) { /* a stage's micro-batches and idle time are inside */
                sh_trace_span(SH_TRACK_PIPE, "pipeline pass", t1, t2, NULL, 0, NULL, 0);
            } else {
                sh_trace_span(SH_TRACK_FORWARD, "forward", t1, t2, NULL, 0, NULL, 0);
                sh_trace_span(SH_TRACK_BACKWARD, "backward", t2, t3, NULL, 0, NULL, 0);
            }
            sh_trace_span(SH_TRACK_WAIT, "wait", t3, t4, NULL, 0, NULL, 0);
            if (!s->applies_update) sh_trace_span(SH_TRACK_OPTIM, "optimizer", t4, t5, NULL, 0, NULL, 0);
        }
    }
    return SHOAL_OK;
}
