/* hier.c — hierarchical allreduce for several ranks per host on several hosts: reduce-scatter
 * within each host, allreduce of each block across hosts, allgather within the host (pipelined
 * for large messages); small messages and uneven hosts go through each host's leader.
 * Not here: the algorithms it composes (ring.c, rd.c, tree.c; the flat choice comes from select.c).
 * Proved by tests/comm/test_algo.c and test_hier.c (ranks_per_host fakes hosts over real links). */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"
#include "comm/reduce.h"

/* Vocabulary: the local group is this host's ranks (in rank order, m of them); cross group i is
 * the i-th rank of every host (in host order).
 * Split shape (every host has m ranks): (1) ring reduce-scatter within the host, after which
 * local rank i holds block (i+1) % m reduced over its host; (2) allreduce of that block across
 * hosts within cross group i (each cross group on a different block at once, so every inter-host
 * link carries 1/m of the message); (3) ring allgather within the host. Inter-host bytes per
 * rank: 2(h-1)/h * S/m instead of the flat ring's 2(n-1)/n * S through the slowest link.
 * Leaders' shape (uneven hosts, and even ones up to LEADER_MAX_NBYTES): reduce to each host's
 * first rank (tree), allreduce among those leaders, broadcast within hosts.
 * Each block's final value is computed once by one cross group's allreduce and then copied, so
 * every rank holds the same bits. In the split shape each local rank averages only its block,
 * and with an update (shoal_allreduce_apply_start) steps only its block, the in-host allgather
 * carrying the updated params (ZeRO stage 1 within each host).
 * Pipelined (even hosts, large messages): piece k's step across hosts moves in the same sh_xfer
 * as piece k+1's reduce-scatter and piece k-1's allgather within the host, so the link between
 * hosts never waits for the in-host phases.
 * Reference: Jia et al., "Highly scalable deep learning training system with mixed-precision"
 * (2018); NCCL's and Horovod's hierarchical allreduce. */

/* Even hosts take the leaders' shape up to here, as uneven ones do: half the ranks wait asleep
 * and one ring crosses the hosts instead of m; from here the split shape is as fast or faster. */
#define LEADER_MAX_NBYTES (64u * 1024)

int sh_hier_by_leaders(const shoal_comm *c, size_t count, shoal_dtype dt)
{
    if (count * shoal_dtype_nbytes(dt) <= LEADER_MAX_NBYTES) return 1;
    int m = -1;
    for (int q = 0; q < c->nhosts; q++) {
        int k = 0;
        for (int r = 0; r < c->world; r++) k += c->host_of[r] == q;
        if (m >= 0 && k != m) return 1;
        m = k;
    }
    return 0;
}

/* Pieces of the pipelined path: the in-host phases of one piece are what stays outside the
 * wire's time (1/npieces of them), each piece costs 2(h-1) more steps across hosts.
 * c->chunk_nbytes (tests: tiny) overrides the piece size; MAX_PIECES bounds the steps. */
#define PIECE_NBYTES (1u << 20)
#define MAX_PIECES 64

size_t sh_hier_pieces(const shoal_comm *c, size_t count, shoal_dtype dt)
{
    size_t piece = c->chunk_nbytes ? c->chunk_nbytes : PIECE_NBYTES, nbytes = count * shoal_dtype_nbytes(dt);
    size_t k = (nbytes + piece - 1) / piece;
    if (k > MAX_PIECES) k = MAX_PIECES;
    if (k > count) k = count;
    return k ? k : 1;
}

/* One stage's tick t: step t of the ring across hosts on piece k-1's block (2(h-1) steps),
 * and within the host step t of piece k's reduce-scatter (ticks 0 .. m-2) or step t-(m-1)
 * of piece k-2's allgather (ticks m-1 .. 2m-3): never two sends on one link in one xfer.
 * Every rank runs the same ticks, so each link's two ends post their ops in the same tick. */
