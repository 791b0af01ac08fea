/* agree.c — the ranks' agreement on saving and stopping after every step, and the deferred
 * exchange it must wait behind (the protocol: below).
 * Not here: the loop (trainer.c), the exchanges (the strategies).
 * Proved by tests/train/test_agree.c; with real training by tests/train/test_dp_overlap.c. */
#include "train/agree.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"

/*
 * Why one step late: where a step's gradient exchange may stay in flight into the next
 * forward (dp/allreduce.c across hosts), the small allreduce of the requests queues behind
 * it on the communicator, so waiting for it would wait for the whole exchange. A quiet step
 * sends it and reads it after the next step, when it long arrived.
 *
 * The protocol, per step k, on every rank (the same decisions everywhere, because every
 * input below is the same everywhere: the schedule, the strategy, the sums):
 *
 *   settle   quiet(k) = may_defer && rests(k). A step that is not quiet drains: its
 *            exchanges are complete before anyone reads weights or gradients.
 *   vote     prev = the sums sent by step k-1 if it was quiet (wait for them: they queued
 *            behind step k-1's exchange, long done by now), else zeros.
 *            quiet(k):  send this rank's requests without waiting (sum_start); act on
 *                       prev; if prev asks for anything, drain first (a checkpoint or the
 *                       end reads the weights).
 *            else:      sum this rank's requests (and the norm's shares) now; act on them
 *                       together with prev.
 *   end      a request still in flight after the last step is waited for and dropped:
 *            the loop ended on the requests of the step before, or on its own schedule.
 *
 * So a request reaches every rank at the same step: at once after a step that is not quiet,
 * one step later after a quiet one. A save request is cleared on the rank that made it as
 * soon as it is sent (quiet) or acted on (otherwise): a later signal is a new request.
 */

void sh_agree_begin(sh_agree *a, sh_strategy *s)
{
    const sh_strategy_ops *ops = s->ops;
    memset(a, 0, sizeof *a);
    a->s = s;
    a->on = sh_strategy_agrees(s);
    a->drains = ops->can_defer && ops->drain && ops->can_defer(s);
    s->may_defer = a->drains && ops->sum_start && ops->sum && s->world > 1;
}

shoal_result sh_agree_settle(sh_agree *a, int rests)
{
    sh_strategy *s = a->s;
    a->quiet = s->may_defer && rests;
    if (!a->quiet && a->drains) SH_TRY(s->ops->drain(s));
    return SHOAL_OK;
}

shoal_result sh_agree_vote(sh_agree *a, sh_agree_votes *v, volatile sig_atomic_t *save_requested)
{
    sh_strategy *s = a->s;
    if (!a->on) { /* alone: this rank's requests are the job's */
        if (v->save && save_requested) *save_requested = 0;
        return SHOAL_OK;
    }
    double f[5] = {v->save, v->stop, v->out_of_time, v->regroup, v->grad_sq}, prev[4] = {0, 0, 0, 0};
    if (a->req) { /* the last step's, sent without waiting */
        shoal_result rc = shoal_wait(a->req);
        a->req = NULL;
        SH_TRY(rc);
        memcpy(prev, a->sent, sizeof prev);
    }
    if (a->quiet) { /* this rank's requests go out now and are acted on after the next step */
        if (v->save && save_requested) *save_requested = 0;
        memcpy(a->sent, f, sizeof a->sent);
        SH_TRY(s->ops->sum_start(s, a->sent, 4, &a->req));
        memcpy(f, prev, sizeof prev);
        if (f[0] > 0 || f[1] > 0 || f[2] > 0 || f[3] > 0) SH_TRY(s->ops->drain(s));
    } else {
        SH_TRY(s->ops->sum(s, f, v->grad_sq >= 0 ? 5 : 4));
    }
    v->save = f[0] > 0 || prev[0] > 0;
    v->stop = f[1] > 0 || prev[1] > 0;
    v->out_of_time = f[2] > 0 || prev[2] > 0;
    v->regroup = f[3] > 0 || prev[3] > 0;
    v->grad_sq = f[4];
    if (v->save && save_requested && !a->quiet) *save_requested = 0;
    return SHOAL_OK;
}

shoal_result sh_agree_end(sh_agree *a)
{
    sh_strategy *s = a->s;
    shoal_result rc = SHOAL_OK;
    if (a->req) { /* stopped on the last step's agreement: this one's is not needed */
        rc = shoal_wait(a->req);
        a->req = NULL;
    }
    if (rc == SHOAL_OK) {
        s->may_defer = 0;
        if (a->drains) rc = s->ops->drain(s);
    }
    if (rc != SHOAL_OK) sh_agree_abandon(a, rc);
    return rc;
}

void sh_agree_abandon(sh_agree *a, shoal_result rc)
{
    sh_strategy *s = a->s;
    if (a->req || a->drains) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", shoal_last_error_message());
        if (a->req) (void)shoal_wait(a->req);
        a->req = NULL;
        if (a->drains) (void)s->ops->drain(s);
        (void)SH_FAIL(rc, "%s", msg);
    }
    s->may_defer = 0;
}
