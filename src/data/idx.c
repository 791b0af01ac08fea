/* idx.c — IDX files (the MNIST / Fashion-MNIST format), gzipped or raw, into an sh_dataset.
 * Not here: finding the files in a directory (dataset_dir.c), batching (loader.c).
 * Proved by tests/data/test_idx.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"

/* IDX magic: two zero bytes, the element type (0x08 = unsigned byte), the number of dims. */
#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
/* A bound that no real image set reaches; it stops a damaged header from asking for terabytes. */
#define IDX_MAX_PIXELS_PER_IMAGE (1 << 24)
/* Images are read in growing steps from this size (see load_images). */
#define IDX_FIRST_READ_NBYTES ((size_t)1 << 16)

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* gzopen reads raw files as they are and gzip files decompressed: the content decides. */
static shoal_result open_gz(const char *path, const char *what, gzFile *out)
{
    *out = NULL;
    if (!sh_dataset_file_exists(path))
        return SH_FAIL(SHOAL_ERR_IO,
                       "%s file %s not found; install dataset-fashion-mnist or pass --data DIR",
                       what, path);
    gzFile g = gzopen(path, "rb");
    if (!g)
        return SH_FAIL(SHOAL_ERR_IO, "cannot open %s file %s: %s", what, path,
                       errno ? strerror(errno) : "out of memory");
    gzbuffer(g, 1 << 17);
    *out = g;
    return SHOAL_OK;
}

/* Read up to nbytes; returns how many arrived (fewer at end of file). A gzip stream that is
 * cut short counts as end of file: the caller reports it as truncated, with the count. */
static shoal_result read_all(gzFile g, const char *path, void *buf, size_t nbytes, size_t *got)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < nbytes) {
        size_t want = nbytes - done;
        if (want > (1u << 30)) want = 1u << 30;
        int n = gzread(g, p + done, (unsigned)want);
        if (n < 0) {
            int zerr = 0;
            const char *msg = gzerror(g, &zerr);
            if (zerr == Z_BUF_ERROR) break; /* compressed stream ends early: truncated */
            return SH_FAIL(SHOAL_ERR_FORMAT,
                           "%s: damaged gzip data after %zu bytes (%s); download the file again",
                           path, done, msg);
        }
        if (n == 0) break;
        done += (size_t)n;
    }
    *got = done;
    return SHOAL_OK;
}

/* After the last element: read on, so that zlib reaches the gzip trailer and checks its CRC-32
 * and length; damage that still inflates is caught here. Bytes after the data are ignored. */
static shoal_result check_end(gzFile g, const char *path)
{
    uint8_t extra[1];
    int n = gzread(g, extra, sizeof extra);
    int zerr = 0;
    const char *msg = gzerror(g, &zerr);
    /* zlib reports a stream cut inside its trailer as 0 bytes read and Z_BUF_ERROR. */
    if (n > 0 || zerr == Z_OK) return SHOAL_OK;
    if (zerr == Z_BUF_ERROR)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s: truncated: the gzip stream ends before its checksum; download it "
                       "again",
                       path);
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s: damaged gzip data (%s); download the file again", path,
                   msg);
}

static shoal_result read_header(gzFile g, const char *path, uint32_t want_magic, int ndims,
                                uint32_t *dims)
{
    uint8_t hdr[16];
    size_t nbytes = 4 + 4 * (size_t)ndims, got = 0;
    SH_TRY(read_all(g, path, hdr, nbytes, &got));
    if (got >= 4 && be32(hdr) != want_magic)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s: not an IDX %s file (magic 0x%08x); expected 0x%08x", path,
                       want_magic == IDX_MAGIC_IMAGES ? "image" : "label", be32(hdr), want_magic);
    if (got < nbytes)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s: truncated: the file ends after %zu bytes, inside the %zu-byte IDX "
                       "header; download it again",
                       path, got, nbytes);
    for (int i = 0; i < ndims; i++) dims[i] = be32(hdr + 4 + 4 * i);
    return SHOAL_OK;
}

