/* stream.c — streamed batches: a ring of slots, each one step's shard of this rank, filled by
 * decoding threads at most `prefetch` steps ahead, so memory stays that many batches whatever
 * the data set's size.
 * Not here: the order and shards (loader.c), one image (source.c). Proved by tests/data/test_stream.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "data/source.h"
#include "data/stream.h"

/* Vocabulary: a slot is FREE, FILLING (its items handed out one by one), READY (all done) or
 * READING (being copied out by next). Decoding threads claim images one at a time from the
 * oldest slot still filling and assign the next step to a free slot. The assign cursor (pe, ps)
 * is the next step to give a slot; the read position (ce, cs) the step next returns, always
 * held by slot `head`. A seek waits for images in flight, frees every slot and moves both. */

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_READING };

typedef struct {
    int state;
    int64_t epoch, step;
    int n, next, done;          /* images; handed out; finished */
    shoal_result rc;            /* the first failure of its images */
    char msg[1024];
    int64_t *item;              /* (batch_max) image of each place */
    uint64_t *seed;             /* (batch_max) its random stream */
    float *x;                   /* (batch_max, C, H, W) */
    int32_t *y;                 /* (batch_max) */
} slot;

typedef struct {
    sh_stream *s;
    sh_source_scratch scratch;
    pthread_t thread;
    int started;
} worker;

struct sh_stream {
    sh_source *src;
    sh_loader_opts o;
    int count, batch_max;
    int64_t steps_per_epoch;
    size_t npix;
    int nslots, nworkers;
    slot *slots;
    worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t work, ready, idle;
    int active;                 /* a next or seek asked for data */
    int stopping;
    int64_t limit_epoch;        /* no slot is assigned past this epoch (evaluation loaders) */
    int64_t pe, ps, ce, cs;
    int head, nassigned, inflight;
    uint64_t generation;        /* bumped by seek: images started before it are dropped */
    int32_t *order;             /* (count) epoch order_epoch's order */
    int64_t order_epoch;
    uint64_t wait_ns;
};

static int can_assign(const sh_stream *s)
{
    return s->active && !s->stopping && s->nassigned < s->nslots && s->pe <= s->limit_epoch;
}

/* Give the assign cursor's step to the next free slot: its images and their seeds. */
static void assign(sh_stream *s)
{
    slot *sl = &s->slots[(s->head + s->nassigned) % s->nslots];
    if (s->order_epoch != s->pe) {
        sh_loader_make_order(s->order, s->count, s->o.seed, s->pe, s->o.shuffle);
        s->order_epoch = s->pe;
    }
    int64_t B = s->o.global_batch, world = s->o.world, r = s->o.rank, start = s->ps * B;
    int64_t b = s->count - start < B ? s->count - start : B;
    int64_t lo = start + r * b / world, hi = start + (r + 1) * b / world;
    for (int64_t i = lo; i < hi; i++) {
        sl->item[i - lo] = s->order[i];
        sl->seed[i - lo] = sh_loader_sample_seed(s->o.seed, s->pe, i);
    }
    sl->epoch = s->pe;
    sl->step = s->ps;
    sl->n = (int)(hi - lo);
    sl->next = sl->done = 0;
    sl->rc = SHOAL_OK;
    sl->msg[0] = 0;
    sl->state = sl->n ? SLOT_FILLING : SLOT_READY;
    s->nassigned++;
    if (++s->ps == s->steps_per_epoch) s->pe++, s->ps = 0;
    if (!sl->n) pthread_cond_broadcast(&s->ready);
}

/* The oldest slot with an image left to hand out, or NULL. */
static slot *claimable(sh_stream *s)
{
    for (int k = 0; k < s->nassigned; k++) {
        slot *sl = &s->slots[(s->head + k) % s->nslots];
        if (sl->state == SLOT_FILLING && sl->next < sl->n) return sl;
    }
    return NULL;
}

static void *run_worker(void *arg)
{
    worker *w = arg;
    sh_stream *s = w->s;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        slot *sl = claimable(s);
        if (!sl && can_assign(s)) {
            assign(s);
            pthread_cond_broadcast(&s->work); /* the other threads may take its images too */
            continue;
        }
        if (!sl) {
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        int j = sl->next++;
        uint64_t gen = s->generation;
        s->inflight++;
        pthread_mutex_unlock(&s->mu);
        int32_t label = 0;
        shoal_result rc = sh_source_fill(s->src, sl->item[j], sl->seed[j], &w->scratch, sl->x + (size_t)j * s->npix,
                                         &label);
        char msg[1024] = "";
        if (rc != SHOAL_OK) snprintf(msg, sizeof msg, "%s", shoal_last_error_message());
        pthread_mutex_lock(&s->mu);
        if (--s->inflight == 0) pthread_cond_broadcast(&s->idle);
        if (gen != s->generation) continue; /* a seek dropped this slot's step */
        sl->y[j] = label;
        if (rc != SHOAL_OK && sl->rc == SHOAL_OK) {
            sl->rc = rc;
            memcpy(sl->msg, msg, sizeof sl->msg);
        }
        if (++sl->done == sl->n) {
            sl->state = SLOT_READY;
            pthread_cond_broadcast(&s->ready);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void sh_stream_destroy(sh_stream *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nworkers; i++) {
        if (s->workers[i].started) pthread_join(s->workers[i].thread, NULL);
        sh_source_scratch_fini(&s->workers[i].scratch);
    }
    for (int i = 0; s->slots && i < s->nslots; i++) {
        free(s->slots[i].item);
        free(s->slots[i].seed);
        sh_free_aligned(s->slots[i].x);
        free(s->slots[i].y);
    }
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->ready);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s->slots);
    free(s->workers);
    free(s->order);
    free(s);
}

