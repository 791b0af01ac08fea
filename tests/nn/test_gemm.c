/* test_gemm.c — proves src/nn/gemm.c: the OpenBLAS path and the portable kernel both match
 * a double-precision triple loop for odd sizes, every transpose combination, alpha and beta. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "nn/gemm.h"

typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int,
                        float, float *, int);

static void fill(float *x, size_t count, sh_rng *r)
{
    for (size_t i = 0; i < count; i++) x[i] = 2.0f * sh_rng_float(r) - 1.0f;
}

/* Reference: C = alpha op(A) op(B) + beta C, in double. */
static void ref_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                double av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += av * bv;
            }
            double old = beta == 0.0f ? 0.0 : (double)beta * c[(size_t)i * ldc + j];
            c[(size_t)i * ldc + j] = (float)(alpha * s + old);
        }
}

static int sweep(gemm_fn fn, const char *name)
{
    static const int sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 1, 33}, {1, 19, 4},
                                   {31, 29, 37}, {64, 65, 63}, {130, 7, 129}, {5, 200, 300}};
    static const float alphas[] = {1.0f, -0.5f};
    static const float betas[] = {0.0f, 1.0f, 0.25f};
    sh_rng r;
    sh_rng_seed(&r, 5);
    int bad = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int m = sizes[si][0], n = sizes[si][1], k = sizes[si][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int ai = 0; ai < 2; ai++)
                    for (int bi = 0; bi < 3; bi++) {
                        /* leading dimensions larger than the rows, to catch ld misuse */
                        int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
                        size_t na = (size_t)(ta ? k : m) * lda, nb = (size_t)(tb ? n : k) * ldb;
                        size_t nc = (size_t)m * ldc;
                        float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4),
                              *want = malloc(nc * 4);
                        fill(a, na, &r);
                        fill(b, nb, &r);
                        fill(c, nc, &r);
                        if (betas[bi] == 0.0f)
                            for (size_t i = 0; i < nc; i++) c[i] = NAN; /* must be ignored */
                        memcpy(want, c, nc * 4);
                        ref_gemm(ta, tb, m, n, k, alphas[ai], a, lda, b, ldb, betas[bi], want, ldc);
                        fn(ta, tb, m, n, k, alphas[ai], a, lda, b, ldb, betas[bi], c, ldc);
                        double worst = 0.0;
                        for (int i = 0; i < m; i++)
                            for (int j = 0; j < n; j++) {
                                double d = fabs((double)c[(size_t)i * ldc + j] -
                                                want[(size_t)i * ldc + j]);
                                if (!(d <= worst)) worst = d; /* NaN counts as worst */
                            }
                        double tol = 1e-5 * (k + 2);
                        if (!(worst <= tol) && bad++ < 5)
                            CHECK(0, "%s m=%d n=%d k=%d ta=%d tb=%d alpha=%g beta=%g: max error %g",
                                  name, m, n, k, ta, tb, alphas[ai], betas[bi], worst);
                        free(a);
                        free(b);
                        free(c);
                        free(want);
                    }
    }
    return bad;
}

static void portable_gemm_matches_reference_for_all_transposes(void)
{
    CHECK(sweep(sh_gemm_portable, "portable") == 0, "portable kernel has wrong results");
}

static void dispatching_gemm_matches_reference_for_all_transposes(void)
{
    CHECK(sweep(sh_gemm, sh_gemm_backend()) == 0, "%s has wrong results", sh_gemm_backend());
}

static void backend_is_openblas_with_cpu_coretype_when_installed(void)
{
    const char *b = sh_gemm_backend();
    CHECK(strstr(b, "openblas") != NULL || strstr(b, "portable") != NULL, "backend %s", b);
    if (sh_gemm_is_blas()) CHECK(strstr(b, "OPENBLAS_CORETYPE=") != NULL, "backend %s", b);
}

static void zero_sized_products_leave_c_alone(void)
{
    float c[4] = {1, 2, 3, 4};
    float a[1] = {5}, b[1] = {6};
    sh_gemm(0, 0, 2, 2, 0, 1.0f, a, 1, b, 2, 1.0f, c, 2); /* k = 0, beta = 1: unchanged */
    CHECK(c[0] == 1 && c[3] == 4, "c changed: %g %g", c[0], c[3]);
    sh_gemm(0, 0, 0, 2, 1, 1.0f, a, 1, b, 2, 0.0f, c, 2); /* m = 0: nothing */
    CHECK(c[0] == 1, "c changed: %g", c[0]);
}

/* The backend is chosen once per process: check SHOAL_GEMM=naive in a child forked before
 * the parent chose its own. */
static void shoal_gemm_naive_forces_the_portable_kernel(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("SHOAL_GEMM", "naive", 1);
        const char *b = sh_gemm_backend();
        float a[6] = {1, 2, 3, 4, 5, 6}, x[2] = {1, -1}, c[3];
        sh_gemm(0, 0, 3, 1, 2, 1.0f, a, 2, x, 1, 0.0f, c, 1);
        int ok = strstr(b, "portable") != NULL && strstr(b, "SHOAL_GEMM=naive") != NULL &&
                 !sh_gemm_is_blas() && c[0] == -1 && c[1] == -1 && c[2] == -1;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

int main(void)
{
    check_begin("test_gemm", 60);
    RUN(shoal_gemm_naive_forces_the_portable_kernel); /* first: before this process opens one */
    RUN(portable_gemm_matches_reference_for_all_transposes);
    RUN(dispatching_gemm_matches_reference_for_all_transposes);
    RUN(backend_is_openblas_with_cpu_coretype_when_installed);
    RUN(zero_sized_products_leave_c_alone);
    return check_end();
}
