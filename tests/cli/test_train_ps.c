/* test_train_ps.c — proves `shoal train --ps` end to end (src/train/job.c, ps/, cmd_train.c's
 * -n relaunch): servers and workers as real processes started by shoal itself, in sync,
 * async and ssp modes, with a deliberately slowed worker; frozen and killed ranks (noticed at
 * once, no checkpoint nobody asked for); and the usage errors. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "train/tiny_data.h"
#include "lib/run.h"

static char dir[256], out[1 << 20];

static int run_env(const char *env, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s train %s 2>&1", dir, env, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int run(const char *args) { return run_env("", args); }

static long field(const char *after)
{
    const char *p = strstr(out, after);
    return p ? strtol(p + strlen(after), NULL, 10) : -1;
}

static void each_mode_trains(void)
{
    const char *modes[] = {"sync", "async", "ssp"};
    for (int m = 0; m < 3; m++) {
        char args[512];
        snprintf(args, sizeof args, "mlp.cfg --data . --ps -n 2 --consistency %s --max-steps 40 --threads 1", modes[m]);
        int rc = run(args);
        CHECK(rc == 0, "%s: exit %d: %s", modes[m], rc, out);
        char want[64];
        snprintf(want, sizeof want, "server 0 (%s): 80 pushes", modes[m]);
        CHECK(strstr(out, want) != NULL, "%s: %s", modes[m], out);
        CHECK(strstr(out, "[rank 1] test accuracy") != NULL, "worker 0 reports: %s", out);
        CHECK(strstr(out, "[rank 2] test accuracy") == NULL, "only worker 0 reports: %s", out);
    }
}

static void ssp_holds_back_fast_workers(void)
{
    int rc = run("mlp.cfg --data . --ps -n 3 --consistency ssp --staleness 1 --max-steps 20 --threads 1 "
                 "--debug-delay-rank 2 --debug-delay-ms 30");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    long waited = field("pulls (");
    long spread = field("largest clock spread ");
    CHECK(waited > 0, "no pull waited for the slow worker: %s", out);
    CHECK(spread >= 1 && spread <= 2, "clock spread %ld with staleness 1: %s", spread, out);
    rc = run("mlp.cfg --data . --ps -n 3 --consistency async --max-steps 20 --threads 1 "
             "--debug-delay-rank 2 --debug-delay-ms 30");
    CHECK(rc == 0 && field("pulls (") == 0, "async waited: %s", out);
}

/* Server 0's clock lines in out: how many, whether each named workers w0..w(n-1), the
 * largest and the smallest spread printed. */
static int clock_lines(int nworkers, int *all_named, long *max_spread, long *min_spread)
{
    int lines = 0;
    *all_named = 1;
    *max_spread = -1;
    *min_spread = 1L << 30;
    for (const char *p = out; (p = strstr(p, "ps server 0: clocks")); p++) {
        char line[1024];
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len >= sizeof line) len = sizeof line - 1;
        memcpy(line, p, len);
        line[len] = 0;
        lines++;
        for (int w = 0; w < nworkers; w++) {
            char name[32];
            snprintf(name, sizeof name, " w%d=", w);
            if (!strstr(line, name)) *all_named = 0;
        }
        const char *sp = strstr(line, ", spread ");
        long spread = sp ? strtol(sp + 9, NULL, 10) : 1L << 30; /* a line without one fails */
        if (spread > *max_spread) *max_spread = spread;
        if (spread < *min_spread) *min_spread = spread;
    }
    return lines;
}

/* The log shows every worker's clock and the spread while the job runs. In ssp mode a worker
 * at clock c (pushes taken) was served its pull for c - 1 only when every live worker had
 * pushed c - 1 - s, and the slowest live clock never goes down, so the spread a server
 * prints is at most s + 1 (here 2). With s = 4 the same straggler shows a spread past 2
 * (fast workers wait s + 1 ahead): the line measures what it claims. */
