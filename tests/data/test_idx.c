/* test_idx.c — proves src/data/idx.c: IDX images and labels, raw and gzipped, load with the
 * right shape and values, and every damaged file is refused with a message naming it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "base/err.h"
#include "check.h"
#include "data/data.h"

static char dir[64];

static void be32(uint8_t *b, uint32_t v)
{
    b[0] = (uint8_t)(v >> 24), b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8), b[3] = (uint8_t)v;
}

/* Write bytes raw or through zlib's gzip writer. */
static void write_file(const char *path, const void *buf, size_t nbytes, int gz)
{
    if (gz) {
        gzFile g = gzopen(path, "wb");
        CHECK(g != NULL, "gzopen %s", path);
        if (!g) return;
        if (nbytes) CHECK(gzwrite(g, buf, (unsigned)nbytes) == (int)nbytes, "gzwrite");
        gzclose(g);
    } else {
        FILE *f = fopen(path, "wb");
        CHECK(f != NULL, "fopen %s", path);
        if (!f) return;
        CHECK(fwrite(buf, 1, nbytes, f) == nbytes, "fwrite");
        fclose(f);
    }
}

/* Image file with count images of h x w; pixel (i, p) = (i * 7 + p) & 255. Returns bytes. */
static size_t make_images(uint8_t *buf, uint32_t magic, uint32_t count, uint32_t h, uint32_t w)
{
    be32(buf, magic);
    be32(buf + 4, count);
    be32(buf + 8, h);
    be32(buf + 12, w);
    for (size_t i = 0; i < count; i++)
        for (size_t p = 0; p < h * w; p++) buf[16 + i * h * w + p] = (uint8_t)((i * 7 + p) & 255);
    return 16 + (size_t)count * h * w;
}

static size_t make_labels(uint8_t *buf, uint32_t count, int nclasses)
{
    be32(buf, 0x801);
    be32(buf + 4, count);
    for (uint32_t i = 0; i < count; i++) buf[8 + i] = (uint8_t)((i * 3) % (uint32_t)nclasses);
    return 8 + count;
}

static uint8_t img_buf[16 + 50 * 6 * 5], lab_buf[8 + 50];

static void path_of(char *out, const char *name) { snprintf(out, 256, "%s/%s", dir, name); }

static void check_loaded(const char *img, const char *lab)
{
    sh_dataset *d = NULL;
    CHECK_OK(sh_idx_load(img, lab, &d));
    if (!d) return;
    CHECK(d->count == 50 && d->c == 1 && d->h == 6 && d->w == 5, "shape %d %dx%dx%d", d->count,
          d->c, d->h, d->w);
    CHECK(d->nclasses == 7, "nclasses %d", d->nclasses);
    int same = 1;
    for (int i = 0; i < 50; i++) {
        if (d->labels[i] != (i * 3) % 7) same = 0;
        for (int p = 0; p < 30; p++)
            if (d->pixels[i * 30 + p] != (uint8_t)((i * 7 + p) & 255)) same = 0;
    }
    CHECK(same, "pixels and labels equal what was written");
    sh_dataset_destroy(d);
}

static void loads_raw_and_gzipped_files_by_content(void)
{
    size_t ni = make_images(img_buf, 0x803, 50, 6, 5), nl = make_labels(lab_buf, 50, 7);
    char img[256], lab[256];
    path_of(img, "raw-images"), path_of(lab, "raw-labels");
    write_file(img, img_buf, ni, 0), write_file(lab, lab_buf, nl, 0);
    check_loaded(img, lab);
    /* gzip content under a name without .gz, and mixed: content decides. */
    path_of(img, "gz-images"), path_of(lab, "gz-labels");
    write_file(img, img_buf, ni, 1), write_file(lab, lab_buf, nl, 1);
    check_loaded(img, lab);
    path_of(lab, "raw-labels");
    check_loaded(img, lab);
}

static void expect_format_error(const char *img, const char *lab, const char *want1,
                                const char *want2)
{
    sh_dataset *d = (sh_dataset *)1;
    CHECK_RC(sh_idx_load(img, lab, &d), SHOAL_ERR_FORMAT);
    CHECK(d == NULL, "out is NULL on error");
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, want1) != NULL, "message \"%s\" lacks \"%s\"", m, want1);
    if (want2) CHECK(strstr(m, want2) != NULL, "message \"%s\" lacks \"%s\"", m, want2);
}

static void missing_file_says_how_to_get_the_dataset(void)
{
    char img[256], lab[256];
    path_of(img, "no-such-images"), path_of(lab, "raw-labels");
    sh_dataset *d = NULL;
    CHECK_RC(sh_idx_load(img, lab, &d), SHOAL_ERR_IO);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "no-such-images") && strstr(m, "not found") &&
              strstr(m, "install dataset-fashion-mnist or pass --data DIR"),
          "message: %s", m);
}

