/* algo_sweep.c — measures the collective algorithms side by side in one run, to set the
 * thresholds in src/comm/coll/select.c: for each message size, every applicable algorithm runs
 * in turn (interleaved, so a busy machine slows them alike) and rank 0 prints the median
 * time of each (from a common start until a barrier after it: all ranks done) and the ratio
 * to the fastest.
 * Not here: the nccl-tests style benchmark of the public API (shoal bench).
 *
 *   make BUILD=build-algo build-algo/libshoal.a
 *   cc -O2 -D_GNU_SOURCE -Iinclude -Isrc -Itests bench/comm/algo_sweep.c tests/lib/ranks.c \
 *      build-algo/libshoal.a -pthread -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt -o build-algo/algo_sweep
 *   ./build-algo/algo_sweep [ranks=4] [links=socketpair|shm] [coll=allreduce|broadcast|allgather|reduce_scatter|
 *                             broadcast_chunks|reduce_chunks]
 *                            [max_nbytes=67108864] [chunk_nbytes=0] [ranks_per_host=0]
 * With ranks_per_host > 0 the hosts are faked (links stay alike) and allreduce compares
 * the hierarchical algorithm instead of the tree. broadcast_chunks / reduce_chunks run the
 * chain broadcast / tree reduce with 32 KiB, 128 KiB, 512 KiB and whole-message chunks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "comm/coll/select.h"
#include "comm/comm_internal.h"
#include "lib/ranks.h"

typedef struct {
    int coll; /* sh_coll_kind */
    size_t max_nbytes;
    int chunks; /* 1: one algorithm (chain broadcast / tree reduce) at several chunk sizes */
} sweep_arg;

