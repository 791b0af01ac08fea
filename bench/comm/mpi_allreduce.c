/* mpi_allreduce.c — the MPI side of bench/comm/run.sh: MPI_Allreduce (float32 sum, out of
 * place) timed as nccl-tests and shoal bench do (mean over iterations of the slowest rank),
 * one JSON row per size. Built with Open MPI's and MPICH's mpicc by run.sh.
 *   mpicc -O2 bench/comm/mpi_allreduce.c -o mpi_allreduce
 *   mpirun -np 2 ./mpi_allreduce MIN MAX FACTOR ITERS_SMALL ITERS_LARGE */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t lo = argc > 1 ? strtoull(argv[1], NULL, 10) : 8, hi = argc > 2 ? strtoull(argv[2], NULL, 10) : 1 << 26;
    int f = argc > 3 ? atoi(argv[3]) : 4, small = argc > 4 ? atoi(argv[4]) : 200, large = argc > 5 ? atoi(argv[5]) : 10;
    float *a = malloc(hi), *b = malloc(hi);
    for (size_t i = 0; i < hi / 4; i++) a[i] = (float)(i % 3 + 1);
    for (size_t nb = lo; nb <= hi; nb *= (size_t)f) {
        int cnt = (int)(nb / 4);
        int iters = nb <= (1u << 20) ? small : large;
        for (int w = 0; w < (iters > 10 ? iters / 10 : 2); w++) MPI_Allreduce(a, b, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) MPI_Allreduce(a, b, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / iters, tm;
        MPI_Allreduce(&t, &tm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r == 0)
            printf("{\"size\": %zu, \"time_us\": %.3f, \"busbw_gb_s\": %.4f}\n", nb, tm * 1e6,
                   n > 1 ? (double)nb / tm / 1e9 * 2.0 * (n - 1) / n : 0.0);
        fflush(stdout);
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
