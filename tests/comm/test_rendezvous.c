/* test_rendezvous.c — start-up where it goes wrong, with real processes: two processes
 * flooding the store's port with junk connections while ranks 1-3 start (all join); two
 * processes claiming one rank, or ranks disagreeing on the world size (refused at once,
 * naming both); a rank waiting at the rendezvous stopped by SIGTERM or SIGINT within a
 * second.
 * Not here: the launchers' variables and the plain rendezvous (test_boot.c), the store's
 * own protocol (test_store.c).
 * Proves src/comm/boot/boot.c, store_server.c and sh_sock_connect in sock.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "base/util.h"
#include "lib/ranks.h"
#include "lib/run.h"
#include "shoal/comm.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int has(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

static void set_rank_env(int rank, int world, int port, const char *key, int timeout_ms)
{
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("SHOAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", world);
    setenv("SHOAL_WORLD_SIZE", v, 1);
    setenv("SHOAL_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("SHOAL_MASTER_PORT", v, 1);
    setenv("SHOAL_JOB_KEY", key, 1);
    snprintf(v, sizeof v, "%d", timeout_ms);
    setenv("SHOAL_TIMEOUT", v, 1);
    unsetenv("SHOAL_HOST_ID");
}

/* ---- a flood of junk connections ---- */

/* Open connections to port as fast as possible, holding the newest HOLD open (half of them
 * sending a few junk bytes), until killed. */
enum { FLOOD_THREADS = 2, HOLD = 400 };

static void *flood_thread(void *arg)
{
    int port = *(const int *)arg;
    int fds[HOLD];
    for (int i = 0; i < HOLD; i++) fds[i] = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    for (unsigned long n = 0;; n++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            sleep_ms(1);
            continue;
        }
        connect(fd, (struct sockaddr *)&a, sizeof a);
        if (n % 2) (void)!send(fd, "GET / HTTP/1.0\r\n", 16, MSG_NOSIGNAL | MSG_DONTWAIT);
        int k = (int)(n % HOLD);
        if (fds[k] >= 0) close(fds[k]);
        fds[k] = fd;
    }
    return NULL;
}

/* A flooding process: FLOOD_THREADS threads of flood_thread. */
static void flooder(int port)
{
    static int p;
    p = port;
    pthread_t t;
    for (int i = 1; i < FLOOD_THREADS; i++) pthread_create(&t, NULL, flood_thread, &p);
    flood_thread(&p);
}

typedef struct {
    int port, world;
} flood_case;

static void flood_rank(int i, void *arg)
{
    flood_case *fc = arg;
    set_rank_env(i, fc->world, fc->port, "flood-test-key", 15000);
    if (i > 0) sleep_ms(700); /* rank 0's store is up and flooded before the others start */
    uint64_t t0 = sh_now_ns();
    shoal_comm *c = NULL;
    shoal_result rc = shoal_comm_create(NULL, &c);
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    CHECK(rc == SHOAL_OK, "rank %d did not join under the flood (%.1f s): %s", i, s, shoal_last_error_message());
    if (c) {
        int64_t x = 1;
        CHECK_OK(shoal_allreduce(c, &x, &x, 1, SHOAL_INT64, SHOAL_SUM));
        CHECK(x == fc->world, "rank %d: allreduce gave %lld", i, (long long)x);
    }
    fprintf(stderr, "flood: rank %d joined in %.2f s\n", i, s);
    shoal_comm_destroy(c);
}

static void ranks_join_while_two_processes_flood_the_store(void)
{
    flood_case fc = {.port = sh_test_free_ports(1), .world = 4};
    pid_t fl[2];
    for (int k = 0; k < 2; k++) {
        fl[k] = fork();
        if (fl[k] == 0) {
            struct rlimit r = {4096, 4096};
            setrlimit(RLIMIT_NOFILE, &r);
            sleep_ms(300); /* once rank 0 listens */
            flooder(fc.port);
        }
    }
    sh_test_ranks_opts o = {.deadline_s = 60};
    RUN_PROCS(4, &o, flood_rank, &fc);
    for (int k = 0; k < 2; k++) {
        kill(fl[k], SIGKILL);
        waitpid(fl[k], NULL, 0);
    }
}

