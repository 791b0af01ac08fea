/* test_peer_gone.c — a peer whose process ends (SIGKILL), over TCP and over shared memory:
 * a receive posted from it and a send to it fail within a second naming it, as does every
 * later one; shoal_peer_check reports it gone within a second to a rank that does nothing
 * else (what a parameter server's loop asks between its receives), and the live ranks
 * stay fine.
 * Not here: collectives with a killed rank (test_comm_faults.c).
 * Proves shoal_peer_check (src/comm/comm.c, comm_base.c, p2p.c) and p2p.c's failing of a
 * lost peer's operations. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "base/util.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

enum { VICTIM = 2, TAG = 7 };

static int has(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

static double since(uint64_t t0) { return (double)(sh_now_ns() - t0) * 1e-9; }

static void ranks(shoal_comm *c, void *arg)
{
    (void)arg;
    int rank = shoal_comm_rank(c);
    CHECK_OK(shoal_barrier(c));
    if (rank == VICTIM) raise(SIGKILL);
    CHECK_OK(shoal_peer_check(c, 1 - rank)); /* ranks 0 and 1: each other */
    if (rank == 0) { /* waits for the victim directly */
        int x = 0;
        uint64_t t0 = sh_now_ns();
        shoal_result rc = shoal_recv(c, &x, 1, SHOAL_INT32, VICTIM, TAG);
        const char *msg = shoal_last_error_message();
        CHECK(rc == SHOAL_ERR_PEER && has(msg, "rank 2"), "recv from the killed rank: %s: %s", shoal_result_name(rc), msg);
        CHECK(since(t0) < 1.5, "the receive from the killed rank failed after %.2f s", since(t0));
        t0 = sh_now_ns();
        CHECK_RC(shoal_send(c, &x, 1, SHOAL_INT32, VICTIM, TAG), SHOAL_ERR_PEER);
        CHECK_RC(shoal_recv(c, &x, 1, SHOAL_INT32, VICTIM, TAG), SHOAL_ERR_PEER);
        CHECK(since(t0) < 0.5, "later operations on the killed rank took %.2f s", since(t0));
        CHECK_RC(shoal_peer_check(c, VICTIM), SHOAL_ERR_PEER);
    } else { /* only asks (no operation of its own on the victim's links reads them) */
        uint64_t t0 = sh_now_ns();
        shoal_result rc = SHOAL_OK;
        while (since(t0) < 5.0) {
            rc = shoal_peer_check(c, VICTIM);
            if (rc != SHOAL_OK) break;
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        const char *msg = shoal_last_error_message();
        CHECK(rc == SHOAL_ERR_PEER && has(msg, "rank 2") && has(msg, "gone"), "peer_check: %s: %s",
              shoal_result_name(rc), msg);
        CHECK(since(t0) < 1.5, "peer_check saw the killed rank after %.2f s", since(t0));
    }
    CHECK_OK(shoal_peer_check(c, 1 - rank)); /* the live stay live */
    int one = 1, got = 0; /* and still talk */
    CHECK_OK(shoal_send(c, &one, 1, SHOAL_INT32, 1 - rank, TAG + 1));
    CHECK_OK(shoal_recv(c, &got, 1, SHOAL_INT32, 1 - rank, TAG + 1));
    CHECK(got == 1, "rank %d got %d", rank, got);
    CHECK_RC(shoal_peer_check(c, rank), SHOAL_ERR_INVALID);
}

static void a_killed_peer_ends_waits_at_once_over_tcp(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp", .timeout_ms = 20000, .dying_mask = 1u << VICTIM};
    RUN_RANKS(3, &o, ranks, NULL);
}

static void a_killed_peer_ends_waits_at_once_over_shared_memory(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "shm", .timeout_ms = 20000, .dying_mask = 1u << VICTIM};
    RUN_RANKS(3, &o, ranks, NULL);
}

int main(void)
{
    check_begin("test_peer_gone", 120);
    signal(SIGPIPE, SIG_IGN);
    RUN(a_killed_peer_ends_waits_at_once_over_tcp);
    RUN(a_killed_peer_ends_waits_at_once_over_shared_memory);
    return check_end();
}
