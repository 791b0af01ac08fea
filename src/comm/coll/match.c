/* match.c — the mismatch check before a collective moves data: descriptors swapped with
 * both ring neighbours, and an error that names both ranks' calls.
 * Not here: the paths that carry descriptors with their data (eager.c, slots.c), what a
 * rank does after a mismatch (comm.c aborts its links, so the others stop at once too).
 * Proved by tests/comm/test_comm.c and tests/comm/test_comm_faults.c (mismatch cases). */
#include "comm/coll/match.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"

/* ---- the mismatch check ----
 * Every collective first swaps a descriptor with both ring neighbours; the ring of all ranks
 * is connected, so if each neighbour pair agrees, all agree. A rank that sees a difference
 * aborts its links, so the others fail at once too. */
enum { DESC_APPLY = 0x10000 }; /* in sh_match_desc.op: shoal_allreduce_apply_start */

static void describe(const sh_match_desc *d, char *out, size_t cap)
{
    const char *k = sh_coll_name((sh_coll_kind)d->kind);
    if (d->kind == SH_COLL_BARRIER) snprintf(out, cap, "barrier()");
    else if (d->kind == SH_COLL_BROADCAST)
        snprintf(out, cap, "%s(count=%llu, %s, root=%d)", k, (unsigned long long)d->count,
                 shoal_dtype_name((shoal_dtype)d->dtype), d->root);
    else if (d->kind == SH_COLL_REDUCE)
        snprintf(out, cap, "%s(count=%llu, %s, %s, root=%d)", k, (unsigned long long)d->count,
                 shoal_dtype_name((shoal_dtype)d->dtype), shoal_op_name((shoal_op)d->op), d->root);
    else if (d->kind == SH_COLL_ALLGATHER || d->kind == SH_COLL_ALLTOALL)
        snprintf(out, cap, "%s(count=%llu, %s)", k, (unsigned long long)d->count,
                 shoal_dtype_name((shoal_dtype)d->dtype));
    else
        snprintf(out, cap, "%s%s(count=%llu, %s, %s)", k, d->op & DESC_APPLY ? "_apply" : "",
                 (unsigned long long)d->count, shoal_dtype_name((shoal_dtype)d->dtype),
                 shoal_op_name((shoal_op)(d->op & ~(uint32_t)DESC_APPLY)));
}

sh_match_desc sh_match_desc_make(const shoal_comm *c, const sh_coll *op)
{
    sh_match_desc me = {c->coll_seq, op->count, (uint32_t)op->kind, (uint32_t)op->dt,
               (uint32_t)op->op | (op->apply ? DESC_APPLY : 0u), op->root};
    if (op->kind == SH_COLL_BARRIER) me.count = 0, me.dtype = 0, me.op = 0, me.root = 0;
    if (op->kind == SH_COLL_ALLGATHER || op->kind == SH_COLL_ALLTOALL || op->kind == SH_COLL_BROADCAST) me.op = 0;
    if (op->kind != SH_COLL_BROADCAST && op->kind != SH_COLL_REDUCE) me.root = 0;
    return me;
}

shoal_result sh_match_compare(shoal_comm *c, const sh_match_desc *me, const sh_match_desc *theirs, int peer)
{
    if (!memcmp(theirs, me, sizeof *me)) return SHOAL_OK;
    char a[160], b[160], pb[128];
    describe(me, a, sizeof a);
    describe(theirs, b, sizeof b);
    sh_comm_peer_name(c, peer, pb, sizeof pb);
    if (theirs->seq != me->seq)
        return SH_FAIL(SHOAL_ERR_MISMATCH,
                       "collective mismatch: rank %d is at collective #%llu, %s at #%llu "
                       "(rank %d called %s, %s called %s)",
                       c->rank, (unsigned long long)me->seq, pb, (unsigned long long)theirs->seq, c->rank, a,
                       pb, b);
    return SH_FAIL(SHOAL_ERR_MISMATCH, "collective mismatch: rank %d called %s, %s called %s", c->rank, a, pb, b);
}

shoal_result sh_match_check(shoal_comm *c, const sh_coll *op)
{
    if (c->world == 1) return SHOAL_OK;
    sh_match_desc me = sh_match_desc_make(c, op);
    int right = (c->rank + 1) % c->world, left = (c->rank + c->world - 1) % c->world;
    sh_match_desc from_left, from_right;
    sh_xfer_op ops[4];
    int n = 0;
    ops[n++] = (sh_xfer_op){c->coll[right], SH_XFER_SEND, &me, sizeof me, 0, NULL, 0, 0, NULL};
    ops[n++] = (sh_xfer_op){c->coll[left], SH_XFER_RECV, &from_left, sizeof from_left, 0, NULL, 0, 0, NULL};
    if (c->world > 2) {
        ops[n++] = (sh_xfer_op){c->coll[left], SH_XFER_SEND, &me, sizeof me, 0, NULL, 0, 0, NULL};
        ops[n++] = (sh_xfer_op){c->coll[right], SH_XFER_RECV, &from_right, sizeof from_right, 0, NULL, 0, 0, NULL};
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, sh_coll_name(op->kind), &x);
    SH_TRY(sh_xfer(&x, ops, n));
    SH_TRY(sh_match_compare(c, &me, &from_left, left));
    if (c->world > 2) SH_TRY(sh_match_compare(c, &me, &from_right, right));
    return SHOAL_OK;
}