/* ---- signals while waiting at the rendezvous ---- */

static volatile sig_atomic_t handled;
static void on_stop(int sig) { handled = sig; }

typedef struct {
    int rank, world, with_master, sig;
} sig_case;

/* A process that catches sig as shoal train does waits at the rendezvous for a rank that
 * never comes (or for a master that is not there); sig must end the wait within a second,
 * its own handler having run. Runs in a child; exit 0 when all held. */
static void waiting_rank(const sig_case *sc, int port)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    sigaction(sc->sig, &sa, NULL);
    set_rank_env(sc->rank, sc->world, port, "signal-test-key", 30000);
    shoal_comm *c = NULL;
    shoal_result rc = shoal_comm_create(NULL, &c);
    printf("%d %d %s\n", (int)rc, (int)handled, shoal_last_error_message());
    fflush(stdout);
    _exit(0);
}

static void signal_case(const sig_case *sc)
{
    int port = sh_test_free_ports(1);
    int pp[2];
    if (pipe(pp) != 0) return;
    pid_t helper = -1;
    if (sc->with_master) { /* rank 0 of the job is there (and waits too); the others are not */
        helper = fork();
        if (helper == 0) {
            close(pp[0]);
            close(pp[1]);
            set_rank_env(0, sc->world, port, "signal-test-key", 30000);
            shoal_comm *c = NULL;
            shoal_comm_create(NULL, &c);
            _exit(0);
        }
        sleep_ms(300);
    }
    pid_t p = fork();
    if (p == 0) {
        close(pp[0]);
        dup2(pp[1], 1);
        waiting_rank(sc, port);
    }
    close(pp[1]);
    sleep_ms(800); /* well inside the wait */
    uint64_t t0 = sh_now_ns();
    kill(p, sc->sig);
    int st = 0;
    waitpid(p, &st, 0);
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    char line[1024] = {0};
    ssize_t n = read(pp[0], line, sizeof line - 1);
    close(pp[0]);
    int rc = -1, got = -1;
    if (n > 0) sscanf(line, "%d %d", &rc, &got);
    CHECK(s < 1.0, "rank %d of %d (%s): the wait ended %.2f s after %s", sc->rank, sc->world,
          sc->with_master ? "rank 0 up" : "alone", s, strsignal(sc->sig));
    const char *name = sc->sig == SIGINT ? "SIGINT" : "SIGTERM";
    CHECK(rc == SHOAL_ERR_INTERRUPTED && has(line, name), "rank %d: want SHOAL_ERR_INTERRUPTED naming %s: %s", sc->rank,
          name, line);
    CHECK(got == sc->sig, "rank %d: the process's own handler did not run (%d)", sc->rank, got);
    if (helper > 0) {
        kill(helper, SIGKILL);
        waitpid(helper, NULL, 0);
    }
}

