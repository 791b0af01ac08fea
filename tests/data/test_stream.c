/* test_stream.c — proves src/data/stream.c, source.c and the loader's streamed path: batches
 * of pictures follow the epoch's order and shards as in-memory ones do, the same pixels on
 * every rank count, thread count and prefetch depth; a sought loader continues exactly (mid-
 * epoch resume); bad files are skipped once each and counted, or stop the run under strict;
 * an evaluation loader decodes no further than its epoch; memory stays flat over a folder of
 * many files; synthetic pictures are deterministic and learnable; a take trades buffers. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "check.h"
#include "data/data.h"
#include "data/image_list.h"
#include "data/source.h"
#include "data/stream.h"

static char dir[] = "/tmp/shoal_test_stream_XXXXXX";

/* An RGB PNG of w x h whose pixel (x, y) is f(index, x, y, channel). */
static void write_png(const char *path, int w, int h, int index, int (*f)(int, int, int, int))
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = PNG_FORMAT_RGB;
    unsigned char *px = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) px[((size_t)y * w + x) * 3 + c] = (unsigned char)f(index, x, y, c);
    CHECK(png_image_write_to_file(&im, path, 0, px, 0, NULL), "cannot write %s: %s", path, im.message);
    free(px);
}

/* Flat pictures: R = index & 255, G = index >> 8, whatever the crop. */
static int flat(int index, int x, int y, int c) { return c == 0 ? index & 255 : c == 1 ? index >> 8 : 0 * (x + y); }
/* Textured pictures: crops, flips and scales change them. */
static int texture(int index, int x, int y, int c) { return (x * 29 + y * 13 + c * 71 + index * 17 + x * y) & 255; }

/* A folder NAME of nclasses classes, count pictures dealt round-robin; returns its path. */
static const char *make_folder(const char *name, int count, int nclasses, int w, int h,
                               int (*f)(int, int, int, int))
{
    static char root[512];
    char path[1024], cmd[1200];
    snprintf(root, sizeof root, "%s/%s", dir, name);
    for (int c = 0; c < nclasses; c++) {
        snprintf(cmd, sizeof cmd, "mkdir -p %s/c%02d", root, c);
        CHECK(system(cmd) == 0, "%s", cmd);
    }
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/c%02d/%05d.png", root, i % nclasses, i);
        write_png(path, w, h, i, f);
    }
    return root;
}

static sh_dataset *open_folder(const char *root, int train, int strict, sh_image_opts *o)
{
    sh_image_list *list = NULL;
    sh_source *src = NULL;
    sh_dataset *d = NULL;
    CHECK_OK(sh_image_list_folder(root, NULL, &list));
    if (!list) return NULL;
    CHECK_OK(sh_source_files_create(list, o, train, strict, &src));
    if (!src) return NULL;
    CHECK_OK(sh_calloc(1, sizeof *d, (void **)&d));
    d->count = (int)src->count;
    d->c = o->c;
    d->h = o->h;
    d->w = o->w;
    d->nclasses = src->nclasses;
    d->source = src;
    snprintf(d->name, sizeof d->name, "%s", root);
    return d;
}

static sh_loader *make_loader(const sh_dataset *d, int B, int rank, int world, int shuffle, int threads,
                              int prefetch)
{
    sh_loader_opts o = {.global_batch = B, .rank = rank, .world = world, .seed = 9, .shuffle = shuffle,
                        .drop_last = shuffle, .threads = threads, .prefetch = prefetch};
    sh_loader *l = NULL;
    CHECK_OK(sh_loader_create(d, &o, &l));
    return l;
}

/* Images the source made so far (its threads count them as they go). */
static int64_t made(const sh_dataset *d) { return __atomic_load_n(&d->source->made, __ATOMIC_RELAXED); }

/* The picture a flat pixel triple names. */
static int index_of(const float *x, size_t plane)
{
    return (int)(x[0] * 255.f + 0.5f) + 256 * (int)(x[plane] * 255.f + 0.5f);
}

