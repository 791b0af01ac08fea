/* eager.c — small allreduces on power-of-two worlds: recursive doubling whose first round
 * carries the mismatch check, so the check costs no round of its own.
 * Not here: when it is taken (select.c), the descriptor (match.c), the general recursive
 * doubling for any group (rd.c).
 * Proved by tests/comm/test_comm.c (small allreduces, mismatch cases) and
 * tests/comm/test_comm_faults.c. */
#include "comm/coll/eager.h"

#include <string.h>

#include "base/err.h"
#include "comm/coll/match.h"
#include "comm/reduce.h"

/* A small allreduce on a power-of-two world: recursive doubling whose first round also
 * does the mismatch check. Round 1 pairs rank i with i ^ 1, always a ring neighbour: the
 * descriptor travels in front of the data to it, and alone to the other neighbour (world
 * 4 and up), so on the wire the first round is sh_match_check's exchange followed by the
 * first exchange of recursive doubling; the later rounds carry data only. A rank that made
 * another call runs sh_match_check and reads the descriptors from both neighbours, so every
 * neighbouring pair still compares, and one difference anywhere stops the job. Two ranks
 * pay one message each way for an 8-byte allreduce; four ranks two rounds, not three. */

int sh_eager_fits(const shoal_comm *c, const sh_coll *op)
{
    return c->world >= 2 && (c->world & (c->world - 1)) == 0 && op->kind == SH_COLL_ALLREDUCE &&
           op->count * shoal_dtype_nbytes(op->dt) <= SH_EAGER_NBYTES;
}

shoal_result sh_eager_allreduce(shoal_comm *c, const sh_coll *op)
{
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    _Alignas(64) unsigned char out[sizeof(sh_match_desc) + SH_EAGER_NBYTES],
        in[sizeof(sh_match_desc) + SH_EAGER_NBYTES];
    sh_match_desc me = sh_match_desc_make(c, op), from_other;
    unsigned char *acc = out + sizeof me;
    memcpy(out, &me, sizeof me);
    if (nb) memcpy(acc, op->send, nb);
    int partner = c->rank ^ 1, right = (c->rank + 1) % c->world, left = (c->rank + c->world - 1) % c->world;
    int other = partner == right ? left : right;
    /* Expect the partner's descriptor and data in one go: if its call differs, its message
     * may be shorter, but it compares our descriptor, finds the mismatch and aborts the
     * link, which ends this wait with its reason. */
    sh_xfer_op ops[4] = {{c->coll[partner], SH_XFER_SEND, out, sizeof me + nb, 0, NULL, 0, 0, NULL},
                         {c->coll[partner], SH_XFER_RECV, in, sizeof me + nb, 0, NULL, 0, 0, NULL},
                         {c->coll[other], SH_XFER_SEND, &me, sizeof me, 0, NULL, 0, 0, NULL},
                         {c->coll[other], SH_XFER_RECV, &from_other, sizeof from_other, 0, NULL, 0, 0, NULL}};
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "allreduce", &x);
    shoal_result xrc = sh_xfer(&x, ops, c->world > 2 ? 4 : 2);
    sh_match_desc theirs;
    memcpy(&theirs, in, sizeof theirs);
    if (ops[1].done >= sizeof theirs) SH_TRY(sh_match_compare(c, &me, &theirs, partner));
    if (c->world > 2 && ops[3].done == sizeof from_other) SH_TRY(sh_match_compare(c, &me, &from_other, other));
    SH_TRY(xrc);
    if (nb) {
        /* lower rank's value first on both partners: the same expression everywhere */
        const unsigned char *peer_data = in + sizeof me;
        if (partner < c->rank) sh_reduce3(acc, peer_data, acc, op->count, op->dt, op->op);
        else sh_reduce(acc, peer_data, op->count, op->dt, op->op);
        for (int mask = 2; mask < c->world; mask <<= 1) {
            int peer = c->rank ^ mask;
            sh_xfer_op r[2] = {{c->coll[peer], SH_XFER_SEND, acc, nb, 0, NULL, 0, 0, NULL},
                               {c->coll[peer], SH_XFER_RECV, in, nb, 0, NULL, 0, 0, NULL}};
            SH_TRY(sh_xfer(&x, r, 2));
            if (peer < c->rank) sh_reduce3(acc, in, acc, op->count, op->dt, op->op);
            else sh_reduce(acc, in, op->count, op->dt, op->op);
        }
        memcpy(op->recv, acc, nb);
        if (op->op == SHOAL_AVG) sh_reduce_avg_finish(op->recv, op->count, op->dt, c->world);
    }
    if (op->apply) { /* every rank updates everything */
        op->apply(op->apply_ctx, 0, op->count, (const float *)op->recv);
        c->last_apply_lead = c->rank == 0;
    }
    return SHOAL_OK;
}