static void a_waiting_rank_honours_sigterm_and_sigint_within_a_second(void)
{
    static const sig_case cases[] = {
        {0, 2, 0, SIGTERM}, /* rank 0, its store up, waiting for rank 1 */
        {1, 2, 0, SIGINT},  /* rank 1, no master yet: connecting */
        {1, 3, 1, SIGTERM}, /* rank 1 with rank 0, both waiting for rank 2 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) signal_case(&cases[i]);
}

static void shoal_train_waiting_for_its_ranks_stops_on_sigterm(void)
{
    int port = sh_test_free_ports(1);
    char bin[4096], here[1024], cmd[6144], out[4096];
    if (!realpath(sh_test_shoal_bin(), bin) || !getcwd(here, sizeof here)) return;
    /* rank 1 of 2 with no rank 0: shoal train waits at the rendezvous; `timeout` sends SIGTERM */
    snprintf(cmd, sizeof cmd,
             "cd /tmp && SHOAL_RANK=1 SHOAL_WORLD_SIZE=2 SHOAL_MASTER_PORT=%d SHOAL_JOB_KEY=k SHOAL_TIMEOUT=30000 "
             "timeout -s TERM 1 %s train %s/examples/lenet.cfg --max-steps 1 2>&1", port, bin, here);
    uint64_t t0 = sh_now_ns();
    int rc = sh_test_run(cmd, out, sizeof out);
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    CHECK(s < 2.0, "shoal train ended %.1f s after it started (SIGTERM at 1 s): %s", s, out);
    CHECK(rc != 0 && has(out, "stopped by SIGTERM"), "exit %d, no word of the signal: %s", rc, out);
}

/* ---- ranks that should not be in the job ---- */

enum { MAX_PROCS = 4 };
typedef struct {
    int rank, world, delay_ms;
    int derived;  /* no SHOAL_JOB_KEY: MPICH's variables and a (fake) connection to Hydra */
    int run_ms;   /* after joining, allreduce with rank 0 for this long (0: leave at once) */
    int must_fail;
} claim_proc_spec;

typedef struct {
    int port, nprocs;
    claim_proc_spec p[MAX_PROCS];
    const char *expect[2]; /* in every failing process's message */
    double within_s;       /* a failing process fails this soon after its last start */
} claim_case;

static void claim_proc(int i, void *arg)
{
    const claim_case *cc = arg;
    int rank = cc->p[i].rank, world = cc->p[i].world;
    if (cc->p[i].derived) {
        char v[32];
        unsetenv("SHOAL_JOB_KEY");
        unsetenv("SHOAL_RANK");
        unsetenv("SHOAL_WORLD_SIZE");
        snprintf(v, sizeof v, "%d", rank);
        setenv("PMI_RANK", v, 1);
        snprintf(v, sizeof v, "%d", world);
        setenv("PMI_SIZE", v, 1);
        int sv[2]; /* an outsider can fake the descriptor too: the claims still catch it */
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
            snprintf(v, sizeof v, "%d", sv[0]);
            setenv("PMI_FD", v, 1);
        }
        setenv("SHOAL_MASTER_ADDR", "127.0.0.1", 1);
        snprintf(v, sizeof v, "%d", cc->port);
        setenv("SHOAL_MASTER_PORT", v, 1);
        setenv("SHOAL_TIMEOUT", "20000", 1);
    } else {
        set_rank_env(rank, world, cc->port, "claim-test-key", 20000);
    }
    sleep_ms(cc->p[i].delay_ms);
    uint64_t t0 = sh_now_ns();
    shoal_comm *c = NULL;
    shoal_result rc = shoal_comm_create(NULL, &c);
    uint64_t until = sh_now_ns() + (uint64_t)cc->p[i].run_ms * 1000000ull;
    while (rc == SHOAL_OK && sh_now_ns() < until) {
        int64_t x = 1;
        rc = shoal_allreduce(c, &x, &x, 1, SHOAL_INT64, SHOAL_SUM);
        sleep_ms(20);
    }
    double s = (double)(sh_now_ns() - t0) * 1e-9 - cc->p[i].run_ms * 1e-3;
    const char *msg = shoal_last_error_message();
    if (cc->p[i].must_fail) {
        CHECK(rc != SHOAL_OK, "process %d (rank %d of %d) went on", i, rank, world);
        for (int k = 0; k < 2 && rc != SHOAL_OK; k++)
            if (cc->expect[k]) CHECK(has(msg, cc->expect[k]), "process %d: \"%s\" not in: %s", i, cc->expect[k], msg);
        CHECK(s < cc->within_s, "process %d: failed %.1f s in (want under %.1f): %s", i, s, cc->within_s, msg);
    } else {
        CHECK(rc == SHOAL_OK, "process %d (rank %d): %s", i, rank, msg);
    }
    shoal_comm_destroy(c);
}

static void run_claims(claim_case *cc)
{
    cc->port = sh_test_free_ports(1);
    unsigned dying = 0;
    for (int i = 0; i < cc->nprocs; i++)
        if (cc->p[i].must_fail) dying |= 1u << i;
    sh_test_ranks_opts o = {.deadline_s = 40, .dying_mask = dying};
    RUN_PROCS(cc->nprocs, &o, claim_proc, cc);
}

static void two_processes_claiming_one_rank_stop_the_job_naming_both(void)
{
    claim_case cc = {.nprocs = 3, .expect = {"rank 1 was claimed twice", "pid "}, .within_s = 3.0};
    cc.p[0] = (claim_proc_spec){0, 3, 0, 0, 0, 1};
    cc.p[1] = (claim_proc_spec){1, 3, 100, 0, 0, 1};
    cc.p[2] = (claim_proc_spec){1, 3, 400, 0, 0, 1}; /* rank 2 never comes; rank 1 twice */
    run_claims(&cc);
}

