/* source.c — one image of a streamed dataset at a time: a picture file read, decoded at the
 * size its augmentation needs and augmented, or a synthetic picture drawn; a bad file warned
 * about once, marked and replaced by the next good one, or returned under --strict-data.
 * Not here: the decoders and the resampling (image_*.c, augment.c), threads (stream.c).
 * Proved by tests/data/test_stream.c. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "data/source.h"

void sh_image_opts_default(sh_image_opts *o, int c, int h, int w)
{
    memset(o, 0, sizeof *o);
    o->c = c;
    o->h = h;
    o->w = w;
    o->min_crop = o->max_crop = o->test_resize = h > w ? h : w;
    o->aspect = o->saturation = o->exposure = 1;
    for (int i = 0; i < 3; i++) o->std[i] = 1;
}

static shoal_result check_opts(const sh_image_opts *o)
{
    if (o->c != 1 && o->c != 3)
        return SH_FAIL(SHOAL_ERR_INVALID, "pictures become 1 (grey) or 3 (RGB) channels, not %d; set "
                       "channels=1 or 3 in the cfg's [net]", o->c);
    if (o->h < 1 || o->w < 1 || (int64_t)o->h * o->w > SH_IMAGE_MAX_PIXELS)
        return SH_FAIL(SHOAL_ERR_INVALID, "pictures of %dx%d: set width and height in the cfg's [net]",
                       o->w, o->h);
    if (o->min_crop < 1 || o->max_crop < o->min_crop || o->test_resize < 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "min_crop %d, max_crop %d, test_resize %d: want 1 <= min_crop "
                       "<= max_crop and test_resize >= 1", o->min_crop, o->max_crop, o->test_resize);
    for (int i = 0; i < o->c; i++)
        if (!(o->std[i] > 0))
            return SH_FAIL(SHOAL_ERR_INVALID, "std of channel %d is %g; it must be > 0", i, (double)o->std[i]);
    return SHOAL_OK;
}

static shoal_result alloc_source(const sh_image_opts *o, sh_source **out)
{
    *out = NULL;
    SH_TRY(check_opts(o));
    SH_TRY(sh_calloc(1, sizeof **out, (void **)out));
    (*out)->opts = *o;
    return SHOAL_OK;
}

shoal_result sh_source_files_create(sh_image_list *list, const sh_image_opts *o, int train, int strict,
                                    sh_source **out)
{
    shoal_result rc = alloc_source(o, out);
    if (rc != SHOAL_OK) {
        sh_image_list_destroy(list);
        return rc;
    }
    sh_source *s = *out;
    s->list = list;
    s->train = train;
    s->strict = strict;
    s->count = list->count;
    s->nclasses = list->nclasses;
    rc = sh_calloc((size_t)(s->count + 63) / 64, sizeof *s->bad, (void **)&s->bad);
    if (rc != SHOAL_OK) {
        sh_source_destroy(s);
        *out = NULL;
    }
    return rc;
}

shoal_result sh_source_synthetic_create(int64_t count, int64_t first_item, int nclasses, uint64_t seed,
                                        const sh_image_opts *o, sh_source **out)
{
    if (count < 1 || nclasses < 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "synthetic data: %lld images of %d classes; want at least one of each",
                       (long long)count, nclasses);
    SH_TRY(alloc_source(o, out));
    (*out)->count = count;
    (*out)->first_item = first_item;
    (*out)->nclasses = nclasses;
    (*out)->seed = seed;
    return SHOAL_OK;
}

void sh_source_destroy(sh_source *s)
{
    if (!s) return;
    sh_image_list_destroy(s->list);
    free(s->bad);
    free(s);
}

void sh_source_scratch_fini(sh_source_scratch *scr)
{
    sh_image_fini(&scr->img);
    sh_augment_scratch_fini(&scr->aug);
}

int64_t sh_dataset_bad_files(const sh_dataset *d)
{
    return d && d->source ? __atomic_load_n(&d->source->nbad, __ATOMIC_RELAXED) : 0;
}

static int is_bad(const sh_source *s, int64_t i)
{
    return (__atomic_load_n(&s->bad[i / 64], __ATOMIC_RELAXED) >> (i % 64)) & 1;
}

/* Mark file i bad; 1 when this call marked it (the first to find it warns and counts). */
static int mark_bad(sh_source *s, int64_t i)
{
    uint64_t bit = (uint64_t)1 << (i % 64);
    return !(__atomic_fetch_or(&s->bad[i / 64], bit, __ATOMIC_RELAXED) & bit);
}

