/* trace.c — the timeline's recorder: per-thread buffers of complete events, chunked so that
 * recording never copies what it holds and takes no lock after a thread's first event.
 * Not here: clock alignment and the JSON file (src/train/timeline.c).
 * Proved by tests/base/test_trace.c. */
#include "base/trace.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* 4096 events of ~170 bytes: 0.7 MB a chunk. A thread keeps at most TRACE_CHUNKS_MAX of
 * them (1M events, ~170 MB); --timeline-steps keeps long runs far below that. */
#define TRACE_CHUNK_EVENTS 4096
#define TRACE_CHUNKS_MAX 256

typedef struct chunk {
    struct chunk *next;
    size_t n;
    sh_trace_event ev[TRACE_CHUNK_EVENTS];
} chunk;

typedef struct tbuf {
    struct tbuf *next;   /* every thread's buffer, for sh_trace_each */
    chunk *head, *tail;
    size_t nchunks;
    size_t dropped;
} tbuf;

_Atomic int sh_trace_recording;
static _Atomic int armed;
static _Atomic int64_t cur_step, win_lo, win_hi;
static pthread_mutex_t list_mu = PTHREAD_MUTEX_INITIALIZER;
static tbuf *all;
/* sh_trace_reset frees the buffers: a thread's pointer is good only for its generation. */
static _Atomic unsigned generation = 1;
static _Thread_local tbuf *mine;
static _Thread_local unsigned mine_gen;

static void update(void)
{
    int64_t s = atomic_load(&cur_step), lo = atomic_load(&win_lo), hi = atomic_load(&win_hi);
    int on = atomic_load(&armed) && s >= lo && (hi < 0 || s < hi);
    atomic_store_explicit(&sh_trace_recording, on, memory_order_relaxed);
}

void sh_trace_arm(int64_t step_lo, int64_t step_hi)
{
    atomic_store(&win_lo, step_lo);
    atomic_store(&win_hi, step_hi);
    atomic_store(&armed, 1);
    update();
}

void sh_trace_set_step(int64_t step)
{
    atomic_store_explicit(&cur_step, step, memory_order_relaxed);
    if (atomic_load_explicit(&armed, memory_order_relaxed)) update();
}

int64_t sh_trace_step(void) { return atomic_load_explicit(&cur_step, memory_order_relaxed); }

void sh_trace_disarm(void)
{
    atomic_store(&armed, 0);
    update();
}

static tbuf *my_buffer(void)
{
    unsigned gen = atomic_load_explicit(&generation, memory_order_acquire);
    if (mine && mine_gen == gen) return mine;
    tbuf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    pthread_mutex_lock(&list_mu);
    b->next = all;
    all = b;
    pthread_mutex_unlock(&list_mu);
    mine = b;
    mine_gen = gen;
    return b;
}

void sh_trace_add(const sh_trace_event *ev)
{
    tbuf *b = my_buffer();
    if (!b) return;
    chunk *c = b->tail;
    if (!c || c->n == TRACE_CHUNK_EVENTS) {
        if (b->nchunks == TRACE_CHUNKS_MAX || !(c = malloc(sizeof *c))) {
            b->dropped++;
            return;
        }
        c->next = NULL;
        c->n = 0;
        if (b->tail) b->tail->next = c;
        else b->head = c;
        b->tail = c;
        b->nchunks++;
    }
    sh_trace_event *e = &c->ev[c->n++];
    *e = *ev;
    e->name[SH_TRACE_NAME_NBYTES - 1] = 0;
    e->step = sh_trace_step();
}

void sh_trace_span(int track, const char *name, uint64_t start_ns, uint64_t end_ns,
                   const char *k0, int64_t v0, const char *k1, int64_t v1)
{
    sh_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.track = track;
    ev.start_ns = start_ns;
    ev.dur_ns = end_ns > start_ns ? end_ns - start_ns : 0;
    size_t len = strlen(name);
    if (len >= SH_TRACE_NAME_NBYTES) len = SH_TRACE_NAME_NBYTES - 1;
    memcpy(ev.name, name, len);
    ev.key[0] = k0;
    ev.val[0] = v0;
    ev.key[1] = k1;
    ev.val[1] = v1;
    sh_trace_add(&ev);
}

void sh_trace_each(void (*fn)(void *ctx, const sh_trace_event *ev), void *ctx)
{
    pthread_mutex_lock(&list_mu);
    for (tbuf *b = all; b; b = b->next)
        for (chunk *c = b->head; c; c = c->next)
            for (size_t i = 0; i < c->n; i++) fn(ctx, &c->ev[i]);
    pthread_mutex_unlock(&list_mu);
}

size_t sh_trace_count(void)
{
    size_t n = 0;
    pthread_mutex_lock(&list_mu);
    for (tbuf *b = all; b; b = b->next)
        for (chunk *c = b->head; c; c = c->next) n += c->n;
    pthread_mutex_unlock(&list_mu);
    return n;
}

size_t sh_trace_dropped(void)
{
    size_t n = 0;
    pthread_mutex_lock(&list_mu);
    for (tbuf *b = all; b; b = b->next) n += b->dropped;
    pthread_mutex_unlock(&list_mu);
    return n;
}

void sh_trace_reset(void)
{
    sh_trace_disarm();
    pthread_mutex_lock(&list_mu);
    atomic_fetch_add(&generation, 1);
    while (all) {
        tbuf *b = all;
        all = b->next;
        while (b->head) {
            chunk *c = b->head;
            b->head = c->next;
            free(c);
        }
        free(b);
    }
    pthread_mutex_unlock(&list_mu);
}
