/* dataset_dir.c — find a dataset in a directory: IDX train-/t10k- files, or CIFAR-10 binary
 * batches, also under cifar-10-batches-bin/.
 * Not here: parsing the files (idx.c, cifar.c), the dataset object (dataset.c).
 * Proved by tests/data/test_cifar.c and test_idx.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/util.h"
#include "data/dataset_priv.h"

#define PATH_NBYTES 4096
#define CIFAR_TRAIN_BATCHES 5

/* The first of dir/stem, dir/stem.gz, dir/<stem with ".idx" for "-idx"> that exists. */
static int find_idx(const char *dir, const char *stem, char *path)
{
    static const char *const suffixes[] = {".gz", ""};
    char alt[128];
    /* Some MNIST mirrors name the files train-images.idx3-ubyte. */
    snprintf(alt, sizeof alt, "%s", stem);
    char *dash = strstr(alt, "-idx");
    if (dash) *dash = '.';
    const char *const stems[] = {stem, alt};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            snprintf(path, PATH_NBYTES, "%s/%s%s", dir, stems[s], suffixes[k]);
            if (sh_dataset_file_exists(path)) return 1;
        }
    return 0;
}

static shoal_result try_idx(const char *dir, int train, sh_dataset **out, int *found)
{
    char img[PATH_NBYTES], lab[PATH_NBYTES];
    const char *split = train ? "train" : "t10k";
    char stem_img[64], stem_lab[64];
    snprintf(stem_img, sizeof stem_img, "%s-images-idx3-ubyte", split);
    snprintf(stem_lab, sizeof stem_lab, "%s-labels-idx1-ubyte", split);
    int has_img = find_idx(dir, stem_img, img), has_lab = find_idx(dir, stem_lab, lab);
    *found = has_img || has_lab;
    if (!*found) return SHOAL_OK;
    if (!has_lab)
        return SH_FAIL(SHOAL_ERR_IO, "%s found but no %s/%s[.gz] beside it; the labels are needed",
                       img, dir, stem_lab);
    if (!has_img)
        return SH_FAIL(SHOAL_ERR_IO, "%s found but no %s/%s[.gz] beside it; the images are needed",
                       lab, dir, stem_img);
    SH_TRY(sh_idx_load(img, lab, out));
    return SHOAL_OK;
}

static shoal_result try_cifar(const char *dir, int train, sh_dataset **out, int *found)
{
    char paths[CIFAR_TRAIN_BATCHES][PATH_NBYTES];
    const char *ptrs[CIFAR_TRAIN_BATCHES];
    int n = 0;
    if (train) {
        for (int b = 1; b <= CIFAR_TRAIN_BATCHES; b++) {
            snprintf(paths[n], PATH_NBYTES, "%s/data_batch_%d.bin", dir, b);
            if (sh_dataset_file_exists(paths[n])) ptrs[n] = paths[n], n++;
        }
    } else {
        snprintf(paths[0], PATH_NBYTES, "%s/test_batch.bin", dir);
        if (sh_dataset_file_exists(paths[0])) ptrs[n] = paths[0], n++;
    }
    *found = n > 0;
    if (n > 0) SH_TRY(sh_cifar_load(ptrs, n, out));
    return SHOAL_OK;
}

int sh_dataset_dir_has_files(const char *dir)
{
    char path[PATH_NBYTES], sub[PATH_NBYTES];
    if (find_idx(dir, "train-images-idx3-ubyte", path) || find_idx(dir, "train-labels-idx1-ubyte", path) ||
        find_idx(dir, "t10k-images-idx3-ubyte", path) || find_idx(dir, "t10k-labels-idx1-ubyte", path))
        return 1;
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", dir);
    const char *const dirs[] = {dir, sub};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/test_batch.bin", dirs[k]);
        if (sh_dataset_file_exists(path)) return 1;
        for (int b = 1; b <= CIFAR_TRAIN_BATCHES; b++) {
            snprintf(path, sizeof path, "%s/data_batch_%d.bin", dirs[k], b);
            if (sh_dataset_file_exists(path)) return 1;
        }
    }
    return 0;
}

shoal_result sh_dataset_open_dir(const char *dir, int train, sh_dataset **out)
{
    *out = NULL;
    if (!dir || !*dir) return SH_FAIL(SHOAL_ERR_INVALID, "dataset directory is empty");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return SH_FAIL(SHOAL_ERR_IO,
                       "dataset directory %s not found%s; install dataset-fashion-mnist or "
                       "pass --data DIR",
                       dir, stat(dir, &st) == 0 ? " (it is not a directory)" : "");
    int found = 0;
    SH_TRY(try_idx(dir, train, out, &found));
    if (found) return SHOAL_OK;
    SH_TRY(try_cifar(dir, train, out, &found));
    if (found) return SHOAL_OK;
    char sub[PATH_NBYTES];
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", dir);
    SH_TRY(try_cifar(sub, train, out, &found));
    if (found) return SHOAL_OK;
    const char *split = train ? "train" : "t10k";
    return SH_FAIL(SHOAL_ERR_IO,
                   "no %s dataset in %s: looked for %s-images-idx3-ubyte[.gz] with "
                   "%s-labels-idx1-ubyte[.gz] (MNIST/Fashion-MNIST), and %s in it or in its "
                   "cifar-10-batches-bin/ (CIFAR-10 binary), and class folders of pictures; pass "
                   "--data DIR pointing at one",
                   train ? "training" : "test", dir, split, split,
                   train ? "data_batch_1..5.bin" : "test_batch.bin");
}
