/* test_netlab.c — proves scripts/netlab.sh (and netlab-agent.sh): an emulated cluster of
 * two shaped hosts comes up, its hosts answer addr and exec, `shoal bench allreduce` runs
 * across it on 2x1 and 2x2 ranks with right results and no faster than the shaped rate,
 * Open MPI (through the agent) and gloo run across it where installed, and down leaves
 * nothing behind, also after up was killed midway. Needs root and `ip netns`; otherwise it says so and skips.
 * Runs from the repository root (as make test does); $SHOAL_BIN names the shoal binary. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define LAB "scripts/netlab.sh"
/* 1 gbit/s is 0.125 GB/s; tbf's bucket (4 ms of traffic) and timing noise may add a little. */
#define SHAPED_GB_S 0.125
#define SHAPED_SLACK 1.2

static char out[1 << 16];
static char name[32];          /* NETLAB_NAME of this test's lab: unique per process */
static const char *shoal_bin;

/* Runs a shell command (stdout and stderr into out) under a time limit; its exit status. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    /* through the environment: the command keeps its own quoting inside timeout's sh */
    setenv("TEST_NETLAB_CMD", cmd, 1);
    out[0] = 0;
    FILE *p = popen("timeout -k 5 90 sh -c \"$TEST_NETLAB_CMD\" 2>&1", "r");
    if (!p) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whatever of this lab the root namespace can see: its namespaces, and links named after it. */
static int lab_leftovers(void)
{
    return run("{ ip netns list; ip -o link show; } | grep -c 'shl-%s-'", name) == 0 ? atoi(out) : 0;
}

static int can_make_namespaces(void)
{
    if (geteuid() != 0) return 0;
    char probe[48];
    snprintf(probe, sizeof probe, "shl-probe%d", (int)getpid());
    if (run("ip netns add %s", probe) != 0) return 0;
    run("ip netns del %s", probe);
    return 1;
}

/* One bench row for 4 MiB: out-of-place and in-place algbw, busbw and #wrong. */
typedef struct {
    double algbw_gb_s[2], busbw_gb_s[2];
    long wrong[2];
} bench_row;

static int parse_row(const char *text, bench_row *b)
{
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        unsigned long long nbytes, count;
        char type[32], redop[32];
        int root;
        double t0, t1;
        if (line[0] != '#' &&
            sscanf(line, "%llu %llu %31s %31s %d %lf %lf %lf %ld %lf %lf %lf %ld", &nbytes, &count, type, redop,
                   &root, &t0, &b->algbw_gb_s[0], &b->busbw_gb_s[0], &b->wrong[0], &t1, &b->algbw_gb_s[1],
                   &b->busbw_gb_s[1], &b->wrong[1]) == 13 &&
            nbytes == 4u << 20)
            return 1;
    }
    return 0;
}

static void up_gives_hosts_with_addresses(void)
{
    int rc = run(LAB " up 2 --rate 1gbit");
    CHECK(rc == 0, "up: exit %d: %s", rc, out);
    CHECK(run(LAB " addr h0") == 0 && !strcmp(out, "10.77.0.1\n"), "addr h0: %s", out);
    CHECK(run(LAB " addr h1") == 0 && !strcmp(out, "10.77.0.2\n"), "addr h1: %s", out);
    CHECK(run(LAB " addr h2") == 1 && strstr(out, "h0 ... h1"), "addr h2 must fail naming the hosts: %s", out);
    CHECK(run(LAB " exec h1 cat /proc/sys/kernel/hostname") == 0 && !strcmp(out, "h1\n"), "host name: %s", out);
    char ns0[64], ns1[64], root_ns[64] = "";
    run(LAB " exec h0 readlink /proc/self/ns/net");
    snprintf(ns0, sizeof ns0, "%.63s", out);
    run(LAB " exec h1 readlink /proc/self/ns/net");
    snprintf(ns1, sizeof ns1, "%.63s", out);
    ssize_t n = readlink("/proc/self/ns/net", root_ns, sizeof root_ns - 1);
    root_ns[n > 0 ? n : 0] = 0;
    CHECK(strncmp(ns0, "net:", 4) == 0 && strcmp(ns0, ns1) && !strstr(ns0, root_ns), "namespaces %s %s (root %s)",
          ns0, ns1, root_ns);
    CHECK(run(LAB " exec h1 tc qdisc show dev eth0") == 0 && strstr(out, "tbf") && strstr(out, "1Gbit"), "%s", out);
    CHECK(run(LAB " status") == 0 && strstr(out, "10.77.0.2") && strstr(out, "1gbit"), "status: %s", out);
    CHECK(run(LAB " up 2") == 1 && strstr(out, "down first"), "a second up must refuse: %s", out);
}

