/* test_gemm_rows.c — A W^T and A W for few rows against a double loop: every row count of a
 * tile (1..13 rows), odd and even W rows, k and n past a multiple of 16, strided operands.
 * Proves src/nn/gemm_rows.c. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "nn/gemm_rows.h"

static void fill(float *x, size_t count, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < count; i++) x[i] = (float)(rand() / (double)RAND_MAX * 2.0 - 1.0);
}

/* worst |got - want| / (1 + |want|) over C (m, n): sh_rows_gemm_nt (W is n x k) or _nn (k x n),
 * each with its own padded leading dimensions and fills */
static double worst(int m, int n, int k, int nt)
{
    int lda = nt ? k + 3 : k + 1, ldw = nt ? k + 5 : n + 7, ldc = nt ? n + 2 : n + 4;
    size_t wrows = (size_t)(nt ? n : k);
    float *a = malloc((size_t)m * lda * sizeof *a), *w = malloc(wrows * ldw * sizeof *w);
    float *c = malloc((size_t)m * ldc * sizeof *c);
    if (!a || !w || !c) {
        free(a), free(w), free(c);
        return INFINITY;
    }
    fill(a, (size_t)m * lda, (nt ? 1 : 4) + m), fill(w, wrows * ldw, (nt ? 2 : 5) + n);
    fill(c, (size_t)m * ldc, nt ? 3 : 6);
    if (nt) sh_rows_gemm_nt(m, n, k, a, lda, w, ldw, c, ldc);
    else sh_rows_gemm_nn(m, n, k, a, lda, w, ldw, c, ldc);
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)a[(size_t)i * lda + p] * (nt ? w[(size_t)j * ldw + p] : w[(size_t)p * ldw + j]);
            double e = fabs(c[(size_t)i * ldc + j] - s) / (1 + fabs(s));
            if (!(e <= worst)) worst = e;
        }
    free(a), free(w), free(c);
    return worst;
}

static void a_w_transposed_matches_the_double_loop(void)
{
    const int ns[] = {1, 2, 7, 64}, ks[] = {1, 15, 16, 37, 784};
    for (int m = 1; m <= 13; m++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 5; b++) {
                double e = worst(m, ns[a], ks[b], 1);
                CHECK(e < 1e-5, "A W^T, m %d n %d k %d: worst error %g", m, ns[a], ks[b], e);
            }
}

static void a_w_matches_the_double_loop(void)
{
    const int ns[] = {1, 16, 17, 48, 50, 784}, ks[] = {1, 3, 256};
    for (int m = 1; m <= 13; m++)
        for (int a = 0; a < 6; a++)
            for (int b = 0; b < 3; b++) {
                double e = worst(m, ns[a], ks[b], 0);
                CHECK(e < 1e-5, "A W, m %d n %d k %d: worst error %g", m, ns[a], ks[b], e);
            }
}

int main(void)
{
    check_begin("test_gemm_rows", 60);
    RUN(a_w_transposed_matches_the_double_loop);
    RUN(a_w_matches_the_double_loop);
    return check_end();
}
