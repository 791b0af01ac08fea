/* threads.c — the persistent kernel-thread pool: a generation counter wakes the workers,
 * a done counter tells the caller they finished. Waiting spins a short while (a layer's
 * parallel section is often tens of microseconds) and then sleeps on a condition variable,
 * so idle pools cost no CPU.
 * Not here: what the threads compute (net.c and the layers pass fn).
 * Proved by tests/nn/test_net.c (threaded steps match and are deterministic). */
#include "nn/threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"

/* About 20-50 us of spinning before sleeping: longer than a typical gap between two
 * parallel sections of one step, short enough not to burn a shared core between steps. */
enum { SPIN_ITERS = 4000 };

struct sh_pool {
    int nthreads;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* workers sleep here for a new generation */
    pthread_cond_t done_cv; /* the caller sleeps here for the last worker */
    atomic_uint generation;
    atomic_int ndone;
    atomic_int sleeping_caller;
    int stop;
    sh_pool_fn fn;
    void *arg;
};

typedef struct {
    sh_pool *pool;
    int tid;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *p)
{
    worker_arg *wa = p;
    sh_pool *pool = wa->pool;
    int tid = wa->tid;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g = 0;
        for (int i = 0; i < SPIN_ITERS; i++) {
            g = atomic_load_explicit(&pool->generation, memory_order_acquire);
            if (g != seen) break;
            cpu_relax();
        }
        if (g == seen) {
            pthread_mutex_lock(&pool->mu);
            while ((g = atomic_load(&pool->generation)) == seen && !pool->stop)
                pthread_cond_wait(&pool->wake, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (pool->stop) return NULL;
        seen = g;
        pool->fn(pool->arg, tid, pool->nthreads);
        if (atomic_fetch_add(&pool->ndone, 1) + 1 == pool->nthreads - 1 &&
            atomic_load(&pool->sleeping_caller)) {
            pthread_mutex_lock(&pool->mu);
            pthread_cond_signal(&pool->done_cv);
            pthread_mutex_unlock(&pool->mu);
        }
    }
}

shoal_result sh_pool_create(int nthreads, sh_pool **out)
{
    *out = NULL;
    if (nthreads < 1) nthreads = 1;
    sh_pool *p = NULL;
    SH_TRY(sh_calloc(1, sizeof *p, (void **)&p));
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    shoal_result rc = sh_calloc((size_t)nthreads, sizeof *p->tids, (void **)&p->tids);
    if (rc != SHOAL_OK) {
        sh_pool_destroy(p);
        return rc;
    }
    for (int t = 1; t < nthreads; t++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, t};
        int err = wa ? pthread_create(&p->tids[t], NULL, worker, wa) : -1;
        if (err != 0) {
            free(wa);
            p->nthreads = t; /* destroy joins the ones that started */
            sh_pool_destroy(p);
            return SH_FAIL(SHOAL_ERR_NOMEM, "thread pool: could not start thread %d of %d; "
                           "use fewer threads (SHOAL_THREADS)", t, nthreads);
        }
    }
    *out = p;
    return SHOAL_OK;
}

void sh_pool_destroy(sh_pool *p)
{
    if (!p) return;
    if (p->tids) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        atomic_fetch_add(&p->generation, 1);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int t = 1; t < p->nthreads; t++) pthread_join(p->tids[t], NULL);
        free(p->tids);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

int sh_pool_nthreads(const sh_pool *p) { return p ? p->nthreads : 1; }

void sh_pool_run(sh_pool *p, sh_pool_fn fn, void *arg)
{
    if (!p || p->nthreads == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->ndone, 0);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->nthreads);
    int want = p->nthreads - 1;
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->ndone, memory_order_acquire) == want) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->sleeping_caller, 1);
    while (atomic_load(&p->ndone) != want) pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->sleeping_caller, 0);
    pthread_mutex_unlock(&p->mu);
}
