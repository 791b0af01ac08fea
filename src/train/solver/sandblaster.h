/* solver/sandblaster.h — L-BFGS across ranks as DistBelief's Sandblaster runs it: each rank
 * the loss and gradient of its shard of the whole training set, rank 0 the coordinator that
 * keeps the history, chooses the direction and every trial step of the line search.
 * Not here: the algorithm (solver/lbfgs.c), the run loop and checkpoints (trainer.c,
 * snapshot.c). Proved by tests/train/test_lbfgs_train.c and tests/cli/test_train_lbfgs.c. */
#ifndef SH_SANDBLASTER_H
#define SH_SANDBLASTER_H

#include "shoal/comm.h"
#include "train/solver/lbfgs.h"
#include "train/strategy.h"

/* What an L-BFGS run did so far, for its report and log lines. */
typedef struct {
    int64_t iterations, evaluations; /* PyTorch's n_iter and the evaluations run */
    double last_t;                   /* the last iteration's step */
    double g_max;                    /* max |g| at the current iterate */
    int converged;                   /* 1: max |g| <= tolerance_grad, the iterate stays */
} sh_sandblaster_stats;

/* The L-BFGS strategy on communicator c (NULL: one process, no other ranks). The learning
 * rate, weight decay and chunk (the net's batch) come from the net at attach; o gives the
 * history and the tolerances. Its step hook replaces step.c's: every step is one iteration
 * over the whole training set (full_batch). */
shoal_result sh_strategy_lbfgs_create(shoal_comm *c, const sh_lbfgs_opts *o, sh_strategy **out);
void sh_strategy_lbfgs_stats(const sh_strategy *s, sh_sandblaster_stats *out);

#endif
