/* match.h — the mismatch check: every collective's descriptor (which call, count, type,
 * op, root, and the collective's number), compared with other ranks' before data moves,
 * and the error that names both sides' calls.
 * Not here: the fast paths that carry the descriptor with their data (eager.c, slots.c),
 * breaking the communicator after a mismatch (comm.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_comm_faults.c (mismatch cases). */
#ifndef SH_COMM_MATCH_H
#define SH_COMM_MATCH_H

#include "comm/comm_internal.h"

/* 32 bytes on the wire and in a shared-memory slot header; ranks compare them bitwise. */
typedef struct {
    uint64_t seq;
    uint64_t count;
    uint32_t kind, dtype, op;
    int32_t root;
} sh_match_desc;

/* This rank's descriptor of op as collective number c->coll_seq (fields a collective does
 * not use are zero, so they never differ). */
sh_match_desc sh_match_desc_make(const shoal_comm *c, const sh_coll *op);
/* SHOAL_OK when theirs (from peer) equals me, else SHOAL_ERR_MISMATCH naming both calls. */
shoal_result sh_match_compare(shoal_comm *c, const sh_match_desc *me, const sh_match_desc *theirs, int peer);
/* Swap descriptors with both ring neighbours and compare: the ring of all ranks is
 * connected, so if each neighbour pair agrees, all agree. Errors: SHOAL_ERR_MISMATCH,
 * and the link errors of sh_xfer. */
shoal_result sh_match_check(shoal_comm *c, const sh_coll *op);

#endif
