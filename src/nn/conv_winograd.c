/* conv_winograd.c — 3x3 stride-1 pad-1 convolutions by Winograd's F(2x2, 3x3): 16 multiplies
 * per 2x2 outputs and channel pair instead of 36.
 * Not here: the weight gradient, bias, activation, batch norm (layer_conv.c).
 * Proved by tests/nn/test_layer_conv.c (against the im2col path and a direct loop). */
#include "nn/conv_winograd.h"

#include <string.h>

#include "base/hot.h"
#include "nn/gemm.h"

/* Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2015): each 4x4 input
 * tile d (2x2 outputs) becomes V = B^T d B, each 3x3 kernel g becomes U = G g G^T, the 16
 * element-wise products summed over input channels are 16 sgemms M[xi] = U[xi] V[xi], and the
 * outputs are A^T M A. Tiles are taken a block of tile rows at a time (rows of several images
 * side by side when the images are small) so each sgemm has a few hundred columns and the block
 * stays in cache. */

/* Tiles per block: at least TILES_MIN (sgemm needs the columns), else as many as keep the
 * block's V and M (16 * (in + out) floats a tile) within BLOCK_FLOATS. */
enum { TILES_MIN = 256 };
#define BLOCK_FLOATS ((size_t)1 << 21)

static size_t round16(size_t count) { return (count + 15) & ~(size_t)15; }

/* Tile rows per block for images (h, w) (tw tiles a row), at most max_rows. */
static int block_rows(int in_ch, int out_ch, int tw, int max_rows)
{
    size_t tiles = BLOCK_FLOATS / (16 * (size_t)(in_ch + out_ch));
    if (tiles < TILES_MIN) tiles = TILES_MIN;
    size_t rows = tiles / (size_t)tw;
    if (rows < 1) rows = 1;
    if (rows > (size_t)max_rows) rows = (size_t)max_rows;
    return (int)rows;
}

/* A padded row buffer: 2 * round16(tw) + 2 floats are read by the transforms. */
static size_t row_floats(int tw) { return round16(2 * round16((size_t)tw) + 2); }

/* Row stride of V and M for nt tiles: the transforms write and read whole groups of TX
 * tiles, up to TX past the last one. */
static size_t tile_ld(size_t nt) { return round16(nt) + 16; }

static size_t ws_floats(int in_ch, int out_ch, int tw, int rows)
{
    size_t ld = tile_ld((size_t)rows * tw);
    return 16 * (size_t)(in_ch + out_ch) * ld + 6 * row_floats(tw);
}

size_t sh_wino_ws_count(int c, int f, int h, int w, int nimg)
{
    int th = (h + 1) / 2, tw = (w + 1) / 2;
    size_t a = ws_floats(c, f, tw, block_rows(c, f, tw, nimg * th));
    size_t b = ws_floats(f, c, tw, block_rows(f, c, tw, nimg * th));
    return a > b ? a : b;
}

void sh_wino_weights(const float *wt, int f, int c, int f0, int f1, float *u)
{
    size_t plane = (size_t)f * c;
    for (int o = f0; o < f1; o++)
        for (int i0 = 0; i0 < c; i0 += 16) {
            int nb = c - i0 < 16 ? c - i0 : 16;
            float d[16][16]; /* [xi][i - i0] */
            for (int j = 0; j < nb; j++) {
                const float *k = wt + ((size_t)o * c + i0 + j) * 9;
                float t[4][3]; /* G g: G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1] */
                for (int x = 0; x < 3; x++) {
                    t[0][x] = k[x];
                    t[1][x] = 0.5f * (k[x] + k[3 + x] + k[6 + x]);
                    t[2][x] = 0.5f * (k[x] - k[3 + x] + k[6 + x]);
                    t[3][x] = k[6 + x];
                }
                for (int y = 0; y < 4; y++) { /* (G g) G^T */
                    d[y * 4 + 0][j] = t[y][0];
                    d[y * 4 + 1][j] = 0.5f * (t[y][0] + t[y][1] + t[y][2]);
                    d[y * 4 + 2][j] = 0.5f * (t[y][0] - t[y][1] + t[y][2]);
                    d[y * 4 + 3][j] = t[y][2];
                }
            }
            for (int xi = 0; xi < 16; xi++)
                memcpy(u + xi * plane + (size_t)o * c + i0, d[xi], (size_t)nb * sizeof(float));
        }
}

