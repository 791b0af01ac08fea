/* staged.c — what user-space copies would buy the one-host allreduce at 2-8 MiB (2 ranks):
 * shoal_allreduce on private buffers (coll/cma.c: process_vm_readv/writev), the same sums on
 * buffers inside a shared window (cma.c's window path: memcpy to and from the peers' blocks),
 * and the window path with the whole send copied in before and the result copied out after
 * (a staged path would copy only the peer's halves: it lies between the last two columns).
 * Interleaved, best of REPS, the slowest rank's time per call. Not here: a staged path in shoal.
 *   cc -O2 -Iinclude bench/comm/staged.c build/libshoal.a -lcrypto -ljpeg -lpng -lz -ldl -lm \
 *      -lrt -lprotobuf-c -pthread -o /tmp/staged && build/shoal launch -n 2 /tmp/staged
 * MAX_MIB=64 for sizes up to 64 MiB (default 8). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shoal/comm.h"

enum { REPS = 15 };
static size_t MAX_NBYTES = 8 << 20;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double slowest(shoal_comm *c, double t)
{
    double m = t;
    shoal_allreduce(c, &t, &m, 1, SHOAL_FLOAT64, SHOAL_MAX);
    return m;
}

int main(void)
{
    shoal_comm_opts o;
    shoal_comm *c;
    shoal_window *w;
    shoal_comm_opts_default(&o);
    if (getenv("MAX_MIB")) MAX_NBYTES = (size_t)atol(getenv("MAX_MIB")) << 20;
    if (shoal_comm_create(&o, &c) != SHOAL_OK) return 1;
    int rank = shoal_comm_rank(c);
    if (shoal_window_create(c, 0, 2 * (size_t)MAX_NBYTES, &w) != SHOAL_OK) {
        fprintf(stderr, "staged: no shared window (all ranks on one host?)\n");
        return 1;
    }
    float *ws = shoal_window_block(w, rank), *wr = ws + MAX_NBYTES / 4;
    float *a = aligned_alloc(4096, MAX_NBYTES), *b = aligned_alloc(4096, MAX_NBYTES);
    for (size_t i = 0; i < MAX_NBYTES / 4; i++) a[i] = (float)(i % 7), b[i] = 0;
    if (rank == 0) printf("| size | private (CMA) us | whole send and result staged us | private / staged | in the window us | private / window |\n|---|---:|---:|---:|---:|---:|\n");
    for (size_t nb = 2 << 20; nb <= MAX_NBYTES; nb *= 2) {
        size_t n = nb / 4;
        int iters = (int)(64 * 1024 * 1024 / nb) + 2;
        double best[3] = {1e9, 1e9, 1e9};
        for (int rep = 0; rep < REPS; rep++)
            for (int k = 0; k < 3; k++) {
                shoal_barrier(c);
                double t0 = now_s();
                for (int it = 0; it < iters; it++) {
                    if (k == 0) {
                        shoal_allreduce(c, a, b, n, SHOAL_FLOAT32, SHOAL_SUM);
                    } else if (k == 2) {
                        shoal_allreduce(c, ws, wr, n, SHOAL_FLOAT32, SHOAL_SUM);
                    } else {
                        memcpy(ws, a, nb);
                        shoal_allreduce(c, ws, wr, n, SHOAL_FLOAT32, SHOAL_SUM);
                        memcpy(b, wr, nb);
                    }
                }
                double t = slowest(c, (now_s() - t0) / iters);
                if (t < best[k]) best[k] = t;
            }
        for (size_t i = 0; i < n; i++)
            if (b[i] != 2 * (float)(i % 7)) {
                fprintf(stderr, "staged: wrong sum at %zu of %zu bytes\n", i, nb);
                return 1;
            }
        if (rank == 0)
            printf("| %zu MiB | %.1f | %.1f | %.2fx | %.1f | %.2fx |\n", nb >> 20, best[0] * 1e6, best[1] * 1e6, best[0] / best[1],
                   best[2] * 1e6, best[0] / best[2]);
    }
    shoal_comm_destroy(c);
    return 0;
}
