/* dataset_priv.h — helpers the dataset readers in src/data share: allocating a dataset of a
 * known shape, and checking whether a path exists.
 * Not here: the public contract (data.h). Proved through tests/data/test_idx.c and test_cifar.c. */
#ifndef SH_DATASET_PRIV_H
#define SH_DATASET_PRIV_H

#include "data/data.h"

/* Allocate an empty dataset of count images of (c, h, w), pixels and labels zeroed. */
shoal_result sh_dataset_alloc(int count, int c, int h, int w, const char *name, sh_dataset **out);
/* Set nclasses = 1 + the largest label. */
void sh_dataset_count_classes(sh_dataset *d);
/* 1 when path names an existing regular file. */
int sh_dataset_file_exists(const char *path);
/* 1 when dir holds IDX or CIFAR-10 files (dataset_dir.c): then it is read as before. */
int sh_dataset_dir_has_files(const char *dir);

#endif
