/* test_loader.c — proves src/data/loader.c and src/data/synthetic.c: rank shards of a global
 * step are disjoint and together equal the world-1 batch, epochs cover every image once, orders
 * depend on (seed, epoch) alone, seek resumes exactly (also mid-epoch at another world size:
 * sh_loader_seek_image), pixels are scaled to [0,1]; a regression's targets come row for row
 * with their images, on every rank, and a target set of another count is refused. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "check.h"
#include "data/data.h"

/* Images whose first pixel encodes their index: pixel 0 = i & 255, pixel 1 = i >> 8. */
static sh_dataset *indexed_dataset(int count)
{
    sh_dataset *d = NULL;
    CHECK_OK(sh_synthetic_create(count, 1, 2, 2, 5, 1, &d));
    if (!d) return NULL;
    for (int i = 0; i < count; i++) {
        d->pixels[i * 4 + 0] = (uint8_t)(i & 255);
        d->pixels[i * 4 + 1] = (uint8_t)(i >> 8);
    }
    return d;
}

static int image_index(const float *x) /* (C=1, H=2, W=2) */
{
    return (int)(x[0] * 255.f + 0.5f) + 256 * (int)(x[1] * 255.f + 0.5f);
}

static sh_loader *make_loader(const sh_dataset *d, int B, int rank, int world, uint64_t seed,
                              int drop_last)
{
    sh_loader_opts o = {.global_batch = B, .rank = rank, .world = world, .seed = seed,
                        .shuffle = 1, .drop_last = drop_last};
    sh_loader *l = NULL;
    CHECK_OK(sh_loader_create(d, &o, &l));
    return l;
}

/* Read one step: the image indices into idx, returns how many. */
static int next_indices(sh_loader *l, float *x, int32_t *y, int *idx)
{
    int n = -1;
    CHECK_OK(sh_loader_next(l, x, y, &n));
    for (int i = 0; i < n; i++) idx[i] = image_index(x + i * 4);
    return n;
}

static void shards_of_ranks_concatenate_to_the_world1_batch(void)
{
    enum { COUNT = 103 };
    sh_dataset *d = indexed_dataset(COUNT);
    if (!d) return;
    const int batches[] = {4, 7, 10, 13, 103};
    float x[COUNT * 4];
    int32_t y[COUNT];
    int ref[COUNT], got[COUNT];
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
        for (int drop = 0; drop < 2; drop++)
            for (int world = 1; world <= 4; world++) {
                int B = batches[bi];
                sh_loader *one = make_loader(d, B, 0, 1, 77, drop);
                sh_loader *ranks[4] = {0};
                for (int r = 0; r < world; r++) ranks[r] = make_loader(d, B, r, world, 77, drop);
                int ok = 1;
                int64_t steps = one ? sh_loader_steps_per_epoch(one) : 0;
                for (int64_t s = 0; s < 2 * steps && one; s++) { /* two epochs */
                    int nref = next_indices(one, x, y, ref), total = 0;
                    for (int r = 0; r < world; r++) {
                        if (!ranks[r]) continue;
                        CHECK(sh_loader_local_batch_max(ranks[r]) >= (B + world - 1) / world,
                              "local max");
                        int n = next_indices(ranks[r], x, y, got + total);
                        if (n > sh_loader_local_batch_max(ranks[r])) ok = 0;
                        total += n;
                    }
                    if (total != nref || memcmp(got, ref, sizeof(int) * (size_t)nref) != 0) ok = 0;
                }
                CHECK(ok, "B %d world %d drop_last %d: shards in rank order equal world-1 batch",
                      B, world, drop);
                sh_loader_destroy(one);
                for (int r = 0; r < world; r++) sh_loader_destroy(ranks[r]);
            }
    sh_dataset_destroy(d);
}