/* Input row iy of a plane into buf[1 .. w] with zeros around it (row_floats(tw) in all). */
static void pad_row(const float *plane, int h, int w, int iy, int tw, float *buf)
{
    size_t len = row_floats(tw);
    if (iy < 0 || iy >= h) {
        memset(buf, 0, len * sizeof *buf);
        return;
    }
    buf[0] = 0.0f;
    memcpy(buf + 1, plane + (size_t)iy * w, (size_t)w * sizeof *buf);
    for (size_t x = (size_t)w + 1; x < len; x++) buf[x] = 0.0f;
}

/* Tiles are transformed 16 at a time through a local (16, 16) array, so the compiler sees
 * that loads and stores cannot alias and vectorises along the tiles. */
enum { TX = 16 };

/* V[xi][tx] (rows xs floats apart) = (B^T d B)[xi] for the tw tiles of one tile row, from 4
 * padded input rows (readable up to 2 * round16(tw) + 2 floats); writes up to round16(tw).
 * B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
SH_HOT static void transform_input_row(const float *restrict p0, const float *restrict p1,
                                const float *restrict p2, const float *restrict p3, int tw,
                                float *restrict v, size_t xs)
{
    for (int t0 = 0; t0 < tw; t0 += TX) {
        float o[16][TX];
        for (int j = 0; j < TX; j++) {
            int b = 2 * (t0 + j);
            float t[4][4];
            for (int c = 0; c < 4; c++) {
                float d0 = p0[b + c], d1 = p1[b + c], d2 = p2[b + c], d3 = p3[b + c];
                t[0][c] = d0 - d2;
                t[1][c] = d1 + d2;
                t[2][c] = d2 - d1;
                t[3][c] = d1 - d3;
            }
            for (int r = 0; r < 4; r++) {
                o[r * 4 + 0][j] = t[r][0] - t[r][2];
                o[r * 4 + 1][j] = t[r][1] + t[r][2];
                o[r * 4 + 2][j] = t[r][2] - t[r][1];
                o[r * 4 + 3][j] = t[r][1] - t[r][3];
            }
        }
        for (int xi = 0; xi < 16; xi++) memcpy(v + (size_t)xi * xs + t0, o[xi], sizeof o[xi]);
    }
}

/* Two output rows (2 * tw floats each, 2 * round16(tw) written) of one tile row from
 * M[xi][tx] (rows xs floats apart, read up to round16(tw)): A^T m A with A^T = [1 1 1 0; 0 1 -1 -1]. */
SH_HOT static void transform_output_row(const float *restrict m, size_t xs, int tw,
                                 float *restrict y0, float *restrict y1)
{
    for (int t0 = 0; t0 < tw; t0 += TX) {
        float a[16][TX];
        for (int xi = 0; xi < 16; xi++) memcpy(a[xi], m + (size_t)xi * xs + t0, sizeof a[xi]);
        float r0[2 * TX], r1[2 * TX];
        for (int j = 0; j < TX; j++) {
            float s[2][4];
            for (int c = 0; c < 4; c++) {
                s[0][c] = a[c][j] + a[4 + c][j] + a[8 + c][j];
                s[1][c] = a[4 + c][j] - a[8 + c][j] - a[12 + c][j];
            }
            r0[2 * j] = s[0][0] + s[0][1] + s[0][2];
            r0[2 * j + 1] = s[0][1] - s[0][2] - s[0][3];
            r1[2 * j] = s[1][0] + s[1][1] + s[1][2];
            r1[2 * j + 1] = s[1][1] - s[1][2] - s[1][3];
        }
        memcpy(y0 + 2 * t0, r0, sizeof r0);
        memcpy(y1 + 2 * t0, r1, sizeof r1);
    }
}

