/* darknet_weights.c — Darknet's .weights format (parser.c's load_weights_upto and
 * save_weights_upto): a header, then each layer's arrays in Darknet's order, as the layer lists
 * them (sh_layer_ops.darknet_blobs); layers Darknet's equations would not fit are refused.
 * Not here: each layer's list of arrays (layer_*.c), shoal's checkpoints (snapshot.c).
 * Proved by tests/nn/test_darknet_weights.c (round trip, and against Darknet itself). */
#include "nn/darknet_weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/err.h"
#include "base/util.h"
#include "nn/layer.h"
#include "nn/recurrent.h"

/* Header: int32 major, minor, revision; images seen (uint64 when major*10 + minor >= 2, else
 * int32). Then, layer by layer: convolutional: biases, [scales, rolling mean, rolling variance],
 * weights; connected: biases, weights, [scales, rolling mean, rolling variance]; [rnn], [lstm],
 * [gru] form=darknet: their connected sublayers in turn, as connected ones. Layers without
 * parameters write nothing. Files with major or minor above 1000 hold connected weights
 * transposed, as Darknet reads them. A sublayer's arrays may be scattered through a fused gate
 * matrix (an [lstm]'s): they pass through a contiguous buffer. A layer whose equations differ
 * from Darknet's ([gru] in PyTorch's form) names why in sh_layer_ops.darknet_refusal, and files
 * with it are refused before anything is read or written. */

/* Darknet's own header when it saves (parser.c save_weights_upto). */
#define DN_MAJOR 0
#define DN_MINOR 2
#define DN_REVISION 0
/* Darknet: a major or minor above this marks transposed connected weights. */
#define DN_TRANSPOSE_MARK 1000

int sh_darknet_weights_is_path(const char *path)
{
    size_t len = strlen(path), ext = strlen(".weights");
    return len >= ext && strcmp(path + len - ext, ".weights") == 0;
}

/* The arrays of layer i; a layer with parameters but no Darknet layout is an error. */
static shoal_result layer_blobs(const sh_net *n, int i, sh_dn_blob *b, int *nb)
{
    sh_layer *l = sh_net_layer((sh_net *)n, i);
    *nb = 0;
    if (l->ops->darknet_refusal && (l->param_count || l->stat_count))
        return SH_FAIL(SHOAL_ERR_INVALID, "layer %d (%s, cfg line %d) cannot be read from or "
                       "written to a Darknet .weights file: %s (or keep its weights in a shoal "
                       "checkpoint)", i, l->name, l->line, l->ops->darknet_refusal);
    if (l->ops->darknet_blobs) *nb = l->ops->darknet_blobs(l, b, SH_DN_MAX_BLOBS);
    else if (l->param_count || l->stat_count)
        return SH_FAIL(SHOAL_ERR_INVALID, "layer %d (%s, cfg line %d) has parameters but no "
                       "Darknet weights layout; it cannot be read from or written to a "
                       ".weights file", i, l->name, l->line);
    SH_ASSERT(*nb <= SH_DN_MAX_BLOBS);
    for (int k = 0; k < *nb; k++)
        SH_ASSERT(!b[k].ngates || (b[k].units && b[k].count % b[k].units == 0));
    return SHOAL_OK;
}

shoal_result sh_darknet_weights_check(const sh_net *n)
{
    sh_dn_blob b[SH_DN_MAX_BLOBS];
    for (int i = 0; i < sh_net_nlayers(n); i++) {
        int nb = 0;
        SH_TRY(layer_blobs(n, i, b, &nb));
    }
    return SHOAL_OK;
}

uint64_t sh_darknet_weights_nbytes(const sh_net *n)
{
    uint64_t bytes = 3 * sizeof(int32_t) + sizeof(uint64_t);
    sh_dn_blob b[SH_DN_MAX_BLOBS];
    for (int i = 0; i < sh_net_nlayers(n); i++) {
        int nb = 0;
        if (layer_blobs(n, i, b, &nb) != SHOAL_OK) continue;
        for (int k = 0; k < nb; k++) bytes += b[k].count * sizeof(float);
    }
    return bytes;
}