static void epoch_covers_every_image_once_and_orders_differ(void)
{
    enum { COUNT = 250, B = 16 };
    sh_dataset *d = indexed_dataset(COUNT);
    sh_loader *l = d ? make_loader(d, B, 0, 1, 5, 0) : NULL;
    if (!l) goto done;
    CHECK(sh_loader_steps_per_epoch(l) == (COUNT + B - 1) / B, "ceil steps %lld",
          (long long)sh_loader_steps_per_epoch(l));
    static float x[B * 4];
    int32_t y[B];
    int idx[B], order[2][COUNT];
    for (int e = 0; e < 2; e++) {
        CHECK(sh_loader_epoch(l) == e && sh_loader_step(l) == 0, "at epoch %lld step %lld",
              (long long)sh_loader_epoch(l), (long long)sh_loader_step(l));
        int seen[COUNT] = {0}, pos = 0;
        for (int64_t s = 0; s < sh_loader_steps_per_epoch(l); s++) {
            int n = next_indices(l, x, y, idx);
            for (int i = 0; i < n; i++) {
                if (idx[i] >= 0 && idx[i] < COUNT) seen[idx[i]]++;
                if (pos < COUNT) order[e][pos++] = idx[i];
                CHECK(y[i] == d->labels[idx[i]], "label follows its image");
            }
        }
        int once = pos == COUNT;
        for (int i = 0; i < COUNT; i++) once &= seen[i] == 1;
        CHECK(once, "epoch %d: every image exactly once (%d read)", e, pos);
    }
    CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0, "two epochs have different orders");
    int moved = 0;
    for (int i = 0; i < COUNT; i++) moved += order[0][i] != i;
    CHECK(moved > COUNT / 2, "shuffled: %d of %d moved", moved, COUNT);
done:
    sh_loader_destroy(l);
    sh_dataset_destroy(d);
}

static void drop_last_skips_the_short_step(void)
{
    sh_dataset *d = indexed_dataset(50);
    sh_loader *l = d ? make_loader(d, 16, 1, 3, 5, 1) : NULL;
    if (!l) goto done;
    CHECK(sh_loader_steps_per_epoch(l) == 3, "floor steps %lld",
          (long long)sh_loader_steps_per_epoch(l));
    float x[6 * 4];
    int32_t y[6];
    int idx[6];
    for (int s = 0; s < 3; s++) {
        int n = next_indices(l, x, y, idx);
        CHECK(n == 16 * 2 / 3 - 16 / 3, "rank 1 of 3 reads %d of 16", n);
    }
    CHECK(sh_loader_epoch(l) == 1 && sh_loader_step(l) == 0, "next epoch after 3 steps");
done:
    sh_loader_destroy(l);
    sh_dataset_destroy(d);
}

static void same_seed_same_order_and_other_seed_another(void)
{
    sh_dataset *d = indexed_dataset(100);
    sh_loader *a = d ? make_loader(d, 100, 0, 1, 9, 1) : NULL;
    sh_loader *b = d ? make_loader(d, 100, 0, 1, 9, 1) : NULL;
    sh_loader *c = d ? make_loader(d, 100, 0, 1, 10, 1) : NULL;
    if (!a || !b || !c) goto done;
    static float x[100 * 4];
    int32_t y[100];
    int ia[100], ib[100], ic[100];
    next_indices(a, x, y, ia), next_indices(b, x, y, ib), next_indices(c, x, y, ic);
    CHECK(memcmp(ia, ib, sizeof ia) == 0, "same seed, same order");
    CHECK(memcmp(ia, ic, sizeof ia) != 0, "another seed, another order");
done:
    sh_loader_destroy(a), sh_loader_destroy(b), sh_loader_destroy(c);
    sh_dataset_destroy(d);
}

static void seek_reproduces_the_sequence(void)
{
    enum { COUNT = 90, B = 8 };
    sh_dataset *d = indexed_dataset(COUNT);
    sh_loader *a = d ? make_loader(d, B, 1, 2, 3, 0) : NULL;
    sh_loader *b = d ? make_loader(d, B, 1, 2, 3, 0) : NULL;
    if (!a || !b) goto done;
    float x[B * 4];
    int32_t y[B];
    int ref[40][B], nref[40], got[B];
    int64_t spe = sh_loader_steps_per_epoch(a);
    int64_t save_epoch = 0, save_step = 0;
    for (int s = 0; s < 40; s++) {
        if (s == 17) save_epoch = sh_loader_epoch(a), save_step = sh_loader_step(a);
        nref[s] = next_indices(a, x, y, ref[s]);
    }
    CHECK(save_epoch == 17 / spe && save_step == 17 % spe, "position %lld/%lld",
          (long long)save_epoch, (long long)save_step);
    /* a fresh loader resumed at the saved position reads what the unbroken one read */
    CHECK_OK(sh_loader_seek(b, save_epoch, save_step));
    int ok = 1;
    for (int s = 17; s < 40; s++) {
        int n = next_indices(b, x, y, got);
        if (n != nref[s] || memcmp(got, ref[s], sizeof(int) * (size_t)n) != 0) ok = 0;
    }
    CHECK(ok, "resumed sequence equals the original");
    /* seeking backwards works too, and the end of an epoch means the next one */
    CHECK_OK(sh_loader_seek(b, 0, spe));
    CHECK(sh_loader_epoch(b) == 1 && sh_loader_step(b) == 0, "seek to end -> next epoch");
    CHECK_OK(sh_loader_seek(b, 0, 0));
    int n = next_indices(b, x, y, got);
    CHECK(n == nref[0] && memcmp(got, ref[0], sizeof(int) * (size_t)n) == 0, "back to start");
    CHECK_RC(sh_loader_seek(b, 0, spe + 1), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "steps") != NULL, "message: %s",
          shoal_last_error_message());
