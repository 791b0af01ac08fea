/* image_png.c — PNG into 8-bit grey or RGB through libpng: grey, grey+alpha, RGB, RGBA,
 * palette (with or without transparency), 1-16 bits a sample, interlaced; alpha is dropped
 * (as PIL's convert("RGB")), 16-bit samples scaled to 8 with rounding.
 * Not here: reading the file, JPEG (image_read.c, image_jpeg.c). Proved by tests/data/test_image_decode.c. */
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <png.h>

#include "base/err.h"
#include "data/image.h"

typedef struct {
    const uint8_t *buf;
    size_t nbytes, pos;
    char msg[256];
    int bad;                 /* a warning that means the pixels are not the file's */
} png_src;

/* libpng's default handler prints and aborts through its own jump; ours keeps the message
 * and jumps back to the decode call, so a damaged file is a result. */
static void on_error(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings stay quiet (an odd colour profile is no reason to lose a picture), except those
 * about the image data itself, which libpng may only warn about. */
static void on_warning(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    if (s->bad) return;
    if (strstr(msg, "IDAT") || strstr(msg, "image data") || strstr(msg, "ecompression")) {
        snprintf(s->msg, sizeof s->msg, "%s", msg);
        s->bad = 1;
    }
}

static void read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->nbytes - s->pos) png_error(png, "the file ends early (truncated)");
    memcpy(out, s->buf + s->pos, n);
    s->pos += n;
}

/* Everything that may longjmp; the caller's setjmp catches it. Returns the channels decoded
 * (1 grey, 3 RGB) into img->px, or -1 with a result in *rc. */
static int run(png_structp png, png_infop info, const char *name, int c, sh_image *img,
               shoal_result *rc)
{
    png_uint_32 w32, h32;
    int depth, ctype, interlace;
    png_read_info(png, info);
    png_get_IHDR(png, info, &w32, &h32, &depth, &ctype, &interlace, NULL, NULL);
    int64_t npix = (int64_t)w32 * h32;
    if (npix <= 0 || npix > SH_IMAGE_MAX_PIXELS) {
        *rc = SH_FAIL(SHOAL_ERR_FORMAT, "%s: a PNG of %ux%u pixels, beyond the %lld pixels a "
                      "picture may have; shrink it", name, w32, h32, (long long)SH_IMAGE_MAX_PIXELS);
        return -1;
    }
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_scale_16(png);
    /* alpha, and tRNS (a transparent colour or palette entries) that expanding makes alpha */
    if ((ctype & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
    int colour = ctype == PNG_COLOR_TYPE_PALETTE || (ctype & PNG_COLOR_MASK_COLOR);
    if (c == 3 && !colour) png_set_gray_to_rgb(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int got = colour ? 3 : c;   /* a colour file read for grey goes RGB, then luma below */
    if ((int)png_get_rowbytes(png, info) != (int)w32 * got) {
        *rc = SH_FAIL(SHOAL_ERR_INTERNAL, "%s: libpng gives rows of %zu bytes, expected %u",
                      name, (size_t)png_get_rowbytes(png, info), w32 * (unsigned)got);
        return -1;
    }
    int w = (int)w32, h = (int)h32;
    *rc = sh_image_reserve(img, (size_t)npix * (size_t)got, 0);
    if (*rc != SHOAL_OK) return -1;
    /* interlaced: every pass runs over all rows, filling in what the earlier ones left */
    for (int p = 0; p < passes; p++)
        for (int y = 0; y < h; y++) png_read_row(png, img->px + (size_t)y * w * got, NULL);
    img->w = w;
    img->h = h;
    img->full_w = w;
    img->full_h = h;
    return got;
}

shoal_result sh_png_decode(const uint8_t *buf, size_t nbytes, const char *name, int c,
                           sh_image *img)
{
    png_src src = {.buf = buf, .nbytes = nbytes};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
    if (!png) return SH_FAIL(SHOAL_ERR_NOMEM, "%s: libpng could not start (out of memory)", name);
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return SH_FAIL(SHOAL_ERR_NOMEM, "%s: libpng could not start (out of memory)", name);
    }
    png_set_read_fn(png, &src, read_mem);
    shoal_result rc = SHOAL_OK;
    int got = -1;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: damaged PNG: %s", name, src.msg);
    }
    got = run(png, info, name, c, img, &rc);
    png_destroy_read_struct(&png, &info, NULL);
    if (got < 0) return rc;
    if (src.bad) return SH_FAIL(SHOAL_ERR_FORMAT, "%s: damaged PNG: %s", name, src.msg);
    if (got == 3 && c == 1) { /* in place: each grey byte lands before the RGB it reads */
        size_t npix = (size_t)img->w * img->h;
        for (size_t i = 0; i < npix; i++)
            img->px[i] = sh_image_luma(img->px[3 * i], img->px[3 * i + 1], img->px[3 * i + 2]);
    }
    img->c = c;
    return SHOAL_OK;
}
