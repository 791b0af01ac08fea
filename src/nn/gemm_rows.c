/* gemm_rows.c — C = A W^T and C = A W for a few rows A and a large W as it is stored, vectors
 * of 16 floats along W's rows: A W^T as dot products (16 at once, summed across lanes by a
 * shuffle tree), A W as rows of W scaled by A's values. W is streamed once (A W: once per 12
 * rows of A).
 * Not here: many rows (gemm.c, gemm_packed.c); who calls it (layer_rbm.c).
 * Proved by tests/nn/test_gemm_rows.c. */
#include "nn/gemm_rows.h"

#include <string.h>

#include "base/hot.h"

/* GCC keeps a + b * c unfused under -std=c11; the kernels' speed is their fused multiply-adds. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

enum { NR = 16, NT_ROWS = 8, NN_ROWS = 12 };

typedef float v16 __attribute__((vector_size(NR * sizeof(float)), aligned(sizeof(float))));

static inline v16 load16(const float *p)
{
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* r[q] for q < 16 become one vector whose lane q is the sum of r[q]'s lanes: at each step the
 * lanes with bit b clear take x's pairwise sums, those with it set y's. */
static inline v16 lane_sums16(v16 r[NR])
{
#ifdef __clang__
    v16 out;
    for (int q = 0; q < NR; q++) {
        float s = 0;
        for (int l = 0; l < NR; l++) s += r[q][l];
        out[q] = s;
    }
    return out;
#else
    typedef int i16 __attribute__((vector_size(NR * sizeof(int))));
    for (int b = NR / 2; b >= 1; b /= 2) {
        i16 lo, hi;
        for (int c = 0; c < NR; c++) {
            lo[c] = (c & b) ? NR + c - b : c;
            hi[c] = (c & b) ? NR + c : c + b;
        }
        for (int i = 0; i < b; i++)
            r[i] = __builtin_shuffle(r[i], r[i + b], lo) + __builtin_shuffle(r[i], r[i + b], hi);
    }
    return r[0];
#endif
}

/* mr rows of A (1..NT_ROWS) by two rows of W (w0, w0 + ldw), or one without two: dot products
 * over k, the tail past a multiple of 16 added one by one. */
static inline __attribute__((always_inline)) void tile_nt(int mr, int two, int k, const float *a, int lda,
                                                          const float *w0, int ldw, float *c, int ldc)
{
    const float *w1 = w0 + (two ? ldw : 0);
    v16 acc[2 * NT_ROWS];
    for (int q = 0; q < 2 * NT_ROWS; q++) acc[q] = (v16){0};
    int p = 0;
    for (; p + NR <= k; p += NR) {
        v16 x0 = load16(w0 + p), x1 = two ? load16(w1 + p) : (v16){0};
        for (int i = 0; i < mr; i++) {
            v16 av = load16(a + (size_t)i * lda + p);
            acc[2 * i] += av * x0;
            if (two) acc[2 * i + 1] += av * x1;
        }
    }
    float sum[2 * NT_ROWS];
    if (mr == NT_ROWS) {
        v16 s = lane_sums16(acc);
        memcpy(sum, &s, sizeof s);
    } else {
        for (int q = 0; q < 2 * mr; q++) {
            float t = 0;
            for (int l = 0; l < NR; l++) t += acc[q][l];
            sum[q] = t;
        }
    }
    for (int i = 0; i < mr; i++) {
        const float *ai = a + (size_t)i * lda;
        float s0 = sum[2 * i], s1 = sum[2 * i + 1];
        for (int t = p; t < k; t++) {
            s0 += ai[t] * w0[t];
            if (two) s1 += ai[t] * w1[t];
        }
        c[(size_t)i * ldc] = s0;
        if (two) c[(size_t)i * ldc + 1] = s1;
    }
}

#define NT_CASE(MR)                                                                       \
    case MR:                                                                              \
        if (two) tile_nt(MR, 1, k, ai, lda, w0, ldw, ci, ldc);                            \
        else tile_nt(MR, 0, k, ai, lda, w0, ldw, ci, ldc);                                \
        break

