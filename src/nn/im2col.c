/* im2col.c — unrolling image windows into matrix columns (and back) so a convolution is one
 * matrix product: col row (c, ky, kx), column (oy, ox) holds im[c][oy*stride - pad + ky]
 * [ox*stride - pad + kx], zero outside the image (Caffe/Darknet layout). The _rows forms
 * cover output rows [oy_lo, oy_hi) only, so a big image is unrolled in tiles that stay in L2.
 * Not here: the product itself (layer_conv.c calls sh_gemm).
 * Proved by tests/nn/test_layer_conv.c (against a direct convolution loop). */
#include <string.h>

#include "nn/layer.h"

static inline void add_short(float *restrict d, const float *restrict s, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) d[i + k] += s[i + k];
    for (; i < n; i++) d[i] += s[i];
}

void sh_im2col_rows(const float *im, int c, int h, int w, int size, int stride, int pad,
                    int oy_lo, int oy_hi, int ow, float *col, size_t ld_col)
{
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
                        for (int ox = ox0; ox < ox1; ox++) dst[ox] = src[ox];
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

void sh_col2im_rows(const float *col, size_t ld_col, int c, int h, int w, int size, int stride,
                    int pad, int oy_lo, int oy_hi, int ow, float *im)
{
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
