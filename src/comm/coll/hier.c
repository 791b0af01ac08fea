/* hier.c — hierarchical allreduce for several ranks per host on several hosts.
 * Vocabulary: the local group is this host's ranks (in rank order, m of them); cross group
 * i is the i-th rank of every host (in host order).
 * When every host has m ranks: (1) ring reduce-scatter within the host, after which local
 * rank i holds block (i+1) % m reduced over its host; (2) allreduce of that block across
 * hosts within cross group i (every cross group works on a different block at once, so
 * all inter-host links carry 1/m of the message each); (3) ring allgather within the
 * host. Inter-host bytes per rank: 2(h-1)/h * S/m instead of the flat ring's 2(n-1)/n * S
 * through the slowest link. Uneven hosts: reduce to each host's first rank (tree),
 * allreduce among those leaders, broadcast within hosts.
 * Each block's final value is computed once by one cross group's allreduce (whose members
 * agree bitwise) and then copied, so every rank holds the same bits.
 * Reference: Jia et al., "Highly scalable deep learning training system with mixed-
 * precision" (2018); NCCL's and Horovod's hierarchical allreduce.
 * Not here: the algorithms it composes (ring.c, rd.c, tree.c; the flat choice comes from select.c).
 * Proved by tests/comm/test_algo.c (ranks_per_host fakes hosts over real links). */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"

/* Allreduce of one block among one rank per host, by the selector's flat table (every
 * member of a cross group has the same block length, so all make the same choice). */
static shoal_result across(shoal_comm *c, const sh_group *g, void *buf, size_t count, shoal_dtype dt,
                           shoal_op op, sh_allreduce_fn flat)
{
    if (g->n == 1 || count == 0) return SHOAL_OK;
    return flat(c, g, buf, buf, count, dt, op);
}

shoal_result sh_hier_allreduce(shoal_comm *c, const void *send, void *buf, size_t count,
                               shoal_dtype dt, shoal_op op, sh_allreduce_fn flat)
{
    shoal_result rc = SHOAL_OK;
    int n = c->world, h = c->nhosts, me = c->rank, host = c->host_of[me];
    int *mem = malloc(sizeof(int) * (size_t)(2 * n + h + h));
    if (!mem) return SH_FAIL(SHOAL_ERR_NOMEM, "allreduce (hierarchical): out of memory for %d ranks", n);
    int *local = mem, *cross = mem + n, *per_host = mem + 2 * n, *first = per_host + h;
    int m = 0, li = -1;
    for (int q = 0; q < h; q++) per_host[q] = 0, first[q] = -1;
    for (int r = 0; r < n; r++) {
        int hq = c->host_of[r];
        if (first[hq] < 0) first[hq] = r;
        per_host[hq]++;
        if (hq == host) {
            if (r == me) li = m;
            local[m++] = r;
        }
    }
    int even = 1;
    for (int q = 0; q < h; q++) even &= per_host[q] == m;
    sh_group lg = {m, li, local};
    if (even) {
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
        size_t es = shoal_dtype_nbytes(dt), off, len;
        sh_algo_block(count, m, (li + 1) % m, &off, &len);
        if (m == 1 && send != buf) memcpy(buf, send, count * es);
        SH_TRY_GOTO(sh_ring_rs_phase(c, &lg, send, buf, count, dt, op), rc, done);
        SH_TRY_GOTO(across(c, &xg, (unsigned char *)buf + off * es, len, dt, op, flat), rc, done);
        SH_TRY_GOTO(sh_ring_ag_phase(c, &lg, buf, count, dt), rc, done);
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
