/* bench_loader.c — shoal's picture loader alone: a folder of class folders read as training
 * reads it (list once, decode and cut each rank's share on THREADS threads, PREFETCH steps
 * ahead), timed over STEPS batches after WARMUP; one JSON line. Not a test.
 *   bench/scaling/loader.sh builds and runs it beside torch_loader.py; by hand:
 *   make && cc -O3 -march=native -Iinclude -Isrc bench/scaling/bench_loader.c build/libshoal.a \
 *     -ljpeg -lpng -lz -lm -ldl -lrt -pthread -o /tmp/bench_loader
 *   /tmp/bench_loader DIR THREADS [BATCH=32] [STEPS=50] [WARMUP=5] [SIZE=224] [RESIZE=256] */
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"
#include "data/data.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s DIR THREADS [BATCH] [STEPS] [WARMUP] [SIZE] [RESIZE]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]), batch = argc > 3 ? atoi(argv[3]) : 32, steps = argc > 4 ? atoi(argv[4]) : 50;
    int warmup = argc > 5 ? atoi(argv[5]) : 5, size = argc > 6 ? atoi(argv[6]) : 224,
        resize = argc > 7 ? atoi(argv[7]) : 256;
    /* torchvision's Resize(RESIZE), RandomCrop(SIZE), RandomHorizontalFlip, Normalize */
    sh_data_opts o = {.path = argv[1], .seed = 1};
    sh_image_opts_default(&o.image, 3, size, size);
    o.image.min_crop = o.image.max_crop = o.image.test_resize = resize;
    o.image.flip = 1;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    for (int c = 0; c < 3; c++) o.image.mean[c] = mean[c], o.image.std[c] = std[c];
    sh_dataset *train = NULL, *test = NULL;
    uint64_t t_list = sh_now_ns();
    if (sh_data_open(&o, &train, &test) != SHOAL_OK) {
        fprintf(stderr, "%s\n", shoal_last_error());
        return 1;
    }
    double list_s = (double)(sh_now_ns() - t_list) * 1e-9;
    sh_loader_opts lo = {.global_batch = batch, .rank = 0, .world = 1, .seed = 1, .shuffle = 1, .drop_last = 1,
                         .threads = threads, .prefetch = 2};
    sh_loader *l = NULL;
    float *x = NULL;
    int32_t *y = malloc((size_t)batch * sizeof *y);
    if (sh_loader_create(train, &lo, &l) != SHOAL_OK ||
        sh_alloc_aligned((size_t)batch * 3 * size * size * sizeof(float), (void **)&x) != SHOAL_OK) {
        fprintf(stderr, "%s\n", shoal_last_error());
        return 1;
    }
    uint64_t t0 = 0;
    for (int k = 0; k < warmup + steps; k++) {
        if (k == warmup) t0 = sh_now_ns();
        int n = 0;
        if (sh_loader_next(l, x, y, &n) != SHOAL_OK) {
            fprintf(stderr, "%s\n", shoal_last_error());
            return 1;
        }
    }
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    printf("{\"loader\":\"shoal\",\"threads\":%d,\"batch\":%d,\"steps\":%d,\"images_per_s\":%.1f,\"list_s\":%.3f,"
           "\"files\":%d,\"peak_rss_mb\":%.1f,\"bad_files\":%lld}\n",
           threads, batch, steps, (double)steps * batch / s, list_s, train->count,
           (double)sh_peak_rss_nbytes() / (1024.0 * 1024.0), (long long)sh_dataset_bad_files(train));
    sh_loader_destroy(l);
    sh_free_aligned(x);
    free(y);
    sh_dataset_destroy(train);
    sh_dataset_destroy(test);
    return 0;
}
