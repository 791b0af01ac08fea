/* gemm.c — sgemm through OpenBLAS, opened with dlopen() after choosing its kernels from the
 * CPU, or through a portable cache-blocked loop when the library is missing or
 * SHOAL_GEMM=naive. Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and falls back
 * to Haswell kernels (about half the AVX-512 speed), so when OPENBLAS_CORETYPE is unset we
 * set it from __builtin_cpu_supports before the library's constructor reads it.
 * Not here: batching and threads (callers split work; OpenBLAS is kept single-threaded).
 * Proved by tests/nn/test_gemm.c. */
#include "nn/gemm.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/hot.h"
#include "base/log.h"

/* CBLAS enum values (cblas.h), spelled out so no header is needed at build time. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);
typedef void (*set_threads_fn)(int n);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static cblas_sgemm_fn blas_sgemm;
static set_threads_fn blas_set_threads;
static char backend[160] = "portable";

static const char *coretype_for_cpu(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL; /* let OpenBLAS decide */
}

static void open_backend(void)
{
    const char *want = sh_env_str("SHOAL_GEMM");
    if (want && strcmp(want, "naive") == 0) {
        snprintf(backend, sizeof backend, "portable (SHOAL_GEMM=naive)");
        return;
    }
    if (!sh_env_is_set("OPENBLAS_CORETYPE")) {
        const char *ct = coretype_for_cpu();
        if (ct) setenv("OPENBLAS_CORETYPE", ct, 0);
    }
    const char *names[] = {"libopenblas.so.0", "libopenblas.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(backend, sizeof backend, "portable (libopenblas.so.0 not found: %s)", dlerror());
        SH_LOG_W("nn", "gemm: %s; install libopenblas0 for full speed", backend);
        return;
    }
    cblas_sgemm_fn f = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    set_threads_fn t = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
    if (!f) {
        snprintf(backend, sizeof backend, "portable (libopenblas.so.0 has no cblas_sgemm)");
        SH_LOG_W("nn", "gemm: %s", backend);
        dlclose(h);
        return;
    }
    if (t) t(1);
    blas_set_threads = t;
    blas_sgemm = f;
    const char *ct = sh_env_str("OPENBLAS_CORETYPE");
    snprintf(backend, sizeof backend, "openblas (OPENBLAS_CORETYPE=%s)", ct ? ct : "auto");
    SH_LOG_I("nn", "gemm: %s", backend);
}

const char *sh_gemm_backend(void)
{
    pthread_once(&once, open_backend);
    return backend;
}

int sh_gemm_is_blas(void)
{
    pthread_once(&once, open_backend);
    return blas_sgemm != NULL;
}

void sh_gemm_set_blas_threads(int nthreads)
{
    pthread_once(&once, open_backend);
    if (blas_set_threads) blas_set_threads(nthreads < 1 ? 1 : nthreads);
}

void sh_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
             int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    pthread_once(&once, open_backend);
    if (m <= 0 || n <= 0) return;
    if (blas_sgemm && k > 0) {
        blas_sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta,
                   c, ldc);
        return;
    }
    sh_gemm_portable(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* Portable kernel. Vocabulary: a row panel of C (MB rows) is updated by a KB-deep slab of
 * op(A) and op(B); the innermost loop runs along a contiguous row of B (trans_b = 0) so the
 * compiler vectorises it, or is a dot product along contiguous rows of A and B
 * (trans_b = 1). Block sizes keep a KB x NB slab of B (64 KiB) in L2. */
enum { KB = 128, NB = 128 };

static void scale_c(int m, int n, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++) {
        float *row = c + (size_t)i * ldc;
        if (beta == 0.0f)
            memset(row, 0, (size_t)n * sizeof *row);
        else if (beta != 1.0f)
            for (int j = 0; j < n; j++) row[j] *= beta;
    }
}

SH_HOT void sh_gemm_portable(int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc)
{
    if (m <= 0 || n <= 0) return;
    scale_c(m, n, beta, c, ldc);
    if (k <= 0 || alpha == 0.0f) return;
    if (!trans_b) {
        for (int k0 = 0; k0 < k; k0 += KB) {
            int k1 = k0 + KB < k ? k0 + KB : k;
            for (int j0 = 0; j0 < n; j0 += NB) {
                int j1 = j0 + NB < n ? j0 + NB : n;
                for (int i = 0; i < m; i++) {
                    float *restrict crow = c + (size_t)i * ldc;
                    for (int p = k0; p < k1; p++) {
                        float av = alpha * (trans_a ? a[(size_t)p * lda + i]
                                                    : a[(size_t)i * lda + p]);
                        const float *restrict brow = b + (size_t)p * ldb;
                        for (int j = j0; j < j1; j++) crow[j] += av * brow[j];
                    }
                }
            }
        }
        return;
    }
    for (int i = 0; i < m; i++) {
        float *crow = c + (size_t)i * ldc;
        for (int j = 0; j < n; j++) {
            const float *brow = b + (size_t)j * ldb;
            float sum = 0.0f;
            if (!trans_a) {
                const float *arow = a + (size_t)i * lda;
                for (int p = 0; p < k; p++) sum += arow[p] * brow[p];
            } else {
                for (int p = 0; p < k; p++) sum += a[(size_t)p * lda + i] * brow[p];
            }
            crow[j] += alpha * sum;
        }
    }
}