static void batches_follow_the_order_on_every_rank_count_and_thread_count(void)
{
    enum { COUNT = 53, B = 8, STEPS = 2 * (COUNT / B) };
    const char *root = make_folder("flat", COUNT, 4, 12, 10, flat);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 6, 6);
    o.min_crop = 6, o.max_crop = 12, o.flip = 1, o.aspect = 0.8f;
    sh_dataset *d = open_folder(root, 1, 0, &o);
    if (!d) return;
    size_t plane = 36, npix = 3 * plane;
    int order[COUNT];
    /* the images, in folder order, are labelled i % 4 and named by their pixels */
    float *x = malloc(B * npix * sizeof(float));
    int32_t y[B];
    int worlds[] = {1, 2, 3}, threads[] = {1, 3}, prefetch[] = {1, 3};
    for (int wi = 0; wi < 3; wi++)
        for (int ti = 0; ti < 2; ti++) {
            int world = worlds[wi];
            sh_loader *l[3] = {NULL};
            for (int r = 0; r < world; r++) l[r] = make_loader(d, B, r, world, 1, threads[ti], prefetch[ti]);
            for (int k = 0; k < STEPS; k++) {
                int64_t epoch = k / (COUNT / B), step = k % (COUNT / B);
                if (step == 0) {
                    int32_t ord[COUNT];
                    sh_loader_make_order(ord, COUNT, 9, epoch, 1);
                    for (int i = 0; i < COUNT; i++) order[i] = ord[i];
                }
                int at = 0, bad = 0;
                for (int r = 0; r < world && l[r]; r++) {
                    int n = 0;
                    CHECK_OK(sh_loader_next(l[r], x, y, &n));
                    for (int i = 0; i < n; i++, at++) {
                        int idx = index_of(x + i * npix, plane);
                        int want = order[step * B + at];
                        /* the folder lists c00's 14 pictures (0, 4, ..., 52), then c01's, c02's
                         * and c03's 13 each: picture i is entry first[i % 4] + i / 4 */
                        static const int first[4] = {0, 14, 27, 40};
                        int entry = first[idx % 4] + idx / 4;
                        bad += entry != want || y[i] != idx % 4;
                    }
                }
                CHECK(at == B && bad == 0, "world %d threads %d step %d: %d images, %d out of order", world,
                      threads[ti], k, at, bad);
            }
            for (int r = 0; r < world; r++) sh_loader_destroy(l[r]);
        }
    CHECK(made(d) >= 6 * STEPS * B, "made %lld images", (long long)made(d));
    free(x);
    sh_dataset_destroy(d);
}

/* sh_loader_take trades buffers of the slot's size instead of copying, and hands out the
 * same pictures as sh_loader_next; a buffer of another size is copied into and kept. */
static void take_trades_buffers_and_reads_what_next_reads(void)
{
    enum { COUNT = 29, B = 6, STEPS = 2 * (COUNT / B) };
    const char *root = make_folder("take", COUNT, 3, 12, 10, flat);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 6, 6);
    o.min_crop = 6, o.max_crop = 12, o.flip = 1;
    sh_dataset *d = open_folder(root, 1, 0, &o);
    if (!d) return;
    size_t npix = 3 * 36, cap = B * npix;
    for (int pf = 1; pf <= 3; pf += 2) {
        sh_loader *a = make_loader(d, B, 0, 1, 1, 2, pf), *b = make_loader(d, B, 0, 1, 1, 2, pf);
        sh_loader *c = make_loader(d, B, 0, 1, 1, 2, pf);
        float *xa = NULL, *xb = malloc(cap * sizeof(float)), *xc = NULL;
        CHECK_OK(sh_alloc_aligned(cap * sizeof(float), (void **)&xa));
        CHECK_OK(sh_alloc_aligned((cap + 1) * sizeof(float), (void **)&xc));
        int32_t ya[B], yb[B], yc[B];
        int traded = 0, same = 0, kept = 1;
        for (int k = 0; a && b && c && xa && xb && xc && k < STEPS; k++) {
            int na = 0, nb = 0, nc = 0;
            float *before = xa, *cbefore = xc;
            CHECK_OK(sh_loader_take(a, &xa, cap, ya, &na));
            CHECK_OK(sh_loader_next(b, xb, yb, &nb));
            CHECK_OK(sh_loader_take(c, &xc, cap + 1, yc, &nc));
            traded += xa != before;
            kept &= xc == cbefore;
            same += na == nb && nc == nb && !memcmp(xa, xb, (size_t)nb * npix * sizeof(float)) &&
                    !memcmp(xc, xb, (size_t)nb * npix * sizeof(float)) && !memcmp(ya, yb, sizeof ya) &&
                    !memcmp(yc, yb, sizeof yc);
        }
        CHECK(traded == STEPS && kept, "prefetch %d: %d of %d steps traded, other size kept %d", pf, traded,
              STEPS, kept);
        CHECK(same == STEPS, "prefetch %d: %d of %d steps equal to sh_loader_next's", pf, same, STEPS);
        sh_loader_destroy(a);
        sh_loader_destroy(b);
        sh_loader_destroy(c);
        sh_free_aligned(xa);
        sh_free_aligned(xc);
        free(xb);
    }
    sh_dataset_destroy(d);
}