done:
    sh_loader_destroy(a), sh_loader_destroy(b);
    sh_dataset_destroy(d);
}

static void resume_on_another_world_size_reads_the_same_images(void)
{
    enum { COUNT = 77, B = 9 };
    sh_dataset *d = indexed_dataset(COUNT);
    sh_loader *one = d ? make_loader(d, B, 0, 1, 21, 1) : NULL;
    sh_loader *three[3] = {0};
    for (int r = 0; r < 3 && d; r++) three[r] = make_loader(d, B, r, 3, 21, 1);
    if (!one || !three[0] || !three[1] || !three[2]) goto done;
    float x[B * 4];
    int32_t y[B];
    int ref[B], got[B];
    for (int s = 0; s < 11; s++) next_indices(one, x, y, ref); /* into the second epoch */
    int ok = 1;
    for (int r = 0; r < 3; r++)
        CHECK_OK(sh_loader_seek(three[r], sh_loader_epoch(one), sh_loader_step(one)));
    for (int s = 0; s < 12; s++) {
        int nref = next_indices(one, x, y, ref), total = 0;
        for (int r = 0; r < 3; r++) total += next_indices(three[r], x, y, got + total);
        if (total != nref || memcmp(got, ref, sizeof(int) * (size_t)nref) != 0) ok = 0;
    }
    CHECK(ok, "3 ranks resumed from a 1-rank position read what the 1-rank run reads");
done:
    sh_loader_destroy(one);
    for (int r = 0; r < 3; r++) sh_loader_destroy(three[r]);
    sh_dataset_destroy(d);
}

/* An elastic job that changes from 2 ranks at batch 10 to 3 at batch 6 mid-epoch goes on from
 * the same image of the epoch's order: the rest of that epoch is read once, none twice, in
 * order; the epoch ends where its images run out, and the next is a whole one at the new batch. */
static void seek_image_goes_on_mid_epoch_at_another_world(void)
{
    enum { COUNT = 100, B1 = 10, B2 = 6 };
    sh_dataset *d = indexed_dataset(COUNT);
    sh_loader *one = d ? make_loader(d, 1, 0, 1, 33, 1) : NULL; /* the epoch's order, one image a step */
    sh_loader *two[2] = {0}, *three[3] = {0};
    for (int r = 0; r < 2 && d; r++) two[r] = make_loader(d, B1, r, 2, 33, 1);
    for (int r = 0; r < 3 && d; r++) three[r] = make_loader(d, B2, r, 3, 33, 1);
    if (!one || !two[0] || !two[1] || !three[0] || !three[1] || !three[2]) goto done;
    float x[COUNT * 4];
    int32_t y[COUNT];
    int order[COUNT], got[COUNT];
    for (int i = 0; i < COUNT; i++) next_indices(one, x, y, &order[i]);
    for (int s = 0; s < 3; s++)
        for (int r = 0; r < 2; r++) next_indices(two[r], x, y, got);
    int64_t image = sh_loader_image(two[0]);
    CHECK(image == 3 * B1 && sh_loader_epoch(two[0]) == 0, "after 3 steps of %d: image %lld", B1, (long long)image);
    for (int r = 0; r < 3; r++) CHECK_OK(sh_loader_seek_image(three[r], 0, image));
    CHECK(sh_loader_steps_left(three[0], 2) == (COUNT - 3 * B1) / B2 + COUNT / B2, "steps left: %lld",
          (long long)sh_loader_steps_left(three[0], 2));
    int at = (int)image, ok = 1, steps = 0;
    while (sh_loader_epoch(three[0]) == 0 && steps < COUNT) {
        int total = 0;
        for (int r = 0; r < 3; r++) total += next_indices(three[r], x, y, got + total);
        ok &= total == B2 && memcmp(got, order + at, sizeof(int) * B2) == 0;
        at += B2;
        steps++;
    }
    CHECK(ok && steps == (COUNT - 3 * B1) / B2, "the rest of the epoch in order: %d steps, ok %d", steps, ok);
    CHECK(sh_loader_epoch(three[0]) == 1 && sh_loader_image(three[0]) == 0 &&
          sh_loader_steps_left(three[0], 2) == COUNT / B2, "the next epoch is whole at the new batch");
    CHECK_RC(sh_loader_seek_image(three[0], 0, COUNT + 1), SHOAL_ERR_INVALID);
    CHECK_OK(sh_loader_seek_image(three[0], 0, COUNT - 2)); /* too few left for a step: the next epoch */
    CHECK(sh_loader_epoch(three[0]) == 1 && sh_loader_image(three[0]) == 0, "a seek past the last step");
done:
    sh_loader_destroy(one);
    for (int r = 0; r < 2; r++) sh_loader_destroy(two[r]);
    for (int r = 0; r < 3; r++) sh_loader_destroy(three[r]);
    sh_dataset_destroy(d);
}

