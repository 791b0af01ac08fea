/* test_launch.c — proves `shoal launch` (src/cli/launch.c, cmd_launch.c) and `shoal bench`
 * (cmd_bench.c) with real processes: environment, output prefixes, failure handling,
 * signal forwarding, usage errors; and an end-to-end checked benchmark. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/run.h"

static char out[1 << 20];

static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void env_reaches_every_rank(void)
{
    int rc = run("launch -n 3 -- sh -c 'echo R=$SHOAL_RANK W=$SHOAL_WORLD_SIZE L=$SHOAL_LOCAL_RANK "
                 "M=$SHOAL_MASTER_ADDR P=${SHOAL_MASTER_PORT:+set} K=${#SHOAL_JOB_KEY}'");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    for (int r = 0; r < 3; r++) {
        char want[128];
        snprintf(want, sizeof want, "[rank %d] R=%d W=3 L=%d M=127.0.0.1 P=set K=64", r, r, r);
        CHECK(strstr(out, want) != NULL, "missing \"%s\" in: %s", want, out);
    }
}

static void lines_never_interleave(void)
{
    int rc = run("launch -n 4 -- sh -c 'i=0; while [ $i -lt 300 ]; do echo line-$SHOAL_RANK-$i-abcdefghijklmnopqrstuvwxyz; "
                 "i=$((i+1)); done'");
    CHECK(rc == 0, "exit %d", rc);
    int bad = 0, lines = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        int r = -1, r2 = -2, i = -1;
        lines++;
        if (sscanf(l, "[rank %d] line-%d-%d-abcdefghijklmnopqrstuvwxyz", &r, &r2, &i) != 3 || r != r2 ||
            strlen(l) < 40)
            bad++;
    }
    CHECK(lines == 1200 && bad == 0, "%d lines, %d garbled", lines, bad);
}

static void one_failure_stops_all(void)
{
    uint64_t t0 = sh_now_ns();
    int rc = run("launch -n 3 -- sh -c 'if [ $SHOAL_RANK = 1 ]; then echo disk on fire >&2; exit 7; fi; sleep 30'");
    double s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc == 7, "exit %d, want rank 1's 7: %s", rc, out);
    CHECK(strstr(out, "rank 1 exited with code 7") != NULL, "%s", out);
    CHECK(strstr(out, "disk on fire") != NULL, "the rank's last error line is missing: %s", out);
    CHECK(s < 10, "took %.1f s to stop the others", s);
}

static void killed_rank_reports_signal(void)
{
    int rc = run("launch -n 2 -- sh -c 'if [ $SHOAL_RANK = 0 ]; then kill -9 $$; fi; sleep 30'");
    CHECK(rc == 137, "exit %d: %s", rc, out);
    CHECK(strstr(out, "rank 0 was killed by SIGKILL") != NULL, "%s", out);
}

/* A process gone, or a zombie waiting for its reaper. */
static int dead(int pid)
{
    char path[64], st[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = 0;
    const char *p = strrchr(st, ')');
    return p && (p[2] == 'Z' || p[2] == 'X');
}

static int read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1) pid = 0;
        fclose(f);
    }
    unlink(path);
    return pid;
}

/* Grandchildren share their rank's fate: a failed rank's and a stopped rank's background
 * processes die with the job, and one left holding the output pipe does not hold the launcher. */
static void grandchildren_die_with_the_job(void)
{
    char dir[64], args[1024];
    snprintf(dir, sizeof dir, "/tmp/shoal-launch-gc.%d", (int)getpid());
    snprintf(args, sizeof args,
             "launch -n 2 -- sh -c 'sleep 30 & echo $! > %s.$SHOAL_RANK; "
             "if [ $SHOAL_RANK = 0 ]; then while [ ! -s %s.1 ]; do sleep 0.05; done; exit 3; fi; wait'",
             dir, dir);
    uint64_t t0 = sh_now_ns();
    int rc = run(args);
    double s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc == 3, "exit %d: %s", rc, out);
    CHECK(s < 10, "took %.1f s", s);
    for (int r = 0; r < 2; r++) {
        char path[96];
        snprintf(path, sizeof path, "%s.%d", dir, r);
        int pid = read_pid(path);
        for (int i = 0; i < 40 && pid > 0 && !dead(pid); i++) usleep(50000);
        CHECK(pid > 0 && dead(pid), "rank %d's background sleep (pid %d) outlived the job", r, pid);
        if (pid > 0 && !dead(pid)) kill(pid, SIGKILL);
    }
    /* every rank succeeds but leaves a background process on the output pipe */
    snprintf(args, sizeof args, "launch -n 2 -- sh -c 'sleep 30 & echo $! > %s.$SHOAL_RANK; echo done'", dir);
    t0 = sh_now_ns();
    rc = run(args);
    s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc == 0 && count(out, "done") == 2, "exit %d: %s", rc, out);
    CHECK(s < 10, "the launcher waited %.1f s for its ranks' leftovers", s);
    for (int r = 0; r < 2; r++) {
        char path[96];
        snprintf(path, sizeof path, "%s.%d", dir, r);
        int pid = read_pid(path);
        for (int i = 0; i < 40 && pid > 0 && !dead(pid); i++) usleep(50000);
        CHECK(pid > 0 && dead(pid), "rank %d's leftover (pid %d) still runs", r, pid);
        if (pid > 0 && !dead(pid)) kill(pid, SIGKILL);
    }
}

