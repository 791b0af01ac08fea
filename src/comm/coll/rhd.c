/* rhd.c — recursive halving-doubling allreduce (Rabenseifner), and reduce-scatter by recursive
 * halving alone.
 * Not here: the choice of algorithm (select.c).
 * Proved by tests/comm/test_algo.c. */
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"

/* Vocabulary: p2 is the largest power of two <= n; extras p2..n-1 fold into member i - p2 first
 * and receive the result last. The message is cut into p2 blocks (sh_algo_block).
 * Halving: in round k (mask = p2/2, p2/4, .., 1) member i keeps half of its current block range
 * (the lower half when i & mask is 0), sends the other half to i ^ mask and reduces the
 * partner's copy of the kept half into buf as it arrives. After log2(p2) rounds member i holds
 * block i fully reduced. Doubling: the same rounds in reverse order swap ranges until everyone
 * holds everything.
 * Cost: 2 log2(p2) rounds, each rank sends 2(p2-1)/p2 of the message (plus the whole message
 * twice for a fold): ring's bandwidth in log rounds, between recursive doubling (small) and ring
 * (large). Each block is reduced at one member and copied: all members hold bitwise the same
 * result. No staging: sends and receives touch disjoint halves of buf.
 * Reference: R. Rabenseifner, "Optimization of collective reduction operations" (ICCS 2004);
 * Thakur, Rabenseifner and Gropp (2005). */

static sh_link *member(shoal_comm *c, const sh_group *g, int i) { return c->coll[g->ranks[i]]; }

/* First element of block b of p2 (b == p2: count). */
static size_t block_start(size_t count, int p2, int b)
{
    size_t off, len;
    if (b >= p2) return count;
    sh_algo_block(count, p2, b, &off, &len);
    return off;
}

shoal_result sh_rhd_allreduce(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                              size_t count, shoal_dtype dt, shoal_op op)
{
    int n = g->n, me = g->me;
    size_t es = shoal_dtype_nbytes(dt), nbytes = count * es;
    unsigned char *b = buf;
    if (send != buf && count) memcpy(buf, send, nbytes);
    if (n == 1 || count == 0) return SHOAL_OK;
    int p2 = 1;
    while (p2 * 2 <= n) p2 *= 2;
    if (me >= p2) {
        sh_xfer_op o[1] = {{member(c, g, me - p2), SH_XFER_SEND, b, nbytes, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (halving-doubling fold)", o, 1, dt, op));
        sh_xfer_op i[1] = {{member(c, g, me - p2), SH_XFER_RECV, b, nbytes, 0, NULL, 0, 0, NULL}};
        return sh_algo_xfer(c, "allreduce (halving-doubling unfold)", i, 1, dt, op);
    }
    if (me + p2 < n) {
        sh_xfer_op i[1] = {{member(c, g, me + p2), SH_XFER_RECV_REDUCE, b, nbytes, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (halving-doubling fold)", i, 1, dt, op));
    }
    int lo = 0, hi = p2; /* block range held, [lo, hi) */
    for (int mask = p2 / 2; mask >= 1; mask /= 2) {
        int peer = me ^ mask, mid = lo + (hi - lo) / 2;
        int klo = (me & mask) ? mid : lo, khi = (me & mask) ? hi : mid;
        int slo = (me & mask) ? lo : mid, shi = (me & mask) ? mid : hi;
        size_t ko = block_start(count, p2, klo), kn = block_start(count, p2, khi) - ko;
        size_t so = block_start(count, p2, slo), sn = block_start(count, p2, shi) - so;
        sh_xfer_op ops[2] = {{member(c, g, peer), SH_XFER_SEND, b + so * es, sn * es, 0, NULL, 0, 0, NULL},
                             {member(c, g, peer), SH_XFER_RECV_REDUCE, b + ko * es, kn * es, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (recursive halving)", ops, 2, dt, op));
        lo = klo;
        hi = khi;
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
        int peer = me ^ mask;
        int plo = lo ^ mask, phi = plo + (hi - lo); /* the partner's range, adjacent to ours */
        size_t mo = block_start(count, p2, lo), mn = block_start(count, p2, hi) - mo;
        size_t po = block_start(count, p2, plo), pn = block_start(count, p2, phi) - po;
        sh_xfer_op ops[2] = {{member(c, g, peer), SH_XFER_SEND, b + mo * es, mn * es, 0, NULL, 0, 0, NULL},
                             {member(c, g, peer), SH_XFER_RECV, b + po * es, pn * es, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (recursive doubling)", ops, 2, dt, op));
        if (plo < lo) lo = plo;
        else hi = phi;
    }
    if (me + p2 < n) {
        sh_xfer_op o[1] = {{member(c, g, me + p2), SH_XFER_SEND, b, nbytes, 0, NULL, 0, 0, NULL}};
        SH_TRY(sh_algo_xfer(c, "allreduce (halving-doubling unfold)", o, 1, dt, op));
    }
    return SHOAL_OK;
}

/* Reduce-scatter by recursive halving (power-of-two groups): the halving half of the
 * allreduce above on n blocks of count, in pieces. Each piece gathers the same element
 * range of every block into staging (n x piece, at most two chunks), halves it down to
 * block me and copies that out: log2(n) rounds instead of ring's n-1, the same bytes. */
shoal_result sh_rhd_reduce_scatter(shoal_comm *c, const sh_group *g, const void *send, void *recv,
                                   size_t count, shoal_dtype dt, shoal_op op)
{
    int n = g->n, me = g->me;
    SH_ASSERT((n & (n - 1)) == 0);
    size_t es = shoal_dtype_nbytes(dt);
    size_t piece = 2 * sh_algo_piece_nbytes(c, count * es * (size_t)n, dt) / (size_t)n / es;
    if (piece == 0) piece = 1;
    if (piece > count) piece = count;
    const unsigned char *in = send;
    unsigned char *stage = NULL;
    SH_TRY(sh_comm_scratch(c, (size_t)n * piece * es, (void **)&stage));
    for (size_t off = 0; off < count; off += piece) {
        size_t m = count - off < piece ? count - off : piece, mb = m * es;
        for (int b = 0; b < n; b++) memcpy(stage + (size_t)b * mb, in + ((size_t)b * count + off) * es, mb);
        int lo = 0, hi = n;
        for (int mask = n / 2; mask >= 1; mask /= 2) {
            int peer = me ^ mask, mid = lo + (hi - lo) / 2;
            int klo = (me & mask) ? mid : lo, slo = (me & mask) ? lo : mid;
            size_t half = (size_t)(hi - lo) / 2 * mb;
            sh_xfer_op ops[2] = {{member(c, g, peer), SH_XFER_SEND, stage + (size_t)slo * mb, half, 0, NULL, 0, 0, NULL},
                                 {member(c, g, peer), SH_XFER_RECV_REDUCE, stage + (size_t)klo * mb, half, 0, NULL, 0, 0, NULL}};
            SH_TRY(sh_algo_xfer(c, "reduce_scatter (recursive halving)", ops, 2, dt, op));
            hi = klo + (hi - lo) / 2;
            lo = klo;
        }
        memcpy((unsigned char *)recv + off * es, stage + (size_t)me * mb, mb);
    }
    return SHOAL_OK;
}
