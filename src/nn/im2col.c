/* im2col.c — unrolling image windows into matrix columns (and back) so a convolution is one
 * matrix product: col row (c, ky, kx), column (oy, ox) holds im[c][oy*stride - pad + ky]
 * [ox*stride - pad + kx], zero outside the image (Caffe/Darknet layout). The _rows forms
 * cover output rows [oy_lo, oy_hi) only, so a big image is unrolled in tiles that stay in L2.
 * Not here: the product itself (layer_conv.c calls sh_gemm).
 * Proved by tests/nn/test_layer_conv.c (against a direct convolution loop). */
#include <string.h>
#if defined(__AVX__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#include "nn/layer.h"

static inline void add_short(float *restrict d, const float *restrict s, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) d[i + k] += s[i + k];
    for (; i < n; i++) d[i] += s[i];
}

/* d[0, n) = s[0, n) for the short rows of small images (LeNet's are 8 and 24 floats): whole
 * 8-float moves, the last one overlapping the one before, instead of a loop per float or a
 * call per row. */
static inline void copy_short(float *restrict d, const float *restrict s, int n)
{
#ifdef __AVX__
    if (n >= 8) {
        int i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(s + i));
        if (i < n) _mm256_storeu_ps(d + n - 8, _mm256_loadu_ps(s + n - 8));
        return;
    }
    if (n >= 4) {
        _mm_storeu_ps(d, _mm_loadu_ps(s));
        _mm_storeu_ps(d + n - 4, _mm_loadu_ps(s + n - 4));
        return;
    }
#elif defined(__SSE2__) /* a portable build: 4-float moves, the last overlapping */
    if (n >= 4) {
        int i = 0;
        for (; i + 4 <= n; i += 4) _mm_storeu_ps(d + i, _mm_loadu_ps(s + i));
        if (i < n) _mm_storeu_ps(d + n - 4, _mm_loadu_ps(s + n - 4));
        return;
    }
#endif
    for (int i = 0; i < n; i++) d[i] = s[i];
}

/* GCC would turn copy_short's loops back into calls to memmove. */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_MEMMOVE __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define NO_MEMMOVE
#endif

/* Stride 1 without padding (LeNet): every window lies inside the image, so each column row
 * is OH-rows-long copies of OW floats with nothing to test. */
NO_MEMMOVE static void im2col_rows_s1p0(const float *im, int c, int h, int w, int size,
                                        int oy_lo, int oy_hi, int ow, float *col,
                                        size_t ld_col)
{
    int nr = oy_hi - oy_lo;
    for (int ch = 0; ch < c; ch++)
        for (int ky = 0; ky < size; ky++)
            for (int kx = 0; kx < size; kx++) {
                const float *src = im + ((size_t)ch * h + oy_lo + ky) * w + kx;
                float *dst = col + ((size_t)(ch * size + ky) * size + kx) * ld_col;
                if (ow == 8) /* one move a row */
                    for (int r = 0; r < nr; r++, src += w, dst += 8) copy_short(dst, src, 8);
                else
                    for (int r = 0; r < nr; r++, src += w, dst += ow) copy_short(dst, src, ow);
            }
}

