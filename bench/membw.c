/* membw.c — this machine's memory bandwidth, the ceiling for large collectives on one host:
 * memcpy of 256 MiB buffers with 1 and 2 threads (each thread its own pair of buffers),
 * best of several passes, reported as GB/s of bytes copied (read + write counted once, as
 * STREAM's copy counts 2x; both are printed).
 *   cc -O2 -pthread bench/membw.c -o membw && ./membw        (bench/comm/run.sh does this) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NBYTES = 256 << 20, PASSES = 5 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    char *a, *b;
    double best;
} job;

static pthread_barrier_t bar;

static void *copy(void *arg)
{
    job *j = arg;
    memset(j->a, 1, NBYTES);
    memset(j->b, 2, NBYTES);
    j->best = 1e9;
    for (int p = 0; p < PASSES; p++) {
        pthread_barrier_wait(&bar);
        double t0 = now();
        memcpy(p % 2 ? j->a : j->b, p % 2 ? j->b : j->a, NBYTES);
        double t = now() - t0;
        if (t < j->best) j->best = t;
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
            jobs[i].a = malloc(NBYTES);
            jobs[i].b = malloc(NBYTES);
            if (!jobs[i].a || !jobs[i].b) return 1;
            pthread_create(&th[i], NULL, copy, &jobs[i]);
        }
        double worst = 0;
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            if (jobs[i].best > worst) worst = jobs[i].best;
            free(jobs[i].a);
            free(jobs[i].b);
        }
        double gb = (double)NBYTES * nt / 1e9;
        printf("{\"threads\": %d, \"memcpy_gb_s\": %.2f, \"stream_copy_gb_s\": %.2f}\n", nt, gb / worst, 2 * gb / worst);
        pthread_barrier_destroy(&bar);
    }
    return 0;
}