static void clock_line_shows_every_worker_and_bounded_spread(void)
{
    int rc = run_env("SHOAL_PS_LOG_MS=10", "mlp.cfg --data . --ps -n 3 --consistency ssp --staleness 1 "
                     "--max-steps 40 --threads 1 --debug-delay-rank 2 --debug-delay-ms 20");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    int named;
    long most, least;
    int lines = clock_lines(3, &named, &most, &least);
    CHECK(lines >= 3, "%d clock lines in a job of about a second, every 10 ms: %s", lines, out);
    CHECK(named, "a clock line leaves out a worker: %s", out);
    CHECK(most <= 2, "ssp with staleness 1 printed a clock spread of %ld: %s", most, out);
    CHECK(most >= 1, "the fast workers were never ahead of the slowed one: %s", out);
    CHECK(least == 0, "the last line (every worker at step 40) has a spread: %s", out);

    rc = run_env("SHOAL_PS_LOG_MS=20", "mlp.cfg --data . --ps -n 2 --consistency ssp --staleness 4 "
                 "--max-steps 16 --threads 1 --debug-delay-rank 1 --debug-delay-ms 40");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    lines = clock_lines(2, &named, &most, &least);
    CHECK(lines >= 3 && named, "%d clock lines: %s", lines, out);
    CHECK(most > 2 && most <= 5, "staleness 4 with a straggler: largest spread printed %ld: %s", most, out);

    /* the default period is seconds: a short job logs the final line alone; --quiet none */
    rc = run("mlp.cfg --data . --ps -n 2 --max-steps 10 --threads 1");
    CHECK(rc == 0 && clock_lines(2, &named, &most, &least) == 1 && named && most == 0, "%s", out);
    rc = run("mlp.cfg --data . --ps -n 2 --max-steps 10 --threads 1 --quiet");
    CHECK(rc == 0 && clock_lines(2, &named, &most, &least) == 0, "%s", out);
}

static void two_servers_split_the_weights(void)
{
    int rc = run("mlp.cfg --data . --ps --servers 2 -n 2 --max-steps 20 --threads 1");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "server 0 (sync)") && strstr(out, "server 1 (sync)"), "%s", out);
}

/* A server that dies stops the job naming it; its checkpoint of the last --save-every
 * resumes the job (servers from their shards, workers from worker 0's step). */
static void dead_server_stops_job_and_shards_resume(void)
{
    int rc = run("other.cfg --data . --ps -n 2 --max-steps 400 --threads 1 --save ps.ckpt --save-every 5 "
                 "--debug-die-rank 0 --debug-die-step 12");
    CHECK(rc != 0, "the job went on without its server: %s", out);
    CHECK(strstr(out, "rank 0 was killed by SIGKILL") != NULL, "%s", out);
    char path[512];
    snprintf(path, sizeof path, "%s/ps.ckpt.server0", dir);
    CHECK(access(path, R_OK) == 0, "no server checkpoint %s", path);
    rc = run("other.cfg --data . --ps -n 2 --max-steps 30 --threads 1 --resume ps.ckpt");
    CHECK(rc == 0, "resume: exit %d: %s", rc, out);
    CHECK(strstr(out, "steps 11..30") != NULL, "workers did not continue from step 10: %s", out);
    /* a shard of another model is refused with a clear line */
    rc = run("mlp.cfg --data . --ps -n 2 --max-steps 30 --threads 1 --resume ps.ckpt");
    CHECK(rc != 0, "a foreign checkpoint was accepted: %s", out);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The pid of the launcher's child that runs rank `rank` (its environment says SHOAL_RANK),
 * or -1. */
static pid_t rank_pid(pid_t launcher, int rank)
{
    DIR *d = opendir("/proc");
    pid_t found = -1;
    char want[32];
    int want_n = snprintf(want, sizeof want, "SHOAL_RANK=%d", rank) + 1; /* with its NUL */
    for (struct dirent *e; d && found < 0 && (e = readdir(d));) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0) continue;
        char path[64], buf[1 << 16];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        FILE *f = fopen(path, "r");
        int ppid = -1;
        if (f) {
            if (fscanf(f, "%*d (%*[^)]) %*c %d", &ppid) != 1) ppid = -1;
            fclose(f);
        }
        if (ppid != launcher) continue;
        snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
        int fd = open(path, O_RDONLY);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
        if (fd >= 0) close(fd);
        for (ssize_t i = 0; i + want_n <= n; i += (ssize_t)strlen(buf + i) + 1)
            if (!memcmp(buf + i, want, (size_t)want_n)) found = pid;
    }
    if (d) closedir(d);
    return found;
}