shoal_result sh_stream_create(const sh_dataset *d, const sh_loader_opts *o, int64_t steps_per_epoch,
                              sh_stream **out)
{
    shoal_result rc = SHOAL_OK;
    sh_stream *s = NULL;
    *out = NULL;
    SH_TRY(sh_calloc(1, sizeof *s, (void **)&s));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->ready, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->src = d->source;
    s->o = *o;
    s->count = d->count;
    s->steps_per_epoch = steps_per_epoch;
    s->batch_max = (int)((o->global_batch + o->world - 1) / o->world);
    s->npix = (size_t)d->c * d->h * d->w;
    s->nslots = o->prefetch > 0 ? o->prefetch : 2;
    s->nworkers = o->threads > 0 ? o->threads : 1;
    s->order_epoch = -1;
    s->limit_epoch = o->shuffle ? INT64_MAX : 0;
    SH_TRY_GOTO(sh_calloc((size_t)s->count, sizeof *s->order, (void **)&s->order), rc, fail);
    SH_TRY_GOTO(sh_calloc((size_t)s->nslots, sizeof *s->slots, (void **)&s->slots), rc, fail);
    for (int i = 0; i < s->nslots; i++) {
        slot *sl = &s->slots[i];
        size_t b = (size_t)s->batch_max;
        SH_TRY_GOTO(sh_calloc(b, sizeof *sl->item, (void **)&sl->item), rc, fail);
        SH_TRY_GOTO(sh_calloc(b, sizeof *sl->seed, (void **)&sl->seed), rc, fail);
        SH_TRY_GOTO(sh_calloc(b, sizeof *sl->y, (void **)&sl->y), rc, fail);
        SH_TRY_GOTO(sh_alloc_aligned(b * s->npix * sizeof(float), (void **)&sl->x), rc, fail);
    }
    SH_TRY_GOTO(sh_calloc((size_t)s->nworkers, sizeof *s->workers, (void **)&s->workers), rc, fail);
    for (int i = 0; i < s->nworkers; i++) {
        s->workers[i].s = s;
        if (pthread_create(&s->workers[i].thread, NULL, run_worker, &s->workers[i]) != 0) {
            rc = SH_FAIL(SHOAL_ERR_NOMEM, "cannot start decoding thread %d of %d; lower --data-threads", i + 1,
                         s->nworkers);
            goto fail;
        }
        s->workers[i].started = 1;
    }
    *out = s;
    return SHOAL_OK;
fail:
    sh_stream_destroy(s);
    return rc;
}

shoal_result sh_stream_next(sh_stream *s, float *x, int32_t *y, int *n)
{
    return sh_stream_take(s, &x, 0, y, n);
}

/* cap: the floats at *x, allocated with sh_alloc_aligned, or 0 (borrowed): a slot's own size
 * trades buffers with the caller instead of copying the batch. */
shoal_result sh_stream_take(sh_stream *s, float **x, size_t cap, int32_t *y, int *n)
{
    pthread_mutex_lock(&s->mu);
    if (s->limit_epoch < s->ce) s->limit_epoch = s->ce; /* evaluation: this epoch may be decoded */
    if (!s->active) {
        s->active = 1;
        pthread_cond_broadcast(&s->work);
    }
    slot *sl = &s->slots[s->head];
    if (!s->nassigned || sl->state != SLOT_READY) {
        uint64_t t0 = sh_now_ns();
        pthread_cond_broadcast(&s->work);
        while (!s->nassigned || sl->state != SLOT_READY) pthread_cond_wait(&s->ready, &s->mu);
        s->wait_ns += sh_now_ns() - t0;
    }
    SH_ASSERT(sl->epoch == s->ce && sl->step == s->cs);
    sl->state = SLOT_READING;
    pthread_mutex_unlock(&s->mu);

    if (cap && cap == (size_t)s->batch_max * s->npix) { /* only a READING slot is ours */
        float *mine = sl->x;
        sl->x = *x;
        *x = mine;
    } else {
        memcpy(*x, sl->x, (size_t)sl->n * s->npix * sizeof(float));
    }
    memcpy(y, sl->y, (size_t)sl->n * sizeof *y);
    *n = sl->n;
    shoal_result rc = sl->rc;
    char msg[1024];
    if (rc != SHOAL_OK) memcpy(msg, sl->msg, sizeof msg);

    pthread_mutex_lock(&s->mu);
    sl->state = SLOT_FREE;
    s->head = (s->head + 1) % s->nslots;
    s->nassigned--;
    if (++s->cs == s->steps_per_epoch) s->ce++, s->cs = 0;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (rc != SHOAL_OK) return SH_FAIL(rc, "%s", msg);
    return SHOAL_OK;
}

void sh_stream_seek(sh_stream *s, int64_t epoch, int64_t step)
{
    pthread_mutex_lock(&s->mu);
    s->generation++;
    while (s->inflight > 0) pthread_cond_wait(&s->idle, &s->mu);
    for (int i = 0; i < s->nslots; i++) s->slots[i].state = SLOT_FREE;
    s->head = s->nassigned = 0;
    s->pe = s->ce = epoch;
    s->ps = s->cs = step;
    if (s->limit_epoch < epoch || !s->o.shuffle) s->limit_epoch = epoch;
    s->active = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
}

double sh_stream_wait_s(const sh_stream *s) { return (double)s->wait_ns * 1e-9; }
