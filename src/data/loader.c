/* loader.c — batches: each epoch's order is a Fisher-Yates permutation from (seed, epoch)
 * alone; each global step is split into contiguous rank shards; in-memory datasets copied
 * here, streamed ones (pictures, synthetic) through stream.c's threads.
 * Not here: reading files (idx.c, cifar.c, source.c), the model.
 * Proved by tests/data/test_loader.c and test_stream.c. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "data/data.h"
#include "data/stream.h"

/* Vocabulary: B = global batch, world ranks, epoch e has order_e (a permutation of the
 * images); global step k of epoch e covers order_e[k*B, min((k+1)*B, count)) — its size b is B
 * except possibly for the last step when drop_last = 0 — and rank r reads the part
 * [r*b/world, (r+1)*b/world) (with drop_last = 0 a last step shorter than world leaves
 * some ranks n = 0 images; trainers that need every rank busy use drop_last = 1).
 * Position (epoch, step) is always the next step to be read, so a checkpoint of it resumes
 * exactly: after the last step of an epoch the loader is at (epoch + 1, 0). Because order_e
 * depends on (seed, e) only, a resumed run and an unbroken run read the same images, on every
 * rank and any world size. Regression targets, when given, are read row for row with the
 * images, from the same indices of a second dataset. An elastic job whose world changed
 * mid-epoch goes on from an image of order_e (sh_loader_seek_image): that epoch's steps start
 * there (skip), the next from 0. */

struct sh_loader {
    const sh_dataset *d;       /* borrowed; must outlive the loader */
    sh_loader_opts o;
    int64_t streams, segment;  /* text: S streams of segment bytes each */
    int64_t steps_per_epoch;
    int64_t epoch, step;       /* the next step to read */
    int64_t skip;              /* images of this epoch's order read before its step 0 */
    int64_t order_epoch;       /* the epoch order[] was built for; -1: none yet */
    int32_t *order;            /* (count) image indices in this epoch's order */
    sh_stream *stream;         /* streamed datasets: the decoding threads and their slots */
};

/* Mix (seed, epoch) into one seed; sh_rng_seed's splitmix64 spreads it over the state. The odd
 * constant is the 64-bit golden ratio, so consecutive epochs land far apart. */
static uint64_t epoch_seed(uint64_t seed, int64_t epoch)
{
    return seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(epoch + 1));
}

void sh_loader_make_order(int32_t *order, int count, uint64_t seed, int64_t epoch, int shuffle)
{
    for (int i = 0; i < count; i++) order[i] = i;
    if (!shuffle) return;
    sh_rng rng;
    sh_rng_seed(&rng, epoch_seed(seed, epoch));
    for (int i = count - 1; i > 0; i--) {
        int j = (int)sh_rng_below(&rng, (uint64_t)i + 1);
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

uint64_t sh_loader_sample_seed(uint64_t seed, int64_t epoch, int64_t i)
{
    /* another odd constant (splitmix64's first multiplier) keeps places apart from epochs */
    return epoch_seed(seed, epoch) ^ (0xBF58476D1CE4E5B9ull * (uint64_t)(i + 1));
}

static void build_order(sh_loader *l, int64_t epoch)
{
    sh_loader_make_order(l->order, l->d->count, l->o.seed, epoch, l->o.shuffle);
    l->order_epoch = epoch;
}

shoal_result sh_loader_create(const sh_dataset *d, const sh_loader_opts *o, sh_loader **out)
{
    shoal_result rc = SHOAL_OK;
    sh_loader *l = NULL;
    *out = NULL;
    if (!d || !o || d->count <= 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "loader: a dataset with at least one image is needed");
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
        return SH_FAIL(SHOAL_ERR_INVALID, "loader: rank %d of world %d; want 0 <= rank < world",
                       o->rank, o->world);
    if (o->global_batch < o->world)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "loader: global batch %d is smaller than the world size %d; every rank "
                       "needs at least one image per step: raise --batch",
                       o->global_batch, o->world);
    if (o->targets && (d->text || o->targets->text || o->targets->count != d->count || !o->target_out))
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "loader: the targets %s hold %d %s but %s holds %d %s; give one target image per image",
                       o->targets->name, o->targets->count, o->targets->text ? "characters" : "images", d->name,
                       d->count, d->text ? "characters" : "images");
    if (o->drop_last && o->global_batch > d->count && !d->text) /* text: streams of characters, below */
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "loader: global batch %d is larger than the %d images of %s, so an "
                       "epoch with drop_last has no step; lower --batch",
                       o->global_batch, d->count, d->name);
    SH_TRY_GOTO(sh_calloc(1, sizeof *l, (void **)&l), rc, done);
    l->d = d;
    l->o = *o;
    if (l->o.time_steps < 1) l->o.time_steps = 1;
    if (d->text) {
        int64_t t = l->o.time_steps;
        if (o->global_batch % t || (o->global_batch / t) % o->world) {
            rc = SH_FAIL(SHOAL_ERR_INVALID, "loader: %d rows per step are not %lld time steps of "
                         "streams shared equally by %d ranks", o->global_batch, (long long)t,
                         o->world);
            goto done;
        }
        l->streams = o->global_batch / t;
        l->segment = d->count / l->streams;
        l->steps_per_epoch = l->segment > 1 ? (l->segment - 1) / t : 0;
        if (l->steps_per_epoch < 1) {
            rc = SH_FAIL(SHOAL_ERR_INVALID, "%s: %d characters are too few for %lld sequences (streams) of "
                         "%lld + 1 characters each, a step's; lower --batch (sequences a step) or time_steps, or "
                         "give a longer text", d->name, d->count, (long long)l->streams, (long long)t);
            goto done;
        }
        *out = l;
        l = NULL;
        goto done;
    }
    l->steps_per_epoch = o->drop_last ? d->count / o->global_batch
                                      : (d->count + o->global_batch - 1) / o->global_batch;
    l->order_epoch = -1;
    if (d->source) SH_TRY_GOTO(sh_stream_create(d, &l->o, l->steps_per_epoch, &l->stream), rc, done);
    else SH_TRY_GOTO(sh_calloc((size_t)d->count, sizeof *l->order, (void **)&l->order), rc, done);
    *out = l;
    l = NULL;
