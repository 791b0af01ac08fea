/* slots.c — small collectives with every rank on this host, in one step through the
 * shared-memory slots: each rank publishes descriptor and data, waits for everyone's,
 * compares every descriptor and reads what it needs in place.
 * Not here: the slots themselves and how a rank waits for them (transport/shm_slots.c),
 * when this path is taken (select.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_transport_shm.c. */
#include "comm/coll/slots.h"

#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"
#include "comm/coll/match.h"
#include "comm/reduce.h"
#include "comm/transport/shm.h"

/* Small collectives with every rank on this host: one step through the shared slots.
 * Every rank publishes its descriptor and what it contributes, waits for everyone else's,
 * compares every descriptor (all pairs, not only neighbours) and reads what it needs from
 * the others' slots in place; reductions run in rank order, so every rank computes the same
 * expression and holds the same bits. 4 ranks on 2 cores: one wait for the others instead
 * of two or more rounds of messages. */
/* The bytes a rank's slot holds for op: its whole contribution (the same on every rank
 * whose call matches). */
static size_t slot_nbytes(const shoal_comm *c, const sh_coll *op)
{
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    return op->kind == SH_COLL_REDUCE_SCATTER || op->kind == SH_COLL_ALLTOALL ? nb * (size_t)c->world : nb;
}

int sh_slots_fits(const shoal_comm *c, const sh_coll *op)
{
    return c->world <= 64 && sh_shm_slots_usable(c) &&
           slot_nbytes(c, op) <= SH_SHM_SLOT_NBYTES;
}

/* dst = slot 0 OP slot 1 OP ... at byte offset off of every rank's slot. */
static void reduce_slots(const shoal_comm *c, uint64_t seq, void *dst, size_t off, size_t count, shoal_dtype dt,
                         shoal_op op)
{
    const unsigned char *s0 = sh_shm_slot_data(c, 0, seq), *s1 = sh_shm_slot_data(c, 1, seq);
    sh_reduce3(dst, s0 + off, s1 + off, count, dt, op);
    for (int p = 2; p < c->world; p++)
        sh_reduce(dst, (const unsigned char *)sh_shm_slot_data(c, p, seq) + off, count, dt, op);
    if (op == SHOAL_AVG) sh_reduce_avg_finish(dst, count, dt, c->world);
}

shoal_result sh_slots_coll(shoal_comm *c, const sh_coll *op)
{
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    const char *what = sh_coll_name(op->kind);
    uint64_t seq = c->coll_seq;
    _Static_assert(sizeof(sh_match_desc) == SH_SHM_SLOT_HDR_NBYTES, "a descriptor fills a slot header");
    /* The slot was last used two collectives ago or earlier: unless the collective just
     * before went through the slots too (then every rank finished the older one before
     * publishing it), wait until everyone has read what that slot holds. */
    sh_xfer_op ops[64];
    int k = 0;
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, what, &x);
    if (c->slot_prev[seq & 1] && c->slot_last != seq) {
        for (int p = 0; p < c->world; p++)
            if (p != c->rank)
                ops[k++] = (sh_xfer_op){.link = c->coll[p], .kind = SH_XFER_POLL, .nbytes = 1,
                                        .arg = c->slot_prev[seq & 1] - 1, .poll = sh_shm_slot_free_poll};
        SH_TRY(sh_xfer(&x, ops, k));
        k = 0;
    }
    sh_match_desc me = sh_match_desc_make(c, op), theirs[64];
    /* a broadcast's data comes from the root alone */
    int contributes = op->kind != SH_COLL_BROADCAST || c->rank == op->root;
    sh_shm_slot_publish(c, seq, &me, op->send, contributes ? slot_nbytes(c, op) : 0);
    for (int p = 0; p < c->world; p++)
        if (p != c->rank)
            ops[k++] = (sh_xfer_op){.link = c->coll[p], .kind = SH_XFER_POLL, .buf = &theirs[p],
                                    .nbytes = sizeof(sh_match_desc), .arg = seq, .poll = sh_shm_slot_recv_poll};
    shoal_result xrc = sh_xfer(&x, ops, k);
    for (int i = 0; i < k; i++) {
        if (ops[i].done != ops[i].nbytes) continue;
        int p = ops[i].link->peer;
        SH_TRY(sh_match_compare(c, &me, &theirs[p], p));
        if (ops[i].flag) { /* the peer talks on the ring */
            char pb[128];
            sh_comm_peer_name(c, p, pb, sizeof pb);
            return SH_FAIL(SHOAL_ERR_MISMATCH, "collective mismatch: rank %d and %s made the same call "
                           "but took different paths (shared slots against links): set SHOAL_ALGO and "
                           "SHOAL_TRANSPORT alike on every rank", c->rank, pb);
        }
    }
    SH_TRY(xrc);
    unsigned char *recv = op->recv;
    switch (op->kind) {
    case SH_COLL_ALLREDUCE:
        if (nb) reduce_slots(c, seq, recv, 0, op->count, op->dt, op->op);
        break;
    case SH_COLL_REDUCE:
        if (nb && c->rank == op->root) reduce_slots(c, seq, recv, 0, op->count, op->dt, op->op);
        break;
    case SH_COLL_REDUCE_SCATTER:
        if (nb) reduce_slots(c, seq, recv, (size_t)c->rank * nb, op->count, op->dt, op->op);
        break;
    case SH_COLL_BROADCAST:
        if (nb) memmove(recv, c->rank == op->root ? op->send : sh_shm_slot_data(c, op->root, seq), nb);
        break;
    case SH_COLL_ALLGATHER:
        for (int p = 0; p < c->world && nb; p++)
            memmove(recv + (size_t)p * nb, p == c->rank ? op->send : sh_shm_slot_data(c, p, seq), nb);
        break;
    case SH_COLL_ALLTOALL:
        for (int p = 0; p < c->world && nb; p++)
            memcpy(recv + (size_t)p * nb, (const unsigned char *)sh_shm_slot_data(c, p, seq) + (size_t)c->rank * nb,
                   nb);
        break;
    default: /* barrier: everyone has arrived */
        break;
    }
    sh_shm_slot_done(c, seq);
    c->slot_last = c->slot_prev[seq & 1] = seq + 1;
    if (op->apply) { /* every rank updates everything */
        op->apply(op->apply_ctx, 0, op->count, (const float *)op->recv);
        c->last_apply_lead = c->rank == 0;
    }
    return SHOAL_OK;
}