static void shoal_bench(int ranks_per_host)
{
    int rc = run(LAB " run %d -- env SHOAL_TIMEOUT=20000 %s bench allreduce -b 4M -e 4M --iters 5 -w 1 -c 1",
                 ranks_per_host, shoal_bin);
    CHECK(rc == 0, "%d ranks per host: exit %d: %s", ranks_per_host, rc, out);
    char want[64];
    snprintf(want, sizeof want, "%d ranks, 2 hosts", 2 * ranks_per_host);
    CHECK(strstr(out, want) != NULL, "want \"%s\": %s", want, out);
    bench_row b;
    if (!parse_row(out, &b)) {
        CHECK(0, "no 4 MiB row in: %s", out);
        return;
    }
    for (int k = 0; k < 2; k++) {
        CHECK(b.wrong[k] == 0, "%ld wrong (%s): %s", b.wrong[k], k ? "in place" : "out of place", out);
        /* Between two hosts every byte of the buffer crosses each link once per direction
         * (ring or hierarchical), so algbw cannot pass the link's rate. */
        CHECK(b.algbw_gb_s[k] > 0.0 && b.algbw_gb_s[k] <= SHAPED_GB_S * SHAPED_SLACK,
              "algbw %.3f GB/s across 1 gbit links: %s", b.algbw_gb_s[k], out);
    }
    printf("test_netlab: 2 hosts x %d ranks at 1 gbit: 4 MiB allreduce algbw %.3f busbw %.3f GB/s\n",
           ranks_per_host, b.algbw_gb_s[0], b.busbw_gb_s[0]);
}

static void shoal_bench_runs_across_hosts_within_the_rate(void)
{
    shoal_bench(1);
    shoal_bench(2);
}

static void open_mpi_runs_across_hosts_through_the_agent(void)
{
    if (run("command -v mpirun && command -v mpicc.openmpi") != 0) {
        printf("test_netlab: Open MPI part skipped: no mpirun or mpicc.openmpi (install openmpi-bin libopenmpi-dev)\n");
        return;
    }
    char dir[] = "/tmp/test_netlab.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp failed");
        return;
    }
    int rc = run(LAB " mpirun --host h0:1,h1:1 -np 2 cat /proc/sys/kernel/hostname");
    CHECK(rc == 0 && strstr(out, "h0\n") && strstr(out, "h1\n"), "exit %d: %s", rc, out);
    rc = run("mpicc.openmpi -O2 bench/comm/mpi_coll.c -o %s/coll", dir);
    CHECK(rc == 0, "mpicc: %s", out);
    rc = run(LAB " mpirun --host h0:2,h1:2 -np 4 %s/coll allreduce 4194304 4194304 2 5 5", dir);
    const char *row = strstr(out, "\"busbw_gb_s\": ");
    double busbw = row ? atof(row + strlen("\"busbw_gb_s\": ")) : -1;
    /* 4 ranks: busbw is 1.5 algbw */
    CHECK(rc == 0 && busbw > 0 && busbw / 1.5 <= SHAPED_GB_S * SHAPED_SLACK, "exit %d, busbw %.3f: %s", rc, busbw,
          out);
    printf("test_netlab: Open MPI 2 hosts x 2 ranks at 1 gbit: 4 MiB allreduce busbw %.3f GB/s\n", busbw);
    run("rm -rf %s", dir);
    /* shoal itself under mpirun across the hosts, as on a cluster: it reads Open MPI's
     * variables, sees two hosts and goes hierarchical */
    char bin[4096];
    if (!realpath(shoal_bin, bin)) snprintf(bin, sizeof bin, "%s", shoal_bin);
    rc = run(LAB " mpirun --host h0:2,h1:2 -np 4 -x SHOAL_MASTER_ADDR=10.77.0.1 -x SHOAL_JOB_KEY=%064d "
             "%s bench allreduce -b 4M -e 4M --iters 3 -w 1 -c 1", (int)getpid(), bin);
    bench_row b;
    CHECK(rc == 0 && strstr(out, "4 ranks, 2 hosts") && parse_row(out, &b) && b.wrong[0] == 0 && b.wrong[1] == 0,
          "shoal under mpirun: exit %d: %s", rc, out);
}