static void wrong_magic_is_refused_with_both_magics(void)
{
    char img[256], lab[256];
    path_of(lab, "raw-labels");
    /* a label file passed as images */
    expect_format_error(lab, lab, "not an IDX image file (magic 0x00000801); expected 0x00000803",
                        "raw-labels");
    path_of(img, "raw-images");
    expect_format_error(img, img, "not an IDX label file (magic 0x00000803); expected 0x00000801",
                        NULL);
    /* random text */
    path_of(img, "text");
    write_file(img, "hello world, not idx data", 25, 0);
    expect_format_error(img, lab, "not an IDX image file (magic 0x68656c6c)", "text");
}

static void truncated_images_report_how_many_arrived(void)
{
    size_t ni = make_images(img_buf, 0x803, 50, 6, 5);
    (void)ni;
    char img[256], lab[256];
    path_of(lab, "raw-labels");
    for (int gz = 0; gz < 2; gz++) {
        path_of(img, gz ? "trunc-images.gz" : "trunc-images");
        /* 12 whole images and part of the 13th */
        write_file(img, img_buf, 16 + 12 * 30 + 17, gz);
        expect_format_error(img, lab,
                            "truncated: header says 50 images of 6x5 but the file ends after 12 "
                            "images",
                            gz ? "trunc-images.gz" : "trunc-images");
        /* inside the header */
        write_file(img, img_buf, 10, gz);
        expect_format_error(img, lab, "truncated", "header");
    }
    /* a gzip file cut in the middle of its compressed stream */
    path_of(img, "gz-images");
    FILE *f = fopen(img, "rb");
    uint8_t whole[4096];
    size_t n = f ? fread(whole, 1, sizeof whole, f) : 0;
    if (f) fclose(f);
    CHECK(n > 40, "gzip file has %zu bytes", n);
    path_of(img, "cut.gz");
    write_file(img, whole, n / 2, 0);
    expect_format_error(img, lab, "truncated", "cut.gz");
}

/* A header that claims 10^9 images of 28x28 (784 GB) in a file of a few bytes is refused as
 * truncated, naming the file, before any allocation of that size (it used to fail with "out
 * of memory allocating 784000000000 bytes", naming nothing). Raw and gzipped alike. */
static void huge_count_in_header_is_truncated_not_out_of_memory(void)
{
    uint8_t buf[16 + 2 * 784];
    make_images(buf, 0x803, 2, 28, 28);
    be32(buf + 4, 1000000000u);
    char img[256], lab[256];
    path_of(lab, "raw-labels");
    for (int gz = 0; gz < 2; gz++) {
        path_of(img, gz ? "huge-count.gz" : "huge-count");
        write_file(img, buf, sizeof buf, gz);
        expect_format_error(img, lab,
                            "truncated: header says 1000000000 images of 28x28 but the file ends "
                            "after 2 images; download it again",
                            gz ? "huge-count.gz" : "huge-count");
        CHECK(strstr(shoal_last_error_message(), "out of memory") == NULL, "message: %s",
              shoal_last_error_message());
    }
}

/* Every cut of a raw or gzipped image file, and every flipped byte of a gzipped one, is refused
 * (never loaded as wrong data, never a crash). */