static shoal_result tick(shoal_comm *c, const sh_group *lg, const sh_group *xg, const void *send, void *buf,
                         void *gather, size_t count, shoal_dtype dt, shoal_op op, size_t npieces, size_t k,
                         int t)
{
    int m = lg->n, h = xg->n;
    size_t es = shoal_dtype_nbytes(dt), po, pc, bo, bl;
    const unsigned char *in = send;
    unsigned char *b = buf;
    sh_xfer_op ops[4];
    int nops = 0;
    if (k >= 1 && k - 1 < npieces && t < 2 * (h - 1)) {
        sh_algo_block(count, (int)npieces, (int)(k - 1), &po, &pc);
        sh_algo_block(pc, m, (lg->me + 1) % m, &bo, &bl);
        unsigned char *blk = b + (po + bo) * es;
        if (t < h - 1) sh_ring_rs_step(c, xg, blk, blk, bl, dt, t, ops);
        else sh_ring_ag_step(c, xg, blk, bl, dt, t - (h - 1), ops);
        nops = 2;
    }
    if (t < m - 1 && k < npieces) {
        sh_algo_block(count, (int)npieces, (int)k, &po, &pc);
        sh_ring_rs_step(c, lg, in + po * es, b + po * es, pc, dt, t, ops + nops);
        nops += 2;
    } else if (t >= m - 1 && t < 2 * (m - 1) && k >= 2 && k - 2 < npieces) {
        sh_algo_block(count, (int)npieces, (int)(k - 2), &po, &pc);
        sh_ring_ag_step(c, lg, (unsigned char *)gather + po * es, pc, dt, t - (m - 1), ops + nops);
        nops += 2;
    }
    return nops ? sh_algo_xfer(c, "allreduce (hierarchical, pipelined)", ops, nops, dt, op) : SHOAL_OK;
}

/* This rank's block of piece j (of the whole message: its offset and length), final once the
 * step across hosts is done: averaged (SHOAL_AVG) and with an update stepped, here alone. */
static void finish_block(shoal_comm *c, const sh_group *lg, const sh_coll *co, size_t npieces, size_t j)
{
    size_t po, pc, bo, bl, es = shoal_dtype_nbytes(co->dt);
    sh_algo_block(co->count, (int)npieces, (int)j, &po, &pc);
    sh_algo_block(pc, lg->n, (lg->me + 1) % lg->n, &bo, &bl);
    unsigned char *blk = (unsigned char *)co->recv + (po + bo) * es;
    if (!bl) return;
    if (co->op == SHOAL_AVG) sh_reduce_avg_finish(blk, bl, co->dt, c->world);
    if (co->apply) co->apply(co->apply_ctx, po + bo, bl, (const float *)blk);
}

/* Stage k: across hosts for piece k-1 while the host reduce-scatters piece k and gathers
 * piece k-2; stages 0 and npieces+1 fill and drain the pipeline. Piece k-1's block is final
 * after stage k, before stage k+1 gathers it (the updated params where there is an update). */
static shoal_result pipelined(shoal_comm *c, const sh_group *lg, const sh_group *xg, const sh_coll *co,
                              size_t npieces)
{
    int wire_ticks = 2 * (xg->n - 1), host_ticks = 2 * (lg->n - 1);
    int ticks = wire_ticks > host_ticks ? wire_ticks : host_ticks;
    void *gather = co->apply ? (void *)co->params : co->recv;
    for (size_t k = 0; k <= npieces + 1; k++) {
        for (int t = 0; t < ticks; t++)
            SH_TRY(tick(c, lg, xg, co->send, co->recv, gather, co->count, co->dt, co->op, npieces, k, t));
        if (k >= 1 && k <= npieces) finish_block(c, lg, co, npieces, k - 1);
    }
    return SHOAL_OK;
}

/* Allreduce of one block among one rank per host, by the selector's flat table (every
 * member of a cross group has the same block length, so all make the same choice). */
static shoal_result across(shoal_comm *c, const sh_group *g, void *buf, size_t count, shoal_dtype dt,
                           shoal_op op, sh_allreduce_fn flat)
{
    if (g->n == 1 || count == 0) return SHOAL_OK;
    return flat(c, g, buf, buf, count, dt, op);
}

