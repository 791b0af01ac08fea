/* image_grid.c — a grid of small images (values in [0, 1], one or three channels) written as
 * a PNG through libpng, or as an SVG holding that PNG (base64), chosen by the file's name:
 * `shoal sample`'s samples and reconstructions. Tiles are separated by a 1-pixel border;
 * the file is written beside its final name and renamed, so a reader never sees half of it.
 * Not here: what the images are (src/cli/cmd_sample.c).
 * Proved by tests/io/test_image_grid.c. */
#include "io/image_grid.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

#define BORDER 1
#define BORDER_VALUE 64 /* dark grey between tiles */

typedef struct {
    unsigned char *bytes;
    size_t len, cap;
    int failed;
} membuf;

static void mem_write(png_structp png, png_bytep data, png_size_t n)
{
    membuf *m = png_get_io_ptr(png);
    if (m->failed) return;
    if (m->len + n > m->cap) {
        size_t cap = 2 * (m->len + n);
        unsigned char *grown = realloc(m->bytes, cap);
        if (!grown) {
            m->failed = 1;
            return;
        }
        m->bytes = grown;
        m->cap = cap;
    }
    memcpy(m->bytes + m->len, data, n);
    m->len += n;
}

static void mem_flush(png_structp png) { (void)png; }

static unsigned char to_byte(float v)
{
    v = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
    return (unsigned char)(v * 255.0f + 0.5f);
}

/* The grid as rows of bytes (gray or RGB interleaved). */
static unsigned char *compose(const float *images, int n, int c, int h, int w, int cols, int *gw, int *gh)
{
    int rows = (n + cols - 1) / cols;
    *gw = cols * (w + BORDER) + BORDER;
    *gh = rows * (h + BORDER) + BORDER;
    size_t stride = (size_t)*gw * c;
    unsigned char *px = malloc(stride * (size_t)*gh);
    if (!px) return NULL;
    memset(px, BORDER_VALUE, stride * (size_t)*gh);
    for (int k = 0; k < n; k++) {
        int x0 = BORDER + (k % cols) * (w + BORDER), y0 = BORDER + (k / cols) * (h + BORDER);
        const float *img = images + (size_t)k * c * h * w; /* (C, H, W) */
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int ch = 0; ch < c; ch++)
                    px[(size_t)(y0 + y) * stride + (size_t)(x0 + x) * c + ch] =
                        to_byte(img[((size_t)ch * h + y) * w + x]);
    }
    return px;
}

/* Encode rows (gw x gh, c channels) as PNG bytes into m. */
static shoal_result encode_png(const unsigned char *px, int gw, int gh, int c, membuf *m)
{
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(png ? &png : NULL, NULL);
        return SH_FAIL(SHOAL_ERR_NOMEM, "image grid: libpng could not start");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return SH_FAIL(SHOAL_ERR_INTERNAL, "image grid: libpng failed to encode a %dx%d image", gw, gh);
    }
    png_set_write_fn(png, m, mem_write, mem_flush);
    png_set_IHDR(png, info, (png_uint_32)gw, (png_uint_32)gh, 8, c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < gh; y++) png_write_row(png, (png_const_bytep)(px + (size_t)y * gw * c));
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    if (m->failed) return SH_FAIL(SHOAL_ERR_NOMEM, "image grid: out of memory for a %dx%d PNG", gw, gh);
    return SHOAL_OK;
}

static int ends_with(const char *s, const char *tail)
{
    size_t ls = strlen(s), lt = strlen(tail);
    return ls >= lt && !strcmp(s + ls - lt, tail);
}

static void put_base64(FILE *f, const unsigned char *b, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)b[i] << 16 | (i + 1 < n ? (unsigned)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        fputc(a[v >> 18 & 63], f);
        fputc(a[v >> 12 & 63], f);
        fputc(i + 1 < n ? a[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? a[v & 63] : '=', f);
    }
}

shoal_result sh_image_grid_save(const char *path, const float *images, int n, int c, int h, int w, int cols)
{
    int svg = ends_with(path, ".svg");
    if (!svg && !ends_with(path, ".png"))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: an image grid is written as PNG or SVG; name the file .png or .svg", path);
    if (n < 1 || (c != 1 && c != 3) || h < 1 || w < 1 || (long long)h * w > (1 << 24))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: %d images of %dx%dx%d (C x H x W): a grid takes one or three channels",
                       path, n, c, h, w);
    if (cols < 1) {
        cols = 1;
        while (cols * cols < n) cols++;
    }
    int gw = 0, gh = 0;
    unsigned char *px = compose(images, n, c, h, w, cols, &gw, &gh);
    if (!px) return SH_FAIL(SHOAL_ERR_NOMEM, "%s: out of memory for a grid of %d images", path, n);
    membuf m = {0};
    shoal_result rc = encode_png(px, gw, gh, c, &m);
    free(px);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = rc == SHOAL_OK ? fopen(tmp, "wb") : NULL;
    if (rc == SHOAL_OK && !f) rc = SH_FAIL(SHOAL_ERR_IO, "%s: cannot write: %m", tmp);
    if (f && svg) {
        fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n"
                   "<image width=\"%d\" height=\"%d\" style=\"image-rendering:pixelated\" href=\"data:image/png;base64,",
                4 * gw, 4 * gh, gw, gh, gw, gh);
        put_base64(f, m.bytes, m.len);
        fprintf(f, "\"/>\n</svg>\n");
    } else if (f) {
        fwrite(m.bytes, 1, m.len, f);
    }
    if (f && (fflush(f) != 0 || ferror(f))) rc = SH_FAIL(SHOAL_ERR_IO, "%s: write failed: %m", tmp);
    if (f) fclose(f);
    if (rc == SHOAL_OK && rename(tmp, path) != 0) rc = SH_FAIL(SHOAL_ERR_IO, "%s: cannot rename into place: %m", path);
    if (rc != SHOAL_OK && f) remove(tmp);
    free(m.bytes);
    return rc;
}
