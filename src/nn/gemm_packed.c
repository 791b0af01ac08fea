/* gemm_packed.c — a small sgemm for a constant right-hand operand packed once into panels of
 * 16 columns (SH_PACKED_NR), for the per-step recurrent products (m = streams, a few dozen rows;
 * k and n a few hundred to a few thousand), and A^T B for their weight gradients.
 * Not here: general products (gemm.c); who packs when (the recurrent layers).
 * Proved by tests/nn/test_gemm_packed.c. */
#include "nn/gemm_packed.h"

#include <string.h>

#include "base/err.h"
#include "base/hot.h"

/* Algorithm: a tile is MR rows of C by one or two panels (16 or 32 columns); its MR x 2 vector
 * accumulators stay in registers while k runs in order, each step loading the panels' row (one
 * vector each) and broadcasting one value of A per row. Panels are the outer loop and row blocks
 * the inner one, so a pair of panels is read from L1/L2 by every row block while A stays in L2
 * (taken 512 KiB of rows at a time when m is large).
 * GCC/clang vector extensions (recurrent.h, reduce_kernels.h do the same); the AVX-512 copy of
 * the kernel is compiled with a target attribute and chosen at run time, the generic copy is the
 * same code for the build's own target and, in a portable build, for AVX2 too (SH_HOT,
 * base/hot.h), as the packing is.
 * A^T B (sh_packed_gemm_tn: k = every row of a batch) runs k in blocks of 256 so the panels stay
 * in L1, and copies A 64 rows at a time into tiles first (strided A reads lose to OpenBLAS). */

/* GCC keeps a + b * c unfused under -std=c11 (clang fuses within an expression by default);
 * the kernel's speed is its fused multiply-adds. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

enum { NR = SH_PACKED_NR, MR = 8 }; /* MR x 2 accumulators: 16 of the 32 vector registers */

typedef float v16 __attribute__((vector_size(NR * sizeof(float)), aligned(sizeof(float))));

static int force_generic;

/* Rows r[0..15] (16 x 16) become their transpose: for each bit b of the index, the element
 * (i, c) with bit b set in c and not in i trades places with (i + b, c - b); trading every
 * bit swaps row and column. 64 two-vector shuffles (vpermt2ps under AVX-512). */
#ifdef __clang__ /* no __builtin_shuffle there: the transpose goes through memory */
static void transpose16(v16 r[NR])
{
    float t[NR][NR];
    memcpy(t, r, sizeof t);
    for (int i = 0; i < NR; i++)
        for (int c = 0; c < NR; c++) r[i][c] = t[c][i];
}
#else
static void transpose16(v16 r[NR])
{
    typedef int i16 __attribute__((vector_size(NR * sizeof(int))));
    for (int b = NR / 2; b >= 1; b /= 2) {
        i16 lo, hi;
        for (int c = 0; c < NR; c++) {
            lo[c] = (c & b) ? NR + c - b : c;
            hi[c] = (c & b) ? NR + c : c + b;
        }
        for (int i = 0; i < NR; i++) {
            if (i & b) continue;
            v16 x = r[i], y = r[i + b];
            r[i] = __builtin_shuffle(x, y, lo);
            r[i + b] = __builtin_shuffle(x, y, hi);
        }
    }
}
#endif

