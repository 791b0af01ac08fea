/* test_log.c — proves src/base/log.c: SHOAL_LOG's level and subsystem filtering, the line
 * prefix ("[rank R host] subsys: level: text", "shoal: subsys: level: text" before the rank
 * is known), one whole line per call even when long or from many threads.
 * SHOAL_LOG is read once per process, so each case runs in a forked child whose stderr is a
 * pipe the parent reads back.
 * Not here: what each subsystem logs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "check.h"

enum { OUT_CAP = 1 << 20 };
static char out[OUT_CAP];

/* Run fn in a child with SHOAL_LOG set to spec (NULL: unset) and stderr on a pipe; the
 * child's stderr lands in out. Returns 1 when the child exited 0. */
static int run_logged(const char *spec, void (*fn)(void))
{
    int fd[2];
    out[0] = 0;
    if (pipe(fd) != 0) return 0;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (spec) setenv("SHOAL_LOG", spec, 1);
        else unsetenv("SHOAL_LOG");
        dup2(fd[1], 2);
        close(fd[1]);
        alarm(20);
        fn();
        fflush(stderr);
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < OUT_CAP && (r = read(fd[0], out + n, OUT_CAP - 1 - n)) > 0) n += (size_t)r;
    out[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static int has_line(const char *line)
{
    size_t n = strlen(line);
    for (const char *p = out; (p = strstr(p, line)); p++)
        if ((p == out || p[-1] == '\n') && p[n] == '\n') return 1;
    return 0;
}

static int count_lines(void)
{
    int n = 0;
    for (const char *p = out; *p; p++) n += *p == '\n';
    return n;
}

/* One line at every level for comm, train and no subsystem, plus what sh_log_enabled says
 * (printed on its own line so the parent sees it). */
static void emit_all(void)
{
    const char *subs[] = {"comm", "train", NULL};
    for (int s = 0; s < 3; s++) {
        const char *sub = subs[s] ? subs[s] : "none";
        SH_LOG_E(subs[s], "e-%s", sub);
        SH_LOG_W(subs[s], "w-%s", sub);
        SH_LOG_I(subs[s], "i-%s", sub);
        SH_LOG_D(subs[s], "d-%s %d", sub, 42);
        fprintf(stderr, "enabled %s %d%d%d%d\n", sub, sh_log_enabled(SH_LOG_ERROR, subs[s]),
                sh_log_enabled(SH_LOG_WARN, subs[s]), sh_log_enabled(SH_LOG_INFO, subs[s]),
                sh_log_enabled(SH_LOG_DEBUG, subs[s]));
    }
}

/* Which of the 12 lines of emit_all appeared, as "EWID" per subsystem with '-' for a missing
 * one; and whether sh_log_enabled agreed with what was printed. */
static void shown(char got[3][5], int *agrees)
{
    const char *subs[] = {"comm", "train", "none"};
    const char *names[] = {"error", "warn", "info", "debug"};
    const char *letters = "EWID";
    *agrees = 1;
    for (int s = 0; s < 3; s++) {
        for (int l = 0; l < 4; l++) {
            char line[128];
            snprintf(line, sizeof line, "shoal: %s: %s: %c-%s%s", s == 2 ? "shoal" : subs[s],
                     names[l], "ewid"[l], subs[s], l == 3 ? " 42" : "");
            got[s][l] = has_line(line) ? letters[l] : '-';
        }
        got[s][4] = 0;
        char en[32];
        snprintf(en, sizeof en, "enabled %s %d%d%d%d", subs[s], got[s][0] != '-', got[s][1] != '-',
                 got[s][2] != '-', got[s][3] != '-');
        if (!has_line(en)) *agrees = 0;
    }
}

static void check_filter(const char *spec, const char *comm, const char *train, const char *none)
{
    CHECK(run_logged(spec, emit_all), "SHOAL_LOG=%s: child failed: %s", spec ? spec : "(unset)", out);
    char got[3][5];
    int agrees;
    shown(got, &agrees);
    CHECK(!strcmp(got[0], comm) && !strcmp(got[1], train) && !strcmp(got[2], none),
          "SHOAL_LOG=%s: comm %s train %s none %s, want %s %s %s; output:\n%s",
          spec ? spec : "(unset)", got[0], got[1], got[2], comm, train, none, out);
    CHECK(agrees, "SHOAL_LOG=%s: sh_log_enabled disagrees with the lines printed:\n%s",
          spec ? spec : "(unset)", out);
    int want_lines = 3; /* the "enabled" lines */
    for (int k = 0; k < 4; k++) want_lines += (comm[k] != '-') + (train[k] != '-') + (none[k] != '-');
    CHECK(count_lines() == want_lines, "SHOAL_LOG=%s: %d lines, want %d:\n%s", spec ? spec : "(unset)",
          count_lines(), want_lines, out);
}

static void default_level_is_warn(void)
{
    check_filter(NULL, "EW--", "EW--", "EW--");
    check_filter("", "EW--", "EW--", "EW--");
    check_filter("warn", "EW--", "EW--", "EW--");
}

static void each_level_shows_itself_and_above(void)
{
    check_filter("error", "E---", "E---", "E---");
    check_filter("info", "EWI-", "EWI-", "EWI-");
    check_filter("debug", "EWID", "EWID", "EWID");
}

/* The subsystem list narrows info and debug; errors and warnings always show; a line with no
 * subsystem is never filtered out by the list. */
static void subsystems_narrow_info_and_debug(void)
{
    check_filter("info,comm", "EWI-", "EW--", "EWI-");
    check_filter("comm,debug", "EWID", "EW--", "EWID");
    check_filter("debug,train,comm", "EWID", "EWID", "EWID");
    check_filter("error,train", "E---", "E---", "E---");
    /* a list without a level keeps the default warn */
    check_filter("comm", "EW--", "EW--", "EW--");
    /* the last level named wins */
    check_filter("debug,error", "E---", "E---", "E---");
}

/* Subsystems match whole names: "com", "xcomm" and "commx" are not "comm". */
static void subsystems_match_whole_names(void)
{
    check_filter("debug,com", "EW--", "EW--", "EWID");
    check_filter("debug,xcomm", "EW--", "EW--", "EWID");
    check_filter("debug,commx", "EW--", "EW--", "EWID");
    check_filter("debug,commtrain", "EW--", "EW--", "EWID");
    check_filter("debug,xcomm,train", "EW--", "EWID", "EWID");
}

static void emit_with_rank(void)
{
    SH_LOG_W("comm", "peer %d is slow", 2);
    sh_log_set_rank(3, "node-a");
    SH_LOG_W("comm", "peer %d is slow", 2);
    SH_LOG_E(NULL, "plain");
    sh_log_set_rank(0, NULL);
    SH_LOG_I("train", "epoch %d", 1);
    sh_log_set_rank(-1, "node-a");
    SH_LOG_W("io", "back to no rank");
}

static void prefix_names_rank_host_subsystem_and_level(void)
{
    CHECK(run_logged("info", emit_with_rank), "child failed: %s", out);
    const char *want =
        "shoal: comm: warn: peer 2 is slow\n"
        "[rank 3 node-a] comm: warn: peer 2 is slow\n"
        "[rank 3 node-a] shoal: error: plain\n"
        "[rank 0] train: info: epoch 1\n"
        "shoal: io: warn: back to no rank\n";
    CHECK(!strcmp(out, want), "got:\n%s\nwant:\n%s", out, want);
}

static void emit_long(void)
{
    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    sh_log_set_rank(1, "h");
    SH_LOG_W("comm", "%s", big);
    SH_LOG_W("comm", "after");
}

/* A line longer than the buffer is cut, but still ends with its newline. */
static void long_line_is_cut_but_stays_one_line(void)
{
    CHECK(run_logged(NULL, emit_long), "child failed");
    CHECK(count_lines() == 2, "%d lines", count_lines());
    const char *nl = strchr(out, '\n');
    size_t first = nl ? (size_t)(nl - out) : strlen(out);
    CHECK(first >= 1000 && first < 2048, "first line %zu bytes", first);
    CHECK(!strncmp(out, "[rank 1 h] comm: warn: xxxx", 27), "prefix kept: %.40s", out);
    CHECK(nl && !strcmp(nl + 1, "[rank 1 h] comm: warn: after\n"), "second line: %s",
          nl ? nl + 1 : "(none)");
}

enum { THREADS = 8, PER_THREAD = 300 };

static void *log_thread(void *arg)
{
    int t = (int)(long)arg;
    for (int i = 0; i < PER_THREAD; i++)
        SH_LOG_I("comm", "thread %d line %d %s", t, i, "................................................");
    return NULL;
}

static void emit_threads(void)
{
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, log_thread, (void *)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
}

/* Lines of concurrent threads never interleave: every line read back is one whole line, and
 * every thread's lines arrive in its order. */
static void concurrent_lines_stay_whole(void)
{
    CHECK(run_logged("info,comm", emit_threads), "child failed");
    int next[THREADS] = {0}, bad = 0, lines = 0;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        int t = -1, i = -1, end = 0;
        lines++;
        if (sscanf(l, "shoal: comm: info: thread %d line %d %*[.]%n", &t, &i, &end) != 2 ||
            l[end] != 0 || strlen(l) != (size_t)end || t < 0 || t >= THREADS || i != next[t]) {
            if (!bad++) fprintf(stderr, "first bad line: %s\n", l);
            continue;
        }
        next[t]++;
    }
    CHECK(lines == THREADS * PER_THREAD, "%d lines, want %d", lines, THREADS * PER_THREAD);
    CHECK(bad == 0, "%d torn or out-of-order lines", bad);
}

int main(void)
{
    check_begin("test_log", 60);
    RUN(default_level_is_warn);
    RUN(each_level_shows_itself_and_above);
    RUN(subsystems_narrow_info_and_debug);
    RUN(subsystems_match_whole_names);
    RUN(prefix_names_rank_host_subsystem_and_level);
    RUN(long_line_is_cut_but_stays_one_line);
    RUN(concurrent_lines_stay_whole);
    return check_end();
}
