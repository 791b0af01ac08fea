/* test_comm_faults.c — proves that failures end in clear errors, never hangs: a killed
 * rank, a frozen rank, mismatched collectives, a stranger with the wrong job key, garbage
 * and port scans against rank 0's store; and that shared memory leaves nothing behind. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "comm/comm_internal.h"
#include "comm/boot/store.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

static int count_shm(void)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "shoal-", 6)) n++;
    if (d) closedir(d);
    return n;
}

typedef struct {
    const char *transport;
    int sig; /* SIGKILL or SIGSTOP */
} fault_arg;

/* Rank 2 of 3 dies or freezes; ranks 0 and 1 must fail within the deadline, naming it. */
static void lost_rank(shoal_comm *c, void *arg)
{
    const fault_arg *a = arg;
    int r = shoal_comm_rank(c);
    int32_t pid = (int32_t)getpid(), pids[3];
    CHECK(shoal_allgather(c, &pid, pids, 1, SHOAL_INT32) == SHOAL_OK, "%s", shoal_last_error_message());
    size_t count = 1 << 20;
    float *v = calloc(count, 4);
    if (r == 2) raise(a->sig);
    uint64_t t0 = sh_now_ns();
    shoal_result rc = SHOAL_OK;
    for (int i = 0; i < 50 && rc == SHOAL_OK; i++) rc = shoal_allreduce(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM);
    double ms = (double)(sh_now_ns() - t0) / 1e6;
    CHECK(rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT, "rank %d: rc %d", r, rc);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "rank 2") != NULL, "rank %d: error does not name rank 2: %s", r, m);
    CHECK(strstr(m, "allreduce") != NULL, "rank %d: error does not name the operation: %s", r, m);
    CHECK(strstr(m, shoal_comm_host(c, 2)) != NULL, "rank %d: error does not name the host: %s", r, m);
    CHECK(ms < c->timeout_ms * 2.0 + 2000, "rank %d: took %.0f ms (timeout %d)", r, ms, c->timeout_ms);
    CHECK(shoal_comm_is_broken(c), "rank %d: communicator not marked broken", r);
    CHECK(shoal_barrier(c) == SHOAL_ERR_BROKEN, "rank %d: a broken communicator accepted a barrier", r);
    if (r == 0 && a->sig == SIGSTOP) kill(pids[2], SIGKILL);
    free(v);
}

static void t_killed_rank(void)
{
    int before = count_shm();
    const char *ts[] = {"shm", "tcp"};
    for (int i = 0; i < 2; i++) {
        fault_arg a = {ts[i], SIGKILL};
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = ts[i], .timeout_ms = 1500, .dying_mask = 4u};
        RUN_RANKS(3, &o, lost_rank, &a);
    }
    CHECK(count_shm() == before, "/dev/shm has %d shoal segments, had %d", count_shm(), before);
}

static void t_frozen_rank(void)
{
    const char *ts[] = {"shm", "tcp"};
    for (int i = 0; i < 2; i++) {
        fault_arg a = {ts[i], SIGSTOP};
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = ts[i], .timeout_ms = 1500, .dying_mask = 4u};
        RUN_RANKS(3, &o, lost_rank, &a);
    }
}

/* Mismatches: every rank gets an error quickly; a neighbour of the odd rank names both. */
typedef struct {
    int what; /* 0 count, 1 dtype, 2 op, 3 root, 4 collective, 5 small against large count */
} mm_arg;