/* The decode asks for the smallest size the plan keeps full detail at. */
static void plan_size(void *ctx, int full_w, int full_h, int *min_w, int *min_h)
{
    const sh_augment_plan *p = ctx;
    (void)full_w;
    (void)full_h;
    *min_w = p->min_w;
    *min_h = p->min_h;
}

/* The plan needs the picture's size before decoding; the header's is read by the decoder
 * itself, so the plan is drawn inside the size callback. */
typedef struct {
    const sh_source *s;
    uint64_t seed;
    sh_augment_plan plan;
} plan_ctx;

static void draw_plan(void *ctx, int full_w, int full_h, int *min_w, int *min_h)
{
    plan_ctx *pc = ctx;
    sh_rng rng;
    sh_rng_seed(&rng, pc->seed);
    sh_augment_plan_make(&pc->s->opts, pc->s->train, full_w, full_h, &rng, &pc->plan);
    plan_size(&pc->plan, full_w, full_h, min_w, min_h);
}

static shoal_result fill_file(sh_source *s, int64_t i, uint64_t sample_seed, sh_source_scratch *scr, float *dst)
{
    SH_TRY(sh_image_list_path(s->list, i, scr->path, sizeof scr->path));
    plan_ctx pc = {.s = s, .seed = sample_seed};
    SH_TRY(sh_image_read(scr->path, s->opts.c, draw_plan, &pc, &scr->img));
    SH_TRY(sh_augment_run(&s->opts, &pc.plan, &scr->img, &scr->aug, dst));
    return SHOAL_OK;
}

shoal_result sh_source_fill(sh_source *s, int64_t item, uint64_t sample_seed, sh_source_scratch *scr,
                            float *dst, int32_t *label)
{
    if (!s->list) {
        sh_synthetic_draw(s->seed, s->first_item + item, s->nclasses, &s->opts, dst, label);
        __atomic_add_fetch(&s->made, 1, __ATOMIC_RELAXED);
        return SHOAL_OK;
    }
    int64_t i = item, run = 0;
    for (;;) {
        if (!is_bad(s, i)) {
            shoal_result rc = fill_file(s, i, sample_seed, scr, dst);
            if (rc == SHOAL_OK) {
                *label = s->list->labels[i];
                __atomic_add_fetch(&s->made, 1, __ATOMIC_RELAXED);
                return SHOAL_OK;
            }
            if (rc == SHOAL_ERR_NOMEM || rc == SHOAL_ERR_INTERNAL || s->strict) {
                if (s->strict) sh_err_prefix("bad picture file (--strict-data): ");
                return rc;
            }
            if (mark_bad(s, i)) {
                int64_t n = __atomic_add_fetch(&s->nbad, 1, __ATOMIC_RELAXED);
                if (n <= SH_SOURCE_WARN_MAX)
                    SH_LOG_W("data", "%s; skipped (the next picture of the list takes its place)",
                             shoal_last_error_message());
                if (n == SH_SOURCE_WARN_MAX)
                    SH_LOG_W("data", "further bad files are counted in the report, not named");
            }
        }
        if (++run >= SH_SOURCE_MAX_BAD_RUN || run >= s->count)
            return SH_FAIL(SHOAL_ERR_FORMAT, "%s: %lld files in a row could not be read as pictures (the "
                           "last: %s); check the data set", s->list->root, (long long)run, scr->path);
        i = i + 1 < s->count ? i + 1 : 0;
    }
}