/* Read steps of augmented pictures, the ranks' shards concatenated, into out. */
static void read_augmented(const sh_dataset *d, int B, int world, int threads, int64_t seek_epoch, int64_t seek_step,
                           int steps, float *out)
{
    size_t npix = (size_t)d->c * d->h * d->w;
    int32_t y[64];
    sh_loader *l[4] = {NULL};
    for (int r = 0; r < world; r++) {
        l[r] = make_loader(d, B, r, world, 1, threads, 2);
        if (l[r] && (seek_epoch || seek_step)) CHECK_OK(sh_loader_seek(l[r], seek_epoch, seek_step));
    }
    for (int k = 0; k < steps; k++)
        for (int r = 0; r < world && l[r]; r++) {
            int n = 0;
            CHECK_OK(sh_loader_next(l[r], out, y, &n));
            out += (size_t)n * npix;
        }
    for (int r = 0; r < world; r++) sh_loader_destroy(l[r]);
}

static void augmented_pixels_are_equal_across_ranks_threads_and_resume(void)
{
    enum { COUNT = 40, B = 6, STEPS = 9 };
    const char *root = make_folder("texture", COUNT, 3, 20, 15, texture);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 8, 8);
    o.min_crop = 8, o.max_crop = 16, o.flip = 1, o.aspect = 0.75f, o.angle = 7, o.hue = 0.1f;
    o.saturation = o.exposure = 1.5f;
    o.mean[0] = 0.5f, o.std[1] = 0.25f;
    sh_dataset *d = open_folder(root, 1, 0, &o);
    if (!d) return;
    size_t per = (size_t)B * 3 * 64, all = STEPS * per;
    float *ref = malloc(all * sizeof(float)), *got = malloc(all * sizeof(float));
    read_augmented(d, B, 1, 1, 0, 0, STEPS, ref);
    read_augmented(d, B, 1, 1, 0, 0, STEPS, got);
    CHECK(!memcmp(ref, got, all * sizeof(float)), "two runs differ");
    const int worlds[] = {2, 3, 2}, threads[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        memset(got, 0, all * sizeof(float));
        read_augmented(d, B, worlds[i], threads[i], 0, 0, STEPS, got);
        CHECK(!memcmp(ref, got, all * sizeof(float)), "%d ranks of %d threads differ from one rank", worlds[i],
              threads[i]);
    }
    /* resume: step 4 of epoch 0 and step 1 of epoch 1 (an epoch is 6 steps) */
    const int from[] = {4, 7};
    for (int i = 0; i < 2; i++) {
        read_augmented(d, B, 2, 2, from[i] / 6, from[i] % 6, STEPS - from[i], got);
        CHECK(!memcmp(ref + from[i] * per, got, (STEPS - from[i]) * per * sizeof(float)),
              "resumed at step %d, the pictures differ", from[i]);
    }
    /* a different seed gives other crops of the same images */
    sh_loader_opts lo = {.global_batch = B, .rank = 0, .world = 1, .seed = 10, .shuffle = 1, .drop_last = 1};
    sh_loader *l = NULL;
    CHECK_OK(sh_loader_create(d, &lo, &l));
    int32_t y[B];
    int n = 0;
    if (l) CHECK_OK(sh_loader_next(l, got, y, &n));
    CHECK(memcmp(ref, got, per * sizeof(float)) != 0, "seed 10 gave seed 9's batch");
    sh_loader_destroy(l);
    free(ref);
    free(got);
    sh_dataset_destroy(d);
}

static void corrupt(const char *root, const char *rel, const char *how)
{
    char path[1024], cmd[2200];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    if (!strcmp(how, "truncate")) snprintf(cmd, sizeof cmd, "truncate -s 60 %s", path);
    else if (!strcmp(how, "text")) snprintf(cmd, sizeof cmd, "echo 'not a picture' > %s", path);
    else snprintf(cmd, sizeof cmd, ": > %s", path);
    CHECK(system(cmd) == 0, "%s", cmd);
}

