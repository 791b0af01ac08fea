/* cifar.c — CIFAR-10 binary batches (records of 1 label byte + 3072 pixel bytes) into an
 * sh_dataset. Not here: finding the batch files (dataset_dir.c), batching (loader.c).
 * Proved by tests/data/test_cifar.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"

/* CIFAR-10 record: label byte, then 32x32 red, 32x32 green, 32x32 blue (channel-major). */
#define CIFAR_C 3
#define CIFAR_HW 32
#define CIFAR_PIXELS (CIFAR_C * CIFAR_HW * CIFAR_HW)
#define CIFAR_RECORD_NBYTES (1 + CIFAR_PIXELS)
#define CIFAR_NCLASSES 10

static shoal_result file_records(const char *path, int *nrecords)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return SH_FAIL(SHOAL_ERR_IO,
                       "CIFAR-10 batch %s not found (%s); pass --data DIR with data_batch_*.bin",
                       path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return SH_FAIL(SHOAL_ERR_IO, "CIFAR-10 batch %s is not a regular file", path);
    if (st.st_size == 0 || st.st_size % CIFAR_RECORD_NBYTES != 0)
        return SH_FAIL(SHOAL_ERR_FORMAT,
                       "%s: size %lld bytes is not a multiple of %d (1 label + %d pixel bytes); "
                       "not a CIFAR-10 binary batch, or truncated: download it again",
                       path, (long long)st.st_size, CIFAR_RECORD_NBYTES, CIFAR_PIXELS);
    if (st.st_size / CIFAR_RECORD_NBYTES > INT32_MAX)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s: too many records", path);
    *nrecords = (int)(st.st_size / CIFAR_RECORD_NBYTES);
    return SHOAL_OK;
}

/* Read nrecords records of one file into d starting at image first. */
static shoal_result read_batch(const char *path, sh_dataset *d, int first, int nrecords)
{
    shoal_result rc = SHOAL_OK;
    uint8_t rec[CIFAR_RECORD_NBYTES];
    FILE *f = fopen(path, "rb");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    for (int i = 0; i < nrecords; i++) {
        if (fread(rec, 1, sizeof rec, f) != sizeof rec) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT,
                         "%s: truncated: expected %d records but the file ends after %d "
                         "(it changed while being read?)",
                         path, nrecords, i);
            goto done;
        }
        if (rec[0] >= CIFAR_NCLASSES) {
            rc = SH_FAIL(SHOAL_ERR_FORMAT,
                         "%s: record %d has label %d; CIFAR-10 labels are 0..9 (is this a "
                         "CIFAR-100 file? only CIFAR-10 binary batches are supported)",
                         path, i, rec[0]);
            goto done;
        }
        d->labels[first + i] = rec[0];
        memcpy(d->pixels + (size_t)(first + i) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
done:
    fclose(f);
    return rc;
}

shoal_result sh_cifar_load(const char *const *paths, int npaths, sh_dataset **out)
{
    shoal_result rc = SHOAL_OK;
    sh_dataset *d = NULL;
    int *nrec = NULL;
    *out = NULL;
    if (!paths || npaths <= 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "sh_cifar_load: no batch files given");
    SH_TRY_GOTO(sh_calloc((size_t)npaths, sizeof *nrec, (void **)&nrec), rc, done);
    int64_t total = 0;
    for (int i = 0; i < npaths; i++) {
        SH_TRY_GOTO(file_records(paths[i], &nrec[i]), rc, done);
        total += nrec[i];
    }
    if (total > INT32_MAX) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "CIFAR-10: %lld records in all is too many",
                     (long long)total);
        goto done;
    }
    SH_TRY_GOTO(sh_dataset_alloc((int)total, CIFAR_C, CIFAR_HW, CIFAR_HW, paths[0], &d), rc,
                done);
    int first = 0;
    for (int i = 0; i < npaths; i++) {
        SH_TRY_GOTO(read_batch(paths[i], d, first, nrec[i]), rc, done);
        first += nrec[i];
    }
    sh_dataset_count_classes(d);
    *out = d;
    d = NULL;
done:
    free(nrec);
    sh_dataset_destroy(d);
    return rc;
}
