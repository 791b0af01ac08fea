/* gemm_packed.h — C = A B + beta C with B packed once and used many times: the recurrent
 * layers multiply each time step's (B, H) state by the same weight matrix T times a pass, and
 * packing it once per pass saves OpenBLAS re-packing 1 MB on every step.
 * Not here: general products (gemm.c); when to pack and which columns a thread owns (the
 * layers, recurrent.c). Proved by tests/nn/test_gemm_packed.c. */
#ifndef SH_GEMM_PACKED_H
#define SH_GEMM_PACKED_H

#include <stddef.h>

#define SH_PACKED_NR 16 /* columns per panel: one 512-bit vector of floats */

/* Panels of a packed (k, n) operand: n / SH_PACKED_NR rounded up. */
static inline int sh_packed_npanels(int n) { return (n + SH_PACKED_NR - 1) / SH_PACKED_NR; }
/* Floats a packed (k, n) operand takes: panel p holds columns [16p, 16p + 16) as k rows of
 * 16 (the last panel padded with zeros). */
static inline size_t sh_packed_count(int k, int n)
{
    return (size_t)sh_packed_npanels(n) * (size_t)k * SH_PACKED_NR;
}

/* Pack panels [p0, p1) of op(B) (k, n) into packed (sh_packed_count floats; threads may
 * pack disjoint panel ranges at once). trans_b: B is stored (n, k), ldb apart. */
void sh_packed_pack(int trans_b, int k, int n, const float *b, int ldb, int p0, int p1,
                    float *packed);

/* Columns [n0, n1) of C (m, n) = A (m, k; lda apart) times the packed op(B) (k, n), plus C
 * when accumulate is 1 (0 ignores C's previous contents, NaN included). n0 is a multiple of
 * SH_PACKED_NR. Each element's sum runs over k in order, the same whatever [n0, n1), so a
 * split of the columns across threads does not change the results. */
void sh_packed_gemm(int m, int n0, int n1, int k, const float *a, int lda, const float *packed,
                    int accumulate, float *c, int ldc);

/* Columns [n0, n1) of C (m, n) = A^T B (+ C when accumulate): A stored (k, m), lda apart
 * (the weight gradients dG^T X of the recurrent layers, k = every row of a batch); B the
 * first k rows at packed of a packed operand of kp >= k rows (packed may point at a later
 * row: panels stay kp rows apart). The same guarantees as sh_packed_gemm. */
void sh_packed_gemm_tn(int m, int n0, int n1, int k, const float *a, int lda,
                       const float *packed, int kp, int accumulate, float *c, int ldc);

/* Pack rows [k0, k1) of a (k, n) B stored by rows (b: row k0, ldb apart), panels [p0, p1),
 * into packed as sh_packed_pack lays it out: a B gathered from several places (the first
 * step's state, then the outputs) packs in pieces. */
void sh_packed_pack_rows(int k, int n, int k0, int k1, const float *b, int ldb, int p0, int p1,
                         float *packed);

/* The kernels behind it: "avx512" when the CPU has AVX-512F, else "generic" (the same
 * vector code compiled for the build's target). tests/nn/test_gemm_packed.c runs both. */
const char *sh_packed_kernel(void);
void sh_packed_force_generic(int on);

#endif