static void ranks_disagreeing_on_the_world_size_stop_at_once(void)
{
    claim_case cc = {.nprocs = 2, .expect = {"for a job of 3 ranks, but rank 0", "for 2"}, .within_s = 3.0};
    cc.p[0] = (claim_proc_spec){0, 2, 0, 0, 0, 1};
    cc.p[1] = (claim_proc_spec){1, 3, 200, 0, 0, 1};
    run_claims(&cc);
}

static void a_second_rank_0_names_the_first_not_the_port(void)
{
    claim_case cc = {.nprocs = 2, .expect = {"rank 0 was claimed twice", "pid "}, .within_s = 3.0};
    cc.p[0] = (claim_proc_spec){0, 2, 0, 0, 0, 1};
    cc.p[1] = (claim_proc_spec){0, 2, 300, 0, 0, 1};
    run_claims(&cc);
}

static void with_a_secret_key_a_late_duplicate_is_refused_and_the_job_goes_on(void)
{
    claim_case cc = {.nprocs = 3, .expect = {"rank 1 was claimed twice", NULL}, .within_s = 3.0};
    cc.p[0] = (claim_proc_spec){0, 2, 0, 0, 1500, 0};
    cc.p[1] = (claim_proc_spec){1, 2, 0, 0, 1500, 0};
    cc.p[2] = (claim_proc_spec){1, 2, 500, 0, 0, 1};
    run_claims(&cc);
}

static void under_mpich_without_a_key_an_outsider_ends_the_job(void)
{
    /* The outsider (process 1) takes rank 1 before the real one (process 2) comes: when
     * the real one claims, the store cannot tell which is real, and the job stops. */
    claim_case cc = {.nprocs = 3, .expect = {NULL, NULL}, .within_s = 4.0};
    cc.p[0] = (claim_proc_spec){0, 2, 0, 1, 3000, 1};
    cc.p[1] = (claim_proc_spec){1, 2, 0, 1, 3000, 1};
    cc.p[2] = (claim_proc_spec){1, 2, 800, 1, 0, 1};
    run_claims(&cc);
}

static void under_mpich_a_process_outside_mpiexec_cannot_join(void)
{
    const char *bin = sh_test_shoal_bin();
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "env -u SHOAL_JOB_KEY -u SHOAL_RANK -u SHOAL_WORLD_SIZE -u PMI_FD PMI_RANK=1 PMI_SIZE=2 "
             "SHOAL_MASTER_PORT=%d SHOAL_TIMEOUT=20000 timeout 10 %s bench allreduce -b 8 -e 8 2>&1",
             sh_test_free_ports(1), bin);
    uint64_t t0 = sh_now_ns();
    int rc = sh_test_run(cmd, out, sizeof out);
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    CHECK(rc != 0 && has(out, "PMI_FD") && has(out, "SHOAL_JOB_KEY") && s < 3.0,
          "an outsider with PMI_RANK/PMI_SIZE only: exit %d after %.1f s: %s", rc, s, out);
}

int main(void)
{
    check_begin("test_rendezvous", 240);
    signal(SIGPIPE, SIG_IGN);
    if (!check_under_san()) RUN(ranks_join_while_two_processes_flood_the_store); /* a timing race under ASan */
    RUN(a_waiting_rank_honours_sigterm_and_sigint_within_a_second);
    RUN(shoal_train_waiting_for_its_ranks_stops_on_sigterm);
    RUN(two_processes_claiming_one_rank_stop_the_job_naming_both);
    RUN(ranks_disagreeing_on_the_world_size_stop_at_once);
    RUN(a_second_rank_0_names_the_first_not_the_port);
    RUN(with_a_secret_key_a_late_duplicate_is_refused_and_the_job_goes_on);
    RUN(under_mpich_without_a_key_an_outsider_ends_the_job);
    RUN(under_mpich_a_process_outside_mpiexec_cannot_join);
    return check_end();
}