static void bad_files_are_skipped_once_and_counted_or_stop_strict_runs(void)
{
    enum { COUNT = 24, B = 4 };
    const char *root = make_folder("bad", COUNT, 2, 8, 8, flat);
    corrupt(root, "c00/00002.png", "truncate");
    corrupt(root, "c01/00003.png", "text");
    corrupt(root, "c01/00005.png", "empty");
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 8, 8);
    sh_dataset *d = open_folder(root, 1, 0, &o);
    if (!d) return;
    float x[B * 3 * 64];
    int32_t y[B];
    sh_loader *l = make_loader(d, B, 0, 1, 1, 2, 2);
    int seen_bad = 0;
    for (int k = 0; l && k < 3 * COUNT / B; k++) { /* three epochs */
        int n = 0;
        CHECK_OK(sh_loader_next(l, x, y, &n));
        for (int i = 0; i < n; i++) {
            int idx = index_of(x + i * 192, 64);
            seen_bad += idx == 2 || idx == 3 || idx == 5;
            CHECK(y[i] == idx % 2, "label %d for picture %d", y[i], idx);
        }
    }
    CHECK(seen_bad == 0, "bad pictures reached a batch %d times", seen_bad);
    CHECK(sh_dataset_bad_files(d) == 3, "%lld bad files counted over three epochs, want 3",
          (long long)sh_dataset_bad_files(d));
    sh_loader_destroy(l);
    sh_dataset_destroy(d);

    d = open_folder(root, 1, 1, &o); /* strict */
    if (!d) return;
    l = make_loader(d, COUNT, 0, 1, 0, 1, 1);
    int n = 0;
    float *all = malloc((size_t)COUNT * 192 * sizeof(float));
    int32_t ys[COUNT];
    shoal_result rc = l ? sh_loader_next(l, all, ys, &n) : SHOAL_ERR_INVALID;
    CHECK(rc == SHOAL_ERR_FORMAT, "strict: got %s", shoal_result_name(rc));
    CHECK(strstr(shoal_last_error(), "--strict-data") && strstr(shoal_last_error(), ".png"),
          "strict error does not name the file: %s", shoal_last_error());
    free(all);
    sh_loader_destroy(l);
    sh_dataset_destroy(d);
}

static void evaluation_loaders_stop_at_their_epoch_end(void)
{
    enum { COUNT = 30, B = 7 };
    const char *root = make_folder("eval", COUNT, 3, 8, 8, flat);
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 8, 8);
    sh_dataset *d = open_folder(root, 0, 0, &o);
    if (!d) return;
    sh_loader *l = make_loader(d, B, 0, 1, 0, 2, 3);
    float x[B * 192];
    int32_t y[B];
    for (int pass = 0; pass < 2 && l; pass++) {
        CHECK_OK(sh_loader_seek(l, 0, 0));
        int total = 0;
        for (int64_t k = 0; k < sh_loader_steps_per_epoch(l); k++) {
            int n = 0;
            CHECK_OK(sh_loader_next(l, x, y, &n));
            for (int i = 0; i < n; i++) { /* entry e is picture 3 (e % 10) + e / 10 (class e / 10) */
                int e = i + total;
                CHECK(index_of(x + i * 192, 64) == 3 * (e % 10) + e / 10, "eval order: place %d", e);
            }
            total += n;
        }
        CHECK(total == COUNT, "an evaluation pass read %d images", total);
        usleep(100 * 1000); /* the threads had time to run ahead, if they would */
        CHECK(made(d) == (int64_t)COUNT * (pass + 1), "pass %d: %lld images decoded, want %d", pass,
              (long long)made(d), COUNT * (pass + 1));
    }
    sh_loader_destroy(l);
    sh_dataset_destroy(d);
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

/* 4000 files of 96 x 96 (110 MB as floats): reading them twice moves RSS by the prefetch
 * slots and the threads' buffers only. */
