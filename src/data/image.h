/* image.h — one decoded picture and the decoders that make it: JPEG (libjpeg-turbo, with DCT
 * scaling), PNG (libpng), either read from a file whose first bytes say which it is.
 * Not here: resizing, cropping, colour changes (augment.h), which files (image_list.h).
 * Proved by tests/data/test_image_decode.c. */
#ifndef SH_IMAGE_H
#define SH_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "shoal/result.h"

/* Decoded pictures larger than this many pixels are refused as bad files: 8192 x 8192, a
 * bound no training image reaches, so one damaged header cannot take gigabytes. */
#define SH_IMAGE_MAX_PIXELS ((int64_t)1 << 26)
/* Files larger than this are refused before they are read (a bound on one worker's buffer). */
#define SH_IMAGE_MAX_FILE_NBYTES ((size_t)1 << 28)

/* A picture and the buffers that made it; a decoding thread keeps one and reuses its memory
 * from picture to picture (nothing is freed between files). */
typedef struct {
    int w, h, c;            /* decoded size; c is 1 (grey) or 3 (RGB) */
    int full_w, full_h;     /* the picture's own size (JPEG: before DCT scaling) */
    uint8_t *px;            /* (H, W, C) interleaved, rows packed */
    size_t px_cap_nbytes;
    uint8_t *row;           /* one row of CMYK or RGB before conversion */
    size_t row_cap_nbytes;
    uint8_t *file;          /* the file's bytes (sh_image_read) */
    size_t file_cap_nbytes;
} sh_image;

/* Called once a decode, when the picture's own size is known: the smallest decoded size that
 * will do (min_w, min_h; 0 for the full size). A JPEG is then decoded at the smallest m/8
 * scale (m = 1, 2, 4, 8) that keeps at least that size; a PNG always at full size (after the call). */
typedef void (*sh_image_size_fn)(void *ctx, int full_w, int full_h, int *min_w, int *min_h);

/* Decode the JPEG or PNG in buf[0, nbytes) into img as c channels (1: grey by ITU-R 601
 * luma, as PIL's convert("L"), a JPEG's own Y channel; 3: RGB), whatever the file holds: grey, RGB, RGBA (alpha
 * dropped), palette, 1-16 bits a sample (16 scaled to 8 with rounding), interlaced or
 * progressive, CMYK and YCCK (Adobe's inverted or plain). size_fn may be NULL (full size).
 * Errors: SHOAL_ERR_FORMAT with "NAME: what is wrong" (truncated, corrupt, not a JPEG or
 * PNG, too large); img keeps its buffers either way. Thread-safe for distinct imgs. */
shoal_result sh_image_decode(const uint8_t *buf, size_t nbytes, const char *name, int c,
                             sh_image_size_fn size_fn, void *size_ctx, sh_image *img);

/* Read the file at path into img->file and decode it (sh_image_decode). A missing,
 * unreadable, empty or oversized file is SHOAL_ERR_IO naming it. */
shoal_result sh_image_read(const char *path, int c, sh_image_size_fn size_fn, void *size_ctx,
                           sh_image *img);

/* The two decoders behind sh_image_decode (the caller has checked the magic bytes). */
shoal_result sh_jpeg_decode(const uint8_t *buf, size_t nbytes, const char *name, int c,
                            sh_image_size_fn size_fn, void *size_ctx, sh_image *img);
shoal_result sh_png_decode(const uint8_t *buf, size_t nbytes, const char *name, int c,
                           sh_image *img);

/* Make img->px hold at least nbytes (keeping nothing) and img->row at least row_nbytes. */
shoal_result sh_image_reserve(sh_image *img, size_t nbytes, size_t row_nbytes);

/* 1 when name ends in .jpg, .jpeg, .png (any case): what the folder scan takes as images. */
int sh_image_name_ok(const char *name);

/* RGB to grey as PIL's convert("L"): (19595 R + 38470 G + 7471 B + 2^15) >> 16. */
static inline uint8_t sh_image_luma(unsigned r, unsigned g, unsigned b)
{
    return (uint8_t)((19595u * r + 38470u * g + 7471u * b + 0x8000u) >> 16);
}

void sh_image_fini(sh_image *img); /* frees the buffers; the struct may be reused (zeroed) */

#endif