int64_t sh_darknet_init_draws(const sh_net *n)
{
    int64_t draws = 0;
    sh_dn_blob b[SH_DN_MAX_BLOBS];
    for (int i = 0; i < sh_net_nlayers(n); i++) {
        const sh_layer *l = sh_net_layer((sh_net *)n, i);
        int nb = 0;
        if (strcmp(l->ops->cfg_name, "convolutional") == 0 || layer_blobs(n, i, b, &nb) != SHOAL_OK)
            return -1;
        for (int k = 0; k < nb; k++)
            if (b[k].rows) draws += (int64_t)b[k].count; /* a connected weight matrix */
    }
    return draws;
}

static float *blob_ptr(sh_net *n, const sh_dn_blob *b)
{
    return b->stats ? sh_net_stats(n, NULL) + b->off : sh_net_params(n) + b->off;
}

/* Float k of a gate blob (one gate's rows scattered through a fused matrix): its offset
 * from the matrix start. */
static size_t gate_pos(const sh_dn_blob *b, size_t k)
{
    size_t cols = b->count / b->units, j = k / cols;
    int row = sh_rnn_gate_col((int)b->units, b->ngates, b->gate, (int)j);
    return (size_t)row * cols + k % cols;
}

/* (rows, cols) read as its transpose (cols, rows): back to (rows, cols). */
static shoal_result untranspose(float *a, size_t rows, size_t cols)
{
    float *t = NULL;
    SH_TRY(sh_calloc(rows * cols, sizeof *t, (void **)&t));
    for (size_t r = 0; r < cols; r++)
        for (size_t c = 0; c < rows; c++) t[c * cols + r] = a[r * rows + c];
    memcpy(a, t, rows * cols * sizeof *t);
    free(t);
    return SHOAL_OK;
}

shoal_result sh_darknet_weights_load(sh_net *n, const char *path, uint64_t *seen)
{
    shoal_result rc = SHOAL_OK;
    float *buf = NULL; /* a gate blob as the file holds it */
    sh_dn_blob b[SH_DN_MAX_BLOBS];
    SH_TRY(sh_darknet_weights_check(n)); /* refuse before changing any layer */
    FILE *f = fopen(path, "rb");
    if (!f)
        return SH_FAIL(SHOAL_ERR_IO, "darknet weights %s: cannot open: %s", path, strerror(errno));
    int32_t head[3];
    uint64_t images = 0, pos = 0;
    if (fread(head, sizeof head, 1, f) != 1) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "darknet weights %s: shorter than the 12-byte header; "
                     "not a Darknet .weights file", path);
        goto done;
    }
    pos = sizeof head;
    int major = head[0], minor = head[1];
    if (major < 0 || minor < 0) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "darknet weights %s: version %d.%d.%d is not Darknet's; "
                     "not a Darknet .weights file", path, head[0], head[1], head[2]);
        goto done;
    }
    /* Darknet's test, (major*10 + minor) >= 2 && major < 1000 && minor < 1000, with the marks
     * first: major*10 overflows an int for a major above 214748364 (scripts/fuzz.sh found it,
     * UBSan); the answer is Darknet's for every header, a 32-bit count above the marks. */
    if (major < DN_TRANSPOSE_MARK && minor < DN_TRANSPOSE_MARK && major * 10 + minor >= 2) {
        if (fread(&images, sizeof images, 1, f) != 1) goto short_file;
        pos += sizeof images;
    } else {
        int32_t iseen = 0;
        if (fread(&iseen, sizeof iseen, 1, f) != 1) goto short_file;
        images = (uint64_t)(uint32_t)iseen;
        pos += sizeof iseen;
    }
    int transpose = major > DN_TRANSPOSE_MARK || minor > DN_TRANSPOSE_MARK;
    for (int i = 0; i < sh_net_nlayers(n); i++) {
        int nb = 0;
        SH_TRY_GOTO(layer_blobs(n, i, b, &nb), rc, done);
        for (int k = 0; k < nb; k++) {
            float *dst = blob_ptr(n, &b[k]);
            if (b[k].ngates) { /* read whole, then scatter */
                free(buf);
                buf = NULL;
                SH_TRY_GOTO(sh_calloc(b[k].count, sizeof *buf, (void **)&buf), rc, done);
            }
            float *in = b[k].ngates ? buf : dst;
            size_t got = fread(in, sizeof(float), b[k].count, f);
            if (got != b[k].count) {
                rc = SH_FAIL(SHOAL_ERR_FORMAT, "darknet weights %s: ends at byte %llu inside "
                             "layer %d (%s), which needs %zu more floats; the file was written "
                             "for another cfg (this one needs %llu bytes)", path,
                             (unsigned long long)(pos + got * sizeof(float)), i,
                             sh_net_layer_name(n, i), b[k].count - got,
                             (unsigned long long)sh_darknet_weights_nbytes(n));
                goto done;
            }
            pos += got * sizeof(float);
            if (transpose && b[k].rows)
                SH_TRY_GOTO(untranspose(in, b[k].rows, b[k].count / b[k].rows), rc, done);
            for (size_t e = 0; b[k].ngates && e < b[k].count; e++) dst[gate_pos(&b[k], e)] = in[e];
        }
    }
    if (fgetc(f) != EOF) {
        fseek(f, 0, SEEK_END);
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "darknet weights %s: %ld bytes, but the cfg's layers "
                     "take %llu; the file was written for another cfg", path, ftell(f),
                     (unsigned long long)pos);
        goto done;
    }
    if (seen) *seen = images;
    goto done;