SH_HOT void sh_packed_pack(int trans_b, int k, int n, const float *b, int ldb, int p0, int p1,
                           float *packed)
{
    for (int p = p0; p < p1; p++) {
        float *dst = packed + (size_t)p * k * NR;
        int j0 = p * NR, w = n - j0 < NR ? n - j0 : NR;
        if (w < NR) memset(dst, 0, (size_t)k * NR * sizeof(float));
        if (!trans_b) {
            for (int kk = 0; kk < k; kk++) { /* a constant size: the copy inlined, no call */
                if (w == NR)
                    memcpy(dst + (size_t)kk * NR, b + (size_t)kk * ldb + j0, NR * sizeof(float));
                else
                    memcpy(dst + (size_t)kk * NR, b + (size_t)kk * ldb + j0, (size_t)w * sizeof(float));
            }
            continue;
        }
        /* column j of op(B) is row j of B: a full panel goes 16 x 16 blocks at a time, each
         * transposed in registers; the rest element by element */
        int kk0 = 0;
        if (w == NR)
            for (; kk0 + NR <= k; kk0 += NR) {
                v16 r[NR];
                for (int j = 0; j < NR; j++) memcpy(&r[j], b + (size_t)(j0 + j) * ldb + kk0, sizeof r[j]);
                transpose16(r);
                for (int t = 0; t < NR; t++) memcpy(dst + (size_t)(kk0 + t) * NR, &r[t], sizeof r[t]);
            }
        for (int j = 0; j < w; j++) {
            const float *src = b + (size_t)(j0 + j) * ldb;
            for (int kk = kk0; kk < k; kk++) dst[(size_t)kk * NR + j] = src[kk];
        }
    }
}

/* One tile: mr rows (1..MR) by np panels (1 or 2) at b0 (and b1); the last panel's first
 * w columns are stored (the others are padding). Inlined with constant mr and np, so the
 * loops unroll and the accumulators live in registers. */
static inline __attribute__((always_inline)) void tile(int ta, int mr, int np, int k,
                                                       const float *a, int lda, const float *b0,
                                                       const float *b1, int w, int accumulate,
                                                       float *c, int ldc)
{
    v16 acc[MR][2];
    for (int i = 0; i < mr; i++) {
        acc[i][0] = (v16){0};
        acc[i][1] = (v16){0};
    }
    for (int p = 0; p < k; p++) {
        v16 x0, x1 = {0};
        memcpy(&x0, b0 + (size_t)p * NR, sizeof x0);
        if (np > 1) memcpy(&x1, b1 + (size_t)p * NR, sizeof x1);
        for (int i = 0; i < mr; i++) {
            float av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
            acc[i][0] = acc[i][0] + av * x0;
            if (np > 1) acc[i][1] = acc[i][1] + av * x1;
        }
    }
    for (int i = 0; i < mr; i++) {
        for (int q = 0; q < np; q++) {
            float *dst = c + (size_t)i * ldc + q * NR;
            int cols = q == np - 1 ? w : NR;
            if (cols == NR) {
                v16 old = {0};
                if (accumulate) memcpy(&old, dst, sizeof old);
                v16 sum = acc[i][q] + old;
                memcpy(dst, &sum, sizeof sum);
            } else {
                float lanes[NR];
                memcpy(lanes, &acc[i][q], sizeof lanes);
                for (int j = 0; j < cols; j++) dst[j] = (accumulate ? dst[j] : 0.0f) + lanes[j];
            }
        }
    }
}

/* Rows of A are taken mb at a time (a block of A_BLOCK_FLOATS, half of a 1 MiB L2), each
 * block running over every panel: many rows (the input products of a whole batch) then read
 * A from L2 rather than once per panel pair from memory. */
enum { A_BLOCK_FLOATS = 128 * 1024 };

/* One row block's tile of mr rows by NP panels, with mr a constant in each case; TA: A is
 * stored transposed. */
