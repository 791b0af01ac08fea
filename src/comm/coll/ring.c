/* ring.c — ring allreduce (Baidu: reduce-scatter then allgather), ring allgather and ring
 * reduce-scatter, over a group.
 * Not here: the choice of algorithm (select.c), kernels (reduce.c), links (transport/).
 * Proved by tests/comm/test_algo.c. */
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"

/* Vocabulary: the message is cut into n blocks (sh_algo_block); in step s member i sends one block
 * to member i+1 and receives one from member i-1. Cost: 2(n-1) steps, each rank sends 2(n-1)/n of
 * the message (bandwidth-optimal), so large messages take this.
 * Pipelining: a step is one sh_xfer holding the SEND to the right and the RECV_REDUCE from the
 * left; the engine moves both a link buffer at a time, so the reduction of what has arrived
 * overlaps the sending of the rest, and no staging copy of the block exists.
 * Reference: Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
 * workstations" (2009); A. Gibiansky, "Bringing HPC techniques to deep learning" (Baidu). */

static int mod(int a, int n) { return ((a % n) + n) % n; }

static sh_link *member(shoal_comm *c, const sh_group *g, int i) { return c->coll[g->ranks[mod(i, g->n)]]; }

/* Step s sends block me-s (our partial) and reduces block me-s-1 from the left into buf.
 * Every block is reduced once per member, in ring order, so all members' results (after
 * the allgather) are copies of one computation: bitwise identical. Out of place, blocks
 * are read from send until first reduced into buf (three-operand receive-reduce): no
 * upfront copy. */
void sh_ring_rs_step(shoal_comm *c, const sh_group *g, const void *send, void *buf, size_t count,
                     shoal_dtype dt, int s, sh_xfer_op ops[2])
{
    int n = g->n, me = g->me;
    size_t es = shoal_dtype_nbytes(dt), so, sl, ro, rl;
    unsigned char *b = buf;
    const unsigned char *in = send;
    sh_algo_block(count, n, mod(me - s, n), &so, &sl);
    sh_algo_block(count, n, mod(me - s - 1, n), &ro, &rl);
    ops[0] = (sh_xfer_op){member(c, g, me + 1), SH_XFER_SEND, (s == 0 ? (unsigned char *)in : b) + so * es,
                          sl * es, 0, NULL, 0, 0, NULL};
    ops[1] = (sh_xfer_op){member(c, g, me - 1), SH_XFER_RECV_REDUCE, b + ro * es, rl * es, 0,
                          in != b ? in + ro * es : NULL, 0, 0, NULL};
}

shoal_result sh_ring_rs_phase(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                              size_t count, shoal_dtype dt, shoal_op op)
{
    for (int s = 0; s < g->n - 1; s++) {
        sh_xfer_op ops[2];
        sh_ring_rs_step(c, g, send, buf, count, dt, s, ops);
        SH_TRY(sh_algo_xfer(c, "allreduce (ring reduce-scatter)", ops, 2, dt, op));
    }
    return SHOAL_OK;
}

/* Member i starts owning block i+1; step s forwards block me+1-s and receives me-s. */
void sh_ring_ag_step(shoal_comm *c, const sh_group *g, void *buf, size_t count, shoal_dtype dt, int s,
                     sh_xfer_op ops[2])
{
    int n = g->n, me = g->me;
    size_t es = shoal_dtype_nbytes(dt), so, sl, ro, rl;
    unsigned char *b = buf;
    sh_algo_block(count, n, mod(me + 1 - s, n), &so, &sl);
    sh_algo_block(count, n, mod(me - s, n), &ro, &rl);
    ops[0] = (sh_xfer_op){member(c, g, me + 1), SH_XFER_SEND, b + so * es, sl * es, 0, NULL, 0, 0, NULL};
    ops[1] = (sh_xfer_op){member(c, g, me - 1), SH_XFER_RECV, b + ro * es, rl * es, 0, NULL, 0, 0, NULL};
}

shoal_result sh_ring_ag_phase(shoal_comm *c, const sh_group *g, void *buf, size_t count,
                              shoal_dtype dt)
{
    for (int s = 0; s < g->n - 1; s++) {
        sh_xfer_op ops[2];
        sh_ring_ag_step(c, g, buf, count, dt, s, ops);
        SH_TRY(sh_algo_xfer(c, "allreduce (ring allgather)", ops, 2, dt, SHOAL_SUM));
    }
    return SHOAL_OK;
}

shoal_result sh_ring_allreduce(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                               size_t count, shoal_dtype dt, shoal_op op)
{
    if (g->n == 1) {
        if (send != buf) memcpy(buf, send, count * shoal_dtype_nbytes(dt));
        return SHOAL_OK;
    }
    SH_TRY(sh_ring_rs_phase(c, g, send, buf, count, dt, op));
    return sh_ring_ag_phase(c, g, buf, count, dt);
}

shoal_result sh_ring_allgather(shoal_comm *c, const sh_group *g, void *recv, size_t count,
                               shoal_dtype dt)
{
    int n = g->n, me = g->me;
    size_t nb = count * shoal_dtype_nbytes(dt);
    unsigned char *b = recv;
    for (int s = 0; s < n - 1; s++) {
        int sb = mod(me - s, n), rb = mod(me - s - 1, n);
        sh_xfer_op ops[2] = {{member(c, g, me + 1), SH_XFER_SEND, b + (size_t)sb * nb, nb, 0, NULL, 0, 0, NULL},
                             {member(c, g, me - 1), SH_XFER_RECV, b + (size_t)rb * nb, nb, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allgather (ring)", ops, 2, dt, SHOAL_SUM));
    }
    return SHOAL_OK;
}

/* Reduce-scatter in pieces (sh_algo_piece_nbytes) per block, so staging is two pieces however
 * large the message: step s sends the running partial of block me-s-1 and receives the
 * partial of block me-s-2 onto our own contribution to it; the block received at the last
 * step is our own, reduced over every member in ring order. In place (send == recv) our
 * contributions are read before the result overwrites the front of the buffer. */
shoal_result sh_ring_reduce_scatter(shoal_comm *c, const sh_group *g, const void *send,
                                    void *recv, size_t count, shoal_dtype dt, shoal_op op)
{
    int n = g->n, me = g->me;
    size_t es = shoal_dtype_nbytes(dt);
    const unsigned char *in = send;
    unsigned char *out = recv;
    size_t piece = sh_algo_piece_nbytes(c, count * es, dt) / es;
    unsigned char *bufs = NULL;
    SH_TRY(sh_comm_scratch(c, 2 * piece * es, (void **)&bufs));
    for (size_t off = 0; off < count; off += piece) {
        size_t m = count - off < piece ? count - off : piece;
        unsigned char *a = bufs, *bb = bufs + piece * es;
        memcpy(a, in + ((size_t)mod(me - 1, n) * count + off) * es, m * es);
        for (int s = 0; s < n - 1; s++) {
            int rb = mod(me - s - 2, n);
            const unsigned char *mine = in + ((size_t)rb * count + off) * es;
            unsigned char *dst = s == n - 2 ? out + off * es : bb;
            sh_xfer_op ops[2] = {{member(c, g, me + 1), SH_XFER_SEND, a, m * es, 0, NULL, 0, 0, NULL},
                                 {member(c, g, me - 1), SH_XFER_RECV_REDUCE, dst, m * es, 0, mine, 0, 0, NULL}};
            SH_TRY(sh_algo_xfer(c, "reduce_scatter (ring)", ops, 2, dt, op));
            unsigned char *t = a;
            a = bb;
            bb = t;
        }
    }
    return SHOAL_OK;
}
