/* gemm_peak.c — the fastest sgemm this machine gives: OpenBLAS opened the way shoal opens it
 * (OPENBLAS_CORETYPE chosen from the CPU unless set), square and layer-shaped products, 1
 * and 2 threads, median GFLOP/s of several runs. The ceiling for shoal's layer GFLOP/s.
 * Not here: shoal's own kernels (bench/nn_step.c times the layers).
 *   cc -O3 -march=native bench/gemm_peak.c -o gemm_peak -ldl && ./gemm_peak */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*threads_fn)(int);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median GFLOP/s of 7 timed runs of at least 50 ms each. */
static double measure(sgemm_fn f, int tb, int m, int n, int k)
{
    float *a = malloc((size_t)m * k * 4), *b = malloc((size_t)k * n * 4), *c = malloc((size_t)m * n * 4);
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)k * n; i++) b[i] = (float)(i % 5) * 0.1f;
    memset(c, 0, (size_t)m * n * 4);
    double flop = 2.0 * m * n * k, rates[7];
    int reps = 1;
    f(101, 111, tb ? 112 : 111, m, n, k, 1.0f, a, k, b, tb ? k : n, 0.0f, c, n);
    for (;;) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            f(101, 111, tb ? 112 : 111, m, n, k, 1.0f, a, k, b, tb ? k : n, 0.0f, c, n);
        if (now_s() - t0 > 0.05) break;
        reps *= 2;
    }
    for (int i = 0; i < 7; i++) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            f(101, 111, tb ? 112 : 111, m, n, k, 1.0f, a, k, b, tb ? k : n, 0.0f, c, n);
        rates[i] = flop * reps / (now_s() - t0) * 1e-9;
    }
    qsort(rates, 7, sizeof *rates, cmp);
    free(a);
    free(b);
    free(c);
    return rates[3];
}

int main(void)
{
    __builtin_cpu_init();
    if (!getenv("OPENBLAS_CORETYPE")) {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            setenv("OPENBLAS_CORETYPE", "Haswell", 0);
    }
    void *h = dlopen("libopenblas.so.0", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "gemm_peak: cannot open libopenblas.so.0: %s\n", dlerror());
        return 1;
    }
    sgemm_fn f = (sgemm_fn)dlsym(h, "cblas_sgemm");
    threads_fn t = (threads_fn)dlsym(h, "openblas_set_num_threads");
    if (!f || !t) {
        fprintf(stderr, "gemm_peak: libopenblas.so.0 lacks cblas_sgemm\n");
        return 1;
    }
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS, OPENBLAS_CORETYPE=%s\n", ct ? ct : "(auto)");
    printf("%-34s %10s %10s\n", "C(m,n) = A(m,k) B(k,n)", "1 thread", "2 threads");
    static const struct {
        const char *what;
        int tb, m, n, k;
    } shapes[] = {
        {"square 512", 0, 512, 512, 512},
        {"square 1024", 0, 1024, 1024, 1024},
        {"square 2048", 0, 2048, 2048, 2048},
        {"lenet conv2 fwd (group 2)", 0, 50, 128, 500},
        {"lenet fc 800->500, batch 64", 1, 64, 500, 800},
        {"mlp fc 784->512, batch 64", 1, 64, 512, 784},
        {"resnet18 3x3 conv 128ch 28x28", 0, 128, 784, 1152},
    };
    double best1 = 0, best2 = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        t(1);
        double g1 = measure(f, shapes[i].tb, shapes[i].m, shapes[i].n, shapes[i].k);
        t(2);
        double g2 = measure(f, shapes[i].tb, shapes[i].m, shapes[i].n, shapes[i].k);
        printf("%-34s %10.1f %10.1f  GFLOP/s (m=%d n=%d k=%d%s)\n", shapes[i].what, g1, g2,
               shapes[i].m, shapes[i].n, shapes[i].k, shapes[i].tb ? ", B transposed" : "");
        best1 = g1 > best1 ? g1 : best1;
        best2 = g2 > best2 ? g2 : best2;
    }
    printf("peak: %.1f GFLOP/s with 1 thread, %.1f GFLOP/s with 2 threads\n", best1, best2);
    return 0;
}
