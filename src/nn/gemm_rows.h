/* gemm_rows.h — C = A W^T and C = A W for a few rows of A (an RBM's batch of ten) against a large
 * W read as it is stored: vectors run along W's rows, so no operand is packed and the few rows
 * are not padded to a vector's width.
 * Not here: many rows (gemm.c, gemm_packed.c). Proved by tests/nn/test_gemm_rows.c. */
#ifndef SH_GEMM_ROWS_H
#define SH_GEMM_ROWS_H

/* C (m, n; ldc apart) = A (m, k; lda apart) W^T, W stored (n, k), ldw apart. */
void sh_rows_gemm_nt(int m, int n, int k, const float *a, int lda, const float *w, int ldw, float *c, int ldc);
/* C (m, n; ldc apart) = A (m, k; lda apart) W, W stored (k, n), ldw apart. */
void sh_rows_gemm_nn(int m, int n, int k, const float *a, int lda, const float *w, int ldw, float *c, int ldc);

#endif
