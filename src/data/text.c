/* text.c — any file as character-level text: its bytes, a training part and a held-out tail,
 * each item one byte (a one-hot of 256 inputs, as `darknet rnn train`) whose label is the
 * next byte. Streams over the text are the loader's (loader.c).
 * Not here: batching (loader.c), the model.
 * Proved by tests/data/test_text.c. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"

#define TEST_FRACTION_DIV 10          /* the held-out tail: a tenth of the file ... */
#define TEST_MAX_NBYTES (1 << 20)     /* ... at most 1 MiB, so evaluation stays quick */
#define MIN_PART_NBYTES 2             /* an input byte and the byte after it */

shoal_result sh_text_load(const char *path, int train, sh_dataset **out)
{
    shoal_result rc = SHOAL_OK;
    FILE *f = NULL;
    uint8_t *bytes = NULL;
    sh_dataset *d = NULL;
    *out = NULL;
    f = fopen(path, "rb");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "text %s: cannot open it (%s); pass --data FILE.txt "
                           "naming a readable file", path, strerror(errno));
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = SH_FAIL(SHOAL_ERR_IO, "text %s: cannot find its size (%s); pass a regular file",
                     path, strerror(errno));
        goto done;
    }
    if (len > INT_MAX) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "text %s holds %ld bytes; at most %d are read, cut it "
                     "(head -c)", path, len, INT_MAX);
        goto done;
    }
    long ntest = len / TEST_FRACTION_DIV < TEST_MAX_NBYTES ? len / TEST_FRACTION_DIV : TEST_MAX_NBYTES;
    if (ntest < MIN_PART_NBYTES || len - ntest < MIN_PART_NBYTES) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "text %s holds %ld bytes, too few for a training part "
                     "and a held-out tenth; use a larger text", path, len);
        goto done;
    }
    long lo = train ? 0 : len - ntest, count = train ? len - ntest : ntest;
    SH_TRY_GOTO(sh_calloc((size_t)count, 1, (void **)&bytes), rc, done);
    if (fseek(f, lo, SEEK_SET) != 0 || fread(bytes, 1, (size_t)count, f) != (size_t)count) {
        rc = SH_FAIL(SHOAL_ERR_IO, "text %s: short read at byte %ld; the file changed while "
                     "being read?", path, lo);
        goto done;
    }
    SH_TRY_GOTO(sh_calloc(1, sizeof *d, (void **)&d), rc, done);
    d->count = (int)count;
    d->c = 256;
    d->h = d->w = 1;
    d->nclasses = 256;
    d->text = 1;
    d->pixels = bytes;
    bytes = NULL;
    snprintf(d->name, sizeof d->name, "%s (%s)", path, train ? "training text" : "held-out tail");
    *out = d;
    d = NULL;
done:
    if (f) fclose(f);
    free(bytes);
    sh_dataset_destroy(d);
    return rc;
}
