/* test_transport_shm.c — proves the shared-memory transport's large allreduce through the
 * peers' memory (exact results, in and out of place, sums and averages, uneven blocks, 2
 * and 3 ranks) and its waiting: a rank whose peer is late sleeps on its doorbell instead
 * of burning the core (the engine at once while nobody waits for it, a blocking call after
 * its short spin), wakes when the peer comes, and still notices a peer that died. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Each rank's contribution: small integers, so sums are exact in float32. */
static float value(int rank, size_t i) { return (float)((int)((i * 7 + (size_t)rank * 13) % 61) - 30); }

static void big_allreduce(shoal_comm *c, void *arg)
{
    (void)arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    /* Through the peers' memory (from 32 KiB), never divisible by the number of ranks: one
     * piece per block, several pieces reduced into the result, and (from 4 MiB) several
     * pieces reduced in scratch and streamed into it. */
    const size_t counts[3] = {(size_t)3 * 3000 + 7, (size_t)3 * 200000 + 7, (size_t)3 * 400000 + 7};
    size_t count = counts[2];
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    CHECK(send && recv, "out of memory");
    for (int run = 0; run < 6; run++) {
        int inplace = run % 2;
        count = counts[run / 2];
        for (int avg = 0; avg < 2; avg++) {
            for (size_t i = 0; i < count; i++) send[i] = value(r, i);
            memset(recv, 0xff, count * 4);
            float *out = inplace ? send : recv;
            CHECK_OK(shoal_allreduce(c, send, out, count, SHOAL_FLOAT32, avg ? SHOAL_AVG : SHOAL_SUM));
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < count; i++) {
                float want = 0;
                for (int p = 0; p < n; p++) want += value(p, i);
                if (avg) want /= (float)n;
                if (out[i] != want && bad++ == 0) first = i;
            }
            CHECK(bad == 0, "rank %d of %d, count %zu, %s, %s: %zu wrong elements, first at %zu (%g)", r,
                  n, count, inplace ? "in place" : "out of place", avg ? "avg" : "sum", bad, first,
                  (double)out[first]);
            if (!inplace) {
                size_t changed = 0;
                for (size_t i = 0; i < count; i++) changed += send[i] != value(r, i);
                CHECK(changed == 0, "rank %d: out of place allreduce changed %zu send elements", r, changed);
            }
        }
    }
    free(send);
    free(recv);
}

static void t_big_allreduce(void)
{
    for (int n = 2; n <= 3; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "shm"};
        CHECK(RUN_RANKS(n, &o, big_allreduce, NULL) == 0, "%d ranks", n);
    }
}

enum { LATE_MS = 800 };

/* Rank 1 comes LATE_MS late to an allreduce. Rank 0 either starts it and sleeps itself (the
 * engine waits alone), or calls it blocking. Either way rank 0 may use only a small part of
 * a core meanwhile, and the result must be right. */
static void late_peer(shoal_comm *c, void *arg)
{
    int blocking = *(const int *)arg;
    int r = shoal_comm_rank(c);
    size_t sizes[2] = {1024, 1 << 20}; /* through the rings, through the peers' memory */
    for (int k = 0; k < 2; k++) {
        size_t count = sizes[k];
        float *v = malloc(count * 4);
        CHECK(v != NULL, "out of memory");
        for (size_t i = 0; i < count; i++) v[i] = (float)(r + 1);
        CHECK_OK(shoal_barrier(c));
        if (r == 1) {
            sleep_ms(LATE_MS);
            CHECK_OK(shoal_allreduce(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM));
        } else {
            double t0 = cpu_ms();
            uint64_t w0 = sh_now_ns();
            if (blocking) {
                CHECK_OK(shoal_allreduce(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM));
            } else {
                shoal_request *req = NULL;
                CHECK_OK(shoal_allreduce_start(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM, &req));
                sleep_ms(LATE_MS + 200);
                CHECK_OK(shoal_wait(req));
            }
            double used = cpu_ms() - t0, wall = (double)(sh_now_ns() - w0) / 1e6;
            CHECK(wall >= LATE_MS * 0.9, "rank 0 finished after %.0f ms, before its peer came", wall);
            CHECK(used < 40.0, "%s allreduce of %zu floats: rank 0 used %.1f ms of CPU in %.0f ms "
                  "waiting for a late peer (it should sleep)", blocking ? "blocking" : "non-blocking",
                  count, used, wall);
        }
        size_t bad = 0;
        for (size_t i = 0; i < count; i++) bad += v[i] != 3.0f;
        CHECK(bad == 0, "rank %d: %zu wrong elements", r, bad);
        free(v);
    }
}

static void t_late_peer(void)
{
    for (int blocking = 0; blocking < 2; blocking++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "shm"};
        CHECK(RUN_RANKS(2, &o, late_peer, &blocking) == 0, "blocking %d", blocking);
    }
}

/* The peer dies while rank 0's engine sleeps on the doorbell: nothing rings it, yet it must
 * notice well before the deadline. */
static void dying_peer(shoal_comm *c, void *arg)
{
    (void)arg;
    int r = shoal_comm_rank(c);
    size_t count = 1 << 20;
    float *v = calloc(count, 4);
    CHECK(v != NULL, "out of memory");
    CHECK_OK(shoal_barrier(c));
    if (r == 1) {
        sleep_ms(300);
        raise(SIGKILL);
    }
    uint64_t t0 = sh_now_ns();
    shoal_request *req = NULL;
    CHECK_OK(shoal_allreduce_start(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM, &req));
    sleep_ms(600);
    shoal_result rc = shoal_wait(req);
    double ms = (double)(sh_now_ns() - t0) / 1e6;
    CHECK(rc == SHOAL_ERR_PEER, "rank 0: rc %d (%s)", rc, shoal_last_error_message());
    CHECK(strstr(shoal_last_error_message(), "rank 1") != NULL, "error does not name rank 1: %s",
          shoal_last_error_message());
    CHECK(ms < 4000, "rank 0 took %.0f ms to notice its dead peer (deadline 8000 ms)", ms);
    free(v);
}

static void t_dying_peer(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "shm", .timeout_ms = 8000, .dying_mask = 2u};
    RUN_RANKS(2, &o, dying_peer, NULL);
}

int main(void)
{
    check_begin("test_transport_shm", 120);
    RUN(t_big_allreduce);
    RUN(t_late_peer);
    RUN(t_dying_peer);
    return check_end();
}
