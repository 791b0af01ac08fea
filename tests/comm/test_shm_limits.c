/* test_shm_limits.c — shared memory where /dev/shm is small, as in a container (Docker's
 * is 64 MiB): in a private mount namespace with a 64, 16 or 4 MiB tmpfs on /dev/shm, 2 to
 * 16 ranks under `shoal launch` run `shoal bench` with right results, no signal and one
 * warning saying what to do (smaller rings, or TCP when not even those fit), and a short
 * `shoal train`; and a host's segment whose maker dies before the others attach leaves
 * nothing in /dev/shm.
 * Without root (unshare -m) the namespace cases say so and skip.
 * Proves src/comm/transport/shm_seg.c, the ring sizing in shm.c and the fallback in transport.c. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "comm/boot/boot.h"
#include "comm/boot/store.h"
#include "comm/comm_internal.h"
#include "comm/transport/transport.h"
#include "lib/ranks.h"
#include "lib/run.h"
#include "shoal/comm.h"

static char out[1 << 18];

static int can_unshare(void)
{
    return sh_test_run("unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>&1", out, sizeof out) == 0;
}

/* cmd in a private mount namespace whose /dev/shm is a tmpfs of mib MiB; its exit status. */
static int in_small_shm(int mib, const char *cmd)
{
    char full[8192];
    snprintf(full, sizeof full,
             "unshare -m sh -c 'mount -t tmpfs -o size=%dm,mode=1777 tmpfs /dev/shm && %s' 2>&1", mib, cmd);
    return sh_test_run(full, out, sizeof out);
}

/* Every "#wrong" column of shoal bench's rows is 0, and there are rows. */
static int bench_rows_right(const char *text, int *rows)
{
    *rows = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        long long size = 0, count = 0;
        char type[16], op[16], wrong1[16], wrong2[16];
        int root = 0;
        double t1, a1, b1, t2, a2, b2;
        if (!strncmp(l, "[rank 0] ", 9)) l += 9; /* rank 0's table passes untagged; other lines are tagged */
        if (sscanf(l, "%lld %lld %15s %15s %d %lf %lf %lf %15s %lf %lf %lf %15s", &size, &count, type, op,
                   &root, &t1, &a1, &b1, wrong1, &t2, &a2, &b2, wrong2) != 13)
            continue;
        (*rows)++;
        if (strcmp(wrong1, "0") || strcmp(wrong2, "0")) return 0;
    }
    return *rows > 0;
}

typedef struct {
    int mib, ranks;
    const char *expect; /* in the one warning ("rings of", "over TCP"), or NULL: none */
} limit_case;

static void bench_case(const limit_case *lc)
{
    const char *bin = sh_test_shoal_bin();
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "SHOAL_BIND=none SHOAL_TIMEOUT=60000 %s launch -n %d -- %s bench allreduce -b 8 -e 4M -f 32 --iters 2 -w 1 -c 1",
             bin, lc->ranks, bin);
    int rc = in_small_shm(lc->mib, cmd);
    int rows = 0;
    CHECK(rc == 0, "%d ranks, %d MiB /dev/shm: exit %d:\n%.3000s", lc->ranks, lc->mib, rc, out);
    CHECK(bench_rows_right(out, &rows), "%d ranks, %d MiB: wrong results (%d rows):\n%.3000s", lc->ranks, lc->mib,
          rows, out);
    CHECK(!strstr(out, "SIGBUS") && !strstr(out, "signal"), "%d ranks, %d MiB: a signal:\n%.3000s", lc->ranks,
          lc->mib, out);
    int warnings = sh_test_count(out, "--shm-size"); /* each warning says what to do */
    if (lc->expect)
        CHECK(warnings == 1 && strstr(out, lc->expect),
              "%d ranks, %d MiB: want one warning with \"%s\" and what to do, got %d:\n%.3000s", lc->ranks, lc->mib,
              lc->expect, warnings, out);
    else
        CHECK(warnings == 0, "%d ranks, %d MiB: a warning where the rings fit:\n%.3000s", lc->ranks, lc->mib, out);
}

