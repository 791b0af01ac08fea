/* membw.c — this machine's memory bandwidth, the ceiling for large collectives on one host:
 * memcpy and a non-temporal (streaming-store) copy of 256 MiB buffers with 1 and 2 threads
 * (each thread its own pair of buffers), best of several passes, reported as GB/s of bytes
 * copied (STREAM's copy figure counts read + write, 2x; printed for memcpy too).
 * Not here: collectives (bench/comm/run.sh prints this beside them).
 *   cc -O2 -pthread bench/membw.c -o membw && ./membw        (bench/comm/run.sh does this) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

enum { NBYTES = 256 << 20, PASSES = 5 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    char *a, *b;
    double best, best_nt;
} job;

/* Copy with streaming stores that bypass the cache (no read-for-ownership of dst). */
static void nt_copy(char *dst, const char *src, size_t nbytes)
{
#if defined(__x86_64__)
    for (size_t i = 0; i + 64 <= nbytes; i += 64) {
        __m128i x0 = _mm_load_si128((const __m128i *)(src + i)), x1 = _mm_load_si128((const __m128i *)(src + i + 16));
        __m128i x2 = _mm_load_si128((const __m128i *)(src + i + 32)), x3 = _mm_load_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), x0);
        _mm_stream_si128((__m128i *)(dst + i + 16), x1);
        _mm_stream_si128((__m128i *)(dst + i + 32), x2);
        _mm_stream_si128((__m128i *)(dst + i + 48), x3);
    }
    _mm_sfence();
#else
    memcpy(dst, src, nbytes);
#endif
}

static pthread_barrier_t bar;

static void *copy(void *arg)
{
    job *j = arg;
    memset(j->a, 1, NBYTES);
    memset(j->b, 2, NBYTES);
    j->best = j->best_nt = 1e9;
    for (int p = 0; p < 2 * PASSES; p++) { /* memcpy and streaming passes alternate */
        pthread_barrier_wait(&bar);
        double t0 = now();
        char *dst = p % 4 < 2 ? j->b : j->a, *src = p % 4 < 2 ? j->a : j->b;
        if (p % 2) nt_copy(dst, src, NBYTES);
        else memcpy(dst, src, NBYTES);
        double t = now() - t0;
        double *best = p % 2 ? &j->best_nt : &j->best;
        if (t < *best) *best = t;
    }
    return NULL;
}

int main(void)
{
    for (int nt = 1; nt <= 2; nt++) {
        pthread_t th[2];
        job jobs[2];
        pthread_barrier_init(&bar, NULL, (unsigned)nt);
        for (int i = 0; i < nt; i++) {
            jobs[i].a = aligned_alloc(64, NBYTES);
            jobs[i].b = aligned_alloc(64, NBYTES);
            if (!jobs[i].a || !jobs[i].b) return 1;
            pthread_create(&th[i], NULL, copy, &jobs[i]);
        }
        double worst = 0, worst_nt = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            if (jobs[i].best > worst) worst = jobs[i].best;
            if (jobs[i].best_nt > worst_nt) worst_nt = jobs[i].best_nt;
            free(jobs[i].a);
            free(jobs[i].b);
        }
        double gb = (double)NBYTES * nt / 1e9;
        printf("{\"threads\": %d, \"memcpy_gb_s\": %.2f, \"nt_copy_gb_s\": %.2f, \"stream_copy_gb_s\": %.2f}\n", nt,
               gb / worst, gb / worst_nt, 2 * gb / worst);
        pthread_barrier_destroy(&bar);
    }
    return 0;
}