static void every_cut_or_gzip_damage_is_refused(void)
{
    enum { N = 4, H = 3, W = 3 };
    uint8_t raw[16 + N * H * W];
    size_t nraw = make_images(raw, 0x803, N, H, W);
    char img[256], lab[256], cut[256];
    path_of(img, "small-images.gz"), path_of(lab, "small-labels"), path_of(cut, "small-cut");
    uint8_t lb[8 + N];
    write_file(lab, lb, make_labels(lb, N, 3), 0);
    write_file(img, raw, nraw, 1);
    static uint8_t gz[4096];
    FILE *f = fopen(img, "rb");
    size_t ngz = f ? fread(gz, 1, sizeof gz, f) : 0;
    if (f) fclose(f);
    CHECK(ngz > 18, "gzip file %zu bytes", ngz);
    sh_dataset *d = NULL;
    CHECK_OK(sh_idx_load(img, lab, &d));
    sh_dataset_destroy(d);
    int raw_ok = 0, gz_ok = 0, flip_ok = 0;
    for (size_t i = 0; i < nraw; i++) {
        write_file(cut, raw, i, 0);
        raw_ok += sh_idx_load(cut, lab, &d) == SHOAL_ERR_FORMAT;
        sh_dataset_destroy(d);
        d = NULL;
    }
    for (size_t i = 0; i < ngz; i++) {
        write_file(cut, gz, i, 0);
        gz_ok += sh_idx_load(cut, lab, &d) == SHOAL_ERR_FORMAT;
        sh_dataset_destroy(d);
        d = NULL;
    }
    /* Bytes 4..9 of a gzip header (mtime, flags, OS) are not checked by zlib; from byte 10 on
     * everything is deflate data or the CRC-32 and length trailer. A flip may only land in the
     * unused padding bits of the last deflate byte: then the data is intact. Never wrong data. */
    int wrong = 0;
    for (size_t i = 10; i < ngz; i++) {
        gz[i] ^= 0x01;
        write_file(cut, gz, ngz, 0);
        gz[i] ^= 0x01;
        shoal_result rc = sh_idx_load(cut, lab, &d);
        flip_ok += rc == SHOAL_ERR_FORMAT;
        if (rc == SHOAL_OK) wrong += memcmp(d->pixels, raw + 16, N * H * W) != 0;
        sh_dataset_destroy(d);
        d = NULL;
    }
    CHECK(raw_ok == (int)nraw, "%d of %zu raw cuts refused", raw_ok, nraw);
    CHECK(gz_ok == (int)ngz, "%d of %zu gzip cuts refused", gz_ok, ngz);
    CHECK(flip_ok >= (int)ngz - 10 - 1, "%d of %zu gzip flips refused", flip_ok, ngz - 10);
    CHECK(wrong == 0, "%d flips loaded wrong pixels", wrong);
}

static void label_count_mismatch_names_both_files(void)
{
    char img[256], lab[256];
    path_of(img, "raw-images"), path_of(lab, "short-labels");
    size_t nl = make_labels(lab_buf, 40, 7);
    write_file(lab, lab_buf, nl, 0);
    expect_format_error(img, lab, "40 labels but", "50 images");
    /* labels header says 50 but the file stops early */
    nl = make_labels(lab_buf, 50, 7);
    write_file(lab, lab_buf, nl - 5, 0);
    expect_format_error(img, lab, "truncated: header says 50 labels but the file ends after 45",
                        NULL);
}

static void classes_are_one_more_than_the_largest_label(void)
{
    char img[256], lab[256];
    path_of(img, "raw-images"), path_of(lab, "big-labels");
    size_t nl = make_labels(lab_buf, 50, 7);
    lab_buf[8 + 20] = 255; /* the largest a u8 label can be */
    write_file(lab, lab_buf, nl, 0);
    sh_dataset *d = NULL;
    CHECK_OK(sh_idx_load(img, lab, &d));
    if (d) CHECK(d->nclasses == 256 && d->labels[20] == 255, "nclasses %d", d->nclasses);
    sh_dataset_destroy(d);
}

static void loads_real_fashion_mnist_test_set(void)
{
    const char *img = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
    const char *lab = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
    if (access(img, R_OK) != 0 || access(lab, R_OK) != 0) {
        printf("skip loads_real_fashion_mnist_test_set: %s not installed\n", img);
        return;
    }
    sh_dataset *d = NULL;
    CHECK_OK(sh_idx_load(img, lab, &d));
    if (!d) return;
    CHECK(d->count == 10000 && d->c == 1 && d->h == 28 && d->w == 28, "shape %d %dx%dx%d",
          d->count, d->c, d->h, d->w);
    CHECK(d->nclasses == 10, "nclasses %d", d->nclasses);
    int per_class[10] = {0};
    for (int i = 0; i < d->count; i++)
        if (d->labels[i] >= 0 && d->labels[i] < 10) per_class[d->labels[i]]++;
    for (int k = 0; k < 10; k++) CHECK(per_class[k] == 1000, "class %d has %d", k, per_class[k]);
    sh_dataset_destroy(d);
    /* and through the directory finder */
    CHECK_OK(sh_dataset_open_dir("/usr/share/datasets/fashion-mnist", 0, &d));
    if (d) CHECK(d->count == 10000, "open_dir test split has %d", d->count);
    sh_dataset_destroy(d);
}

int main(void)
{
    check_begin("test_idx", 30);
    snprintf(dir, sizeof dir, "/tmp/shoal-test-idx-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(loads_raw_and_gzipped_files_by_content);
    RUN(missing_file_says_how_to_get_the_dataset);
    RUN(wrong_magic_is_refused_with_both_magics);
    RUN(truncated_images_report_how_many_arrived);
    RUN(huge_count_in_header_is_truncated_not_out_of_memory);
    RUN(every_cut_or_gzip_damage_is_refused);
    RUN(label_count_mismatch_names_both_files);
    RUN(classes_are_one_more_than_the_largest_label);
    RUN(loads_real_fashion_mnist_test_set);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
