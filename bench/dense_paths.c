/* dense_paths.c — a [connected] layer's three products on each path dense_gemm.c chooses
 * between, one core, for one shape over several row counts: forward Y = X W^T (OpenBLAS,
 * gemm_small.c turned around, the packed kernel + packing W^T), input gradient dX = dY W
 * (the same three, packing W) and weight gradient dW = dY^T X (OpenBLAS, the packed kernel
 * with X packed, packing included); median ms of several calls, W rotated over 3 copies so it
 * comes from memory as in training. The measurements behind dense_rules.c (bench/README.md).
 * Not here: whole steps (nn_step.c), the rules themselves (src/nn/dense_rules.c).
 *   cc -O2 -march=native -Iinclude -Isrc bench/dense_paths.c build/libshoal.a -lz -ldl -lm -lpthread -lrt
 *   env -u OPENBLAS_CORETYPE ./a.out 1024 1024 8,16,32,64,128   # outputs, inputs, rows [, calls, max rows] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/gemm.h"
#include "nn/gemm_packed.h"
#include "nn/gemm_small.h"

enum { COPIES = 3, MAX_CALLS = 64 };

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static float *filled(size_t count)
{
    float *p = aligned_alloc(64, (count * sizeof(float) + 127) / 64 * 64);
    for (size_t i = 0; i < count; i++) p[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    return p;
}

/* median ms of calls runs of expr, with w the call's copy of W */
#define MEDIAN_MS(expr)                                                                            \
    ({                                                                                             \
        for (int c_ = 0; c_ < calls; c_++) {                                                       \
            float *w = ws_w[c_ % COPIES];                                                          \
            (void)w;                                                                               \
            double t0 = now_ms();                                                                  \
            expr;                                                                                  \
            t[c_] = now_ms() - t0;                                                                 \
        }                                                                                          \
        qsort(t, (size_t)calls, sizeof *t, cmp_double);                                            \
        t[calls / 2];                                                                              \
    })

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s outputs inputs rows,rows,... [calls] [max rows]\n", argv[0]);
        return 2;
    }
    int K = atoi(argv[1]), I = atoi(argv[2]), calls = argc > 4 ? atoi(argv[4]) : 9;
    int maxm = argc > 5 ? atoi(argv[5]) : 128, big = K > I ? K : I;
    if (calls < 1 || calls > MAX_CALLS) calls = 9;
    double t[MAX_CALLS];
    float *ws_w[COPIES];
    for (int c = 0; c < COPIES; c++) ws_w[c] = filled((size_t)K * I);
    float *x = filled((size_t)maxm * I), *y = filled((size_t)maxm * big);
    float *dy = filled((size_t)maxm * K), *dx = filled((size_t)maxm * I);
    float *pw = filled(sh_packed_count(I, K) + sh_packed_count(K, I)), *px = filled(sh_packed_count(maxm, I));
    float *ws = filled(sh_small_ws_count(maxm, I, K) + sh_small_ws_count(maxm, K, I));
    for (char *s = strtok(argv[3], ","); s; s = strtok(NULL, ",")) {
        int m = atoi(s);
        if (m < 1 || m > maxm) continue;
        double fb = MEDIAN_MS(sh_gemm(0, 1, m, K, I, 1.0f, x, I, w, I, 0.0f, y, K));
        double fs = MEDIAN_MS(sh_small_gemm_nt(m, K, I, x, I, w, I, y, K, ws));
        double fpk = MEDIAN_MS(sh_packed_pack(1, I, K, w, I, 0, sh_packed_npanels(K), pw));
        double fp = MEDIAN_MS(sh_packed_gemm(m, 0, K, I, x, I, pw, 0, y, K));
        double db = MEDIAN_MS(sh_gemm(0, 0, m, I, K, 1.0f, dy, K, w, I, 0.0f, dx, I));
        double ds = MEDIAN_MS(sh_small_gemm_nn(m, I, K, dy, K, w, I, 0, dx, I, ws));
        double dpk = MEDIAN_MS(sh_packed_pack(0, K, I, w, I, 0, sh_packed_npanels(I), pw));
        double dp = MEDIAN_MS(sh_packed_gemm(m, 0, I, K, dy, K, pw, 0, dx, I));
        double wb = MEDIAN_MS(sh_gemm(1, 0, K, I, m, 1.0f, dy, K, x, I, 0.0f, w, I));
        double wp = MEDIAN_MS(sh_packed_pack(0, m, I, x, I, 0, sh_packed_npanels(I), px);
                              sh_packed_gemm_tn(K, 0, I, m, dy, K, px, m, 0, w, I));
        printf("%5dx%-5d m=%4d | fwd blas %7.3f small %7.3f packed %7.3f+%6.3f | dX blas %7.3f small %7.3f "
               "packed %7.3f+%6.3f | dW blas %7.3f packed %7.3f\n",
               K, I, m, fb, fs, fp, fpk, db, ds, dp, dpk, wb, wp);
        fflush(stdout);
    }
    return 0;
}
