/* test_gemm_packed.c — proves src/nn/gemm_packed.c: packing both layouts of B, then products
 * over column ranges (whole, split at panel boundaries, ragged last panel) against a
 * double-precision loop, for row counts that hit every tile height (1..8 and more) and
 * several blocks of rows, odd k,
 * accumulate on and off, with the AVX-512 kernel (where the CPU has it) and the generic one;
 * A^T B (sh_packed_gemm_tn) with B packed in pieces of rows, k past one block of 256, a
 * packed operand read from a later row, row splits giving the same bits, more rows than
 * the kernel copies of A at a time. */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "nn/gemm_packed.h"

static void fill(float *x, size_t count, sh_rng *r)
{
    for (size_t i = 0; i < count; i++) x[i] = 2.0f * sh_rng_float(r) - 1.0f;
}

/* Columns [n0, n1) of C = A op(B) (+ C), in double. */
static void ref(int m, int n0, int n1, int k, const float *a, int lda, int tb, const float *b,
                int ldb, int accumulate, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = n0; j < n1; j++) {
            double s = accumulate ? c[(size_t)i * ldc + j] : 0.0;
            for (int p = 0; p < k; p++)
                s += (double)a[(size_t)i * lda + p] *
                     (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            c[(size_t)i * ldc + j] = (float)s;
        }
}

/* Every size, layout, accumulate mode and column split; returns the failures. */
static int sweep(const char *kernel)
{
    static const int sizes[][3] = {{1, 1, 1},   {3, 5, 7},    {8, 16, 16},  {9, 17, 33},
                                   {7, 33, 19}, {64, 64, 64}, {13, 70, 29}, {16, 1024, 256},
                                   {5, 48, 1},  {2, 31, 300}, {64, 256, 1024},
                                   {300, 40, 1024} /* three blocks of rows: 128, 128, 44 */};
    sh_rng r;
    sh_rng_seed(&r, 7);
    int bad = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
        for (int tb = 0; tb < 2; tb++)
            for (int acc = 0; acc < 2; acc++) {
                int lda = k + 3, ldb = (tb ? k : n) + 2, ldc = n + 5;
                size_t na = (size_t)m * lda, nb = (size_t)(tb ? n : k) * ldb;
                size_t nc = (size_t)m * ldc;
                float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4),
                      *want = malloc(nc * 4), *pk = malloc(sh_packed_count(k, n) * 4);
                fill(a, na, &r);
                fill(b, nb, &r);
                fill(c, nc, &r);
                if (!acc) /* columns outside the range keep their values; inside NaN is ignored */
                    for (int i = 0; i < m; i++)
                        for (int j = 0; j < n; j++) c[(size_t)i * ldc + j] = NAN;
                /* pack in two ranges, as two threads would */
                int np = sh_packed_npanels(n), half = np / 2;
                memset(pk, 0xff, sh_packed_count(k, n) * 4); /* NaN: padding must be written */
                sh_packed_pack(tb, k, n, b, ldb, 0, half, pk);
                sh_packed_pack(tb, k, n, b, ldb, half, np, pk);
                memcpy(want, c, nc * 4);
                ref(m, 0, n, k, a, lda, tb, b, ldb, acc, want, ldc);
                /* columns in three ranges split at panel boundaries: [0, s1), [s1, s2), [s2, n) */
                int s1 = (np / 3) * SH_PACKED_NR, s2 = ((2 * np) / 3) * SH_PACKED_NR;
                if (s2 > n) s2 = n;
                sh_packed_gemm(m, 0, s1, k, a, lda, pk, acc, c, ldc);
                sh_packed_gemm(m, s1, s2, k, a, lda, pk, acc, c, ldc);
                sh_packed_gemm(m, s2, n, k, a, lda, pk, acc, c, ldc);
                double worst = 0.0;
                for (size_t i = 0; i < nc; i++) {
                    double d = fabs((double)c[i] - want[i]);
                    if (isnan(want[i]) && isnan(c[i])) d = 0.0; /* outside C's n columns */
                    if (!(d <= worst)) worst = d;             /* NaN counts as worst */
                }
                double tol = 1e-6 * (k + 2);
                if (!(worst <= tol) && bad++ < 5)
                    CHECK(0, "%s m=%d n=%d k=%d tb=%d accumulate=%d: max error %g", kernel, m,
                          n, k, tb, acc, worst);
                free(a);
                free(b);
                free(c);
                free(want);
                free(pk);
            }
    }
    return bad;
}

static void packed_gemm_matches_reference_with_the_cpus_kernel(void)
{
    sh_packed_force_generic(0);
    const char *k = sh_packed_kernel();
    CHECK(sweep(k) == 0, "%s kernel has wrong results", k);
}

static void packed_gemm_matches_reference_with_the_generic_kernel(void)
{
    sh_packed_force_generic(1);
    CHECK(strcmp(sh_packed_kernel(), "generic") == 0, "kernel %s", sh_packed_kernel());
    CHECK(sweep("generic") == 0, "generic kernel has wrong results");
    sh_packed_force_generic(0);
}

/* Each element sums k in order whichever columns a call covers, so a thread split gives the
 * very same bits as one call. */
