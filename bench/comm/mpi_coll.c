/* mpi_coll.c — the MPI side of bench/comm/run.sh: one MPI collective (float32, sum where it
 * reduces, out of place, root 0) timed as nccl-tests and `shoal bench` do: mean over the
 * iterations of the slowest rank, size = the whole buffer (nccl-tests' size column, so split
 * collectives move size/n per rank), busbw with nccl-tests' factors; one JSON row per size,
 * the last size clamped to MAX as `shoal bench` does.
 * Not here: shoal's side (src/cli/cmd_bench.c). Built with Open MPI's and MPICH's mpicc by run.sh.
 *   mpicc -O2 bench/comm/mpi_coll.c -o mpi_coll
 *   mpirun -np 2 ./mpi_coll allreduce|allgather|broadcast|reduce_scatter MIN MAX FACTOR ITERS_SMALL ITERS_LARGE */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const char *coll = argc > 1 ? argv[1] : "allreduce";
    size_t lo = argc > 2 ? strtoull(argv[2], NULL, 10) : 8, hi = argc > 3 ? strtoull(argv[3], NULL, 10) : 1 << 26;
    int f = argc > 4 ? atoi(argv[4]) : 4, small = argc > 5 ? atoi(argv[5]) : 200, large = argc > 6 ? atoi(argv[6]) : 10;
    int kind = !strcmp(coll, "allreduce") ? 0 : !strcmp(coll, "allgather") ? 1 : !strcmp(coll, "broadcast") ? 2
             : !strcmp(coll, "reduce_scatter") ? 3 : -1;
    if (kind < 0 || lo < 1 || hi < lo || f < 2) {
        if (r == 0)
            fprintf(stderr, "mpi_coll: want allreduce|allgather|broadcast|reduce_scatter MIN MAX FACTOR ITERS ITERS, got \"%s\"\n",
                    coll);
        MPI_Finalize();
        return 2;
    }
    double factor = kind == 0 ? 2.0 * (n - 1) / n : kind == 2 ? 1.0 : (double)(n - 1) / n;
    float *a = malloc(hi + 64), *b = malloc(hi + 64);
    int *counts = malloc(sizeof(int) * (size_t)n);
    if (!a || !b || !counts) MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < hi / 4; i++) a[i] = (float)(i % 3 + 1);
    for (size_t nb = lo;;) {
        size_t total = nb / 4, per = total / (size_t)n;
        size_t shown = kind == 1 || kind == 3 ? per * (size_t)n * 4 : total * 4;
        int iters = nb <= (1u << 20) ? small : large;
        for (int i = 0; i < n; i++) counts[i] = (int)per;
        for (int k = -(iters > 10 ? iters / 10 : 2); k < iters; k++) {
            if (k == 0) MPI_Barrier(MPI_COMM_WORLD);
            static double t0;
            if (k == 0) t0 = MPI_Wtime();
            switch (kind) {
            case 0: MPI_Allreduce(a, b, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
            case 1: MPI_Allgather(a, (int)per, MPI_FLOAT, b, (int)per, MPI_FLOAT, MPI_COMM_WORLD); break;
            case 2: MPI_Bcast(a, (int)total, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
            default: MPI_Reduce_scatter(a, b, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
            }
            if (k == iters - 1) {
                double t = (MPI_Wtime() - t0) / iters, tm;
                MPI_Allreduce(&t, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (r == 0)
                    printf("{\"size\": %zu, \"time_us\": %.3f, \"busbw_gb_s\": %.4f}\n", shown, tm * 1e6,
                           n > 1 && tm > 0 ? (double)shown / tm / 1e9 * factor : 0.0);
                fflush(stdout);
            }
        }
        if (nb >= hi) break;
        nb = nb * (size_t)f > hi ? hi : nb * (size_t)f;
    }
    free(a);
    free(b);
    free(counts);
    MPI_Finalize();
    return 0;
}