static void sigint_is_forwarded(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/shoal-launch-int.%d", (int)getpid());
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(path, "w", stdout);
        if (!f || dup2(1, 2) < 0) _exit(126);
        execl(sh_test_shoal_bin(), "shoal", "launch", "-n", "2", "--", "sh", "-c",
              "trap 'echo got-int-$SHOAL_RANK; exit 0' INT; echo ready; i=0; "
              "while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) { /* wait for both ranks to be ready */
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
        if (f) fclose(f);
        out[n] = 0;
        if (count(out, "ready") == 2) break;
        usleep(50000);
    }
    kill(p, SIGINT);
    int st;
    waitpid(p, &st, 0);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    if (f) fclose(f);
    out[n] = 0;
    unlink(path);
    CHECK(strstr(out, "got-int-0") && strstr(out, "got-int-1"), "ranks did not see SIGINT: %s", out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status %d", st);
}

static void output_dir_holds_files(void)
{
    char dir[64], path[128];
    snprintf(dir, sizeof dir, "/tmp/shoal-launch-out.%d", (int)getpid());
    char args[256];
    snprintf(args, sizeof args, "launch -n 2 --output-dir %s -- sh -c 'echo out-$SHOAL_RANK; echo err-$SHOAL_RANK >&2'", dir);
    CHECK(run(args) == 0, "%s", out);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/rank-%d.out", dir, r);
        FILE *f = fopen(path, "r");
        char line[64] = "";
        if (f) {
            if (!fgets(line, sizeof line, f)) line[0] = 0;
            fclose(f);
        }
        char want[32];
        snprintf(want, sizeof want, "out-%d\n", r);
        CHECK(!strcmp(line, want), "%s holds \"%s\"", path, line);
        unlink(path);
        snprintf(path, sizeof path, "%s/rank-%d.err", dir, r);
        unlink(path);
    }
    rmdir(dir);
}

static void usage_errors(void)
{
    CHECK(run("launch -- true") == 2 && strstr(out, "-n N is required"), "%s", out);
    CHECK(run("launch -n 0 true") == 2 && strstr(out, "-n takes"), "%s", out);
    CHECK(run("launch -n 2") == 2 && strstr(out, "no command"), "%s", out);
    CHECK(run("launch -n 2 -- /no/such/program") == 127 && strstr(out, "cannot run"), "%s", out);
    CHECK(run("launch -n 3 -- no-such-program-anywhere") == 127 && strstr(out, "not found in PATH") &&
              count(out, "\n") == 1 && !strstr(out, "[rank"),
          "want one line: %s", out);
    CHECK(run("bench frobnicate") == 2 && strstr(out, "unknown collective"), "%s", out);
    CHECK(run("bench allreduce -d complex") == 2 && strstr(out, "data type"), "%s", out);
    CHECK(run("bench allreduce -b 1Q") == 2 && strstr(out, "bad size"), "%s", out);
    CHECK(run("bench allreduce -e 99999999999G") == 2 && strstr(out, "bad size"), "%s", out);
    CHECK(run("bench allreduce -b nan") == 2 && strstr(out, "bad size"), "%s", out);
    CHECK(run("bench allreduce -b 4K -e 1K") == 2 && strstr(out, "larger than -e"), "%s", out);
}

/* Two launchers as two machines (--nnodes 2), here both on this one: each starts its
 * share of the ranks with the job's numbering, and together they run one checked job. */