done:
    sh_loader_destroy(l);
    return rc;
}

void sh_loader_destroy(sh_loader *l)
{
    if (!l) return;
    sh_stream_destroy(l->stream);
    free(l->order);
    free(l);
}

int sh_loader_local_batch_max(const sh_loader *l)
{
    /* Rank r's share of B is floor((r+1)B/world) - floor(rB/world) <= ceil(B/world); a short
     * last step b < B gives shares <= ceil(b/world) <= that. */
    return (l->o.global_batch + l->o.world - 1) / l->o.world;
}

int64_t sh_loader_steps_per_epoch(const sh_loader *l) { return l->steps_per_epoch; }
int64_t sh_loader_epoch(const sh_loader *l) { return l->epoch; }
int64_t sh_loader_step(const sh_loader *l) { return l->step; }

/* Steps of the current epoch: all of them, or those left after skip. */
static int64_t epoch_steps(const sh_loader *l)
{
    if (!l->skip) return l->steps_per_epoch;
    int64_t left = l->d->count - l->skip, B = l->o.global_batch;
    return l->o.drop_last ? left / B : (left + B - 1) / B;
}

/* After a step: the next one, or the next epoch's first. */
static void advance(sh_loader *l)
{
    if (++l->step < epoch_steps(l)) return;
    l->epoch++;
    l->step = 0;
    l->skip = 0;
}

int64_t sh_loader_image(const sh_loader *l)
{
    return l->d->text ? l->step : l->skip + l->step * l->o.global_batch;
}

int64_t sh_loader_steps_left(const sh_loader *l, int64_t epochs)
{
    int64_t left = epoch_steps(l) - l->step;
    if (epochs > l->epoch + 1) left += (epochs - l->epoch - 1) * l->steps_per_epoch;
    return epochs > l->epoch ? left : 0;
}

shoal_result sh_loader_seek_image(sh_loader *l, int64_t epoch, int64_t image)
{
    if (l->d->text)
        return SH_FAIL(SHOAL_ERR_INVALID, "loader: a text's streams cannot move to another world size mid-epoch");
    if (l->stream)
        return SH_FAIL(SHOAL_ERR_INVALID, "loader: %s is decoded as it is read and cannot move to another world size "
                       "mid-epoch; --elastic trains on datasets held in memory (IDX, CIFAR-10)", l->d->name);
    if (epoch < 0 || image < 0 || image > l->d->count)
        return SH_FAIL(SHOAL_ERR_INVALID, "loader: cannot seek to epoch %lld image %lld of %d", (long long)epoch,
                       (long long)image, l->d->count);
    l->epoch = epoch;
    l->step = 0;
    l->skip = image;
    if (epoch_steps(l) < 1) { /* too few left for a step: the next epoch */
        l->epoch++;
        l->skip = 0;
    }
    return SHOAL_OK;
}

