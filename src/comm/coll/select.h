/* select.h — how one collective runs on a communicator: the single selector (select.c)
 * that owns every choice between paths and algorithms.
 * Not here: the algorithms (algo.h, eager.h, slots.h, cma.h), checks and queueing (comm.c,
 * engine.c).
 * Proved by tests/comm/test_algo.c and tests/comm/test_comm.c. */
#ifndef SH_COMM_SELECT_H
#define SH_COMM_SELECT_H

#include "comm/coll/algo.h"

/* Run one collective, the mismatch check included, by the path chosen for it: window
 * update, slots, eager recursive doubling, CMA, MPI or the table; as the engine's thread
 * and blocking calls run it. Refuses on a broken communicator (SHOAL_ERR_BROKEN), counts
 * the collective, and breaks the communicator when a peer failed, timed out or disagreed.
 * No argument checks, no queueing (comm.c, engine.c). */
shoal_result sh_select_run(shoal_comm *c, const sh_coll *op);
/* The same once the mismatch check has passed (tests and benchmarks call it directly on
 * communicators whose ranks are known to agree): CMA, MPI, forced or table algorithm,
 * then op->apply on the whole result where the path did not apply it piece by piece. */
shoal_result sh_select_algo_run(shoal_comm *c, const sh_coll *op);
/* The algorithm sh_select_algo_run would use for this call among shoal's own (after
 * fallbacks), for tests and logs. */
sh_algo_kind sh_select_choose(const shoal_comm *c, const sh_coll *op);
/* rd, rhd or ring for this group and size, by the table (sh_hier_allreduce's step across
 * hosts). */
shoal_result sh_select_allreduce_flat(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                                      size_t count, shoal_dtype dt, shoal_op op);

#endif
