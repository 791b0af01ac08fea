/* eager.h — small allreduces on power-of-two worlds of 2 or more: recursive doubling with
 * the mismatch check folded into its first round (eager.c).
 * Not here: when it is taken (select.c).
 * Proved by tests/comm/test_comm.c. */
#ifndef SH_COMM_EAGER_H
#define SH_COMM_EAGER_H

#include "comm/comm_internal.h"

/* The largest message it takes: one descriptor and this many bytes travel together. */
enum { SH_EAGER_NBYTES = 4096 };

/* 1 when op is an allreduce of at most SH_EAGER_NBYTES on a power-of-two world of 2 or
 * more. */
int sh_eager_fits(const shoal_comm *c, const sh_coll *op);
/* The allreduce, the mismatch check included; applies op->apply on the whole result. */
shoal_result sh_eager_allreduce(shoal_comm *c, const sh_coll *op);

#endif