static void pixels_are_scaled_to_unit_range(void)
{
    sh_dataset *d = NULL;
    CHECK_OK(sh_synthetic_create(20, 3, 4, 5, 4, 2, &d));
    if (!d) return;
    sh_loader_opts o = {.global_batch = 20, .rank = 0, .world = 1, .seed = 0, .shuffle = 0,
                        .drop_last = 1};
    sh_loader *l = NULL;
    CHECK_OK(sh_loader_create(d, &o, &l));
    static float x[20 * 60];
    int32_t y[20];
    int n = 0;
    if (l) CHECK_OK(sh_loader_next(l, x, y, &n));
    int exact = n == 20;
    for (int i = 0; i < n * 60; i++) exact &= x[i] == (float)d->pixels[i] / 255.f;
    for (int i = 0; i < n; i++) exact &= y[i] == d->labels[i];
    CHECK(exact, "unshuffled batch is x / 255.f in dataset order");
    sh_loader_destroy(l);
    sh_dataset_destroy(d);
}

static void synthetic_is_deterministic_and_learnable(void)
{
    sh_dataset *a = NULL, *b = NULL;
    CHECK_OK(sh_synthetic_create(200, 1, 8, 8, 4, 42, &a));
    CHECK_OK(sh_synthetic_create(200, 1, 8, 8, 4, 42, &b));
    if (!a || !b) goto done;
    CHECK(memcmp(a->pixels, b->pixels, 200 * 64) == 0 &&
              memcmp(a->labels, b->labels, 200 * sizeof(int32_t)) == 0,
          "same seed, same dataset");
    CHECK(a->nclasses == 4, "nclasses %d", a->nclasses);
    /* Nearest class mean (from the first half) classifies the second half well. */
    double mean[4][64] = {{0}};
    int cnt[4] = {0};
    for (int i = 0; i < 100; i++) {
        cnt[a->labels[i]]++;
        for (int p = 0; p < 64; p++) mean[a->labels[i]][p] += a->pixels[i * 64 + p];
    }
    for (int k = 0; k < 4; k++)
        for (int p = 0; p < 64; p++) mean[k][p] /= cnt[k] ? cnt[k] : 1;
    int right = 0;
    for (int i = 100; i < 200; i++) {
        int best = 0;
        double bestd = 1e300;
        for (int k = 0; k < 4; k++) {
            double dist = 0;
            for (int p = 0; p < 64; p++) {
                double t = a->pixels[i * 64 + p] - mean[k][p];
                dist += t * t;
            }
            if (dist < bestd) bestd = dist, best = k;
        }
        right += best == a->labels[i];
    }
    CHECK(right >= 90, "nearest mean gets %d of 100", right);
    sh_dataset_destroy(b);
    b = NULL;
    CHECK_OK(sh_synthetic_create(200, 1, 8, 8, 4, 43, &b));
    if (b) CHECK(memcmp(a->pixels, b->pixels, 200 * 64) != 0, "another seed, other pixels");
done:
    sh_dataset_destroy(a), sh_dataset_destroy(b);
}

