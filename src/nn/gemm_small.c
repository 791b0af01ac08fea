/* gemm_small.c — Y = X W^T and dX = dY W for a few rows X, dY and a large W (a connected
 * layer's share under hybrid parallelism: 64 images by 2048 x 6272 weights). OpenBLAS packs
 * all of W (51 MB) on every call and runs such products at 100-150 GFLOPS on one core here;
 * turned around, C^T = W A^T packs only A (m x k, a few hundred KB) and streams W once
 * through the packed kernel as its left operand: 170-185 GFLOPS (one AVX-512 core, 64 rows by
 * 2048 x 6272 and 2048 x 4096: 11.7 -> 9.4 ms forward, 10.8 -> 9.5 ms input gradient). The
 * weight gradient dW = dY^T X stays OpenBLAS's: turned around it was no faster. Whole layers
 * use it too where a pass has few rows (layer_dense.c's rule, bench/README.md 2026-11-25).
 * Since 2026-11-25 13:20 a hybrid share's input gradient is OpenBLAS's again: measured then,
 * 2048 x 6272 at 64 rows, sh_small_gemm_nn 35 ms against OpenBLAS's 18 (at 128 rows 55 / 29).
 * Not here: the kernels and the packing (gemm_packed.c); who calls it (layer_dense.c).
 * Proved by tests/nn/test_gemm_small.c. */
#include "nn/gemm_small.h"

#include "nn/gemm_packed.h"

size_t sh_small_ws_count(int m, int k, int n)
{
    return sh_packed_count(k, m) + (size_t)n * (size_t)m;
}

/* c (m, n) = ct^T (+ c), ct stored (n, m) */
static void put_transposed(int m, int n, const float *ct, int accumulate, float *c, int ldc)
{
    enum { J = 64 }; /* columns of c a pass: J x m floats of ct stay in L1 */
    for (int j0 = 0; j0 < n; j0 += J) {
        int j1 = j0 + J < n ? j0 + J : n;
        for (int i = 0; i < m; i++) {
            float *row = c + (size_t)i * ldc;
            if (accumulate)
                for (int j = j0; j < j1; j++) row[j] += ct[(size_t)j * m + i];
            else
                for (int j = j0; j < j1; j++) row[j] = ct[(size_t)j * m + i];
        }
    }
}

void sh_small_gemm_nt(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                      float *c, int ldc, float *ws)
{
    if (m <= 0 || n <= 0) return;
    float *packed = ws, *ct = ws + sh_packed_count(k, m); /* A^T (k, m) packed; C^T (n, m) */
    sh_packed_pack(1, k, m, a, lda, 0, sh_packed_npanels(m), packed);
    sh_packed_gemm(n, 0, m, k, w, ldw, packed, 0, ct, m);
    put_transposed(m, n, ct, 0, c, ldc);
}

void sh_small_gemm_nn(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                      int accumulate, float *c, int ldc, float *ws)
{
    if (m <= 0 || n <= 0) return;
    float *packed = ws, *ct = ws + sh_packed_count(k, m);
    sh_packed_pack(1, k, m, a, lda, 0, sh_packed_npanels(m), packed);
    sh_packed_gemm_tn(n, 0, m, k, w, ldw, packed, k, 0, ct, m);
    put_transposed(m, n, ct, accumulate, c, ldc);
}
