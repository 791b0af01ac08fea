/* algo.h — the collective algorithms over a group of a communicator's ranks (so hier.c composes
 * them), moving bytes only through sh_xfer on c->coll links, and their helpers (common.c).
 * Algorithm files include this header, never the selector's.
 * Not here: whole-communicator fast paths (eager.h, slots.h, cma.h), the mismatch check (match.h),
 * the choice (select.h), argument checks and queueing (comm.c, engine.c), links, kernels.
 * Proved by tests/comm/test_algo.c. */
#ifndef SH_COMM_ALGO_H
#define SH_COMM_ALGO_H

#include "comm/comm_internal.h"

/* A group: n comm ranks in the order the algorithm uses them; me is this rank's index.
 * The whole communicator is the group {0..world-1}. Every member calls with the same
 * group (same ranks, same order) and the same arguments. */
typedef struct {
    int n;
    int me;
    const int *ranks; /* [n] */
} sh_group;

/* Element range [off, off + len) of block b when count elements are split into n blocks
 * (the first count % n blocks one longer). */
void sh_algo_block(size_t count, int n, int b, size_t *off, size_t *len);
/* Chunk bytes for pipelined algorithms (tree, chain): c->chunk_nbytes, else a size-based
 * default; a whole number of elements, at least one. */
size_t sh_algo_chunk_nbytes(const shoal_comm *c, size_t msg_nbytes, shoal_dtype dt);
/* Piece bytes for staged algorithms (a piece goes through every round before the next):
 * c->chunk_nbytes, else the message up to a bound; whole elements, at least one. */
size_t sh_algo_piece_nbytes(const shoal_comm *c, size_t msg_nbytes, shoal_dtype dt);
/* One sh_xfer on c's links with the operation's name and reduction. */
shoal_result sh_algo_xfer(shoal_comm *c, const char *what, sh_xfer_op *ops, int nops,
                          shoal_dtype dt, shoal_op op);

/* ---- allreduce: result in buf on every member; send may equal buf, else only read.
 * None applies SHOAL_AVG's division (the dispatcher does, once). ---- */
shoal_result sh_ring_allreduce(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                               size_t count, shoal_dtype dt, shoal_op op);
shoal_result sh_rd_allreduce(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                             size_t count, shoal_dtype dt, shoal_op op);
shoal_result sh_rhd_allreduce(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                              size_t count, shoal_dtype dt, shoal_op op);
/* An allreduce over a group, as the three above; the hierarchical one is handed the
 * selector's flat choice (sh_select_allreduce_flat) for its step across hosts. */
typedef shoal_result (*sh_allreduce_fn)(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                                        size_t count, shoal_dtype dt, shoal_op op);
/* Within hosts, across hosts (by across), back within hosts (whole communicator), for the
 * allreduce op (send, recv, count, dt, op; apply). *own = 1: each rank averaged (SHOAL_AVG)
 * only its block, the caller must not average again; *applied = 1: op->apply ran on each
 * rank's block (of each piece, pipelined) and params hold the result. Both stay 0 in the
 * leaders' shape. */
shoal_result sh_hier_allreduce(shoal_comm *c, const sh_coll *op, sh_allreduce_fn across, int *own,
                               int *applied);
/* How many pieces the hierarchical allreduce of count elements pipelines (1: not pipelined;
 * only hosts with equal rank counts pipeline). */
size_t sh_hier_pieces(const shoal_comm *c, size_t count, shoal_dtype dt);
/* Whether it takes the leaders' shape (reduce to each host's first rank, allreduce among
 * them, broadcast): hosts with different rank counts, or messages up to 64 KiB. */
int sh_hier_by_leaders(const shoal_comm *c, size_t count, shoal_dtype dt);

/* The two halves of the ring allreduce, for composition: after the reduce-scatter phase
 * member i holds the reduction of block (i + 1) % n of buf (blocks as sh_algo_block); the
 * allgather phase spreads every member's block to all. */
shoal_result sh_ring_rs_phase(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                              size_t count, shoal_dtype dt, shoal_op op);
shoal_result sh_ring_ag_phase(shoal_comm *c, const sh_group *g, void *buf, size_t count,
                              shoal_dtype dt);
/* Step s of either phase (0 <= s < n-1) as the two ops it moves (send right, receive from
 * the left), for callers that move several steps of different groups in one sh_xfer. */
void sh_ring_rs_step(shoal_comm *c, const sh_group *g, const void *send, void *buf, size_t count,
                     shoal_dtype dt, int s, sh_xfer_op ops[2]);
void sh_ring_ag_step(shoal_comm *c, const sh_group *g, void *buf, size_t count, shoal_dtype dt, int s,
                     sh_xfer_op ops[2]);

/* ---- allgather: recv holds n blocks of count, member i's at i * count; ours is already
 * in place. rd needs a power-of-two n. ---- */
shoal_result sh_ring_allgather(shoal_comm *c, const sh_group *g, void *recv, size_t count,
                               shoal_dtype dt);
shoal_result sh_rd_allgather(shoal_comm *c, const sh_group *g, void *recv, size_t count,
                             shoal_dtype dt);

/* ---- reduce-scatter: send has n blocks of count; recv gets block me reduced ---- */
shoal_result sh_ring_reduce_scatter(shoal_comm *c, const sh_group *g, const void *send,
                                    void *recv, size_t count, shoal_dtype dt, shoal_op op);
/* Power-of-two groups only. */
shoal_result sh_rhd_reduce_scatter(shoal_comm *c, const sh_group *g, const void *send, void *recv,
                                   size_t count, shoal_dtype dt, shoal_op op);

/* ---- rooted: root is a group index. buf holds the root's data at the root. ---- */
shoal_result sh_tree_broadcast(shoal_comm *c, const sh_group *g, void *buf, size_t count,
                               shoal_dtype dt, int root);
shoal_result sh_tree_chain_broadcast(shoal_comm *c, const sh_group *g, void *buf, size_t count,
                                     shoal_dtype dt, int root);
/* recv is written at the root only (may be NULL elsewhere). */
shoal_result sh_tree_reduce(shoal_comm *c, const sh_group *g, const void *send, void *recv,
                            size_t count, shoal_dtype dt, shoal_op op, int root);

/* ---- the rest (misc.c) ---- */
shoal_result sh_misc_alltoall(shoal_comm *c, const sh_group *g, const void *send, void *recv,
                              size_t count, shoal_dtype dt);
shoal_result sh_misc_barrier(shoal_comm *c, const sh_group *g);

/* "ring", "rd", ... as SHOAL_ALGO spells them; "allreduce", "broadcast", ... */
const char *sh_algo_name(sh_algo_kind a);
const char *sh_coll_name(sh_coll_kind k);

#endif