static void gloo_runs_across_hosts(void)
{
    /* Debian's python3, where scripts/deps.sh --bench puts PyTorch, as bench/comm/run.sh */
    if (run("/usr/bin/python3 -c 'import torch.distributed'") != 0) {
        printf("test_netlab: gloo part skipped: no PyTorch for /usr/bin/python3 (scripts/deps.sh --bench installs it)\n");
        return;
    }
    int rc = run(LAB " run 1 -- /usr/bin/python3 bench/comm/gloo_allreduce.py --from-env --min 4194304 --max 4194304 --large 5");
    const char *row = strstr(out, "\"busbw_gb_s\": ");
    double busbw = row ? atof(row + strlen("\"busbw_gb_s\": ")) : -1;
    /* 2 ranks: busbw is algbw */
    CHECK(rc == 0 && busbw > 0 && busbw <= SHAPED_GB_S * SHAPED_SLACK, "exit %d, busbw %.3f: %s", rc, busbw, out);
    printf("test_netlab: gloo 2 hosts x 1 rank at 1 gbit: 4 MiB allreduce busbw %.3f GB/s\n", busbw);
}

static void down_leaves_nothing(void)
{
    int rc = run(LAB " down");
    CHECK(rc == 0, "down: exit %d: %s", rc, out);
    CHECK(lab_leftovers() == 0, "left behind: %d", lab_leftovers());
    CHECK(run("ip netns list | grep -c 'shl-%s-'", name) == 1, "namespaces left: %s", out);
    CHECK(run(LAB " addr h0") == 1 && strstr(out, "not up"), "addr after down: %s", out);
    CHECK(run(LAB " down") == 0, "a second down must be harmless: %s", out);
}

/* up is killed once it has made some hosts: down finds and removes what it made. */
static void down_cleans_up_after_up_was_killed(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl("/bin/bash", "bash", LAB, "up", "8", "--rate", "1gbit", (char *)NULL);
        _exit(127);
    }
    char h1[96];
    snprintf(h1, sizeof h1, "/run/netns/shl-%s-h1", name);
    struct stat st;
    for (int i = 0; i < 1000 && stat(h1, &st) != 0; i++) usleep(10000);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK(lab_leftovers() > 0, "up should have made something before it was killed");
    CHECK(run(LAB " up 2") == 1 && strstr(out, "down first"), "up over a crashed lab must refuse: %s", out);
    int rc = run(LAB " down");
    CHECK(rc == 0, "down: exit %d: %s", rc, out);
    CHECK(lab_leftovers() == 0, "left behind after a crash: %d", lab_leftovers());
    rc = run(LAB " up 1 --rate none");
    CHECK(rc == 0, "up after the cleanup: exit %d: %s", rc, out);
    CHECK(run(LAB " exec h0 tc qdisc show dev eth0") == 0 && !strstr(out, "tbf"), "--rate none shaped: %s", out);
    run(LAB " down");
    CHECK(lab_leftovers() == 0, "left behind: %d", lab_leftovers());
}

int main(void)
{
    check_begin("test_netlab", 170);
    if (check_under_san()) {
        printf("test_netlab: skipped under sanitizers: it times a shaped link\n");
        return check_end();
    }
    if (!can_make_namespaces()) {
        printf("test_netlab: skipped: needs root and `ip netns add` (iproute2)\n");
        return check_end();
    }
    if (access(LAB, X_OK) != 0) {
        CHECK(0, "%s not found: run from the repository root", LAB);
        return check_end();
    }
    shoal_bin = getenv("SHOAL_BIN") ? getenv("SHOAL_BIN") : "build/shoal";
    snprintf(name, sizeof name, "t%d", (int)getpid());
    setenv("NETLAB_NAME", name, 1);
    RUN(up_gives_hosts_with_addresses);
    RUN(shoal_bench_runs_across_hosts_within_the_rate);
    RUN(open_mpi_runs_across_hosts_through_the_agent);
    RUN(gloo_runs_across_hosts);
    RUN(down_leaves_nothing);
    RUN(down_cleans_up_after_up_was_killed);
    run(LAB " down");
    return check_end();
}
