/* misc.c — pairwise alltoall and the dissemination barrier, over a group.
 * Not here: the choice of algorithm (select.c).
 * Proved by tests/comm/test_algo.c. */
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"

/* Alltoall: in round s member i exchanges with (s - i) mod n, which pairs members symmetrically
 * (each pair meets once); n rounds, each rank sends (n-1)/n of its buffer. The outgoing piece is
 * staged (one bounded piece), which also makes in place safe.
 * Barrier: in round k member i signals i + 2^k and waits for i - 2^k; after ceil(log2 n) rounds
 * everyone has heard, transitively, from everyone.
 * Reference: Hensgen, Finkel and Manber, "Two algorithms for barrier synchronization" (1988);
 * Thakur, Rabenseifner and Gropp (2005). */

static int mod(int a, int n) { return ((a % n) + n) % n; }

shoal_result sh_misc_alltoall(shoal_comm *c, const sh_group *g, const void *send, void *recv,
                              size_t count, shoal_dtype dt)
{
    int n = g->n, me = g->me;
    size_t nb = count * shoal_dtype_nbytes(dt);
    const unsigned char *in = send;
    unsigned char *out = recv;
    if (in != out) memcpy(out + (size_t)me * nb, in + (size_t)me * nb, nb);
    size_t piece = sh_algo_piece_nbytes(c, nb, SHOAL_UINT8);
    if (piece > nb) piece = nb;
    unsigned char *stage = NULL;
    SH_TRY(sh_comm_scratch(c, piece ? piece : 1, (void **)&stage));
    for (int s = 0; s < n; s++) {
        int p = mod(s - me, n);
        if (p == me) continue;
        sh_link *l = c->coll[g->ranks[p]];
        for (size_t off = 0; off < nb; off += piece) {
            size_t m = nb - off < piece ? nb - off : piece;
            memcpy(stage, in + (size_t)p * nb + off, m);
            sh_xfer_op ops[2] = {{l, SH_XFER_SEND, stage, m, 0, NULL, 0, 0, NULL},
                                 {l, SH_XFER_RECV, out + (size_t)p * nb + off, m, 0, NULL, 0, 0, NULL}};
            SH_TRY(sh_algo_xfer(c, "alltoall (pairwise)", ops, 2, dt, SHOAL_SUM));
        }
    }
    return SHOAL_OK;
}

shoal_result sh_misc_barrier(shoal_comm *c, const sh_group *g)
{
    int n = g->n, me = g->me;
    for (int k = 1; k < n; k <<= 1) {
        unsigned char out = 1, in = 0;
        sh_xfer_op ops[2] = {{c->coll[g->ranks[mod(me + k, n)]], SH_XFER_SEND, &out, 1, 0, NULL, 0, 0, NULL},
                             {c->coll[g->ranks[mod(me - k, n)]], SH_XFER_RECV, &in, 1, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "barrier (dissemination)", ops, 2, SHOAL_UINT8, SHOAL_SUM));
    }
    return SHOAL_OK;
}