NO_MEMMOVE void sh_im2col_rows(const float *im, int c, int h, int w, int size, int stride,
                               int pad, int oy_lo, int oy_hi, int ow, float *col, size_t ld_col)
{
    if (stride == 1 && pad == 0 && ow < 64) {
        im2col_rows_s1p0(im, c, h, w, size, oy_lo, oy_hi, ow, col, ld_col);
        return;
    }
    for (int ch = 0; ch < c; ch++) {
        const float *plane = im + (size_t)ch * h * w;
        for (int ky = 0; ky < size; ky++) {
            for (int kx = 0; kx < size; kx++) {
                float *row = col + ((size_t)(ch * size + ky) * size + kx) * ld_col;
                /* columns ox whose input x = ox*stride - pad + kx lies in [0, w) */
                int ox0 = 0, ox1 = ow;
                while (ox0 < ow && ox0 * stride - pad + kx < 0) ox0++;
                while (ox1 > ox0 && (ox1 - 1) * stride - pad + kx >= w) ox1--;
                for (int oy = oy_lo; oy < oy_hi; oy++) {
                    float *dst = row + (size_t)(oy - oy_lo) * ow;
                    int iy = oy * stride - pad + ky;
                    if (iy < 0 || iy >= h) {
                        memset(dst, 0, (size_t)ow * sizeof *dst);
                        continue;
                    }
                    const float *src = plane + (size_t)iy * w - pad + kx;
                    for (int ox = 0; ox < ox0; ox++) dst[ox] = 0.0f;
                    if (stride == 1 && ox1 - ox0 >= 64) {
                        memcpy(dst + ox0, src + ox0, (size_t)(ox1 - ox0) * sizeof *dst);
                    } else if (stride == 1) { /* short rows: a call per row costs more */
                        copy_short(dst + ox0, src + ox0, ox1 - ox0);
                    } else if (stride == 2) { /* a constant stride vectorises */
                        for (int ox = ox0; ox < ox1; ox++) dst[ox] = src[2 * ox];
                    } else {
                        for (int ox = ox0; ox < ox1; ox++) dst[ox] = src[ox * stride];
                    }
                    for (int ox = ox1; ox < ow; ox++) dst[ox] = 0.0f;
                }
            }
        }
    }
}

/* col2im for stride 1 without padding: im2col_rows_s1p0 backwards. */
static void col2im_rows_s1p0(const float *col, size_t ld_col, int c, int h, int w,
                             int size, int oy_lo, int oy_hi, int ow, float *im)
{
    int nr = oy_hi - oy_lo;
    for (int ch = 0; ch < c; ch++)
        for (int ky = 0; ky < size; ky++)
            for (int kx = 0; kx < size; kx++) {
                float *dst = im + ((size_t)ch * h + oy_lo + ky) * w + kx;
                const float *src = col + ((size_t)(ch * size + ky) * size + kx) * ld_col;
                if (ow == 8)
                    for (int r = 0; r < nr; r++, src += 8, dst += w) add_short(dst, src, 8);
                else
                    for (int r = 0; r < nr; r++, src += ow, dst += w) add_short(dst, src, ow);
            }
}

void sh_col2im_rows(const float *col, size_t ld_col, int c, int h, int w, int size, int stride,
                    int pad, int oy_lo, int oy_hi, int ow, float *im)
{
    if (stride == 1 && pad == 0 && ow < 64) {
        col2im_rows_s1p0(col, ld_col, c, h, w, size, oy_lo, oy_hi, ow, im);
        return;
    }
    for (int ch = 0; ch < c; ch++) {
        float *plane = im + (size_t)ch * h * w;
        for (int ky = 0; ky < size; ky++) {
            for (int kx = 0; kx < size; kx++) {
                const float *row = col + ((size_t)(ch * size + ky) * size + kx) * ld_col;
                int ox0 = 0, ox1 = ow;
                while (ox0 < ow && ox0 * stride - pad + kx < 0) ox0++;
                while (ox1 > ox0 && (ox1 - 1) * stride - pad + kx >= w) ox1--;
                for (int oy = oy_lo; oy < oy_hi; oy++) {
                    int iy = oy * stride - pad + ky;
                    if (iy < 0 || iy >= h) continue;
                    const float *src = row + (size_t)(oy - oy_lo) * ow;
                    float *dst = plane + (size_t)iy * w - pad + kx;
                    if (stride == 1) {
                        add_short(dst + ox0, src + ox0, ox1 - ox0);
                    } else {
                        for (int ox = ox0; ox < ox1; ox++) dst[ox * stride] += src[ox];
                    }
                }
            }
        }
    }
}

void sh_im2col(const float *im, int c, int h, int w, int size, int stride, int pad, int oh,
               int ow, float *col, size_t ld_col)
{
    sh_im2col_rows(im, c, h, w, size, stride, pad, 0, oh, ow, col, ld_col);
}

void sh_col2im(const float *col, size_t ld_col, int c, int h, int w, int size, int stride,
               int pad, int oh, int ow, float *im)
{
    sh_col2im_rows(col, ld_col, c, h, w, size, stride, pad, 0, oh, ow, im);
}
