/* fuzz_idx.c — libFuzzer target: arbitrary image and label files through the IDX reader
 * (src/data/idx.c), raw and gzipped.
 * Input: flags u8 | images length u16 (little-endian) | images | labels. Flag bit 0: the
 * target gzips the images part before writing it, bit 1: the labels part (else both are
 * written as they are, so a seed may itself be a gzip file to damage).
 * Not here: finding the files in a directory (dataset_dir.c).
 * Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_idx.c. */
#include <stddef.h>
#include <stdint.h>

#include "data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    size_t img_nbytes = (size_t)data[1] | (size_t)data[2] << 8;
    if (img_nbytes > size - 3) img_nbytes = size - 3;
    char img[128], lab[128];
    fuzz_path("images-idx3-ubyte", img, sizeof img);
    fuzz_path("labels-idx1-ubyte", lab, sizeof lab);
    fuzz_write(img, data + 3, img_nbytes, data[0] & 1);
    fuzz_write(lab, data + 3 + img_nbytes, size - 3 - img_nbytes, data[0] & 2);
    sh_dataset *d = NULL;
    if (sh_idx_load(img, lab, &d) == SHOAL_OK) {
        /* What a loaded set promises its users (loader.c): labels within nclasses. */
        for (int i = 0; i < d->count; i++)
            if (d->labels[i] < 0 || d->labels[i] >= d->nclasses) abort();
        sh_dataset_destroy(d);
    }
    return 0;
}