static void memory_stays_flat_over_many_files(void)
{
    enum { COUNT = 4000, B = 50 };
    char root[512], one[600], cmd[2000];
    snprintf(root, sizeof root, "%s/many", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/a %s/b", root, root);
    CHECK(system(cmd) == 0, "%s", cmd);
    snprintf(one, sizeof one, "%s/one.png", dir);
    write_png(one, 96, 96, 5, texture);
    /* hard links: 4000 names, one file's blocks */
    for (int i = 0; i < COUNT; i++) {
        char name[700];
        snprintf(name, sizeof name, "%s/%c/%d.png", root, i % 2 ? 'b' : 'a', i / 2);
        if (link(one, name) != 0) {
            CHECK(0, "cannot link %s", name);
            return;
        }
    }
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 64, 64);
    o.max_crop = 96;
    sh_dataset *d = open_folder(root, 1, 0, &o);
    if (!d) return;
    CHECK(d->source->list->names_nbytes < (size_t)COUNT * 10, "%zu bytes of names for %d files",
          d->source->list->names_nbytes, COUNT);
    float *x = malloc((size_t)B * 3 * 64 * 64 * sizeof(float));
    int32_t y[B];
    memset(x, 0, (size_t)B * 3 * 64 * 64 * sizeof(float));
    sh_loader *l = make_loader(d, B, 0, 1, 1, 2, 2);
    int n = 0;
    for (int k = 0; l && k < 4; k++) CHECK_OK(sh_loader_next(l, x, y, &n)); /* buffers warm */
    long before = rss_kb();
    for (int k = 4; l && k < 2 * COUNT / B; k++) CHECK_OK(sh_loader_next(l, x, y, &n));
    long after = rss_kb();
    /* AddressSanitizer keeps freed memory in quarantine: RSS says nothing there */
    CHECK(check_under_san() || after - before < 8 * 1024, "RSS grew %ld kB over two epochs of %d files",
          after - before, COUNT);
    CHECK(made(d) >= 2 * COUNT - 4 * B, "%lld images made", (long long)made(d));
    CHECK(sh_loader_wait_s(l) >= 0, "wait %g", sh_loader_wait_s(l));
    sh_loader_destroy(l);
    free(x);
    sh_dataset_destroy(d);
}

static void synthetic_pictures_are_deterministic_and_learnable(void)
{
    sh_image_opts o;
    sh_image_opts_default(&o, 3, 12, 16);
    o.mean[2] = 0.5f, o.std[2] = 0.5f;
    float a[3 * 12 * 16], b[3 * 12 * 16], m0[3 * 12 * 16] = {0}, m1[3 * 12 * 16] = {0};
    int32_t ya, yb;
    sh_synthetic_draw(7, 11, 5, &o, a, &ya);
    sh_synthetic_draw(7, 11, 5, &o, b, &yb);
    CHECK(ya == 1 && yb == 1 && !memcmp(a, b, sizeof a), "item 11 of 5 classes: labels %d %d", ya, yb);
    sh_synthetic_draw(7, 16, 5, &o, b, &yb);
    CHECK(yb == 1 && memcmp(a, b, sizeof a) != 0, "items 11 and 16 are the same picture");
    for (int k = 0; k < 20; k++) {
        int32_t y0, y1;
        sh_synthetic_draw(7, 5 * k, 5, &o, a, &y0);
        sh_synthetic_draw(7, 5 * k + 1, 5, &o, b, &y1);
        for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) m0[i] += a[i] / 20, m1[i] += b[i] / 20;
    }
    double dist = 0, lo = 1e9, hi = -1e9;
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) dist += (m0[i] - m1[i]) * (m0[i] - m1[i]);
    for (size_t i = 2 * 12 * 16; i < sizeof a / sizeof a[0]; i++) lo = lo < a[i] ? lo : a[i], hi = hi > a[i] ? hi : a[i];
    CHECK(dist > 1.0, "class means of two classes are %g apart", dist);
    CHECK(lo >= -1.0 - 1e-6 && hi <= 1.0 + 1e-6 && lo < 0, "normalized channel in [%g, %g]", lo, hi);

    sh_source *src = NULL;
    CHECK_OK(sh_source_synthetic_create(100, 0, 5, 7, &o, &src));
    sh_source_scratch scr;
    memset(&scr, 0, sizeof scr);
    int32_t y;
    if (src) CHECK_OK(sh_source_fill(src, 11, 0, &scr, b, &y));
    sh_synthetic_draw(7, 11, 5, &o, a, &ya);
    CHECK(src && y == 1 && !memcmp(a, b, sizeof a), "the source draws what sh_synthetic_draw does");
    sh_source_scratch_fini(&scr);
    sh_source_destroy(src);
    CHECK_RC(sh_source_synthetic_create(0, 0, 5, 7, &o, &src), SHOAL_ERR_INVALID);
    o.c = 4;
    CHECK_RC(sh_source_synthetic_create(10, 0, 5, 7, &o, &src), SHOAL_ERR_INVALID);
}

int main(void)
{
    check_begin("test_stream", 240);
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return check_end();
    }
    RUN(batches_follow_the_order_on_every_rank_count_and_thread_count);
    RUN(take_trades_buffers_and_reads_what_next_reads);
    RUN(augmented_pixels_are_equal_across_ranks_threads_and_resume);
    RUN(bad_files_are_skipped_once_and_counted_or_stop_strict_runs);
    RUN(evaluation_loaders_stop_at_their_epoch_end);
    RUN(memory_stays_flat_over_many_files);
    RUN(synthetic_pictures_are_deterministic_and_learnable);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_end();
}
