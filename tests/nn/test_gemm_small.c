/* test_gemm_small.c — proves src/nn/gemm_small.c: Y = X W^T and dX = dY W (accumulate on and
 * off) against a double-precision loop, for row counts below, at and past one panel of 16
 * (1, 5, 16, 33, 64), padded leading dimensions, k and n not multiples of 16; columns of C
 * outside n untouched; row by row the same bits as one call over all rows (a thread's chunk
 * of images gives what the whole batch gives). */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "nn/gemm_small.h"

static void fill(float *x, size_t count, sh_rng *r)
{
    for (size_t i = 0; i < count; i++) x[i] = 2.0f * sh_rng_float(r) - 1.0f;
}

/* C (m, n) = A (m, k) op(W) (+ C); tw: W stored (n, k), else (k, n). */
static void ref(int m, int n, int k, const float *a, int lda, int tw, const float *w, int ldw, int accumulate,
                float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = accumulate ? c[(size_t)i * ldc + j] : 0.0;
            for (int p = 0; p < k; p++)
                s += (double)a[(size_t)i * lda + p] * (tw ? w[(size_t)j * ldw + p] : w[(size_t)p * ldw + j]);
            c[(size_t)i * ldc + j] = (float)s;
        }
}

/* One product of either kind; returns its worst error (NaN or a changed padding: +inf). */
static double one(int m, int n, int k, int tw, int accumulate, sh_rng *r)
{
    int lda = k + 3, ldw = (tw ? k : n) + 5, ldc = n + 7;
    size_t na = (size_t)m * lda, nw = (size_t)(tw ? n : k) * ldw, nc = (size_t)m * ldc;
    float *a = malloc(na * 4), *w = malloc(nw * 4), *c = malloc(nc * 4), *want = malloc(nc * 4),
          *ws = malloc(sh_small_ws_count(m, k, n) * 4);
    fill(a, na, r);
    fill(w, nw, r);
    fill(c, nc, r);
    memcpy(want, c, nc * 4);
    ref(m, n, k, a, lda, tw, w, ldw, accumulate, want, ldc);
    memset(ws, 0xff, sh_small_ws_count(m, k, n) * 4); /* NaN: nothing may read it unwritten */
    if (tw) sh_small_gemm_nt(m, n, k, a, lda, w, ldw, c, ldc, ws);
    else sh_small_gemm_nn(m, n, k, a, lda, w, ldw, accumulate, c, ldc, ws);
    double worst = 0.0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < ldc; j++) {
            size_t at = (size_t)i * ldc + j;
            double d = fabs((double)c[at] - want[at]);
            if (j >= n && c[at] != want[at]) d = INFINITY; /* past n: untouched */
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
        }
    free(a);
    free(w);
    free(c);
    free(want);
    free(ws);
    return worst;
}

static void products_match_reference(void)
{
    static const int rows[] = {1, 5, 16, 33, 64}, shapes[][2] = {{1, 1}, {17, 40}, {100, 300}, {48, 1030}};
    sh_rng r;
    sh_rng_seed(&r, 11);
    int bad = 0;
    for (size_t mi = 0; mi < sizeof rows / sizeof rows[0]; mi++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int kind = 0; kind < 3; kind++) { /* nt; nn; nn accumulating */
                int m = rows[mi], n = shapes[si][0], k = shapes[si][1];
                double worst = one(m, n, k, kind == 0, kind == 2, &r), tol = 1e-6 * (k + 2);
                if (!(worst <= tol) && bad++ < 5)
                    CHECK(0, "%s m=%d n=%d k=%d: max error %g", kind ? "nn" : "nt", m, n, k, worst);
            }
    CHECK(bad == 0, "%d products off", bad);
}

/* Each element sums k in order whatever m: row i alone gives the bits of row i of the batch. */
static void a_row_alone_gives_the_batchs_bits(void)
{
    enum { M = 37, N = 70, K = 129 };
    static float a[M * K], w[N * K], c1[M * N], c2[N], ws[64 * K + 64 * N + 4096];
    sh_rng r;
    sh_rng_seed(&r, 5);
    fill(a, M * K, &r);
    fill(w, N * K, &r);
    sh_small_gemm_nt(M, N, K, a, K, w, K, c1, N, ws);
    int same = 1;
    for (int i = 0; i < M; i++) {
        sh_small_gemm_nt(1, N, K, a + (size_t)i * K, K, w, K, c2, N, ws);
        same &= memcmp(c1 + (size_t)i * N, c2, sizeof c2) == 0;
    }
    CHECK(same, "a row alone differs from its row in the batch");
}

int main(void)
{
    check_begin("test_gemm_small", 60);
    RUN(products_match_reference);
    RUN(a_row_alone_gives_the_batchs_bits);
    return check_end();
}
