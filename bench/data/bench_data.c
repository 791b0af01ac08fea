/* bench_data.c — how fast the data path is: loading Fashion-MNIST (gzip IDX), filling batches
 * with the sharding loader, saving and loading checkpoints (with fsync), writing TensorBoard
 * scalars. Medians of several runs; not a test.
 *   make BUILD=build-data && cc -O3 -march=native -Iinclude -Isrc bench/data/bench_data.c \
 *     build-data/libshoal.a -ljpeg -lpng -lz -lm -ldl -pthread -o /tmp/bench_data && /tmp/bench_data [DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "data/data.h"
#include "io/checkpoint.h"
#include "io/tb_events.h"
#include "shoal/result.h"

#define RUNS 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

#define OK(expr)                                                              \
    do {                                                                      \
        if ((expr) != SHOAL_OK) {                                             \
            fprintf(stderr, "bench_data: %s\n", shoal_last_error());          \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

/* The loader's conversion (x / 255.f, vectorized) against a 256-entry table, side by side on
 * the same random images: why loader.c divides. */
static void conversion_side_by_side(const sh_dataset *d)
{
    enum { B = 64, REPS = 200 };
    size_t npix = (size_t)d->c * d->h * d->w;
    float *x = malloc(sizeof(float) * npix * B), lut[256];
    int32_t idx[B];
    for (int i = 0; i < 256; i++) lut[i] = (float)i / 255.f;
    sh_rng rng;
    sh_rng_seed(&rng, 3);
    double tdiv[RUNS], tlut[RUNS];
    volatile float sink = 0;
    for (int r = 0; r < RUNS; r++) {
        for (int v = 0; v < 2; v++) {
            double t0 = sh_now_s();
            for (int k = 0; k < REPS; k++) {
                for (int i = 0; i < B; i++) idx[i] = (int32_t)sh_rng_below(&rng, (uint64_t)d->count);
                for (int i = 0; i < B; i++) {
                    const uint8_t *src = d->pixels + (size_t)idx[i] * npix;
                    float *dst = x + (size_t)i * npix;
                    if (v == 0)
                        for (size_t p = 0; p < npix; p++) dst[p] = (float)src[p] / 255.f;
                    else
                        for (size_t p = 0; p < npix; p++) dst[p] = lut[src[p]];
                }
                sink += x[k % (B * npix)];
            }
            (v == 0 ? tdiv : tlut)[r] = (sh_now_s() - t0) / REPS;
        }
    }
    double a = median(tdiv, RUNS), b = median(tlut, RUNS);
    printf("batch-64 conversion: divide %.1f us, table %.1f us: divide is %.2fx faster\n",
           a * 1e6, b * 1e6, b / a);
    free(x);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    double t[RUNS];
    sh_dataset *d = NULL;
    for (int r = 0; r < RUNS; r++) {
        sh_dataset_destroy(d);
        double t0 = sh_now_s();
        OK(sh_dataset_open_dir(dir, 1, &d));
        t[r] = sh_now_s() - t0;
    }
    printf("load %s train split: %d images %dx%dx%d: %.3f s (median of %d)\n", dir, d->count,
           d->c, d->h, d->w, median(t, RUNS), RUNS);

    conversion_side_by_side(d);
    const int batches[] = {64, 256};
    for (size_t bi = 0; bi < 2; bi++) {
        sh_loader_opts o = {.global_batch = batches[bi], .rank = 0, .world = 1, .seed = 1,
                            .shuffle = 1, .drop_last = 1};
        sh_loader *l = NULL;
        OK(sh_loader_create(d, &o, &l));
        size_t npix = (size_t)d->c * d->h * d->w;
        float *x = malloc(sizeof(float) * npix * (size_t)batches[bi]);
        int32_t *y = malloc(sizeof(int32_t) * (size_t)batches[bi]);
        int64_t steps = sh_loader_steps_per_epoch(l);
        for (int r = 0; r < RUNS; r++) {
            double t0 = sh_now_s();
            int n = 0;
            for (int64_t s = 0; s < steps; s++) OK(sh_loader_next(l, x, y, &n));
            t[r] = sh_now_s() - t0;
        }
        double sec = median(t, RUNS);
        printf("loader batch %d: one epoch (%lld steps, reshuffle included) %.1f ms: %.2f us/step, "
               "%.1f M img/s\n",
               batches[bi], (long long)steps, sec * 1e3, sec / (double)steps * 1e6,
               (double)steps * batches[bi] / sec * 1e-6);
        free(x), free(y);
        sh_loader_destroy(l);
    }

    size_t ck_nbytes = 64u << 20;
    char *buf = malloc(ck_nbytes);
    memset(buf, 7, ck_nbytes);
    char path[] = "/tmp/bench-data-ckpt-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    sh_ckpt_section sec = {"params", buf, ck_nbytes};
    double ts[RUNS], tl[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = sh_now_s();
        OK(sh_ckpt_save(path, &sec, 1));
        ts[r] = sh_now_s() - t0;
        t0 = sh_now_s();
        OK(sh_ckpt_load(path, &sec, 1));
        tl[r] = sh_now_s() - t0;
    }
    printf("checkpoint %zu MiB: save (fsync, rename) %.1f ms = %.2f GB/s, load (CRC) %.1f ms = "
           "%.2f GB/s\n",
           ck_nbytes >> 20, median(ts, RUNS) * 1e3, (double)ck_nbytes / median(ts, RUNS) * 1e-9,
           median(tl, RUNS) * 1e3, (double)ck_nbytes / median(tl, RUNS) * 1e-9);
    unlink(path);
    free(buf);

    char tbdir[] = "/tmp/bench-data-tb-XXXXXX";
    if (mkdtemp(tbdir)) {
        sh_tb *tb = NULL;
        OK(sh_tb_open(tbdir, &tb));
        const int n = 20000;
        double t0 = sh_now_s();
        for (int i = 0; i < n; i++) OK(sh_tb_scalar(tb, "train/loss", i, 1.0f / (float)(i + 1)));
        double sec_tb = sh_now_s() - t0;
        printf("tensorboard: %d scalars in %.1f ms = %.2f us each\n", n, sec_tb * 1e3,
               sec_tb / n * 1e6);
        unlink(sh_tb_path(tb));
        sh_tb_close(tb);
        rmdir(tbdir);
    }
    sh_dataset_destroy(d);
    return 0;
}