static void mismatch(shoal_comm *c, void *arg)
{
    const mm_arg *a = arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    int odd = r == n - 1;
    static _Thread_local float x[4096];
    memset(x, 0, sizeof x);
    uint64_t t0 = sh_now_ns();
    shoal_result rc;
    switch (a->what) {
    case 0: rc = shoal_allreduce(c, x, x, odd ? 63 : 64, SHOAL_FLOAT32, SHOAL_SUM); break;
    case 1: rc = shoal_allreduce(c, x, x, 16, odd ? SHOAL_INT32 : SHOAL_FLOAT32, SHOAL_SUM); break;
    case 2: rc = shoal_allreduce(c, x, x, 16, SHOAL_FLOAT32, odd ? SHOAL_MAX : SHOAL_SUM); break;
    case 3: rc = shoal_broadcast(c, x, x, 16, SHOAL_FLOAT32, odd ? 1 : 0); break;
    case 4: rc = odd ? shoal_barrier(c) : shoal_allreduce(c, x, x, 16, SHOAL_FLOAT32, SHOAL_SUM); break;
    /* the small allreduce checks in its first round, the large one in a round of its own */
    default: rc = shoal_allreduce(c, x, x, odd ? 4096 : 16, SHOAL_FLOAT32, SHOAL_SUM); break;
    }
    double ms = (double)(sh_now_ns() - t0) / 1e6;
    CHECK(rc == SHOAL_ERR_MISMATCH || rc == SHOAL_ERR_PEER, "rank %d: rc %d (%s)", r, rc, shoal_last_error_message());
    CHECK(ms < 3000, "rank %d: mismatch took %.0f ms to report", r, ms);
    const char *m = shoal_last_error_message();
    static const char *want_odd[] = {"count=63", "int32", "max", "root=1", "barrier()", "count=4096"};
    static const char *want_rest[] = {"count=64", "float32", "sum", "root=0", "allreduce(", "count=16"};
    int adjacent = r == 0 || r == n - 2 || odd;
    if (adjacent) {
        CHECK(strstr(m, want_odd[a->what]) && strstr(m, want_rest[a->what]),
              "rank %d: message lacks both sides (%s / %s): %s", r, want_odd[a->what], want_rest[a->what], m);
    }
    CHECK(strstr(m, "mismatch") != NULL, "rank %d: %s", r, m);
    CHECK(shoal_comm_is_broken(c), "rank %d: not broken after a mismatch", r);
}

static void t_mismatch(void)
{
    for (int w = 0; w < 6; w++)
        for (int n = 2; n <= 8; n *= 2) {
            mm_arg a = {w};
            sh_test_ranks_opts o = {.links = SH_TEST_REAL, .timeout_ms = 5000};
            RUN_RANKS(n, &o, mismatch, &a);
        }
}

/* Strangers at rank 0's store: wrong key, port scan, garbage, a huge length, a stalled
 * half handshake. The job goes on: collectives and a split (which uses the store) work. */
static void strangers(shoal_comm *c, void *arg)
{
    int r = shoal_comm_rank(c);
    int port = atoi(getenv("SHOAL_MASTER_PORT"));
    if (r == 1) {
        sh_store *s = NULL;
        shoal_result rc = sh_store_connect("127.0.0.1", port, "not-the-key", 2000, &s);
        CHECK(rc != SHOAL_OK, "a wrong key was accepted");
        CHECK(strstr(shoal_last_error_message(), "job key") != NULL, "%s", shoal_last_error_message());
        sh_store_close(s);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(0x7f000001)};
        int stalled = -1;
        for (int k = 0; k < 6; k++) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
                close(fd);
                continue;
            }
            unsigned char junk[4096];
            for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 131 + (size_t)k);
            if (k == 1) { /* "SHOAL1C" then a stall: must not block anyone else */
                if (write(fd, "SHOAL1C", 7) < 0) {}
                stalled = fd;
                continue;
            }
            if (k == 2) memset(junk, 0xff, 8); /* absurd lengths */
            if (k > 0 && write(fd, junk, k == 3 ? 1 : sizeof junk) < 0) {}
            close(fd); /* k == 0: a port scan's connect-and-close */
        }
        CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
        if (stalled >= 0) close(stalled);
    } else {
        CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
    }
    int32_t v = r + 1, s = 0;
    CHECK(shoal_allreduce(c, &v, &s, 1, SHOAL_INT32, SHOAL_SUM) == SHOAL_OK && s == 6, "sum %d", s);
    shoal_comm *child = NULL;
    CHECK(shoal_comm_split(c, 0, r, &child) == SHOAL_OK, "split after strangers: %s", shoal_last_error_message());
    shoal_comm_destroy(child);
}

static void t_strangers(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .timeout_ms = 8000};
    RUN_RANKS(3, &o, strangers, NULL);
}

