/* threads.h — a persistent pool of kernel threads: run one function on every thread
 * (caller included) and wait for all of them; workers spin briefly, then sleep.
 * Not here: how work is split (the layers split images or channels by tid).
 * Proved by tests/nn/test_net.c (thread counts 1 and 2 agree; determinism). */
#ifndef SH_THREADS_H
#define SH_THREADS_H

#include "shoal/result.h"

typedef struct sh_pool sh_pool;
/* fn runs once on each thread tid in [0, nthreads); tid 0 is the caller. */
typedef void (*sh_pool_fn)(void *arg, int tid, int nthreads);

shoal_result sh_pool_create(int nthreads, sh_pool **out);
void sh_pool_destroy(sh_pool *p);
int sh_pool_nthreads(const sh_pool *p);
/* Run fn on all threads and return when all are done. Not reentrant. Allocates nothing. */
void sh_pool_run(sh_pool *p, sh_pool_fn fn, void *arg);

/* The contiguous share [*lo, *hi) of count items that thread tid of nthreads works on. */
static inline void sh_pool_share(int count, int tid, int nthreads, int *lo, int *hi)
{
    *lo = (int)((long)count * tid / nthreads);
    *hi = (int)((long)count * (tid + 1) / nthreads);
}

#endif
