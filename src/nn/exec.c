/* exec.c — how a layer's pass is shared by the net's kernel threads: fixed shares of a count
 * (sh_exec_split), fixed-boundary chunks of images handed to whichever thread is free
 * (sh_exec_chunks, sh_exec_images) and per-chunk gradient slots (sh_exec_partials).
 * Not here: the pool itself (threads.c), summing the slots after a layer (net.c).
 * Proved by tests/nn/test_net.c (thread counts agree, deterministic) and test_layer_*.c. */
#include "nn/layer.h"

typedef struct {
    sh_layer *l;
    sh_exec *x;
    sh_image_fn fn;
    int count;
} split_job;

static void split_run(void *arg, int tid, int nthreads)
{
    split_job *j = arg;
    int lo, hi;
    sh_pool_share(j->count, tid, nthreads, &lo, &hi);
    j->fn(j->l, j->x, tid, lo, hi);
}

void sh_exec_split(sh_layer *l, sh_exec *x, int count, sh_image_fn fn)
{
    split_job j = {l, x, fn, count};
    if (x->nthreads == 1) {
        fn(l, x, 0, 0, count);
        return;
    }
    sh_pool_run(x->pool, split_run, &j);
}

typedef struct {
    sh_layer *l;
    sh_exec *x;
    sh_image_fn fn;
    int chunk, nchunks;
} chunk_job;

static void chunk_run(void *arg, int tid, int nthreads)
{
    (void)nthreads;
    chunk_job *j = arg;
    for (;;) {
        int c = __atomic_fetch_add(&j->x->next_chunk, 1, __ATOMIC_RELAXED);
        if (c >= j->nchunks) return;
        int lo = c * j->chunk, hi = lo + j->chunk < j->x->nimg ? lo + j->chunk : j->x->nimg;
        j->fn(j->l, j->x, tid, lo, hi);
    }
}

void sh_exec_chunks(sh_layer *l, sh_exec *x, int chunk, sh_image_fn fn)
{
    if (chunk < 1) chunk = 1;
    int nchunks = (x->nimg + chunk - 1) / chunk;
    if (x->nthreads == 1 || nchunks <= 1) {
        for (int c = 0; c < nchunks; c++) {
            int lo = c * chunk, hi = lo + chunk < x->nimg ? lo + chunk : x->nimg;
            fn(l, x, 0, lo, hi);
        }
        return;
    }
    chunk_job j = {l, x, fn, chunk, nchunks};
    x->next_chunk = 0;
    sh_pool_run(x->pool, chunk_run, &j);
}

void sh_exec_partials(sh_layer *l, sh_exec *x, sh_image_fn fn)
{
    int chunk = (x->nimg + x->nslots - 1) / x->nslots;
    x->used_partials = 1;
    x->slot_images = chunk;
    x->nslots_used = (x->nimg + chunk - 1) / chunk;
    sh_exec_chunks(l, x, chunk, fn);
}

/* Four chunks per thread: enough to even out a core shared with another process. */
void sh_exec_images(sh_layer *l, sh_exec *x, sh_image_fn fn)
{
    int parts = x->nthreads == 1 ? 1 : 4 * x->nthreads;
    sh_exec_chunks(l, x, (x->nimg + parts - 1) / parts, fn);
}
