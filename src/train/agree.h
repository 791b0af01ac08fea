/* agree.h — after every step the ranks agree on saving, stopping and the time limit, so all
 * act at the same step; behind a deferred exchange (strategy.h, can_defer) one step later.
 * Not here: when to save or what a step is (trainer.c); the exchanges (dp/allreduce.c).
 * Proved by tests/train/test_agree.c; with real training by tests/train/test_dp_overlap.c. */
#ifndef SH_AGREE_H
#define SH_AGREE_H

#include <signal.h>

#include "shoal/comm.h"
#include "train/strategy.h"

/* One step's requests: this rank's before sh_agree_vote, the job's after. */
typedef struct {
    int save, stop, out_of_time;
    int regroup;        /* an elastic job: ranks wait to join (this rank's wish, the job's) */
    double grad_sq;     /* in: this rank's share of the gradient's squared norm (< 0: none);
                           out: the sum over the ranks when every rank had one, else as in */
} sh_agree_votes;

typedef struct {
    sh_strategy *s;
    int on;             /* the ranks agree (sh_strategy_agrees) */
    int drains;         /* the strategy can leave exchanges in flight: drain ends them */
    int quiet;          /* this step: its exchanges may stay in flight (sh_agree_settle) */
    shoal_request *req; /* a quiet step's requests, summing behind its exchanges */
    double sent[4];     /* their buffer */
} sh_agree;

/* Before the first step: the strategy may defer (s->may_defer) where it can, sums and has
 * other ranks. */
void sh_agree_begin(sh_agree *a, sh_strategy *s);
/* Right after a step: rests = 1 when nothing but the next step reads the weights or
 * gradients after this one (no evaluation, checkpoint, divergence scan, logged norm, end);
 * it must be the same on every rank. Unless the step may stay in flight, its exchanges end
 * here (drain). */
shoal_result sh_agree_settle(sh_agree *a, int rests);
/* After the step's own work: v in, this rank's requests; out, the job's. A quiet step sends
 * its requests without waiting and returns the last step's (draining first when they ask for
 * anything); other steps sum the requests (and grad_sq where present) at once, together with
 * the last quiet step's. *save_requested (NULL: none) is cleared once this rank's request is
 * sent or acted on. Collective where the ranks agree. */
shoal_result sh_agree_vote(sh_agree *a, sh_agree_votes *v, volatile sig_atomic_t *save_requested);
/* After the last step: the agreement still in flight (not needed), then every exchange. */
shoal_result sh_agree_end(sh_agree *a);
/* After an error with code rc: what is in flight ends (or fails) before the caller frees
 * the weights it updates; the error message stays the first one. */
void sh_agree_abandon(sh_agree *a, shoal_result rc);

#endif
