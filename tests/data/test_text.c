/* test_text.c — proves src/data/text.c and the loader's text streams (src/data/loader.c):
 * the held-out tail is the file's last tenth, rows are (time step, stream) one-hots labelled
 * with the next byte, streams are contiguous segments read in order, two ranks read exactly
 * the rows one rank reads, and too-short texts or batches that do not divide are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data/data.h"

static char path[64];

static void write_bytes(size_t n)
{
    FILE *f = fopen(path, "wb");
    for (size_t i = 0; i < n; i++) fputc((int)(i * 7 % 251), f);
    fclose(f);
}

static int onehot_index(const float *row)
{
    int idx = -1, ones = 0;
    for (int i = 0; i < 256; i++) {
        if (row[i] == 1.0f) idx = i, ones++;
        else if (row[i] != 0.0f) return -2;
    }
    return ones == 1 ? idx : -1;
}

static void tail_is_held_out(void)
{
    write_bytes(1000);
    sh_dataset *tr = NULL, *te = NULL;
    CHECK_OK(sh_text_load(path, 1, &tr));
    CHECK_OK(sh_text_load(path, 0, &te));
    if (!tr || !te) return;
    CHECK(tr->count == 900 && te->count == 100, "split %d + %d", tr->count, te->count);
    CHECK(tr->text && tr->c == 256 && tr->nclasses == 256, "shape");
    CHECK(te->pixels[0] == 900 * 7 % 251 && tr->pixels[899] == 899 * 7 % 251, "tail bytes");
    sh_dataset_destroy(tr);
    sh_dataset_destroy(te);
}

static void streams_are_read_in_order(void)
{
    write_bytes(1000);
    sh_dataset *d = NULL;
    CHECK_OK(sh_text_load(path, 1, &d)); /* 900 bytes */
    if (!d) return;
    enum { T = 5, S = 4 };
    sh_loader_opts o = {.global_batch = T * S, .rank = 0, .world = 1, .time_steps = T};
    sh_loader *l = NULL;
    CHECK_OK(sh_loader_create(d, &o, &l));
    if (!l) return;
    CHECK(sh_loader_steps_per_epoch(l) == (900 / S - 1) / T, "steps %lld",
          (long long)sh_loader_steps_per_epoch(l));
    float *x = malloc(T * S * 256 * sizeof *x);
    int32_t y[T * S];
    int n = 0, bad = 0;
    for (int step = 0; step < 3; step++) {
        CHECK_OK(sh_loader_next(l, x, y, &n));
        CHECK(n == T * S, "rows %d", n);
        for (int t = 0; t < T; t++)
            for (int s = 0; s < S; s++) {
                int pos = s * (900 / S) + step * T + t, row = t * S + s;
                if (onehot_index(x + row * 256) != pos * 7 % 251 || y[row] != (pos + 1) * 7 % 251)
                    bad++;
            }
    }
    CHECK(bad == 0, "%d rows are not the stream's bytes", bad);
    /* two ranks read the streams one rank reads, split in halves */
    sh_loader_opts o2 = {.global_batch = T * S, .rank = 1, .world = 2, .time_steps = T};
    sh_loader *l2 = NULL;
    CHECK_OK(sh_loader_create(d, &o2, &l2));
    CHECK_OK(sh_loader_seek(l, 0, 0));
    CHECK_OK(sh_loader_next(l, x, y, &n));
    int32_t y2[T * S];
    float *x2 = malloc(T * S * 256 * sizeof *x2);
    CHECK_OK(sh_loader_next(l2, x2, y2, &n));
    CHECK(n == T * S / 2, "rank 1 rows %d", n);
    bad = 0;
    for (int t = 0; t < T; t++)
        for (int s = 0; s < S / 2; s++) bad += y2[t * (S / 2) + s] != y[t * S + S / 2 + s];
    CHECK(bad == 0, "rank 1 of 2 does not read streams 2 and 3");
    free(x);
    free(x2);
    sh_loader_destroy(l);
    sh_loader_destroy(l2);
    sh_dataset_destroy(d);
}

static void short_texts_and_odd_batches_are_refused(void)
{
    write_bytes(15);
    sh_dataset *d = NULL;
    CHECK_RC(sh_text_load(path, 1, &d), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), path) != NULL, "names the file: %s", shoal_last_error());
    CHECK_RC(sh_text_load("/nonexistent/x.txt", 1, &d), SHOAL_ERR_IO);
    write_bytes(200);
    CHECK_OK(sh_text_load(path, 1, &d)); /* 180 bytes */
    if (!d) return;
    sh_loader *l = NULL;
    sh_loader_opts o = {.global_batch = 64 * 4, .rank = 0, .world = 1, .time_steps = 4};
    CHECK_RC(sh_loader_create(d, &o, &l), SHOAL_ERR_INVALID); /* 64 streams of 2 bytes */
    CHECK(strstr(shoal_last_error(), "too few") != NULL, "%s", shoal_last_error());
    sh_loader_opts o2 = {.global_batch = 6, .rank = 0, .world = 1, .time_steps = 4};
    CHECK_RC(sh_loader_create(d, &o2, &l), SHOAL_ERR_INVALID);
    sh_dataset_destroy(d);
}

int main(void)
{
    check_begin("test_text", 30);
    snprintf(path, sizeof path, "/tmp/shoal_test_text_%d.txt", (int)getpid());
    RUN(tail_is_held_out);
    RUN(streams_are_read_in_order);
    RUN(short_texts_and_odd_batches_are_refused);
    unlink(path);
    return check_end();
}