/* Targets of 3 values per image: image i's is (i & 255, 255 - (i & 255), 7). */
static void targets_follow_their_images(void)
{
    enum { COUNT = 50, B = 12 };
    sh_dataset *d = indexed_dataset(COUNT), *t = NULL;
    CHECK_OK(sh_synthetic_create(COUNT, 3, 1, 1, 2, 9, &t));
    if (!d || !t) goto done;
    for (int i = 0; i < COUNT; i++) {
        t->pixels[i * 3 + 0] = (uint8_t)(i & 255);
        t->pixels[i * 3 + 1] = (uint8_t)(255 - (i & 255));
        t->pixels[i * 3 + 2] = 7;
    }
    for (int world = 1; world <= 3; world++)
        for (int rank = 0; rank < world; rank++) {
            float x[B * 4], tgt[B * 3];
            int32_t y[B];
            sh_loader_opts o = {.global_batch = B, .rank = rank, .world = world, .seed = 5, .shuffle = 1,
                                .drop_last = 1, .targets = t, .target_out = tgt};
            sh_loader *l = NULL;
            CHECK_OK(sh_loader_create(d, &o, &l));
            for (int step = 0; l && step < 9; step++) {
                int n = 0;
                CHECK_OK(sh_loader_next(l, x, y, &n));
                for (int i = 0; i < n; i++) {
                    int idx = image_index(x + i * 4);
                    CHECK(tgt[i * 3] * 255.f + 0.5f >= (float)(idx & 255) && tgt[i * 3] * 255.f - 0.5f <= (float)(idx & 255) &&
                          fabsf(tgt[i * 3 + 1] - (255 - (idx & 255)) / 255.f) < 1e-6f && fabsf(tgt[i * 3 + 2] - 7 / 255.f) < 1e-6f,
                          "world %d rank %d step %d row %d: image %d, target %g %g %g", world, rank, step, i, idx,
                          tgt[i * 3] * 255, tgt[i * 3 + 1] * 255, tgt[i * 3 + 2] * 255);
                }
            }
            sh_loader_destroy(l);
        }
    sh_dataset *fewer = NULL;
    CHECK_OK(sh_synthetic_create(COUNT - 1, 3, 1, 1, 2, 9, &fewer));
    float tgt[B * 3];
    sh_loader_opts o = {.global_batch = B, .world = 1, .targets = fewer, .target_out = tgt};
    sh_loader *l = NULL;
    CHECK_RC(sh_loader_create(d, &o, &l), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error(), "hold 49 images but") && strstr(shoal_last_error(), "holds 50 images"), "error: %s",
          shoal_last_error());
    sh_dataset_destroy(fewer);
done:
    sh_dataset_destroy(d);
    sh_dataset_destroy(t);
}

static void bad_options_are_refused(void)
{
    sh_dataset *d = indexed_dataset(10);
    if (!d) return;
    sh_loader *l = NULL;
    sh_loader_opts o = {.global_batch = 2, .rank = 0, .world = 3, .shuffle = 1};
    CHECK_RC(sh_loader_create(d, &o, &l), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "smaller than the world size") != NULL, "msg %s",
          shoal_last_error_message());
    o = (sh_loader_opts){.global_batch = 4, .rank = 3, .world = 3};
    CHECK_RC(sh_loader_create(d, &o, &l), SHOAL_ERR_INVALID);
    o = (sh_loader_opts){.global_batch = 11, .rank = 0, .world = 1, .drop_last = 1};
    CHECK_RC(sh_loader_create(d, &o, &l), SHOAL_ERR_INVALID);
    CHECK(l == NULL, "no loader on error");
    sh_dataset_destroy(d);
}

int main(void)
{
    check_begin("test_loader", 30);
    RUN(shards_of_ranks_concatenate_to_the_world1_batch);
    RUN(epoch_covers_every_image_once_and_orders_differ);
    RUN(drop_last_skips_the_short_step);
    RUN(same_seed_same_order_and_other_seed_another);
    RUN(seek_reproduces_the_sequence);
    RUN(resume_on_another_world_size_reads_the_same_images);
    RUN(seek_image_goes_on_mid_epoch_at_another_world);
    RUN(pixels_are_scaled_to_unit_range);
    RUN(synthetic_is_deterministic_and_learnable);
    RUN(targets_follow_their_images);
    RUN(bad_options_are_refused);
    return check_end();
}
