/* gemm_small.c — Y = X W^T and dX = dY W for a few rows X, dY and a large W, turned around:
 * C^T = W A^T packs only A and streams W once through the packed kernel, where OpenBLAS would
 * pack all of W on every call. The weight gradient stays OpenBLAS's. Who takes it: dense_rules.c.
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
