/* fuzz_text.c — libFuzzer target: arbitrary files as character text (src/data/text.c, what
 * --data FILE.txt reads: the training part or the held-out tail) and the loader's text
 * streams over them (src/data/loader.c) for a fuzzed shape, every step of an epoch and the
 * first of the next, for every rank. Every row the loader gives must be a one-hot of 256
 * labelled with a byte, and no more rows than the caller's buffer holds.
 * Input: mode u8 (bit 0: the held-out tail, else the training part) · time steps u8 ·
 * streams u8 · world u8 · the file. Not here: finding the file (the CLI), the model.
 * Driven by scripts/fuzz.sh and tests/fuzz/test_fuzz_text.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "data/data.h"
#include "fuzz_util.h"

/* Steps run per input at most: a long text's epoch is many steps of the same code. */
enum { FUZZ_TEXT_MAX_STEPS = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    char path[128];
    fuzz_write(fuzz_path("fuzz.txt", path, sizeof path), data + 4, size - 4, 0);
    sh_dataset *d = NULL;
    if (sh_text_load(path, !(data[0] & 1), &d) != SHOAL_OK) return 0;
    /* shapes up to 16 x 16 rows, world up to 4, some of which do not divide: the loader
     * must refuse those */
    int t = data[1] % 16 + 1, s = data[2] % 16 + 1, world = data[3] % 4 + 1;
    sh_loader_opts o = {.global_batch = t * s, .world = world, .time_steps = t};
    for (o.rank = 0; o.rank < world; o.rank++) {
        sh_loader *l = NULL;
        if (sh_loader_create(d, &o, &l) != SHOAL_OK) break;
        int rows = sh_loader_local_batch_max(l);
        float *x = malloc((size_t)rows * 256 * sizeof *x);
        int32_t *y = malloc((size_t)rows * sizeof *y);
        if (!x || !y) abort();
        int64_t steps = sh_loader_steps_per_epoch(l) + 1;
        for (int64_t k = 0; k < steps && k < FUZZ_TEXT_MAX_STEPS; k++) {
            int n = -1;
            if (sh_loader_next(l, x, y, &n) != SHOAL_OK || n < 0 || n > rows) abort();
            for (int r = 0; r < n; r++) {
                if (y[r] < 0 || y[r] > 255) abort();
                int ones = 0;
                for (int c = 0; c < 256; c++) ones += x[(size_t)r * 256 + c] == 1.0f;
                if (ones != 1) abort();
            }
        }
        free(x);
        free(y);
        sh_loader_destroy(l);
    }
    sh_dataset_destroy(d);
    return 0;
}