static shoal_result load_images(const char *path, sh_dataset **out)
{
    shoal_result rc = SHOAL_OK;
    gzFile g = NULL;
    sh_dataset *d = NULL;
    uint8_t *pix = NULL; /* (count, H, W) as read */
    uint32_t dims[3];
    *out = NULL;
    SH_TRY_GOTO(open_gz(path, "image", &g), rc, done);
    SH_TRY_GOTO(read_header(g, path, IDX_MAGIC_IMAGES, 3, dims), rc, done);
    if (dims[0] == 0 || dims[0] > INT32_MAX || dims[1] == 0 || dims[2] == 0 ||
        (uint64_t)dims[1] * dims[2] > IDX_MAX_PIXELS_PER_IMAGE) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT,
                     "%s: implausible IDX header: %u images of %ux%u; the file is damaged",
                     path, dims[0], dims[1], dims[2]);
        goto done;
    }
    /* The header's count is a claim: memory grows with what the stream really yields
     * (doubling from 64 KiB), so a damaged count fails as truncated, never as a huge
     * allocation. A gzip file's inflated size is not known before it is read. */
    size_t img_nbytes = (size_t)dims[1] * dims[2], want = (size_t)dims[0] * img_nbytes, got = 0;
    for (size_t cap = 0; got < want;) {
        size_t next = cap ? 2 * cap : IDX_FIRST_READ_NBYTES;
        if (next > want) next = want;
        uint8_t *grown = realloc(pix, next);
        if (!grown) {
            rc = SH_FAIL(SHOAL_ERR_NOMEM,
                         "%s: out of memory reading %zu bytes of images (%u images of %ux%u); "
                         "free memory or use a smaller dataset",
                         path, next, dims[0], dims[1], dims[2]);
            goto done;
        }
        pix = grown;
        cap = next;
        size_t n = 0;
        SH_TRY_GOTO(read_all(g, path, pix + got, cap - got, &n), rc, done);
        got += n;
        if (got < cap) break; /* the stream ended */
    }
    if (got < want) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT,
                     "%s: truncated: header says %u images of %ux%u but the file ends after "
                     "%zu images; download it again",
                     path, dims[0], dims[1], dims[2], got / img_nbytes);
        goto done;
    }
    SH_TRY_GOTO(sh_dataset_alloc((int)dims[0], 1, (int)dims[1], (int)dims[2], path, &d), rc,
                done);
    free(d->pixels); /* calloc'd and never touched: the pages read take its place */
    d->pixels = pix;
    pix = NULL;
    SH_TRY_GOTO(check_end(g, path), rc, done);
    *out = d;
    d = NULL;
done:
    if (g) gzclose(g);
    free(pix);
    sh_dataset_destroy(d);
    return rc;
}

static shoal_result load_labels(const char *path, sh_dataset *d)
{
    shoal_result rc = SHOAL_OK;
    gzFile g = NULL;
    uint8_t *raw = NULL;
    uint32_t count = 0;
    SH_TRY_GOTO(open_gz(path, "label", &g), rc, done);
    SH_TRY_GOTO(read_header(g, path, IDX_MAGIC_LABELS, 1, &count), rc, done);
    if (count != (uint32_t)d->count) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT,
                     "%s has %u labels but %s has %d images; the two files must come from the "
                     "same split (train- with train-, t10k- with t10k-)",
                     path, count, d->name, d->count);
        goto done;
    }
    SH_TRY_GOTO(sh_calloc(count, 1, (void **)&raw), rc, done);
    size_t got = 0;
    SH_TRY_GOTO(read_all(g, path, raw, count, &got), rc, done);
    if (got < count) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT,
                     "%s: truncated: header says %u labels but the file ends after %zu labels; "
                     "download it again",
                     path, count, got);
        goto done;
    }
    SH_TRY_GOTO(check_end(g, path), rc, done);
    for (uint32_t i = 0; i < count; i++) d->labels[i] = raw[i];
    sh_dataset_count_classes(d);
done:
    if (g) gzclose(g);
    free(raw);
    return rc;
}

shoal_result sh_idx_load(const char *images_path, const char *labels_path, sh_dataset **out)
{
    shoal_result rc = SHOAL_OK;
    sh_dataset *d = NULL;
    *out = NULL;
    if (!images_path || !labels_path)
        return SH_FAIL(SHOAL_ERR_INVALID, "sh_idx_load: images and labels paths are required");
    SH_TRY_GOTO(load_images(images_path, &d), rc, done);
    SH_TRY_GOTO(load_labels(labels_path, d), rc, done);
    *out = d;
    d = NULL;
done:
    sh_dataset_destroy(d);
    return rc;
}