short_file:
    rc = SH_FAIL(SHOAL_ERR_FORMAT, "darknet weights %s: ends inside the header; not a "
                 "Darknet .weights file", path);
done:
    free(buf);
    fclose(f);
    return rc;
}

shoal_result sh_darknet_weights_save(const sh_net *n, const char *path, uint64_t seen)
{
    sh_dn_blob b[SH_DN_MAX_BLOBS];
    SH_TRY(sh_darknet_weights_check(n)); /* refuse before creating the file */
    sh_atomic_file af;
    SH_TRY(sh_atomic_open(&af, path, "darknet weights"));
    int dupfd = dup(af.fd);
    FILE *f = dupfd >= 0 ? fdopen(dupfd, "wb") : NULL;
    if (!f) {
        if (dupfd >= 0) close(dupfd);
        shoal_result rc = SH_FAIL(SHOAL_ERR_IO, "darknet weights %s: cannot write: %s", path,
                                  strerror(errno));
        sh_atomic_abort(&af);
        return rc;
    }
    int32_t head[3] = {DN_MAJOR, DN_MINOR, DN_REVISION};
    int ok = fwrite(head, sizeof head, 1, f) == 1 && fwrite(&seen, sizeof seen, 1, f) == 1;
    for (int i = 0; ok && i < sh_net_nlayers(n); i++) {
        int nb = 0;
        (void)layer_blobs(n, i, b, &nb);
        for (int k = 0; ok && k < nb; k++) {
            const float *src = blob_ptr((sh_net *)n, &b[k]);
            if (!b[k].ngates) {
                ok = fwrite(src, sizeof(float), b[k].count, f) == b[k].count;
                continue;
            }
            size_t cols = b[k].count / b[k].units; /* a gate's row: contiguous, cols floats */
            for (size_t j = 0; ok && j < b[k].units; j++)
                ok = fwrite(src + gate_pos(&b[k], j * cols), sizeof(float), cols, f) == cols;
        }
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        shoal_result rc = SH_FAIL(SHOAL_ERR_IO, "darknet weights %s: write failed: %s", path,
                                  strerror(errno));
        sh_atomic_abort(&af);
        return rc;
    }
    return sh_atomic_commit(&af);
}