shoal_result sh_loader_seek(sh_loader *l, int64_t epoch, int64_t step)
{
    if (epoch < 0 || step < 0 || step > l->steps_per_epoch)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "loader: cannot seek to epoch %lld step %lld; an epoch has %lld steps "
                       "(was the checkpoint saved with another batch size or dataset?)",
                       (long long)epoch, (long long)step, (long long)l->steps_per_epoch);
    if (step == l->steps_per_epoch) epoch++, step = 0;
    l->epoch = epoch;
    l->step = step;
    if (l->stream) sh_stream_seek(l->stream, epoch, step);
    l->skip = 0;
    return SHOAL_OK;
}

double sh_loader_wait_s(const sh_loader *l) { return l->stream ? sh_stream_wait_s(l->stream) : 0; }

/* Text: rows (t, b) for this rank's streams b, one-hot of the byte at the stream's position
 * step*T + t, labelled with the byte after it. */
static void next_text(sh_loader *l, float *x, int32_t *y, int *n)
{
    int64_t t_steps = l->o.time_steps, world = l->o.world, r = l->o.rank;
    int64_t s0 = r * l->streams / world, s1 = (r + 1) * l->streams / world, nb = s1 - s0;
    const uint8_t *bytes = l->d->pixels;
    memset(x, 0, (size_t)(t_steps * nb) * 256 * sizeof(float));
    for (int64_t t = 0; t < t_steps; t++)
        for (int64_t b = 0; b < nb; b++) {
            int64_t pos = (s0 + b) * l->segment + l->step * t_steps + t, row = t * nb + b;
            x[row * 256 + bytes[pos]] = 1.0f;
            y[row] = bytes[pos + 1];
        }
    *n = (int)(t_steps * nb);
    advance(l);
}

shoal_result sh_loader_take(sh_loader *l, float **x, size_t cap, int32_t *y, int *n)
{
    if (!l->stream || l->d->text) return sh_loader_next(l, *x, y, n);
    shoal_result rc = sh_stream_take(l->stream, x, cap, y, n);
    if (++l->step == l->steps_per_epoch) l->epoch++, l->step = 0;
    return rc;
}

shoal_result sh_loader_next(sh_loader *l, float *x, int32_t *y, int *n)
{
    const sh_dataset *d = l->d;
    if (d->text) {
        next_text(l, x, y, n);
        return SHOAL_OK;
    }
    if (l->stream) { /* the stream keeps its own position in step with this one */
        shoal_result rc = sh_stream_next(l->stream, x, y, n);
        if (++l->step == l->steps_per_epoch) l->epoch++, l->step = 0;
        return rc;
    }
    if (l->order_epoch != l->epoch) build_order(l, l->epoch);
    int64_t B = l->o.global_batch, world = l->o.world, r = l->o.rank;
    int64_t start = l->skip + l->step * B;
    int64_t b = d->count - start < B ? d->count - start : B;
    int64_t lo = start + r * b / world, hi = start + (r + 1) * b / world;
    size_t npix = (size_t)d->c * d->h * d->w;
    for (int64_t i = lo; i < hi; i++) {
        int32_t idx = l->order[i];
        const uint8_t *src = d->pixels + (size_t)idx * npix;
        float *dst = x + (size_t)(i - lo) * npix;
        /* A true division, exactly x / 255.f, that the compiler vectorizes (16 lanes with
         * AVX-512); a 256-entry table would be exact too but gathers one lane at a time. */
        for (size_t p = 0; p < npix; p++) dst[p] = (float)src[p] / 255.f;
        y[i - lo] = d->labels[idx];
        if (!l->o.targets) continue;
        const sh_dataset *t = l->o.targets;
        size_t tpix = (size_t)t->c * t->h * t->w;
        const uint8_t *tsrc = t->pixels + (size_t)idx * tpix;
        float *tdst = l->o.target_out + (size_t)(i - lo) * tpix;
        for (size_t p = 0; p < tpix; p++) tdst[p] = (float)tsrc[p] / 255.f;
    }
    *n = (int)(hi - lo);
    advance(l);
    return SHOAL_OK;
}
