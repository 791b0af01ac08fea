/* dp/hogwild.h — lock-free data parallelism on one host (Hogwild!, Project Adam's workers):
 * see dp/hogwild.c.
 * Not here: the window (shoal/comm.h). Proved by tests/train/test_stragglers.c. */
#ifndef SH_STRATEGY_HOGWILD_H
#define SH_STRATEGY_HOGWILD_H

#include <stdint.h>

#include "shoal/comm.h"
#include "train/strategy.h"

/* What the ranks saw, summed over every rank's updates (read after training). */
typedef struct {
    int64_t updates;          /* every rank's updates to the shared weights */
    double staleness_sum;     /* other ranks' updates between a rank's read and its write */
    int64_t staleness_max;
    double images_per_s;      /* every rank's, between its first and last update */
} sh_hogwild_stats;

/* The strategy over c (every rank on one host): at attach the weights move into a window
 * that every rank maps (rank 0's), and from then on each rank applies its own gradient
 * there after backward with its own optimizer state, without waiting for any other.
 * Errors at attach: SHOAL_ERR_INVALID with one line when the ranks span hosts (no window).
 * c is borrowed. */
shoal_result sh_strategy_hogwild_create(shoal_comm *c, int batch, sh_strategy **out);
/* The job-wide figures (every rank's, from the window). */
void sh_strategy_hogwild_stats(const sh_strategy *s, sh_hogwild_stats *out);

#endif
