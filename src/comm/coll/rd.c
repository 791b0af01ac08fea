/* rd.c — recursive doubling: allreduce for small messages (any group size) and allgather for
 * power-of-two groups.
 * Not here: the choice of algorithm (select.c).
 * Proved by tests/comm/test_algo.c. */
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"
#include "comm/reduce.h"

/* Vocabulary: p2 is the largest power of two <= n; the "extra" members p2..n-1 first fold their
 * data into member i - p2 and get the result back at the end (the standard fold). In round k
 * (mask = 2^k) member i exchanges with i ^ mask.
 * Cost (allreduce): log2(p2) rounds (+2 with extras), each sending the whole message: few rounds,
 * so it wins while latency dominates; large messages go in bounded pieces so staging stays one
 * piece. Allgather: log2(n) rounds, each doubling the blocks held.
 * Reference: Thakur, Rabenseifner and Gropp, "Optimization of collective communication
 * operations in MPICH" (2005). */

static sh_link *member(shoal_comm *c, const sh_group *g, int i) { return c->coll[g->ranks[i]]; }

/* One piece of count elements, in place on buf. Both partners of a round compute
 * lower OP higher; IEEE sum, product, min and max are commutative, so both hold the same
 * bits, and the extras receive a copy: every member ends bitwise identical. */
static shoal_result rd_piece(shoal_comm *c, const sh_group *g, unsigned char *buf, size_t count,
                             shoal_dtype dt, shoal_op op, int p2, unsigned char *tmp)
{
    int n = g->n, me = g->me;
    size_t nbytes = count * shoal_dtype_nbytes(dt);
    if (me >= p2) {
        sh_xfer_op o[1] = {{member(c, g, me - p2), SH_XFER_SEND, buf, nbytes, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (recursive doubling fold)", o, 1, dt, op));
        sh_xfer_op i[1] = {{member(c, g, me - p2), SH_XFER_RECV, buf, nbytes, 0, NULL, 0, 0, NULL}};
        return sh_algo_xfer(c, "allreduce (recursive doubling unfold)", i, 1, dt, op);
    }
    if (me + p2 < n) {
        sh_xfer_op i[1] = {{member(c, g, me + p2), SH_XFER_RECV_REDUCE, buf, nbytes, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (recursive doubling fold)", i, 1, dt, op));
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
        int peer = me ^ mask;
        sh_xfer_op ops[2] = {{member(c, g, peer), SH_XFER_SEND, buf, nbytes, 0, NULL, 0, 0, NULL},
                             {member(c, g, peer), SH_XFER_RECV, tmp, nbytes, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (recursive doubling)", ops, 2, dt, op));
        if (peer < me) sh_reduce3(buf, tmp, buf, count, dt, op);
        else sh_reduce(buf, tmp, count, dt, op);
    }
    if (me + p2 < n) {
        sh_xfer_op o[1] = {{member(c, g, me + p2), SH_XFER_SEND, buf, nbytes, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (recursive doubling unfold)", o, 1, dt, op));
    }
    return SHOAL_OK;
}

shoal_result sh_rd_allreduce(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                             size_t count, shoal_dtype dt, shoal_op op)
{
    size_t es = shoal_dtype_nbytes(dt);
    if (send != buf && count) memcpy(buf, send, count * es);
    if (g->n == 1 || count == 0) return SHOAL_OK;
    int p2 = 1;
    while (p2 * 2 <= g->n) p2 *= 2;
    size_t piece = sh_algo_piece_nbytes(c, count * es, dt) / es;
    if (piece > count) piece = count;
    unsigned char *tmp = NULL;
    SH_TRY(sh_comm_scratch(c, piece * es, (void **)&tmp));
    for (size_t off = 0; off < count; off += piece) {
        size_t m = count - off < piece ? count - off : piece;
        SH_TRY(rd_piece(c, g, (unsigned char *)buf + off * es, m, dt, op, p2, tmp));
    }
    return SHOAL_OK;
}

/* Round k: member i holds the 2^k blocks of its aligned range and swaps them with the
 * partner's adjacent range, straight into recv (no staging). */
shoal_result sh_rd_allgather(shoal_comm *c, const sh_group *g, void *recv, size_t count,
                             shoal_dtype dt)
{
    int n = g->n, me = g->me;
    SH_ASSERT((n & (n - 1)) == 0);
    size_t nb = count * shoal_dtype_nbytes(dt);
    unsigned char *b = recv;
    for (int mask = 1; mask < n; mask <<= 1) {
        int peer = me ^ mask;
        size_t mine = (size_t)(me & ~(mask - 1)), theirs = (size_t)(peer & ~(mask - 1));
        sh_xfer_op ops[2] = {{member(c, g, peer), SH_XFER_SEND, b + mine * nb, (size_t)mask * nb, 0, NULL, 0, 0, NULL},
                             {member(c, g, peer), SH_XFER_RECV, b + theirs * nb, (size_t)mask * nb, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allgather (recursive doubling)", ops, 2, dt, SHOAL_SUM));
    }
    return SHOAL_OK;
}
