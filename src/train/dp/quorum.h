/* dp/quorum.h — synchronous data parallelism that does not wait for stragglers (--quorum F;
 * Project Adam, Chen et al.'s backup workers): see dp/quorum.c.
 * Not here: the parameter server's quorum (ps/server_rounds.c). Proved by tests/train/test_stragglers.c. */
#ifndef SH_STRATEGY_QUORUM_H
#define SH_STRATEGY_QUORUM_H

#include <stdint.h>

#include "shoal/comm.h"
#include "train/strategy.h"

/* The job's figures, every rank's (read from the window). */
typedef struct {
    int ranks;               /* ceil(F N): fresh gradients a step waits for */
    int64_t updates;         /* steps taken (the weights' version) */
    int64_t fresh;           /* gradients in time for the step of the weights they read */
    int64_t late;            /* gradients that came after their step: added to a later one */
    int64_t late_unused;     /* late ones still waiting when training ended */
    int64_t posts;           /* every gradient every rank computed (fresh + late) */
    int64_t posts_here;      /* of them, this rank's (its steps) */
    double images_per_s;     /* every rank's images per second, between its first and last post */
} sh_quorum_stats;

/* The strategy over c (every rank on one host): every rank steps from the weights of the last
 * update; a step's update is made by the rank whose gradient completes ceil(F N) fresh ones,
 * adding the late ones posted since, and the others go on at once. fraction in (0, 1].
 * Errors at attach: SHOAL_ERR_INVALID with one line when the ranks span hosts. c borrowed. */
shoal_result sh_strategy_quorum_create(shoal_comm *c, int batch, double fraction, sh_strategy **out);
void sh_strategy_quorum_stats(const sh_strategy *s, sh_quorum_stats *out);

#endif
