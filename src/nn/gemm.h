/* gemm.h — single-precision matrix products, row-major: C = alpha * op(A) op(B) + beta * C.
 * OpenBLAS (opened at run time, kernels chosen from the CPU) or a portable blocked loop.
 * Not here: threading over a batch (threads.c); every call here runs on the calling thread.
 * Proved by tests/nn/test_gemm.c. */
#ifndef SH_GEMM_H
#define SH_GEMM_H

/* op(A) is (m, k), op(B) is (k, n), C is (m, n). trans_a: A is stored (k, m) with leading
 * dimension lda. Opens the backend on first use (thread-safe). beta = 0 ignores C's
 * previous contents (NaN included). */
void sh_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
             int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* The portable kernel, always available (tests compare the two). */
void sh_gemm_portable(int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc);
/* "openblas (OPENBLAS_CORETYPE=SkylakeX)" or "portable (why)"; opens the backend. */
const char *sh_gemm_backend(void);
/* 1 when OpenBLAS is in use. */
int sh_gemm_is_blas(void);
/* OpenBLAS's own threads for one call (shoal keeps it at 1 and splits batches itself). */
void sh_gemm_set_blas_threads(int nthreads);

#endif