shoal_result sh_hier_allreduce(shoal_comm *c, const sh_coll *co, sh_allreduce_fn flat, int *own,
                               int *applied)
{
    shoal_result rc = SHOAL_OK;
    const void *send = co->send;
    void *buf = co->recv;
    size_t count = co->count;
    shoal_dtype dt = co->dt;
    shoal_op op = co->op;
    int n = c->world, h = c->nhosts, me = c->rank, host = c->host_of[me];
    int *mem = malloc(sizeof(int) * (size_t)(2 * n + h));
    if (!mem) return SH_FAIL(SHOAL_ERR_NOMEM, "allreduce (hierarchical): out of memory for %d ranks", n);
    int *local = mem, *cross = mem + n, *first = mem + 2 * n;
    int m = 0, li = -1;
    for (int q = 0; q < h; q++) first[q] = -1;
    for (int r = 0; r < n; r++) {
        int hq = c->host_of[r];
        if (first[hq] < 0) first[hq] = r;
        if (hq == host) {
            if (r == me) li = m;
            local[m++] = r;
        }
    }
    sh_group lg = {m, li, local};
    if (!sh_hier_by_leaders(c, count, dt)) {
        /* cross group li: the li-th rank of every host, hosts in order of their first rank */
        int k = 0, xi = -1;
        for (int q = 0; q < h; q++) {
            int seen = 0;
            for (int r = first[q]; r < n; r++) {
                if (c->host_of[r] != q) continue;
                if (seen++ == li) {
                    if (r == me) xi = k;
                    cross[k++] = r;
                    break;
                }
            }
        }
        sh_group xg = {k, xi, cross};
        size_t es = shoal_dtype_nbytes(dt), off, len, npieces = sh_hier_pieces(c, count, dt);
        sh_algo_block(count, m, (li + 1) % m, &off, &len);
        if (m == 1 && send != buf) memcpy(buf, send, count * es);
        if (npieces > 1 && m > 1 && k > 1) {
            c->last_path = "hier-pipelined"; /* what shoal_wait_trace and timelines report */
            rc = pipelined(c, &lg, &xg, co, npieces);
            *own = 1;
            if (co->apply) {
                *applied = 1;
                c->last_apply_lead = xi == 0; /* the same blocks were stepped on every host */
            }
            goto done;
        }
        unsigned char *blk = (unsigned char *)buf + off * es;
        SH_TRY_GOTO(sh_ring_rs_phase(c, &lg, send, buf, count, dt, op), rc, done);
        SH_TRY_GOTO(across(c, &xg, blk, len, dt, op, flat), rc, done);
        /* the block is final here: average it, and step it, once per host */
        if (op == SHOAL_AVG && len) sh_reduce_avg_finish(blk, len, dt, c->world);
        *own = 1;
        if (co->apply) {
            if (len) co->apply(co->apply_ctx, off, len, (const float *)blk);
            *applied = 1;
            c->last_apply_lead = xi == 0; /* the same block was stepped on every host */
            SH_TRY_GOTO(sh_ring_ag_phase(c, &lg, co->params, count, dt), rc, done);
        } else {
            SH_TRY_GOTO(sh_ring_ag_phase(c, &lg, buf, count, dt), rc, done);
        }
    } else {
        int k = 0, xi = -1;
        for (int q = 0; q < h; q++) {
            if (first[q] < 0) continue;
            if (first[q] == me) xi = k;
            cross[k++] = first[q];
        }
        sh_group xg = {k, xi, cross};
        SH_TRY_GOTO(sh_tree_reduce(c, &lg, send, buf, count, dt, op, 0), rc, done);
        if (li == 0) SH_TRY_GOTO(across(c, &xg, buf, count, dt, op, flat), rc, done);
        SH_TRY_GOTO(sh_tree_broadcast(c, &lg, buf, count, dt, 0), rc, done);
    }
done:
    free(mem);
    return rc;
}
