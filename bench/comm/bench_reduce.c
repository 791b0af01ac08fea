/* bench_reduce.c — speed of the reduction kernels (src/comm/reduce.c): float32 sum in place
 * (dst += src) from 4 KiB to 64 MiB for every kernel set the CPU has, beside memcpy of the
 * same bytes in the same run (medians of interleaved repetitions; the ratio is what to read
 * on a shared machine), then every dtype at 1 MiB with the best set.
 * Not here: correctness (tests/comm/test_reduce.c).
 * Build and run:
 *   make BUILD=build WERROR=1 build/libshoal.a
 *   cc -O3 -march=native -Iinclude -Isrc bench/comm/bench_reduce.c build/libshoal.a \
 *      -pthread -lcrypto -lm -ldl -lz -lrt -o /tmp/bench_reduce && /tmp/bench_reduce [reps]
 * GB/s counts the bytes of one buffer per call (the message size), as NCCL's algbw. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/reduce.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum { K_MEMCPY = -1 };

/* Seconds per call of one kernel (kind: K_MEMCPY or a set), iterations sized to ~64 MiB. */
static double time_one(int kind, void *dst, const void *src, size_t nbytes, shoal_dtype dt)
{
    size_t iters = (64u << 20) / nbytes;
    if (iters < 3) iters = 3;
    size_t count = nbytes / shoal_dtype_nbytes(dt);
    double t0 = now_s();
    for (size_t i = 0; i < iters; i++) {
        if (kind == K_MEMCPY)
            memcpy(dst, src, nbytes);
        else
            sh_reduce3_isa((sh_reduce_isa)kind, dst, dst, src, count, dt, SHOAL_SUM);
        __asm__ volatile("" ::"r"(dst) : "memory");
    }
    return (now_s() - t0) / (double)iters;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > 100) {
        fprintf(stderr, "bench_reduce: repetitions must be 1..100 (got \"%s\")\n", argv[1]);
        return 2;
    }
    size_t max_nbytes = 64u << 20;
    float *dst = aligned_alloc(64, max_nbytes), *src = aligned_alloc(64, max_nbytes);
    if (!dst || !src) {
        fprintf(stderr, "bench_reduce: out of memory for two 64 MiB buffers\n");
        return 1;
    }
    for (size_t i = 0; i < max_nbytes / 4; i++) dst[i] = 0.0f, src[i] = (float)(i % 7) * 1e-3f;

    int sets[SH_ISA_COUNT], nsets = 0;
    for (int s = 0; s < SH_ISA_COUNT; s++)
        if (sh_reduce_isa_supported((sh_reduce_isa)s)) sets[nsets++] = s;
    printf("float32 sum in place, GB/s of message (median of %d); ratio = memcpy time / sum time\n",
           reps);
    printf("%10s %10s", "bytes", "memcpy");
    for (int k = 0; k < nsets; k++) printf(" %10s %6s", sh_reduce_isa_name((sh_reduce_isa)sets[k]), "ratio");
    printf("\n");
    for (size_t nbytes = 4096; nbytes <= max_nbytes; nbytes *= 4) {
        double t[SH_ISA_COUNT + 1][100];
        for (int r = 0; r < reps; r++) { /* interleaved: noise hits every kernel alike */
            t[0][r] = time_one(K_MEMCPY, dst, src, nbytes, SHOAL_FLOAT32);
            for (int k = 0; k < nsets; k++) t[k + 1][r] = time_one(sets[k], dst, src, nbytes, SHOAL_FLOAT32);
        }
        double mc = median(t[0], reps);
        printf("%10zu %10.2f", nbytes, (double)nbytes / mc * 1e-9);
        for (int k = 0; k < nsets; k++) {
            double m = median(t[k + 1], reps);
            printf(" %10.2f %6.2f", (double)nbytes / m * 1e-9, mc / m);
        }
        printf("\n");
    }

    sh_reduce_isa best = sh_reduce_isa_best();
    printf("\nevery dtype, sum in place, 1 MiB, set %s against scalar (median of %d)\n",
           sh_reduce_isa_name(best), reps);
    printf("%10s %10s %10s %8s\n", "dtype", "scalar", sh_reduce_isa_name(best), "speedup");
    size_t nbytes = 1u << 20;
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++) {
        memset(dst, 0, nbytes);
        memset(src, 0x11, nbytes); /* small finite values in every dtype */
        double ts[100], tb[100];
        for (int r = 0; r < reps; r++) {
            ts[r] = time_one(SH_ISA_SCALAR, dst, src, nbytes, (shoal_dtype)d);
            tb[r] = time_one(best, dst, src, nbytes, (shoal_dtype)d);
        }
        double ms = median(ts, reps), mb = median(tb, reps);
        printf("%10s %10.2f %10.2f %8.2f\n", shoal_dtype_name((shoal_dtype)d),
               (double)nbytes / ms * 1e-9, (double)nbytes / mb * 1e-9, ms / mb);
    }
    free(dst);
    free(src);
    return 0;
}
