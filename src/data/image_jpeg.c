/* image_jpeg.c — JPEG into 8-bit grey or RGB through libjpeg-turbo: baseline and progressive,
 * grey, YCbCr, RGB, CMYK and YCCK; decoded at the smallest DCT scale 1/8, 1/4, 1/2 or 1 that
 * keeps the size the caller asks for, so a large photo costs a fraction of its full decode.
 * Not here: reading the file, PNG (image_read.c, image_png.c). Proved by tests/data/test_image_decode.c. */
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "base/err.h"
#include "data/image.h"

/* A JPEG is decoded at up to 1/8 of its size, so its own may be larger than a decoded
 * picture's bound: 16384 x 16384. */
#define SH_JPEG_MAX_FULL_PIXELS (4 * SH_IMAGE_MAX_PIXELS)
/* libjpeg's working memory for one file (a progressive one's coefficients at full size). */
#define SH_JPEG_MAX_MEMORY_NBYTES (512L << 20)

/* libjpeg's default error_exit calls exit(): ours longjmps back to the decode call with the
 * library's message, so a damaged file is a result, never the end of the process. */
typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    int bad;                 /* a warning that means the pixels are not the file's */
} jpeg_err;

static void on_error_exit(j_common_ptr cinfo)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    cinfo->err->format_message(cinfo, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings (level -1) go nowhere, except those saying the image data is cut short or
 * damaged: libjpeg fills the rest with grey and goes on, which would train on a picture
 * that is not the file's. Extraneous bytes before a marker (common and harmless) pass. */
static void on_message(j_common_ptr cinfo, int level)
{
    jpeg_err *e = (jpeg_err *)cinfo->err;
    if (level >= 0 || e->bad) return;
    int code = cinfo->err->msg_code;
    if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
        code == JWRN_MUST_RESYNC || code == JWRN_NOT_SEQUENTIAL) {
        cinfo->err->format_message(cinfo, e->msg);
        e->bad = 1;
    }
}

/* The smallest m of 1, 2, 4, 8 whose m/8 scale keeps at least min_w x min_h (libjpeg rounds
 * the scaled size up); no minimum at all is the full size. Those four scales have SIMD inverse
 * DCTs in libjpeg-turbo (a 4:2:0 picture's chroma at twice its luma's); the others run in C,
 * chroma at 10x10 to 14x14, and decode slower than the full size: they are taken only when
 * the power of two would pass the decoded picture's bound. */
static int pick_scale(int w, int h, int min_w, int min_h)
{
    if (min_w <= 0 && min_h <= 0) return 8;
    int any = 8, two = 8;
    for (int m = 7; m >= 1; m--) {
        int64_t sw = ((int64_t)w * m + 7) / 8, sh = ((int64_t)h * m + 7) / 8;
        if (sw < min_w || sh < min_h) break;
        any = m;
        if (!(m & (m - 1))) two = m;
    }
    int64_t npix = (((int64_t)w * two + 7) / 8) * (((int64_t)h * two + 7) / 8);
    return npix <= SH_IMAGE_MAX_PIXELS ? two : any;
}

/* CMYK row (as stored; Adobe's files invert it) to RGB or grey, as PIL reads them:
 * R = (255 - C)(255 - K) / 255 on plain values, c k / 255 on inverted ones. */
static void cmyk_row(const uint8_t *in, int w, int c, int inverted, uint8_t *out)
{
    for (int x = 0; x < w; x++, in += 4) {
        unsigned cy = in[0], m = in[1], y = in[2], k = in[3];
        if (!inverted) cy = 255 - cy, m = 255 - m, y = 255 - y, k = 255 - k;
        unsigned r = (cy * k + 127) / 255, g = (m * k + 127) / 255, b = (y * k + 127) / 255;
        if (c == 3) {
            out[3 * x] = (uint8_t)r;
            out[3 * x + 1] = (uint8_t)g;
            out[3 * x + 2] = (uint8_t)b;
        } else {
            out[x] = sh_image_luma(r, g, b);
        }
    }
}

