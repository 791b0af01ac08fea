/* gemm_small.h — a connected layer's products over a few rows of images (m up to a few dozen)
 * with its weights W (n, k) read once, in order: the weights stream as the left operand of
 * the packed kernels (gemm_packed.c) and the images' side, small, is what gets packed.
 * Not here: the kernels (gemm_packed.c); which layers use it (layer_dense.c: hybrid shares,
 * whole layers over few rows).
 * Proved by tests/nn/test_gemm_small.c. */
#ifndef SH_GEMM_SMALL_H
#define SH_GEMM_SMALL_H

#include <stddef.h>

/* Scratch floats for a product of m rows by k inner values into n columns (either call). */
size_t sh_small_ws_count(int m, int k, int n);

/* C (m, n; ldc apart) = A (m, k; lda apart) W^T with W stored (n, k), ldw apart: a layer's
 * forward. Computed as C^T = W A^T; ws holds sh_small_ws_count(m, k, n) floats. Each element
 * sums over k in order, whatever m. */
void sh_small_gemm_nt(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                      float *c, int ldc, float *ws);

/* C (m, n) = A (m, k) W (+ C when accumulate) with W stored (k, n), ldw apart: a layer's
 * input gradient dX = dY W. Computed as C^T = W^T A^T; the same guarantees. */
void sh_small_gemm_nn(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                      int accumulate, float *c, int ldc, float *ws);

#endif
