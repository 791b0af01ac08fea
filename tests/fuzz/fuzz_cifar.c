/* fuzz_cifar.c — libFuzzer target: arbitrary files through the CIFAR-10 batch reader
 * (src/data/cifar.c), one or two batch files.
 * Input: n u8 (bit 0: two files) | first file's length u16 (little-endian) | first file |
 * second file. Seeds are a record or two (3073 bytes each); the fuzzer damages labels and
 * sizes. Not here: finding the batch files (dataset_dir.c).
 * Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_cifar.c. */
#include <stddef.h>
#include <stdint.h>

#include "data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    size_t first_nbytes = (size_t)data[1] | (size_t)data[2] << 8;
    if (first_nbytes > size - 3) first_nbytes = size - 3;
    char a[128], b[128];
    const char *paths[2] = {fuzz_path("data_batch_1.bin", a, sizeof a),
                            fuzz_path("data_batch_2.bin", b, sizeof b)};
    int npaths = (data[0] & 1) ? 2 : 1;
    fuzz_write(paths[0], data + 3, first_nbytes, 0);
    if (npaths == 2) fuzz_write(paths[1], data + 3 + first_nbytes, size - 3 - first_nbytes, 0);
    sh_dataset *d = NULL;
    if (sh_cifar_load(paths, npaths, &d) == SHOAL_OK) {
        for (int i = 0; i < d->count; i++)
            if (d->labels[i] < 0 || d->labels[i] >= d->nclasses || d->nclasses > 10) abort();
        sh_dataset_destroy(d);
    }
    return 0;
}
