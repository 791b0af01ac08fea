/* dataset.c — the dataset object: allocation of a known shape, the class count, release
 * (a streamed one's source too); whether a path names a regular file (the readers' check).
 * Not here: reading files (idx.c, cifar.c, text.c), finding them (dataset_dir.c).
 * Proved by tests/data/test_idx.c and test_cifar.c. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"
#include "data/source.h"

shoal_result sh_dataset_alloc(int count, int c, int h, int w, const char *name, sh_dataset **out)
{
    shoal_result rc = SHOAL_OK;
    sh_dataset *d = NULL;
    *out = NULL;
    SH_TRY_GOTO(sh_calloc(1, sizeof *d, (void **)&d), rc, done);
    d->count = count;
    d->c = c;
    d->h = h;
    d->w = w;
    snprintf(d->name, sizeof d->name, "%s", name);
    SH_TRY_GOTO(sh_calloc((size_t)count, (size_t)c * h * w, (void **)&d->pixels), rc, done);
    SH_TRY_GOTO(sh_calloc((size_t)count, sizeof *d->labels, (void **)&d->labels), rc, done);
    *out = d;
    d = NULL;
done:
    sh_dataset_destroy(d);
    return rc;
}

void sh_dataset_count_classes(sh_dataset *d)
{
    int32_t maxy = -1;
    for (int i = 0; i < d->count; i++)
        if (d->labels[i] > maxy) maxy = d->labels[i];
    d->nclasses = maxy + 1;
}

int sh_dataset_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void sh_dataset_destroy(sh_dataset *d)
{
    if (!d) return;
    sh_source_destroy(d->source);
    free(d->pixels);
    free(d->labels);
    free(d);
}
