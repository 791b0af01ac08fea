/* algo.h — the collective algorithms, each over all ranks of a communicator, moving bytes
 * only through sh_xfer on c->coll links: ring (Baidu), recursive doubling, binomial trees,
 * pairwise alltoall, dissemination barrier; and the table that picks one by size.
 * Not here: argument and mismatch checks, queueing (comm.c), links (transport_*.c).
 * Proved by tests/comm/test_algo.c. */
#ifndef SH_ALGO_H
#define SH_ALGO_H

#include "comm/comm_internal.h"

/* send may equal buf (in place); out of place, send is only read. */
shoal_result sh_ring_allreduce(shoal_comm *c, const void *send, void *buf, size_t count,
                               shoal_dtype dt, shoal_op op);
shoal_result sh_rd_allreduce(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, shoal_op op);
shoal_result sh_ring_allgather(shoal_comm *c, void *recv, size_t count, shoal_dtype dt);
shoal_result sh_ring_reduce_scatter(shoal_comm *c, const void *send, void *recv, size_t count,
                                    shoal_dtype dt, shoal_op op);
shoal_result sh_tree_broadcast(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int root);
shoal_result sh_tree_reduce(shoal_comm *c, const void *send, void *recv, size_t count,
                            shoal_dtype dt, shoal_op op, int root);
shoal_result sh_pairwise_alltoall(shoal_comm *c, const void *send, void *recv, size_t count,
                                  shoal_dtype dt);
shoal_result sh_dissemination_barrier(shoal_comm *c);

/* Largest allreduce (bytes) that recursive doubling takes under SHOAL_ALGO=auto. */
size_t sh_algo_rd_max_nbytes(const shoal_comm *c);

#endif
