/* image_read.c — a picture file into memory and on to its decoder, chosen by the file's first
 * bytes (not its name); the picture's reusable buffers; which names the folder scan takes.
 * Not here: the decoders (image_jpeg.c, image_png.c). Proved by tests/data/test_image_decode.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "data/image.h"

static const uint8_t jpeg_magic[3] = {0xFF, 0xD8, 0xFF};
static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

static shoal_result grow(uint8_t **p, size_t *cap, size_t nbytes)
{
    if (nbytes <= *cap) return SHOAL_OK;
    size_t want = *cap ? *cap : 4096;
    while (want < nbytes) want *= 2;
    uint8_t *q = realloc(*p, want);
    if (!q) return SH_FAIL(SHOAL_ERR_NOMEM, "no memory for a picture buffer of %zu bytes", want);
    *p = q;
    *cap = want;
    return SHOAL_OK;
}

shoal_result sh_image_reserve(sh_image *img, size_t nbytes, size_t row_nbytes)
{
    SH_TRY(grow(&img->px, &img->px_cap_nbytes, nbytes));
    if (row_nbytes) SH_TRY(grow(&img->row, &img->row_cap_nbytes, row_nbytes));
    return SHOAL_OK;
}

void sh_image_fini(sh_image *img)
{
    free(img->px);
    free(img->row);
    free(img->file);
    memset(img, 0, sizeof *img);
}

int sh_image_name_ok(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 0;
    return !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".png");
}

shoal_result sh_image_decode(const uint8_t *buf, size_t nbytes, const char *name, int c,
                             sh_image_size_fn size_fn, void *size_ctx, sh_image *img)
{
    if (c != 1 && c != 3)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: pictures decode to 1 (grey) or 3 (RGB) channels, "
                       "not %d; set channels=1 or 3 in the cfg's [net]", name, c);
    if (nbytes >= sizeof jpeg_magic && !memcmp(buf, jpeg_magic, sizeof jpeg_magic))
        return sh_jpeg_decode(buf, nbytes, name, c, size_fn, size_ctx, img);
    if (nbytes >= sizeof png_magic && !memcmp(buf, png_magic, sizeof png_magic)) {
        SH_TRY(sh_png_decode(buf, nbytes, name, c, img));
        int min_w, min_h; /* a PNG decodes whole: the answer does not matter, the call does */
        if (size_fn) size_fn(size_ctx, img->full_w, img->full_h, &min_w, &min_h);
        return SHOAL_OK;
    }
    if (nbytes == 0) return SH_FAIL(SHOAL_ERR_FORMAT, "%s: the file is empty", name);
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s: not a JPEG or PNG (its first bytes are %02x %02x %02x "
                   "%02x); convert it or remove it", name, buf[0], nbytes > 1 ? buf[1] : 0,
                   nbytes > 2 ? buf[2] : 0, nbytes > 3 ? buf[3] : 0);
}

shoal_result sh_image_read(const char *path, int c, sh_image_size_fn size_fn, void *size_ctx,
                           sh_image *img)
{
    shoal_result rc = SHOAL_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return SH_FAIL(SHOAL_ERR_IO, "%s: cannot open it (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = SH_FAIL(SHOAL_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)st.st_size > SH_IMAGE_MAX_FILE_NBYTES) {
        rc = SH_FAIL(SHOAL_ERR_IO, "%s: %lld bytes, more than the %zu a picture file may have",
                     path, (long long)st.st_size, SH_IMAGE_MAX_FILE_NBYTES);
        goto done;
    }
    size_t n = (size_t)st.st_size, got = 0;
    SH_TRY_GOTO(grow(&img->file, &img->file_cap_nbytes, n ? n : 1), rc, done);
    while (got < n) {
        ssize_t k = read(fd, img->file + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            rc = SH_FAIL(SHOAL_ERR_IO, "%s: read failed after %zu of %zu bytes (%s)", path, got,
                         n, k < 0 ? strerror(errno) : "the file shrank");
            goto done;
        }
        got += (size_t)k;
    }
    rc = sh_image_decode(img->file, n, path, c, size_fn, size_ctx, img);
done:
    close(fd);
    return rc;
}
