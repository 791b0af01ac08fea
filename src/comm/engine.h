/* engine.h — requests and the communicator's thread that runs non-blocking collectives in
 * start order (engine.c).
 * Not here: argument checks and the public calls that start work (comm.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_comm_faults.c. */
#ifndef SH_COMM_ENGINE_H
#define SH_COMM_ENGINE_H

#include "comm/comm_internal.h"
#include "comm/p2p.h"

/* Queue op (copied; its buffers borrowed until the request completes) on c's thread,
 * starting the thread on first use. Errors: SHOAL_ERR_NOMEM, SHOAL_ERR_IO (no thread). */
shoal_result sh_engine_start(shoal_comm *c, const sh_coll *op, shoal_request **req);
/* 1 when nothing is queued or running on c's thread (a blocking call may run inline). */
int sh_engine_idle(shoal_comm *c);
/* A request for a started point-to-point op (takes ownership of op; on failure the op is
 * waited for and freed). */
shoal_result sh_engine_p2p_request(shoal_comm *c, sh_p2p_op *op, shoal_request **req);
/* Finish what is queued (failing it with SHOAL_ERR_BROKEN) and join the thread. */
void sh_engine_stop(shoal_comm *c);

#endif