/* Run `shoal train ARGV...` with SHOAL_TIMEOUT=timeout_ms in dir, output into out; once
 * worker 0 (rank 1 with one server) prints its first line, send rank `target` signal sig
 * (SIGSTOP freezes it). Waits at most 60 s (then kills the job). Returns 1 when the job
 * ended by itself, with its wait status in *st and the seconds from the signal to its end
 * in *took_s. */
static int run_and_signal(const char *timeout_ms, int target, int sig, const char *const argv[], int *st,
                          double *took_s)
{
    const char *bin = sh_test_shoal_bin();
    char *args[64];
    int na = 0;
    args[na++] = (char *)bin;
    args[na++] = "train";
    for (int i = 0; argv[i] && na < 63; i++) args[na++] = (char *)argv[i];
    args[na] = NULL;
    int fds[2];
    if (pipe(fds) != 0) return 0;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        if (chdir(dir) != 0) _exit(126);
        setenv("SHOAL_TIMEOUT", timeout_ms, 1);
        execv(bin, args);
        _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    size_t len = 0;
    pid_t frozen = -1;
    int ended = 0;
    double t0 = now_s(), frozen_at = 0;
    out[0] = 0;
    while (!ended && now_s() - t0 < 60) { /* a hang is a failure, not a stall */
        struct pollfd pf = {fds[0], POLLIN, 0};
        poll(&pf, 1, 20);
        ssize_t n;
        while (len < sizeof out - 1 && (n = read(fds[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)n;
        out[len] = 0;
        if (frozen < 0 && strstr(out, "[rank 1] train ")) { /* worker 0 has begun */
            frozen = rank_pid(pid, target);
            if (frozen > 0) kill(frozen, sig);
            frozen_at = now_s();
        }
        ended = waitpid(pid, st, WNOHANG) == pid;
    }
    *took_s = now_s() - frozen_at;
    if (!ended) {
        kill(pid, SIGKILL);
        waitpid(pid, st, 0);
    }
    if (frozen > 0) kill(frozen, SIGKILL);
    ssize_t n;
    while (len < sizeof out - 1 && (n = read(fds[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)n;
    out[len] = 0;
    close(fds[0]);
    CHECK(frozen > 0, "never found rank %d to signal: %s", target, out);
    return ended;
}

static int run_and_freeze(const char *timeout_ms, int freeze, const char *const argv[], int *st, double *took_s)
{
    return run_and_signal(timeout_ms, freeze, SIGSTOP, argv, st, took_s);
}

/* A worker frozen with SIGSTOP once it trained (async, ssp): the server drops it, the next
 * worker takes over progress and the final report, and the launcher kills the frozen one
 * at once, naming it, instead of waiting for it. Worker 0 is
 * the slow one (10 ms a step), so it is frozen well before its 400 steps are done. */
static void frozen_worker_is_dropped_and_the_job_ends(void)
{
    const char *modes[] = {"async", "ssp"};
    for (int m = 0; m < 2; m++) {
        const char *argv[] = {"mlp.cfg", "--data", ".", "--ps", "-n", "2", "--consistency", modes[m],
                              "--max-steps", "400", "--threads", "1", "--debug-delay-rank", "0",
                              "--debug-delay-ms", "10", NULL};
        int st = -1;
        double took = 0;
        int ended = run_and_freeze("2000", 1, argv, &st, &took);
        CHECK(ended, "%s: the job still waits for the frozen rank after 60 s: %s", modes[m], out);
        CHECK(ended && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: exit status %d: %s", modes[m], st, out);
        CHECK(took < 30, "%s: the job ended %.1f s after the freeze (SHOAL_TIMEOUT 2 s)", modes[m], took);
        CHECK(strstr(out, "dropped worker rank 1") != NULL, "%s: %s", modes[m], out);
        CHECK(strstr(out, "rank 1 was dropped by the job (it stopped answering); killed it"),
              "%s: the launcher did not name the frozen rank: %s", modes[m], out);
        CHECK(strstr(out, "[rank 2] test accuracy") != NULL, "%s: the live worker did not report: %s", modes[m],
              out);
        CHECK(strstr(out, "[rank 1] test accuracy") == NULL, "%s: %s", modes[m], out);
        if (m == 1) /* ssp holds worker 1 until the drop, so it trains on, printing, after it */
            CHECK(strstr(out, "[rank 2] epoch") != NULL, "ssp: no progress from the live worker: %s", out);
    }
}

/* A server frozen once the workers train is noticed after one SHOAL_TIMEOUT (a server that
 * holds a pull says so every quarter timeout), and the launcher's SIGTERM reaches the
 * frozen rank (it is continued), so the job ends well before two timeouts. */
static void frozen_server_is_noticed_after_one_timeout(void)
{
    const char *argv[] = {"mlp.cfg", "--data", ".", "--ps", "-n", "2", "--consistency", "sync",
                          "--max-steps", "400", "--threads", "1", "--debug-delay-rank", "0",
                          "--debug-delay-ms", "10", NULL};
    int st = -1;
    double took = 0;
    int ended = run_and_freeze("3000", 0, argv, &st, &took);
    CHECK(ended && WIFEXITED(st) && WEXITSTATUS(st) == 1, "exit status %d: %s", st, out);
    CHECK(strstr(out, "no parameters from the servers within 3000 ms (a server is dead or frozen)"), "%s", out);
    CHECK(strstr(out, "shoal: rank 1: no parameters") || strstr(out, "shoal: rank 2: no parameters"),
          "the rank is not named once, first: %s", out);
    CHECK(!strstr(out, "worker rank 1: ") && !strstr(out, "worker rank 2: ") && !strstr(out, "[rank 1] shoal: rank 1") &&
              !strstr(out, "[rank 2] shoal: rank 2"), "a line names its rank twice: %s", out);
    CHECK(took < 5.0, "the job ended %.1f s after the server froze, SHOAL_TIMEOUT 3 s: %s", took, out);
}

/* 1 when dir holds name with exactly the bytes want. */
static int holds(const char *name, const char *want)
{
    char path[512], got[64] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f) fclose(f);
    got[n] = 0;
    return f && !strcmp(got, want);
}

/* Checkpoint files of mlp.cfg in dir (mlp*.ckpt*), their names into names. */
static int ckpt_files(char *names, size_t nbytes)
{
    DIR *d = opendir(dir);
    int n = 0;
    names[0] = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "mlp", 3) && strstr(e->d_name, ".ckpt")) {
            n++;
            strncat(names, e->d_name, nbytes - strlen(names) - 2);
            strncat(names, " ", nbytes - strlen(names) - 1);
        }
    if (d) closedir(d);
    return n;
}

/* SIGKILL of the server: the workers see it gone at once (not after SHOAL_TIMEOUT, nor at
 * the launcher's grace SIGKILL) and, although the launcher's SIGTERM asks them to stop,
 * write no checkpoint: it would lack the server's shard. */
static void killed_server_ends_workers_without_a_checkpoint(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/mlp.ckpt", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("old", f);
        fclose(f);
    }
    const char *argv[] = {"mlp.cfg", "--data", ".", "--ps", "-n", "2", "--max-steps", "400", "--threads", "1",
                          "--debug-delay-rank", "0", "--debug-delay-ms", "10", NULL};
    int st = -1;
    double took = 0;
    int ended = run_and_signal("60000", 0, SIGKILL, argv, &st, &took);
    CHECK(ended && WIFEXITED(st) && WEXITSTATUS(st) == 137, "exit status %d: %s", st, out);
    CHECK(strstr(out, "rank 0 was killed by SIGKILL") && strstr(out, "parameter server 0 (rank 0) is gone"), "%s", out);
    CHECK(took < 3.0, "the workers ended %.1f s after their server was killed: %s", took, out);
    char names[512];
    int n = ckpt_files(names, sizeof names);
    CHECK(holds("mlp.ckpt", "old") && n == 1 && !strstr(out, "saved "), "checkpoints written (%s): %s", names, out);
    unlink(path);
}

/* SIGKILL of a worker in sync mode: the server fails the round at once and tells every
 * worker, naming the lost one; none writes a checkpoint. */
static void killed_sync_worker_stops_the_job_at_once(void)
{
    const char *argv[] = {"mlp.cfg", "--data", ".", "--ps", "-n", "3", "--max-steps", "400", "--threads", "1",
                          "--debug-delay-rank", "0", "--debug-delay-ms", "10", NULL};
    int st = -1;
    double took = 0;
    int ended = run_and_signal("60000", 3, SIGKILL, argv, &st, &took);
    CHECK(ended && WIFEXITED(st) && WEXITSTATUS(st) == 137, "exit status %d: %s", st, out);
    CHECK(strstr(out, "worker rank 3 (") && strstr(out, "is gone") && strstr(out, "sync mode cannot go on"), "%s",
          out);
    CHECK(took < 3.0, "the job ended %.1f s after a worker was killed: %s", took, out);
    char names[512];
    CHECK(ckpt_files(names, sizeof names) == 0 && !strstr(out, "saved "), "checkpoints written (%s): %s", names, out);
}

/* A worker frozen early (ssp: the fast worker, its pull held) with a large reply on its way:
 * the job ends one SHOAL_TIMEOUT after the freeze, not two or three (the dropped rank is
 * killed at once, so the server's last send to it fails instead of timing out). */
static void early_frozen_worker_holds_the_job_one_timeout(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/wide.cfg", dir);
    FILE *f = fopen(path, "w");
    if (f) { /* 1 MB of parameters: a pull's answer outgrows every buffer on its way */
        fputs("[net]\nbatch=16\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\nmomentum=0.9\n"
              "\n[connected]\noutput=4096\nactivation=relu\n\n[connected]\noutput=4\nactivation=linear\n"
              "\n[softmax]\n\n[cost]\n", f);
        fclose(f);
    }
    const char *argv[] = {"wide.cfg", "--data", ".", "--ps", "-n", "2", "--consistency", "ssp", "--staleness", "1",
                          "--max-steps", "60", "--threads", "1", "--debug-delay-rank", "0", "--debug-delay-ms", "30",
                          NULL};
    int st = -1;
    double took = 0;
    int ended = run_and_freeze("6000", 2, argv, &st, &took);
    CHECK(ended && WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d: %s", st, out);
    CHECK(strstr(out, "dropped worker rank 2") != NULL, "%s", out);
    /* two timeouts end it no sooner than 12 s; the rest of the run may take seconds under load */
    CHECK(took < 11.9, "the job ended %.1f s after the freeze (SHOAL_TIMEOUT 6 s): %s", took, out);
    unlink(path);
}

static void usage_errors(void)
{
    CHECK(run("mlp.cfg --data . --ps") == 2 && strstr(out, "--ps needs ranks"), "%s", out);
    CHECK(run("mlp.cfg --data . --ps -n 2 --consistency eventual") == 2 && strstr(out, "sync, async or ssp"), "%s", out);
    CHECK(run("mlp.cfg --data . --ps -n 0") == 2, "%s", out);
}

int main(void)
{
    check_begin("test_train_ps", 300);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(each_mode_trains);
    RUN(ssp_holds_back_fast_workers);
    RUN(clock_line_shows_every_worker_and_bounded_spread);
    RUN(two_servers_split_the_weights);
    RUN(dead_server_stops_job_and_shards_resume);
    RUN(frozen_worker_is_dropped_and_the_job_ends);
    RUN(frozen_server_is_noticed_after_one_timeout);
    RUN(killed_server_ends_workers_without_a_checkpoint);
    RUN(killed_sync_worker_stops_the_job_at_once);
    RUN(early_frozen_worker_holds_the_job_one_timeout);
    RUN(usage_errors);
    tiny_remove_dir(dir);
    return check_end();
}