#define TILE_ROWS(TA, NP, LDA)                                                              \
    switch (mr) {                                                                           \
    case 8: tile(TA, 8, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;             \
    case 7: tile(TA, 7, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;             \
    case 6: tile(TA, 6, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;             \
    case 5: tile(TA, 5, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;             \
    case 4: tile(TA, 4, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;             \
    case 3: tile(TA, 3, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;             \
    case 2: tile(TA, 2, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;             \
    default: tile(TA, 1, NP, k, ai, LDA, b0, b1, w, accumulate, ci, ldc); break;            \
    }

/* The loops over panels and row blocks, as a macro so that each copy below is compiled for
 * its own target with tile() inlined into it. */
#define PACKED_BODY                                                                         \
    do {                                                                                    \
        size_t pstride = (size_t)k * NR;                                                    \
        int mb = (int)(A_BLOCK_FLOATS / k) / MR * MR;                                       \
        if (mb < MR) mb = MR;                                                               \
        for (int i0 = 0; i0 < m; i0 += mb)                                                  \
        for (int j = n0; j < n1; j += 2 * NR) {                                             \
            const float *b0 = packed + (size_t)(j / NR) * pstride, *b1 = b0 + pstride;      \
            int np = n1 - j > NR ? 2 : 1;                                                   \
            int w = n1 - j - (np - 1) * NR; /* columns stored of the last panel */         \
            if (w > NR) w = NR;                                                             \
            for (int i = i0; i < m && i < i0 + mb; i += MR) {                               \
                const float *ai = a + (size_t)i * lda;                                      \
                float *ci = c + (size_t)i * ldc + j;                                        \
                int mr = m - i < MR ? m - i : MR; /* i0 + mb is a multiple of MR */         \
                if (np == 2) {                                                              \
                    TILE_ROWS(0, 2, lda);                                                   \
                } else {                                                                    \
                    TILE_ROWS(0, 1, lda);                                                   \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    } while (0)

SH_HOT static void packed_generic(int m, int n0, int n1, int k, const float *a, int lda,
                                  const float *packed, int accumulate, float *c, int ldc)
{
    PACKED_BODY;
}


/* A^T B with A stored (k, m): k runs in blocks of KC so that a pair of panels (KC x 128
 * bytes) stays in L1 while every row tile of C uses it; the blocks' partial sums are added to
 * C in order, so each element's sum is the same whatever the split of rows or columns.
 * A's rows are lda apart, a step of a tile reading 8 floats of a new row: with lda a
 * multiple of 1 KiB (4H gates of 256 units: 4 KiB) those rows share a few L1 sets and
 * every read misses. So MC rows of A at a time are copied into tiles (k x MR, contiguous)
 * on the stack first: a copy of A per panel row, read once per pair of panels. */
enum { KC = 256, MC = 64 };
#define PACKED_BODY_T                                                                       \
    do {                                                                                    \
        float at[MC * KC] __attribute__((aligned(64))); /* (MC / MR) tiles of (k, MR) */   \
        size_t pstride = (size_t)kp * NR;                                                   \
        for (int p0 = 0; p0 < ktot; p0 += KC) {                                             \
            int k = ktot - p0 < KC ? ktot - p0 : KC;                                        \
            int accumulate = p0 > 0 || accum;                                               \
            for (int i0 = 0; i0 < m; i0 += MC) {                                            \
                int mc = m - i0 < MC ? m - i0 : MC;                                         \
                for (int p = 0; p < k; p++) { /* row by row: each row's mc floats in turn */\
                    const float *src = a + (size_t)(p0 + p) * lda + i0;                     \
                    int i = 0;                                                              \
                    for (; i + MR <= mc; i += MR)                                           \
                        memcpy(at + (size_t)i * k + (size_t)p * MR, src + i,                \
                               MR * sizeof(float));                                         \
                    if (i < mc)                                                             \
                        memcpy(at + (size_t)i * k + (size_t)p * MR, src + i,                \
                               (size_t)(mc - i) * sizeof(float));                           \
                }                                                                           \
                for (int j = n0; j < n1; j += 2 * NR) {                                     \
                    const float *b0 = packed + (size_t)(j / NR) * pstride + (size_t)p0 * NR;\
                    const float *b1 = b0 + pstride;                                         \
                    int np = n1 - j > NR ? 2 : 1;                                           \
                    int w = n1 - j - (np - 1) * NR;                                         \
                    if (w > NR) w = NR;                                                     \
                    for (int i = 0; i < mc; i += MR) {                                      \
                        const float *ai = at + (size_t)i * k;                               \
                        float *ci = c + (size_t)(i0 + i) * ldc + j;                         \
                        int mr = mc - i < MR ? mc - i : MR;                                 \
                        if (np == 2) {                                                      \
                            TILE_ROWS(1, 2, MR);                                            \
                        } else {                                                            \
                            TILE_ROWS(1, 1, MR);                                            \
                        }                                                                   \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    } while (0)

SH_HOT static void packed_t_generic(int m, int n0, int n1, int ktot, const float *a, int lda,
                                    const float *packed, int kp, int accum, float *c, int ldc)
{
    PACKED_BODY_T;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,avx512f"))) static void
packed_t_avx512(int m, int n0, int n1, int ktot, const float *a, int lda, const float *packed,
                int kp, int accum, float *c, int ldc)
{
    PACKED_BODY_T;
}

__attribute__((target("avx2,fma,avx512f"))) static void
packed_avx512(int m, int n0, int n1, int k, const float *a, int lda, const float *packed,
              int accumulate, float *c, int ldc)
{
    PACKED_BODY;
}

/* Asked once: every recurrent step calls sh_packed_gemm. */
static int has_avx512(void)
{
    static int known = -1; /* a race writes the same value */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    }
    return known;
}
#else
static int has_avx512(void) { return 0; }
#endif

const char *sh_packed_kernel(void) { return !force_generic && has_avx512() ? "avx512" : "generic"; }

void sh_packed_force_generic(int on) { force_generic = on; }

void sh_packed_gemm(int m, int n0, int n1, int k, const float *a, int lda, const float *packed,
                    int accumulate, float *c, int ldc)
{
    SH_ASSERT(n0 % NR == 0);
    if (m <= 0 || n1 <= n0) return;
    if (k <= 0) { /* an empty sum */
        for (int i = 0; i < m; i++)
            for (int j = n0; j < n1; j++)
                if (!accumulate) c[(size_t)i * ldc + j] = 0.0f;
        return;
    }
#if defined(__x86_64__)
    if (!force_generic && has_avx512()) {
        packed_avx512(m, n0, n1, k, a, lda, packed, accumulate, c, ldc);
        return;
    }
#endif
    packed_generic(m, n0, n1, k, a, lda, packed, accumulate, c, ldc);
}

void sh_packed_gemm_tn(int m, int n0, int n1, int k, const float *a, int lda,
                       const float *packed, int kp, int accumulate, float *c, int ldc)
{
    SH_ASSERT(n0 % NR == 0 && k <= kp);
    if (m <= 0 || n1 <= n0) return;
    if (k <= 0) {
        for (int i = 0; i < m; i++)
            for (int j = n0; j < n1; j++)
                if (!accumulate) c[(size_t)i * ldc + j] = 0.0f;
        return;
    }
#if defined(__x86_64__)
    if (!force_generic && has_avx512()) {
        packed_t_avx512(m, n0, n1, k, a, lda, packed, kp, accumulate, c, ldc);
        return;
    }
#endif
    packed_t_generic(m, n0, n1, k, a, lda, packed, kp, accumulate, c, ldc);
}

SH_HOT void sh_packed_pack_rows(int k, int n, int k0, int k1, const float *b, int ldb, int p0, int p1,
                         float *packed)
{
    for (int p = p0; p < p1; p++) {
        float *dst = packed + (size_t)p * k * NR + (size_t)k0 * NR;
        int j0 = p * NR, w = n - j0 < NR ? n - j0 : NR;
        if (w == NR) {
            for (int kk = k0; kk < k1; kk++)
                memcpy(dst + (size_t)(kk - k0) * NR, b + (size_t)(kk - k0) * ldb + j0,
                       NR * sizeof(float));
        } else {
            for (int kk = k0; kk < k1; kk++) {
                float *d = dst + (size_t)(kk - k0) * NR;
                memcpy(d, b + (size_t)(kk - k0) * ldb + j0, (size_t)w * sizeof(float));
                memset(d + w, 0, (size_t)(NR - w) * sizeof(float));
            }
        }
    }
}