static void nodes_make_one_job(void)
{
    char cmd[2048];
    const char *bin = sh_test_shoal_bin();
    int port = sh_test_free_ports(1);
    snprintf(cmd, sizeof cmd,
             "export SHOAL_JOB_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n') SHOAL_MASTER_PORT=%d; "
             "%s launch -n 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 -- sh -c "
             "'echo R=$SHOAL_RANK W=$SHOAL_WORLD_SIZE L=$SHOAL_LOCAL_RANK S=$SHOAL_LOCAL_SIZE M=$SHOAL_MASTER_ADDR' 2>&1; "
             "%s launch -n 2 --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 -- %s bench allreduce -b 8 -e 1M "
             "-f 32 --iters 3 -w 1 -c 1 >/dev/null 2>&1 & "
             "%s launch -n 2 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 -- %s bench allreduce -b 8 -e 1M "
             "-f 32 --iters 3 -w 1 -c 1 2>&1; a=$?; wait $!; echo \"exits $a $?\"",
             port, bin, bin, bin, bin, bin);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    for (int l = 0; l < 2; l++) {
        char want[128];
        snprintf(want, sizeof want, "[rank %d] R=%d W=4 L=%d S=2 M=127.0.0.1", 2 + l, 2 + l, l);
        CHECK(strstr(out, want) != NULL, "missing \"%s\" in: %s", want, out);
    }
    CHECK(strstr(out, "shoal bench allreduce: 4 ranks") && strstr(out, "# Out of bounds values : 0 OK") &&
              strstr(out, "exits 0 0"),
          "the two nodes' job: %s", out);
    /* what every node must agree on is asked for, one line each */
    CHECK(run("launch -n 2 --nnodes 2 --node-rank 0 true") == 2 && strstr(out, "--master-addr") &&
              count(out, "\n") == 1,
          "%s", out);
    CHECK(run("launch -n 2 --nnodes 2 --node-rank 2 --master-addr 127.0.0.1 true") == 2 &&
              strstr(out, "outside 0..1"), "%s", out);
    snprintf(cmd, sizeof cmd, "env -u SHOAL_JOB_KEY %s launch -n 1 --nnodes 2 --master-addr 10.0.0.1 true 2>&1", bin);
    CHECK(sh_test_run(cmd, out, sizeof out) == 2 && strstr(out, "SHOAL_JOB_KEY"), "%s", out);
    CHECK(run("launch -n 2 --node-rank 1 true") == 2 && strstr(out, "needs --nnodes"), "%s", out);
    CHECK(run("train x.cfg --nnodes 2") == 2 && strstr(out, "go with -n N"), "%s", out);
    CHECK(run("train x.cfg -n 2 --nnodes 2 --master-addr h0 --ps") == 2 && strstr(out, "shoal launch -n N --nnodes 2"),
          "%s", out);
}

/* SHOAL_PORT_RANGE: the ranks listen inside it (a firewall's opening), and a range too small
 * or malformed is one clear line. */
static void port_range_is_kept(void)
{
    char cmd[1024];
    const char *bin = sh_test_shoal_bin();
    int lo = sh_test_free_ports(3);
    snprintf(cmd, sizeof cmd, "SHOAL_LOG=debug SHOAL_TRANSPORT=tcp SHOAL_PORT_RANGE=%d-%d %s launch -n 3 -- %s bench "
             "allreduce -b 8 -e 64K --iters 2 -w 0 -c 1 2>&1", lo, lo + 2, bin, bin);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "Out of bounds values : 0 OK"), "exit %d: %s", rc, out);
    for (int p = lo; p <= lo + 2; p++) {
        char want[64];
        snprintf(want, sizeof want, ":%d for the ranks", p);
        CHECK(strstr(out, want) != NULL, "no rank listens on %d: %s", p, out);
    }
    snprintf(cmd, sizeof cmd, "SHOAL_TRANSPORT=tcp SHOAL_TIMEOUT=3000 SHOAL_PORT_RANGE=%d-%d %s launch -n 2 -- %s bench "
             "allreduce -b 8 -e 8 --iters 1 -w 0 2>&1", lo, lo, bin, bin);
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc != 0 && strstr(out, "no free port in SHOAL_PORT_RANGE") && strstr(out, "widen"), "%s", out);
    snprintf(cmd, sizeof cmd, "SHOAL_TRANSPORT=tcp SHOAL_PORT_RANGE=9-2 %s launch -n 2 -- %s bench allreduce -b 8 "
             "-e 8 --iters 1 -w 0 2>&1", bin, bin);
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc != 0 && strstr(out, "expected LO-HI"), "%s", out);
}

/* End to end: every collective checked by shoal bench under shoal launch. */
static void bench_end_to_end(void)
{
    const char *colls[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "sendrecv"};
    for (int i = 0; i < 7; i++) {
        char args[512];
        snprintf(args, sizeof args, "launch -n 3 %s bench %s -b 8 -e 256K -f 16 --iters 3 -w 1 -c 1",
                 sh_test_shoal_bin(), colls[i]);
        int rc = run(args);
        CHECK(rc == 0, "%s: exit %d: %s", colls[i], rc, out);
        CHECK(strstr(out, "# Out of bounds values : 0 OK") != NULL, "%s: %s", colls[i], out);
        CHECK(count(out, "  float  ") >= 4 && !strstr(out, "[rank 0]  ") && strstr(out, "busbw"),
              "%s: rows missing or tagged: %s", colls[i], out);
    }
    char args[512];
    snprintf(args, sizeof args, "launch -n 2 %s bench allreduce -b 1K -e 4K --iters 2 -w 0 --json", sh_test_shoal_bin());
    CHECK(run(args) == 0 && strstr(out, "\"busbw_gb_s\"") && strstr(out, "\"rows\""), "%s", out);
}

int main(void)
{
    check_begin("test_launch", 240);
    RUN(env_reaches_every_rank);
    RUN(lines_never_interleave);
    RUN(one_failure_stops_all);
    RUN(killed_rank_reports_signal);
    RUN(grandchildren_die_with_the_job);
    RUN(sigint_is_forwarded);
    RUN(output_dir_holds_files);
    RUN(usage_errors);
    RUN(bench_end_to_end);
    RUN(nodes_make_one_job);
    RUN(port_range_is_kept);
    return check_end();
}
