/* test_cifar.c — proves src/data/cifar.c and src/data/dataset_dir.c: CIFAR-10 batches load
 * channel-major with their labels, bad sizes and labels are refused, and a directory is searched
 * for IDX or CIFAR files with a clear error when it holds neither. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/err.h"
#include "check.h"
#include "data/data.h"

#define REC 3073

static char dir[64];

/* A batch of n records; record i of batch b: label (i + b) % 10, pixel p = (i + 3p + b) & 255. */
static void write_batch(const char *path, int n, int b)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "fopen %s", path);
    if (!f) return;
    uint8_t rec[REC];
    for (int i = 0; i < n; i++) {
        rec[0] = (uint8_t)((i + b) % 10);
        for (int p = 0; p < 3072; p++) rec[1 + p] = (uint8_t)((i + 3 * p + b) & 255);
        fwrite(rec, 1, REC, f);
    }
    fclose(f);
}

static void loads_several_batches_in_order(void)
{
    char p1[256], p2[256];
    snprintf(p1, sizeof p1, "%s/a.bin", dir);
    snprintf(p2, sizeof p2, "%s/b.bin", dir);
    write_batch(p1, 7, 0);
    write_batch(p2, 5, 1);
    const char *paths[] = {p1, p2};
    sh_dataset *d = NULL;
    CHECK_OK(sh_cifar_load(paths, 2, &d));
    if (!d) return;
    CHECK(d->count == 12 && d->c == 3 && d->h == 32 && d->w == 32, "shape %d %dx%dx%d", d->count,
          d->c, d->h, d->w);
    int ok = 1;
    for (int i = 0; i < 12; i++) {
        int b = i < 7 ? 0 : 1, r = i < 7 ? i : i - 7;
        if (d->labels[i] != (r + b) % 10) ok = 0;
        for (int p = 0; p < 3072; p++)
            if (d->pixels[(size_t)i * 3072 + p] != (uint8_t)((r + 3 * p + b) & 255)) ok = 0;
    }
    CHECK(ok, "records equal what was written, batches concatenated in order");
    CHECK(d->nclasses == 7, "nclasses %d (labels reach 6)", d->nclasses);
    sh_dataset_destroy(d);
}

static void size_not_a_multiple_of_a_record_is_refused(void)
{
    char p[256];
    snprintf(p, sizeof p, "%s/short.bin", dir);
    write_batch(p, 3, 0);
    CHECK(truncate(p, 3 * REC - 100) == 0, "truncate");
    const char *paths[] = {p};
    sh_dataset *d = NULL;
    CHECK_RC(sh_cifar_load(paths, 1, &d), SHOAL_ERR_FORMAT);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "short.bin") && strstr(m, "not a multiple of 3073"), "message: %s", m);
    CHECK(d == NULL, "no dataset on error");
}

static void label_out_of_range_is_refused(void)
{
    char p[256];
    snprintf(p, sizeof p, "%s/bad-label.bin", dir);
    write_batch(p, 3, 0);
    FILE *f = fopen(p, "r+b");
    if (f) {
        fseek(f, REC, SEEK_SET);
        fputc(42, f);
        fclose(f);
    }
    const char *paths[] = {p};
    sh_dataset *d = NULL;
    CHECK_RC(sh_cifar_load(paths, 1, &d), SHOAL_ERR_FORMAT);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "record 1 has label 42"), "message: %s", m);
}

static void open_dir_finds_cifar_in_subdirectory(void)
{
    char sub[256], p[300];
    snprintf(sub, sizeof sub, "%s/c", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/c/cifar-10-batches-bin", dir);
    CHECK(mkdir(sub, 0755) == 0, "mkdir %s", sub);
    for (int b = 1; b <= 3; b++) {
        snprintf(p, sizeof p, "%s/data_batch_%d.bin", sub, b);
        write_batch(p, 4, b);
    }
    snprintf(p, sizeof p, "%s/test_batch.bin", sub);
    write_batch(p, 2, 9);
    snprintf(sub, sizeof sub, "%s/c", dir);
    sh_dataset *d = NULL;
    CHECK_OK(sh_dataset_open_dir(sub, 1, &d));
    if (d) CHECK(d->count == 12 && d->c == 3, "train count %d", d->count);
    if (d) CHECK(d->labels[4] == 2 && d->labels[8] == 3, "batches 2 and 3 follow batch 1");
    sh_dataset_destroy(d);
    d = NULL;
    CHECK_OK(sh_dataset_open_dir(sub, 0, &d));
    if (d) CHECK(d->count == 2 && d->labels[0] == 9, "test count %d", d->count);
    sh_dataset_destroy(d);
}

static void open_dir_finds_idx_files(void)
{
    char sub[256], p[300];
    snprintf(sub, sizeof sub, "%s/m", dir);
    CHECK(mkdir(sub, 0755) == 0, "mkdir");
    uint8_t img[16 + 3 * 4], lab[8 + 3];
    memset(img, 0, sizeof img), memset(lab, 0, sizeof lab);
    img[2] = 8, img[3] = 3, img[7] = 3, img[11] = 2, img[15] = 2;
    lab[2] = 8, lab[3] = 1, lab[7] = 3, lab[8 + 2] = 4;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", sub);
    gzFile g = gzopen(p, "wb");
    if (g) gzwrite(g, img, sizeof img), gzclose(g);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", sub);
    FILE *f = fopen(p, "wb");
    if (f) fwrite(lab, 1, sizeof lab, f), fclose(f);
    sh_dataset *d = NULL;
    CHECK_OK(sh_dataset_open_dir(sub, 1, &d));
    if (d) CHECK(d->count == 3 && d->h == 2 && d->nclasses == 5, "count %d nclasses %d", d->count,
                 d->nclasses);
    sh_dataset_destroy(d);
    /* the test split is absent: the message names what it looked for */
    d = NULL;
    CHECK_RC(sh_dataset_open_dir(sub, 0, &d), SHOAL_ERR_IO);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "t10k-images-idx3-ubyte") && strstr(m, "test_batch.bin") &&
              strstr(m, "cifar-10-batches-bin") && strstr(m, "--data"),
          "message: %s", m);
}

static void open_dir_with_nothing_lists_what_it_looked_for(void)
{
    char sub[256];
    snprintf(sub, sizeof sub, "%s/empty", dir);
    CHECK(mkdir(sub, 0755) == 0, "mkdir");
    sh_dataset *d = NULL;
    CHECK_RC(sh_dataset_open_dir(sub, 1, &d), SHOAL_ERR_IO);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "train-images-idx3-ubyte") && strstr(m, "train-labels-idx1-ubyte") &&
              strstr(m, "data_batch_1..5.bin") && strstr(m, sub),
          "message: %s", m);
    snprintf(sub, sizeof sub, "%s/does-not-exist", dir);
    CHECK_RC(sh_dataset_open_dir(sub, 1, &d), SHOAL_ERR_IO);
    m = shoal_last_error_message();
    CHECK(strstr(m, "not found") && strstr(m, "install dataset-fashion-mnist or pass --data DIR"),
          "message: %s", m);
}

int main(void)
{
    check_begin("test_cifar", 30);
    snprintf(dir, sizeof dir, "/tmp/shoal-test-cifar-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(loads_several_batches_in_order);
    RUN(size_not_a_multiple_of_a_record_is_refused);
    RUN(label_out_of_range_is_refused);
    RUN(open_dir_finds_cifar_in_subdirectory);
    RUN(open_dir_finds_idx_files);
    RUN(open_dir_with_nothing_lists_what_it_looked_for);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