/* Chunk candidates of the chunks mode; SIZE_MAX: the whole message as one chunk. */
static const size_t chunk_cand[4] = {32 << 10, 128 << 10, 512 << 10, (size_t)-1};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void sweep(shoal_comm *c, void *argp)
{
    const sweep_arg *a = argp;
    sh_algo_kind cand[4];
    int nc = 0;
    if (a->chunks) {
        for (nc = 0; nc < 4; nc++) cand[nc] = a->coll == SH_COLL_BROADCAST ? SH_ALGO_RING : SH_ALGO_TREE;
    } else if (a->coll == SH_COLL_ALLREDUCE) {
        cand[nc++] = SH_ALGO_RD, cand[nc++] = SH_ALGO_RHD, cand[nc++] = SH_ALGO_RING;
        cand[nc++] = c->nhosts > 1 ? SH_ALGO_HIER : SH_ALGO_TREE;
    } else if (a->coll == SH_COLL_BROADCAST) {
        cand[nc++] = SH_ALGO_TREE, cand[nc++] = SH_ALGO_RING;
    } else {
        cand[nc++] = SH_ALGO_RING;
        if ((c->world & (c->world - 1)) == 0) cand[nc++] = a->coll == SH_COLL_ALLGATHER ? SH_ALGO_RD : SH_ALGO_RHD;
    }
    /* allgather and reduce_scatter: nbytes is one rank's block */
    size_t per = a->coll == SH_COLL_ALLGATHER || a->coll == SH_COLL_REDUCE_SCATTER ? (size_t)c->world : 1;
    float *send = NULL, *recv = NULL;
    if (sh_alloc_aligned(a->max_nbytes * per, (void **)&send) || sh_alloc_aligned(a->max_nbytes * per, (void **)&recv)) return;
    memset(send, 0, a->max_nbytes * per);
    memset(recv, 0, a->max_nbytes * per);
    sh_group g;
    int ranks[64];
    for (int r = 0; r < c->world; r++) ranks[r] = r;
    g.n = c->world, g.me = c->rank, g.ranks = ranks;
    if (c->rank == 0) {
        printf("# %s, %d ranks on %d hosts, median us (ratio to the fastest)\n%10s", a->coll == SH_COLL_ALLREDUCE ? "allreduce"
               : a->coll == SH_COLL_BROADCAST ? "broadcast"
               : a->coll == SH_COLL_ALLGATHER ? "allgather" : a->coll == SH_COLL_REDUCE ? "reduce" : "reduce_scatter",
               c->world, c->nhosts, "bytes");
        for (int k = 0; k < nc; k++) {
            char name[32];
            if (a->chunks && chunk_cand[k] != (size_t)-1)
                snprintf(name, sizeof name, "%s/%zuK", sh_algo_name(cand[k]), chunk_cand[k] >> 10);
            else
                snprintf(name, sizeof name, "%s%s", sh_algo_name(cand[k]), a->chunks ? "/whole" : "");
            printf(" %18s", name);
        }
        printf("\n");
    }
    enum { MAXREP = 41 };
    for (size_t nbytes = 256; nbytes <= a->max_nbytes; nbytes *= 4) {
        int reps = nbytes <= 64 * 1024 ? MAXREP : nbytes <= 4 << 20 ? 11 : 5;
        uint64_t t[4][MAXREP];
        sh_coll op = {(sh_coll_kind)a->coll, send, recv, nbytes / 4, SHOAL_FLOAT32, SHOAL_SUM, 0};
        if (a->coll == SH_COLL_ALLGATHER) op.send = recv + (size_t)c->rank * (nbytes / 4);
        for (int rep = -2; rep < reps; rep++)
            for (int k = 0; k < nc; k++) {
                c->algo = cand[k];
                if (a->chunks) c->chunk_nbytes = chunk_cand[k] == (size_t)-1 ? nbytes : chunk_cand[k];
                if (sh_misc_barrier(c, &g) != SHOAL_OK) return;
                uint64_t t0 = sh_now_ns();
                if (sh_select_algo_run(c, &op) != SHOAL_OK) {
                    fprintf(stderr, "rank %d: %s\n", c->rank, shoal_last_error_message());
                    return;
                }
                /* until every rank is done: a root that only pushes bytes out has not
                 * finished the collective (the barrier costs every algorithm the same) */
                if (sh_misc_barrier(c, &g) != SHOAL_OK) return;
                if (rep >= 0) t[k][rep] = sh_now_ns() - t0;
            }
        if (c->rank == 0) {
            double med[4], best = 1e300;
            for (int k = 0; k < nc; k++) {
                qsort(t[k], (size_t)reps, sizeof t[k][0], cmp_u64);
                med[k] = (double)t[k][reps / 2] / 1e3;
                if (med[k] < best) best = med[k];
            }
            printf("%10zu", nbytes);
            for (int k = 0; k < nc; k++) printf(" %10.1f (%4.2f)", med[k], med[k] / best);
            printf("\n");
            fflush(stdout);
        }
    }
    sh_free_aligned(send);
    sh_free_aligned(recv);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    const char *links = argc > 2 ? argv[2] : "socketpair";
    const char *coll = argc > 3 ? argv[3] : "allreduce";
    sweep_arg a = {SH_COLL_ALLREDUCE, argc > 4 ? (size_t)atoll(argv[4]) : (size_t)64 << 20, 0};
    if (!strcmp(coll, "broadcast")) a.coll = SH_COLL_BROADCAST;
    else if (!strcmp(coll, "allgather")) a.coll = SH_COLL_ALLGATHER;
    else if (!strcmp(coll, "reduce_scatter")) a.coll = SH_COLL_REDUCE_SCATTER;
    else if (!strcmp(coll, "broadcast_chunks")) a.coll = SH_COLL_BROADCAST, a.chunks = 1;
    else if (!strcmp(coll, "reduce_chunks")) a.coll = SH_COLL_REDUCE, a.chunks = 1;
    else if (strcmp(coll, "allreduce")) {
        fprintf(stderr, "algo_sweep: unknown collective \"%s\"; use allreduce, broadcast, allgather, "
                "reduce_scatter, broadcast_chunks or reduce_chunks\n", coll);
        return 2;
    }
    if (n < 2 || n > 64) {
        fprintf(stderr, "algo_sweep: ranks %d out of range; use 2..64\n", n);
        return 2;
    }
    sh_test_ranks_opts o = {.links = strcmp(links, "shm") ? SH_TEST_SOCKETPAIR : SH_TEST_SHM,
                            .chunk_nbytes = argc > 5 ? (size_t)atoll(argv[5]) : 0, .deadline_s = 600,
                            .timeout_ms = 60000, .ranks_per_host = argc > 6 ? atoi(argv[6]) : 0};
    int passed = 0, failed = 0;
    return sh_test_ranks(n, &o, sweep, &a, &passed, &failed) ? 1 : 0;
}