static void ranks_fit_a_64_mib_dev_shm(void)
{
    static const limit_case cases[] = {{64, 2, NULL}, {64, 8, "rings of"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bench_case(&cases[i]);
}

static void ranks_fit_a_16_mib_dev_shm(void)
{
    static const limit_case cases[] = {{16, 16, "rings of"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) bench_case(&cases[i]);
}

static void ranks_fall_back_to_tcp_when_no_rings_fit(void)
{
    static const limit_case c = {2, 8, "over TCP"};
    bench_case(&c);
}

static void a_short_training_run_fits_16_mib(void)
{
    char here[1024], cmd[6144], bin[4096];
    if (!getcwd(here, sizeof here) || !realpath(sh_test_shoal_bin(), bin)) return;
    snprintf(cmd, sizeof cmd, "cd /tmp && SHOAL_BIND=none SHOAL_THREADS=1 %s train %s/examples/lenet.cfg -n 8 --max-steps 3",
             bin, here);
    int rc = in_small_shm(16, cmd);
    CHECK(rc == 0 && !strstr(out, "SIGBUS"), "shoal train -n 8 in 16 MiB: exit %d:\n%.3000s", rc, out);
}

/* ---- a host's segment whose maker dies before the others attach ---- */

typedef struct {
    int port, pid_pipe[2];
} orphan_case;

static int shoal_files_of(int pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "shoal-%d-", pid);
    DIR *d = opendir("/dev/shm");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
    if (d) closedir(d);
    return n;
}

static void orphan_rank(int i, void *arg)
{
    orphan_case *oc = arg;
    char v[32];
    snprintf(v, sizeof v, "%d", i);
    setenv("SHOAL_RANK", v, 1);
    setenv("SHOAL_WORLD_SIZE", "2", 1);
    setenv("SHOAL_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", oc->port);
    setenv("SHOAL_MASTER_PORT", v, 1);
    setenv("SHOAL_JOB_KEY", "orphan-test-key", 1);
    setenv("SHOAL_TIMEOUT", "3000", 1);
    if (i == 0) { /* the host's first rank: it makes the segment, then waits for rank 1 */
        int me = (int)getpid();
        if (write(oc->pid_pipe[1], &me, sizeof me) != (ssize_t)sizeof me) _exit(5);
        shoal_comm *c = NULL;
        shoal_comm_create(NULL, &c); /* killed in here */
        _exit(6);
    }
    int pid0 = 0;
    CHECK(read(oc->pid_pipe[0], &pid0, sizeof pid0) == (ssize_t)sizeof pid0, "no pid from rank 0");
    shoal_comm *c = NULL;
    CHECK_OK(sh_boot_world(NULL, &c)); /* the rendezvous; rank 0 goes on to make the segment */
    if (!c) return;
    struct timespec ts = {0, 400 * 1000000L}; /* rank 0 now waits for us to attach */
    nanosleep(&ts, NULL);
    CHECK(shoal_files_of(pid0) == 0, "rank 0's segment has a name in /dev/shm while it waits for the others");
    kill(pid0, SIGKILL);
    shoal_result rc = sh_transport_connect_all(c); /* fails: its maker is gone */
    CHECK(rc != SHOAL_OK, "rank 1 linked to a dead rank 0");
    CHECK(shoal_files_of(pid0) == 0, "rank 0's segment outlived it in /dev/shm");
    sh_transport_destroy_all(c);
    sh_store_close(c->store);
    c->store = NULL;
    sh_comm_free(c);
}

static void maker_killed_before_attach_leaves_nothing_in_dev_shm(void)
{
    orphan_case oc;
    oc.port = sh_test_free_ports(1);
    if (pipe(oc.pid_pipe) != 0) return;
    sh_test_ranks_opts o = {.deadline_s = 30, .dying_mask = 1};
    RUN_PROCS(2, &o, orphan_rank, &oc);
    close(oc.pid_pipe[0]);
    close(oc.pid_pipe[1]);
}

int main(void)
{
    check_begin("test_shm_limits", 280);
    signal(SIGPIPE, SIG_IGN);
    RUN(maker_killed_before_attach_leaves_nothing_in_dev_shm);
    if (check_under_san() || !can_unshare()) {
        printf("test_shm_limits: no private mount namespace (needs root and unshare -m); the /dev/shm sizes skip\n");
        return check_end();
    }
    RUN(ranks_fit_a_64_mib_dev_shm);
    RUN(ranks_fit_a_16_mib_dev_shm);
    RUN(ranks_fall_back_to_tcp_when_no_rings_fit);
    RUN(a_short_training_run_fits_16_mib);
    return check_end();
}