static void store_row(float *restrict dst, const float *restrict src, int w, int accum)
{
    if (accum)
        for (int x = 0; x < w; x++) dst[x] += src[x];
    else
        memcpy(dst, src, (size_t)w * sizeof *dst);
}

/* Rotating a kernel by 180 degrees reverses both indices of G g G^T's rows/columns' order
 * (3, 1, 2, 0): the input gradient uses U[turn(xi)] transposed. */
static const int turn[4] = {3, 1, 2, 0};

void sh_wino_conv(const float *u, int flip, const float *in, int nimg, int in_ch, int h, int w,
                  int out_ch, float *out, int accum, float *ws)
{
    int th = (h + 1) / 2, tw = (w + 1) / 2, total_rows = nimg * th;
    int rows = block_rows(in_ch, out_ch, tw, total_rows);
    size_t hw = (size_t)h * w, row_len = row_floats(tw);
    size_t ld_max = tile_ld((size_t)rows * tw);
    float *v = ws;                                     /* (16, in_ch, ld) */
    float *m = v + 16 * (size_t)in_ch * ld_max;        /* (16, out_ch, ld) */
    float *buf = m + 16 * (size_t)out_ch * ld_max;     /* 6 rows */
    size_t uplane = (size_t)out_ch * in_ch;
    for (int r0 = 0; r0 < total_rows; r0 += rows) {
        int nr = total_rows - r0 < rows ? total_rows - r0 : rows;
        size_t nt = (size_t)nr * tw, ld = tile_ld(nt);
        for (int i = 0; i < in_ch; i++)
            for (int r = 0; r < nr; r++) {
                int n = (r0 + r) / th, ty = (r0 + r) % th;
                const float *plane = in + ((size_t)n * in_ch + i) * hw;
                for (int k = 0; k < 4; k++)
                    pad_row(plane, h, w, 2 * ty - 1 + k, tw, buf + k * row_len);
                transform_input_row(buf, buf + row_len, buf + 2 * row_len, buf + 3 * row_len, tw,
                                    v + (size_t)i * ld + (size_t)r * tw, (size_t)in_ch * ld);
            }
        for (int xi = 0; xi < 16; xi++) {
            float *mx = m + (size_t)xi * out_ch * ld;
            const float *vx = v + (size_t)xi * in_ch * ld;
            if (!flip)
                sh_gemm(0, 0, out_ch, (int)nt, in_ch, 1.0f, u + xi * uplane, in_ch, vx, (int)ld,
                        0.0f, mx, (int)ld);
            else /* U is (in_ch, out_ch) here: the forward layer's (F, C) */
                sh_gemm(1, 0, out_ch, (int)nt, in_ch, 1.0f,
                        u + (size_t)(turn[xi / 4] * 4 + turn[xi % 4]) * uplane, out_ch, vx,
                        (int)ld, 0.0f, mx, (int)ld);
        }
        float *y0 = buf + 4 * row_len, *y1 = buf + 5 * row_len;
        for (int o = 0; o < out_ch; o++)
            for (int r = 0; r < nr; r++) {
                int n = (r0 + r) / th, ty = (r0 + r) % th;
                float *plane = out + ((size_t)n * out_ch + o) * hw;
                transform_output_row(m + (size_t)o * ld + (size_t)r * tw, (size_t)out_ch * ld, tw,
                                     y0, y1);
                store_row(plane + (size_t)(2 * ty) * w, y0, w, accum);
                if (2 * ty + 1 < h) store_row(plane + (size_t)(2 * ty + 1) * w, y1, w, accum);
            }
    }
}