SH_HOT void sh_rows_gemm_nt(int m, int n, int k, const float *a, int lda, const float *w, int ldw, float *c, int ldc)
{
    for (int j = 0; j < n; j += 2) /* W's two rows stay in L1 while every row of A takes them */
        for (int i = 0; i < m; i += NT_ROWS) {
            int mr = m - i < NT_ROWS ? m - i : NT_ROWS;
            const float *ai = a + (size_t)i * lda;
            const float *w0 = w + (size_t)j * ldw;
            int two = j + 1 < n;
            float *ci = c + (size_t)i * ldc + j;
            switch (mr) {
                NT_CASE(8);
                NT_CASE(7);
                NT_CASE(6);
                NT_CASE(5);
                NT_CASE(4);
                NT_CASE(3);
                NT_CASE(2);
            default:
                if (two) tile_nt(1, 1, k, ai, lda, w0, ldw, ci, ldc);
                else tile_nt(1, 0, k, ai, lda, w0, ldw, ci, ldc);
            }
        }
}

/* mr rows of A (1..NN_ROWS) by nv vectors of W's columns (1 or 2) from column j: C's rows as
 * sums of W's rows scaled by A's values, k in order. */
static inline __attribute__((always_inline)) void tile_nn(int mr, int nv, int k, const float *a, int lda,
                                                          const float *w, int ldw, float *c, int ldc)
{
    v16 acc[NN_ROWS][2];
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = (v16){0};
    for (int p = 0; p < k; p++) {
        const float *wp = w + (size_t)p * ldw;
        v16 x0 = load16(wp), x1 = nv > 1 ? load16(wp + NR) : (v16){0};
        for (int i = 0; i < mr; i++) {
            float av = a[(size_t)i * lda + p];
            acc[i][0] += av * x0;
            if (nv > 1) acc[i][1] += av * x1;
        }
    }
    for (int i = 0; i < mr; i++)
        memcpy(c + (size_t)i * ldc, acc[i], (size_t)nv * sizeof(v16));
}

#define NN_CASE(MR)                                                                       \
    case MR:                                                                              \
        if (nv == 2) tile_nn(MR, 2, k, ai, lda, w + j, ldw, ci, ldc);                     \
        else tile_nn(MR, 1, k, ai, lda, w + j, ldw, ci, ldc);                             \
        break

SH_HOT void sh_rows_gemm_nn(int m, int n, int k, const float *a, int lda, const float *w, int ldw, float *c, int ldc)
{
    int nfull = n / NR * NR;
    for (int i = 0; i < m; i += NN_ROWS) {
        int mr = m - i < NN_ROWS ? m - i : NN_ROWS;
        const float *ai = a + (size_t)i * lda;
        for (int j = 0; j < nfull; j += 2 * NR) {
            int nv = nfull - j >= 2 * NR ? 2 : 1;
            float *ci = c + (size_t)i * ldc + j;
            switch (mr) {
                NN_CASE(12);
                NN_CASE(11);
                NN_CASE(10);
                NN_CASE(9);
                NN_CASE(8);
                NN_CASE(7);
                NN_CASE(6);
                NN_CASE(5);
                NN_CASE(4);
                NN_CASE(3);
                NN_CASE(2);
            default:
                if (nv == 2) tile_nn(1, 2, k, ai, lda, w + j, ldw, ci, ldc);
                else tile_nn(1, 1, k, ai, lda, w + j, ldw, ci, ldc);
            }
        }
        for (int r = 0; r < mr; r++) /* the columns past the last whole vector */
            for (int j = nfull; j < n; j++) {
                float s = 0;
                for (int p = 0; p < k; p++) s += ai[(size_t)r * lda + p] * w[(size_t)p * ldw + j];
                c[(size_t)(i + r) * ldc + j] = s;
            }
    }
}