static void column_splits_give_identical_bits(void)
{
    enum { M = 11, N = 96, K = 77 };
    static float a[M * K], b[K * N], pk[(N / SH_PACKED_NR) * K * SH_PACKED_NR], c1[M * N],
        c2[M * N];
    sh_rng r;
    sh_rng_seed(&r, 3);
    fill(a, M * K, &r);
    fill(b, K * N, &r);
    sh_packed_pack(0, K, N, b, N, 0, sh_packed_npanels(N), pk);
    sh_packed_gemm(M, 0, N, K, a, K, pk, 0, c1, N);
    for (int j = 0; j < N; j += SH_PACKED_NR)
        sh_packed_gemm(M, j, j + SH_PACKED_NR, K, a, K, pk, 0, c2, N);
    CHECK(memcmp(c1, c2, sizeof c1) == 0, "split columns differ from one call");
}

static void empty_sums_zero_or_keep_c(void)
{
    float c[4] = {1, 2, 3, 4}, a[1] = {0}, pk[SH_PACKED_NR] = {0};
    sh_packed_gemm(2, 0, 2, 0, a, 1, pk, 1, c, 2);
    CHECK(c[0] == 1 && c[3] == 4, "accumulate with k = 0 changed c: %g %g", c[0], c[3]);
    sh_packed_gemm(2, 0, 2, 0, a, 1, pk, 0, c, 2);
    CHECK(c[0] == 0 && c[3] == 0, "k = 0 without accumulate left %g %g", c[0], c[3]);
}

/* C = A^T B with A (k, m) and B rows [off, off + k) of a (kp, n) operand packed in two
 * pieces of rows and two ranges of panels; returns the failures. */
static int sweep_tn(const char *kernel)
{
    static const int sizes[][3] = {{1, 1, 1},    {9, 17, 33},   {13, 40, 300}, {64, 33, 600},
                                   {20, 256, 2080}, {150, 40, 300} /* A copied 64 rows at a time:
                                   64, 64, 22 (two tiles and a ragged one) */};
    sh_rng r;
    sh_rng_seed(&r, 11);
    int bad = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int m = sizes[si][0], n = sizes[si][1], k = sizes[si][2], off = 3, kp = k + off;
        for (int acc = 0; acc < 2; acc++) {
            int lda = m + 2, ldb = n + 3, ldc = n + 1;
            size_t na = (size_t)k * lda, nb = (size_t)kp * ldb, nc = (size_t)m * ldc;
            float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4),
                  *want = malloc(nc * 4), *pk = malloc(sh_packed_count(kp, n) * 4);
            fill(a, na, &r);
            fill(b, nb, &r);
            fill(c, nc, &r);
            memset(pk, 0xff, sh_packed_count(kp, n) * 4);
            int np = sh_packed_npanels(n), half = np / 2, cut = kp / 2;
            for (int q = 0; q < 2; q++) { /* rows [0, cut) and [cut, kp); panels in two ranges */
                int p0 = q ? half : 0, p1 = q ? np : half;
                sh_packed_pack_rows(kp, n, 0, cut, b, ldb, p0, p1, pk);
                sh_packed_pack_rows(kp, n, cut, kp, b + (size_t)cut * ldb, ldb, p0, p1, pk);
            }
            memcpy(want, c, nc * 4);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double sum = acc ? c[(size_t)i * ldc + j] : 0.0;
                    for (int p = 0; p < k; p++)
                        sum += (double)a[(size_t)p * lda + i] * b[(size_t)(off + p) * ldb + j];
                    want[(size_t)i * ldc + j] = (float)sum;
                }
            /* rows in two calls, as two threads would split the gradient's rows */
            int mh = m / 2;
            const float *b0 = pk + (size_t)off * SH_PACKED_NR;
            sh_packed_gemm_tn(mh, 0, n, k, a, lda, b0, kp, acc, c, ldc);
            sh_packed_gemm_tn(m - mh, 0, n, k, a + mh, lda, b0, kp, acc, c + (size_t)mh * ldc, ldc);
            double worst = 0.0;
            for (size_t i = 0; i < nc; i++) {
                double d = fabs((double)c[i] - want[i]);
                if (!(d <= worst)) worst = d;
            }
            if (!(worst <= 1e-6 * (k + 2)) && bad++ < 5)
                CHECK(0, "%s tn m=%d n=%d k=%d accumulate=%d: max error %g", kernel, m, n, k, acc,
                      worst);
            /* the same bits as one call over every row */
            float *one = malloc(nc * 4);
            memcpy(one, want, nc * 4);
            if (!acc) {
                sh_packed_gemm_tn(m, 0, n, k, a, lda, b0, kp, 0, one, ldc);
                if (memcmp(one, c, nc * 4) != 0 && bad++ < 5)
                    CHECK(0, "%s tn m=%d n=%d k=%d: a split of rows changed bits", kernel, m, n, k);
            }
            free(one);
            free(a);
            free(b);
            free(c);
            free(want);
            free(pk);
        }
    }
    return bad;
}

static void transposed_products_match_reference_with_both_kernels(void)
{
    sh_packed_force_generic(0);
    const char *k = sh_packed_kernel();
    CHECK(sweep_tn(k) == 0, "%s kernel: A^T B wrong", k);
    sh_packed_force_generic(1);
    CHECK(sweep_tn("generic") == 0, "generic kernel: A^T B wrong");
    sh_packed_force_generic(0);
}

int main(void)
{
    check_begin("test_gemm_packed", 60);
    RUN(packed_gemm_matches_reference_with_the_cpus_kernel);
    RUN(packed_gemm_matches_reference_with_the_generic_kernel);
    RUN(column_splits_give_identical_bits);
    RUN(transposed_products_match_reference_with_both_kernels);
    RUN(empty_sums_zero_or_keep_c);
    return check_end();
}