/* The environment: missing variables and wrong values give one clear line. */
/* A rank whose kernel refuses to let it read its peers' memory (SHOAL_TEST_CMA_FAIL names
 * it): every rank fails that allreduce at once, naming it, instead of waiting for the
 * deadline; the communicator stays usable and the next allreduces go through the rings. */
static void cma_refused(shoal_comm *c, void *arg)
{
    (void)arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    enum { N = 100000 }; /* 400 KB: through the peers' memory */
    float *v = malloc(N * sizeof *v);
    if (!v) return;
    for (int i = 0; i < N; i++) v[i] = (float)(r + 1);
    uint64_t t0 = sh_now_ns();
    shoal_result rc = shoal_allreduce(c, v, v, N, SHOAL_FLOAT32, SHOAL_SUM);
    double ms = (double)(sh_now_ns() - t0) / 1e6;
    const char *m = shoal_last_error_message();
    CHECK(rc == SHOAL_ERR_IO, "rank %d: rc %d (%s)", r, rc, m);
    CHECK(ms < 2000, "rank %d: the refusal took %.0f ms to report (deadline 5000)", r, ms);
    CHECK(r == 1 ? strstr(m, "failed") != NULL : strstr(m, "rank 1") != NULL, "rank %d: %s", r, m);
    CHECK(!shoal_comm_is_broken(c), "rank %d: broken after a refused copy", r);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++) v[i] = (float)(r + 1 + k);
        CHECK_OK(shoal_allreduce(c, v, v, N, SHOAL_FLOAT32, SHOAL_SUM));
        float want = (float)(n * (n + 1) / 2 + n * k);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += v[i] != want;
        CHECK(bad == 0, "rank %d: %d wrong after the fallback (want %g, v[0] %g)", r, bad, want, v[0]);
    }
    free(v);
}

static void t_cma_refused(void)
{
    setenv("SHOAL_TEST_CMA_FAIL", "1", 1);
    for (int n = 2; n <= 3; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .timeout_ms = 5000};
        RUN_RANKS(n, &o, cma_refused, NULL);
    }
    unsetenv("SHOAL_TEST_CMA_FAIL");
}

static void t_env_errors(void)
{
    pid_t p = fork();
    if (p == 0) {
        unsetenv("SHOAL_RANK");
        unsetenv("SHOAL_WORLD_SIZE");
        unsetenv("OMPI_COMM_WORLD_RANK");
        unsetenv("PMI_RANK");
        unsetenv("SLURM_PROCID");
        shoal_comm *c = NULL;
        int ok = shoal_comm_create(NULL, &c) == SHOAL_ERR_INVALID &&
                 strstr(shoal_last_error_message(), "shoal launch") != NULL;
        setenv("SHOAL_RANK", "3", 1);
        setenv("SHOAL_WORLD_SIZE", "2", 1);
        ok = ok && shoal_comm_create(NULL, &c) == SHOAL_ERR_INVALID &&
             strstr(shoal_last_error_message(), "rank 3") != NULL;
        setenv("SHOAL_RANK", "x", 1);
        ok = ok && shoal_comm_create(NULL, &c) == SHOAL_ERR_INVALID &&
             strstr(shoal_last_error_message(), "SHOAL_RANK") != NULL;
        /* a rank that never comes: rank 1 of 2 waits for rank 0's store, then times out */
        setenv("SHOAL_RANK", "1", 1);
        setenv("SHOAL_JOB_KEY", "k", 1);
        setenv("SHOAL_MASTER_PORT", "1", 1);
        shoal_comm_opts o;
        shoal_comm_opts_default(&o);
        o.timeout_ms = 500;
        ok = ok && shoal_comm_create(&o, &c) == SHOAL_ERR_TIMEOUT &&
             strstr(shoal_last_error_message(), "127.0.0.1:1") != NULL;
        if (!ok) fprintf(stderr, "last: %s\n", shoal_last_error_message());
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    waitpid(p, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "environment errors were not clear");
}

int main(void)
{
    check_begin("test_comm_faults", 300);
    RUN(t_env_errors);
    RUN(t_killed_rank);
    RUN(t_frozen_rank);
    RUN(t_mismatch);
    RUN(t_strangers);
    RUN(t_cma_refused);
    return check_end();
}
