/* test_elastic.c — elastic communicators with real processes, sockets and shared memory: a
 * killed rank leaves and the others regroup at once, renumbered, and sum again; so when the
 * lost rank held the job's store (rank 0: a member's store takes over); a frozen rank is
 * left out after the timeout; a process started later with the job's variables joins at a
 * planned regroup; below the minimum every member stops naming who left; a member alone
 * (its peers frozen or cut off) is not a majority of the last generation and stops.
 * Not here: training through it (tests/cli/test_train_elastic.c).
 * Proves src/comm/boot/elastic.c, elastic_members.c and shoal_comm_regroup (include/shoal/comm.h). */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "base/err.h"
#include "base/util.h"
#include "comm/boot/elastic.h"
#include "comm/boot/sock.h"
#include "lib/ranks.h"
#include "lib/run.h"
#include "shoal/comm.h"

static int port;            /* the master port of the current case */
static volatile int *shared; /* [0..7]: pids, across the forked processes */

static double since(uint64_t t0) { return (double)(sh_now_ns() - t0) * 1e-9; }

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* This process as rank `rank` of `world` of the case's job, elastic with min..max. */
static shoal_result make(int rank, int world, int min, int max, shoal_comm **c)
{
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("SHOAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", world);
    setenv("SHOAL_WORLD_SIZE", v, 1);
    setenv("SHOAL_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("SHOAL_MASTER_PORT", v, 1);
    setenv("SHOAL_JOB_KEY", "test-elastic-key", 1);
    shoal_comm_opts o;
    shoal_comm_opts_default(&o);
    o.elastic_min = min;
    o.elastic_max = max;
    return shoal_comm_create(&o, c);
}

static int sum_ranks(shoal_comm *c)
{
    int one = 1;
    if (shoal_allreduce(c, &one, &one, 1, SHOAL_INT32, SHOAL_SUM) != SHOAL_OK) return -1;
    return one;
}

/* ---- a killed rank ---- */

typedef struct {
    int victim, min;
} kill_case;

static void killed_rank_proc(int i, void *arg)
{
    const kill_case *k = arg;
    shoal_comm *c = NULL;
    CHECK_OK(make(i, 3, k->min, 0, &c));
    if (!c) return;
    CHECK(sum_ranks(c) == 3, "rank %d: the first sum", i);
    if (i == k->victim) raise(SIGKILL);
    int one = 1;
    shoal_result rc = shoal_allreduce(c, &one, &one, 1, SHOAL_INT32, SHOAL_SUM);
    CHECK(rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_BROKEN || rc == SHOAL_ERR_TIMEOUT, "rank %d: a sum with the killed "
          "rank gave %s", i, shoal_result_name(rc));
    uint64_t t0 = sh_now_ns();
    shoal_regroup g;
    rc = shoal_comm_regroup(&c, 10 + i, &g); /* progress: the highest is rank 2's, or 1's */
    if (k->min > 2) { /* below the minimum: every member stops, naming who left */
        const char *msg = shoal_last_error_message();
        CHECK(rc == SHOAL_ERR_PEER && c == NULL, "rank %d: regroup below the minimum gave %s", i, shoal_result_name(rc));
        char who[32];
        snprintf(who, sizeof who, "job rank %d", k->victim);
        CHECK(strstr(msg, who) && strstr(msg, "minimum of 3"), "rank %d: the reason does not name the lost rank "
              "and the minimum: %s", i, msg);
        return;
    }
    CHECK(rc == SHOAL_OK, "rank %d: regroup: %s", i, shoal_last_error_message());
    if (rc != SHOAL_OK) return;
    CHECK(since(t0) < 3.0, "rank %d: the regroup after a kill took %.2f s", i, since(t0));
    int expect_rank = i < k->victim ? i : i - 1;
    CHECK(g.world == 2 && g.rank == expect_rank && shoal_comm_world(c) == 2 && shoal_comm_rank(c) == expect_rank,
          "rank %d: new rank %d of %d", i, g.rank, g.world);
    CHECK(g.generation == 1 && g.nleft == 1 && g.left[0] == k->victim && g.njoined == 0 && !g.joiner,
          "rank %d: generation %" PRId64 ", %d left (%d), %d joined", i, g.generation, g.nleft, g.left[0], g.njoined);
    int best = k->victim == 2 ? 11 : 12;
    CHECK(g.progress == best && g.progress_rank == 1, "rank %d: progress %" PRId64 " at rank %d", i, g.progress,
          g.progress_rank);
    CHECK(shoal_comm_job_rank(c, expect_rank) == i, "rank %d: job rank %d", i, shoal_comm_job_rank(c, expect_rank));
    CHECK(sum_ranks(c) == 2, "rank %d: the sum after the regroup", i);
    shoal_regroup again;
    CHECK_OK(shoal_comm_last_regroup(c, &again));
    CHECK(again.generation == 1 && again.world == 2, "rank %d: last regroup", i);
    shoal_comm_destroy(c);
}

static void run_kill(int victim, int min)
{
    port = sh_test_free_ports(1);
    kill_case k = {victim, min};
    sh_test_ranks_opts o = {.dying_mask = 1u << victim, .deadline_s = 60};
    setenv("SHOAL_ELASTIC_SETTLE_MS", "5000", 1); /* a killed rank is known lost: never waited for */
    RUN_PROCS(3, &o, killed_rank_proc, &k);
    unsetenv("SHOAL_ELASTIC_SETTLE_MS");
}

static void a_killed_rank_leaves_and_the_others_regroup_at_once(void) { run_kill(2, 2); }

static void the_store_moves_when_rank_0_is_killed(void) { run_kill(0, 2); }

static void below_the_minimum_every_member_stops_naming_who_left(void) { run_kill(2, 3); }

/* ---- a frozen rank ---- */

static void frozen_rank_proc(int i, void *arg)
{
    (void)arg;
    shoal_comm *c = NULL;
    CHECK_OK(make(i, 3, 2, 0, &c));
    if (!c) return;
    shared[i] = (int)getpid();
    CHECK(sum_ranks(c) == 3, "rank %d: the first sum", i);
    if (i == 1) {
        raise(SIGSTOP); /* rank 0 kills it once the others went on */
        _exit(0);
    }
    uint64_t t0 = sh_now_ns();
    int one = 1;
    shoal_result rc = shoal_allreduce(c, &one, &one, 1, SHOAL_INT32, SHOAL_SUM);
    CHECK(rc != SHOAL_OK, "rank %d: a sum with a frozen rank went through", i);
    shoal_regroup g;
    rc = shoal_comm_regroup(&c, 0, &g);
    CHECK(rc == SHOAL_OK, "rank %d: regroup: %s", i, shoal_last_error_message());
    if (rc != SHOAL_OK) return;
    /* the timeout (1.5 s), the frozen store's silence (0.5 s) and the rebuild */
    CHECK(since(t0) < 4.5, "rank %d: the regroup after a freeze took %.2f s", i, since(t0));
    CHECK(g.world == 2 && g.nleft == 1 && g.left[0] == 1, "rank %d: %d ranks, %d left", i, g.world, g.nleft);
    CHECK(sum_ranks(c) == 2, "rank %d: the sum after the regroup", i);
    shoal_comm_destroy(c);
    if (i == 0 && shared[1] > 0) kill(shared[1], SIGKILL);
}

static void a_frozen_rank_is_left_out_after_the_timeout(void)
{
    port = sh_test_free_ports(1);
    setenv("SHOAL_TIMEOUT", "1500", 1);
    setenv("SHOAL_ELASTIC_SETTLE_MS", "5000", 1); /* a frozen rank is not waited for */
    sh_test_ranks_opts o = {.dying_mask = 1u << 1, .deadline_s = 60};
    RUN_PROCS(3, &o, frozen_rank_proc, NULL);
    unsetenv("SHOAL_TIMEOUT");
    unsetenv("SHOAL_ELASTIC_SETTLE_MS");
}

/* ---- a joiner ---- */

/* Ranks 0..2 start; 2 dies; 0 and 1 go on; process 3, started later as rank 2 of 3,
 * joins when they regroup for it. */
static void join_proc(int i, void *arg)
{
    (void)arg;
    shoal_comm *c = NULL;
    if (i == 3) { /* the restarted rank 2 */
        while (!shared[4]) sleep_ms(20);
        CHECK_OK(make(2, 3, 2, 3, &c));
        if (!c) return;
        shoal_regroup g;
        CHECK_OK(shoal_comm_last_regroup(c, &g));
        CHECK(g.joiner && g.world == 3 && g.rank == 2 && g.njoined == 1 && g.joined[0] == 2 && g.progress == 7,
              "joiner: joined %d of %d as %d (joiner %d, progress %" PRId64 ")", g.world, g.world, g.rank, g.joiner,
              g.progress);
        CHECK(sum_ranks(c) == 3, "joiner: the sum");
        shoal_comm_destroy(c);
        return;
    }
    CHECK_OK(make(i, 3, 2, 3, &c));
    if (!c) return;
    CHECK(sum_ranks(c) == 3, "rank %d: the first sum", i);
    if (i == 2) raise(SIGKILL);
    CHECK(sum_ranks(c) < 0, "rank %d: a sum with the killed rank went through", i);
    CHECK_OK(shoal_comm_regroup(&c, 7, NULL));
    if (!c) return;
    CHECK(sum_ranks(c) == 2, "rank %d: two ranks", i);
    if (i == 0) shared[4] = 1; /* now start the late one */
    /* Every step: rank 0 asks whether someone waits, and the answer is shared (a sum), so
     * that both regroup at the same step. */
    uint64_t t0 = sh_now_ns();
    int waiting = 0;
    while (!waiting && since(t0) < 20) {
        waiting = i == 0 ? shoal_comm_joiners(c) > 0 : 0;
        if (shoal_allreduce(c, &waiting, &waiting, 1, SHOAL_INT32, SHOAL_SUM) != SHOAL_OK) break;
        sleep_ms(20);
    }
    CHECK(waiting, "rank %d: nobody asked to join", i);
    shoal_regroup g;
    CHECK_OK(shoal_comm_regroup(&c, 7, &g));
    if (!c) return;
    CHECK(g.world == 3 && g.njoined == 1 && g.joined[0] == 2 && g.nleft == 0 && g.generation == 2,
          "rank %d: after the join %d ranks, %d joined, %d left, generation %" PRId64, i, g.world, g.njoined, g.nleft,
          g.generation);
    CHECK(sum_ranks(c) == 3, "rank %d: three ranks again", i);
    shoal_comm_destroy(c);
}

static void a_late_process_joins_at_a_planned_regroup(void)
{
    port = sh_test_free_ports(1);
    shared[4] = 0;
    sh_test_ranks_opts o = {.dying_mask = 1u << 2, .deadline_s = 60};
    RUN_PROCS(4, &o, join_proc, NULL);
}

/* ---- the majority rule, on a real store, with members that answer nothing ---- */

/* A listening socket nobody serves: a connection is taken by the kernel and then nothing
 * comes, as from a frozen process. */
static int silent_listener(int *port_out)
{
    int fd = -1;
    if (sh_sock_listen("127.0.0.1", 0, &fd, port_out) != SHOAL_OK) return -1;
    return fd;
}

/* Member 0 decides generation 1 at a store (the job's: primary) while members 1 and 2 do not
 * come and their stores take connections but say nothing; with `second`, member 1 comes. */
static void decide_case(int primary, int second, const char *want)
{
    sh_store_server *srv = NULL;
    sh_store *s = NULL;
    int lp[2] = {0, 0};
    int lfd[2] = {silent_listener(&lp[0]), silent_listener(&lp[1])};
    CHECK_OK(sh_store_server_start("127.0.0.1", 0, "k", 0, 0, &srv));
    if (!srv) return;
    CHECK_OK(sh_store_connect("127.0.0.1", sh_store_server_port(srv), "k", 5000, &s));
    sh_member old[3];
    memset(old, 0, sizeof old);
    for (int k = 0; k < 3; k++) {
        old[k] = (sh_member){.job_rank = k, .id = 100 + (uint64_t)k, .pid = 1, .progress = 5};
        snprintf(old[k].cand_host, sizeof old[k].cand_host, "127.0.0.1");
        old[k].cand_port = k ? lp[k - 1] : sh_store_server_port(srv);
        snprintf(old[k].hostname, sizeof old[k].hostname, "host%d", k);
        snprintf(old[k].hostid, sizeof old[k].hostid, "other-host-%d", k);
    }
    int idx = -1;
    if (s) CHECK_OK(sh_elastic_arrive(s, 1, &old[0], &idx));
    if (s && second) CHECK_OK(sh_elastic_arrive(s, 1, &old[1], &idx));
    sh_decide_opts d = {old, 3, &old[0], primary, 1, 3, 200, 5000, "k", NULL};
    if (s) CHECK_OK(sh_elastic_decide(s, 1, &d));
    sh_member *list = NULL;
    int n = 0, p = 0;
    shoal_result rc = s ? sh_elastic_wait_closed(s, 1, 1000, &p, &list, &n) : SHOAL_ERR_INVALID;
    const char *msg = shoal_last_error_message();
    if (want)
        CHECK(rc == SHOAL_ERR_PEER && strstr(msg, want) && strstr(msg, "job rank 2 on host2 (not answering)"),
              "one member of three at %s store: %s: %s", primary ? "the job's" : "a member's", shoal_result_name(rc),
              msg);
    else
        CHECK(rc == SHOAL_OK && n == 2 && list[0].job_rank == 0 && list[1].job_rank == 1 && p == primary,
              "two members of three at %s store: %s (%d members): %s", primary ? "the job's" : "a member's",
              shoal_result_name(rc), n, msg);
    free(list);
    sh_store_close(s);
    sh_store_server_stop(srv);
    for (int k = 0; k < 2; k++)
        if (lfd[k] >= 0) close(lfd[k]);
}

static void a_member_cut_off_from_the_others_is_not_a_majority(void)
{
    decide_case(0, 0, "only 1 of the 3 ranks before still reach each other (at a member's store): not a majority");
    decide_case(1, 0, "only 1 of the 3 ranks before still reach each other (at the job's store): not a majority");
    decide_case(0, 1, NULL);
}

int main(void)
{
    check_begin("test_elastic", 300);
    signal(SIGPIPE, SIG_IGN);
    shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) return 1;
    RUN(a_killed_rank_leaves_and_the_others_regroup_at_once);
    RUN(the_store_moves_when_rank_0_is_killed);
    RUN(below_the_minimum_every_member_stops_naming_who_left);
    RUN(a_frozen_rank_is_left_out_after_the_timeout);
    RUN(a_late_process_joins_at_a_planned_regroup);
    RUN(a_member_cut_off_from_the_others_is_not_a_majority);
    return check_end();
}
