/* test_comm_abort.c — proves shoal_comm_abort: another thread gives up on a communicator
 * while its rank waits in a collective (a barrier the other rank reaches late) or in a
 * receive nothing will match; the waiting call fails within a second naming the reason, and
 * the other rank's calls fail too, naming the aborting rank, over shm and tcp. */
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

typedef struct {
    shoal_comm *c;
    int delay_ms;
} aborter;

static void *abort_later(void *arg)
{
    aborter *a = arg;
    struct timespec ts = {a->delay_ms / 1000, (long)(a->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    (void)shoal_comm_abort(a->c, "interrupted by the test");
    return NULL;
}

/* 0 = a barrier the other rank joins 3 s late; 1 = a receive nothing matches. */
static void waits_then_aborts(shoal_comm *c, void *arg)
{
    const int *a = arg;
    int mode = a[0];
    const char *transport = a[1] ? "tcp" : "shm";
    int r = shoal_comm_rank(c);
    CHECK_OK(shoal_barrier(c));
    if (r == 0) {
        aborter ab = {c, 200};
        pthread_t th;
        pthread_create(&th, NULL, abort_later, &ab);
        uint64_t t0 = sh_now_ns();
        float v = 0;
        shoal_result rc = mode == 0 ? shoal_barrier(c) : shoal_recv(c, &v, 1, SHOAL_FLOAT32, 1, 7);
        double ms = (double)(sh_now_ns() - t0) / 1e6;
        pthread_join(th, NULL);
        CHECK(rc == SHOAL_ERR_PEER, "mode %d: the waiting call returned %s: %s", mode,
              shoal_result_name(rc), shoal_last_error_message());
        /* Shared memory carries the reason; a socket only closes. */
        if (!strcmp(transport, "shm"))
            CHECK(strstr(shoal_last_error_message(), "interrupted by the test") != NULL, "mode %d: %s", mode,
                  shoal_last_error_message());
        CHECK(ms >= 150 && ms < 1200, "mode %d: the aborted call returned after %.0f ms", mode, ms);
        CHECK(shoal_barrier(c) != SHOAL_OK, "mode %d: an aborted communicator ran a barrier", mode);
    } else {
        sleep(mode == 0 ? 3 : 1);
        /* The barrier rank 0 gave up on may still complete here (its part was sent
         * before it gave up); the calls after it cannot. */
        shoal_result rc = SHOAL_OK;
        for (int i = 0; i < 3 && rc == SHOAL_OK; i++) rc = shoal_barrier(c);
        CHECK(rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_BROKEN, "mode %d: rank 1 got %s", mode, shoal_result_name(rc));
        const char *m = shoal_last_error_message();
        CHECK(strstr(m, "rank 0") != NULL || strstr(m, "interrupted by the test") != NULL,
              "mode %d: rank 1's error names neither rank 0 nor the reason: %s", mode, m);
    }
}

static void t_abort_wakes_the_waiting_call(void)
{
    const char *ts[] = {"shm", "tcp"};
    for (int t = 0; t < 2; t++)
        for (int mode = 0; mode < 2; mode++) {
            sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = ts[t], .timeout_ms = 20000, .deadline_s = 30};
            int arg[2] = {mode, t};
            RUN_RANKS(2, &o, waits_then_aborts, arg);
        }
}

static void t_abort_checks_its_argument(void)
{
    CHECK_RC(shoal_comm_abort(NULL, "x"), SHOAL_ERR_INVALID);
}

int main(void)
{
    check_begin("test_comm_abort", 120);
    RUN(t_abort_checks_its_argument);
    RUN(t_abort_wakes_the_waiting_call);
    return check_end();
}