/* The decompression proper, between setjmp and the cleanup (no locals live across longjmp). */
static shoal_result run(struct jpeg_decompress_struct *ci, const char *name, int c,
                        sh_image_size_fn size_fn, void *size_ctx, const int *bad, sh_image *img)
{
    jpeg_read_header(ci, TRUE);
    int full_w = (int)ci->image_width, full_h = (int)ci->image_height;
    if ((int64_t)full_w * full_h > SH_JPEG_MAX_FULL_PIXELS)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: a JPEG of %dx%d pixels, beyond the %lld a picture file may "
                       "hold; shrink it", name, full_w, full_h, (long long)SH_JPEG_MAX_FULL_PIXELS);
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    int min_w = 0, min_h = 0;
    if (size_fn) size_fn(size_ctx, full_w, full_h, &min_w, &min_h);
    ci->scale_num = (unsigned)pick_scale(full_w, full_h, min_w, min_h);
    ci->scale_denom = 8;
    ci->dct_method = JDCT_ISLOW;
    ci->out_color_space = cmyk ? JCS_CMYK : c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_calc_output_dimensions(ci);
    int64_t npix = (int64_t)ci->output_width * ci->output_height;
    if (npix <= 0 || npix > SH_IMAGE_MAX_PIXELS)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: a JPEG of %dx%d pixels decodes to %ux%u, beyond "
                       "the %lld pixels a picture may have; shrink it", name, full_w, full_h,
                       ci->output_width, ci->output_height, (long long)SH_IMAGE_MAX_PIXELS);
    int w = (int)ci->output_width, h = (int)ci->output_height;
    SH_TRY(sh_image_reserve(img, (size_t)npix * (size_t)c, cmyk ? (size_t)w * 4 : 0));
    jpeg_start_decompress(ci);
    /* once the data is known damaged the rest is libjpeg's grey: stop (the caller reports) */
    while (ci->output_scanline < ci->output_height && !*bad) {
        int y = (int)ci->output_scanline;
        if (cmyk) {
            JSAMPROW rows[1] = {img->row};
            if (jpeg_read_scanlines(ci, rows, 1) != 1) break;
            cmyk_row(img->row, w, c, ci->saw_Adobe_marker, img->px + (size_t)y * w * c);
        } else {
            /* up to four rows a call, straight into the picture */
            JSAMPROW rows[4];
            int nrows = h - y < 4 ? h - y : 4;
            for (int k = 0; k < nrows; k++) rows[k] = img->px + (size_t)(y + k) * w * c;
            if (jpeg_read_scanlines(ci, rows, (JDIMENSION)nrows) == 0) break;
        }
    }
    if (*bad) return SHOAL_OK;
    jpeg_finish_decompress(ci);
    img->w = w;
    img->h = h;
    img->c = c;
    img->full_w = full_w;
    img->full_h = full_h;
    return SHOAL_OK;
}

shoal_result sh_jpeg_decode(const uint8_t *buf, size_t nbytes, const char *name, int c,
                            sh_image_size_fn size_fn, void *size_ctx, sh_image *img)
{
    struct jpeg_decompress_struct ci;
    jpeg_err err;
    memset(&err, 0, sizeof err);
    ci.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error_exit;
    err.pub.emit_message = on_message;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&ci);
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: damaged JPEG: %s", name, err.msg);
    }
    jpeg_create_decompress(&ci);
    /* a progressive file keeps every coefficient of its full size: past this, an error
     * (libjpeg has no backing store here), not gigabytes for a damaged header */
    ci.mem->max_memory_to_use = SH_JPEG_MAX_MEMORY_NBYTES;
    jpeg_mem_src(&ci, buf, (unsigned long)nbytes);
    shoal_result rc = run(&ci, name, c, size_fn, size_ctx, &err.bad, img);
    jpeg_destroy_decompress(&ci);
    if (rc == SHOAL_OK && err.bad)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: damaged JPEG: %s", name, err.msg);
    return rc;
}
