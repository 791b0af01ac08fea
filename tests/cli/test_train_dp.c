/* test_train_dp.c — proves data-parallel `shoal train -n N` end to end (cmd_train.c's
 * relaunch, src/train/job.c): a killed rank stops the job within the deadline with a
 * message naming it, the last checkpoint is intact and the job resumes from it on another
 * number of ranks; SIGINT stops every rank at one step and rank 0 saves, SIGHUP saves and
 * the job goes on; only rank 0 prints; bad scaling options are clear usage errors; ranks
 * started with different SHOAL_DP_* settings stop at start-up, naming the variable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cpus.h"
#include "base/util.h"
#include "check.h"
#include "train/tiny_data.h"
#include "lib/run.h"

static char dir[256], out[1 << 20];

static int run(const char *env, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s %s train %s 2>&1", dir, env, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static void trains_and_only_rank0_prints(void)
{
    int rc = run("", "other.cfg --data . -n 3 --max-steps 30 --threads 1 --scaling strong --batch 48 --profile");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "[rank 0] test accuracy") != NULL, "%s", out);
    CHECK(!strstr(out, "[rank 1] test accuracy") && !strstr(out, "[rank 2] test accuracy"), "%s", out);
    CHECK(strstr(out, "waiting for allreduce") != NULL, "--profile line missing: %s", out);
}

static void killed_rank_stops_all_and_checkpoint_resumes(void)
{
    uint64_t t0 = sh_now_ns();
    int rc = run("SHOAL_TIMEOUT=3000", "other.cfg --data . -n 3 --max-steps 400 --threads 1 --save ck.ckpt "
                 "--save-every 5 --debug-die-rank 2 --debug-die-step 12");
    double s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc != 0, "the job went on without rank 2: %s", out);
    CHECK(strstr(out, "rank 2 was killed by SIGKILL") != NULL, "launcher does not name the lost rank: %s", out);
    CHECK(strstr(out, "rank 2") && (strstr(out, "[rank 0]") || strstr(out, "[rank 1]")), "%s", out);
    /* each survivor's error line names its rank once: no "rank 1: rank 1:", and no launcher
     * tag in front of a line that starts by naming it */
    CHECK(strstr(out, "shoal: rank 0: ") || strstr(out, "shoal: rank 1: "), "no survivor's error: %s", out);
    for (int r = 0; r < 2; r++) {
        char twice[3][96];
        snprintf(twice[0], sizeof twice[0], "rank %d: rank %d", r, r);
        snprintf(twice[1], sizeof twice[1], "[rank %d] shoal: rank %d", r, r);
        snprintf(twice[2], sizeof twice[2], "rank %d: communicator is broken: rank %d", r, r);
        for (int i = 0; i < 3; i++) CHECK(!strstr(out, twice[i]), "\"%s\" in: %s", twice[i], out);
    }
    CHECK(s < 30, "stopping took %.1f s", s);
    /* the checkpoint of step 10 (global batch 3 x 16) resumes on 2 ranks with the same global batch */
    rc = run("", "other.cfg --data . -n 2 --max-steps 20 --threads 1 --resume ck.ckpt --scaling strong --batch 48");
    CHECK(rc == 0, "resume exit %d: %s", rc, out);
    CHECK(strstr(out, "steps 11..20") != NULL, "did not continue from step 10: %s", out);
}

/* Ctrl-C on the launcher reaches every rank; they agree on the step, rank 0 saves, all exit
 * 0, and the checkpoint resumes. */
static void sigint_stops_every_rank_at_one_step(void)
{
    char log[512], ck[512];
    snprintf(log, sizeof log, "%s/int.log", dir);
    snprintf(ck, sizeof ck, "%s/int.ckpt", dir);
    pid_t p = fork();
    if (p == 0) {
        if (chdir(dir) != 0 || !freopen(log, "w", stdout) || dup2(1, 2) < 0) _exit(126);
        execl(sh_test_shoal_bin(), "shoal", "train", "other.cfg", "--data", ".", "-n", "2", "--threads", "1",
              "--max-steps", "100000000", "--save", "int.ckpt", "--quiet", (char *)NULL);
        _exit(127);
    }
    usleep(1500000); /* training is under way */
    kill(p, SIGINT);
    int st = 0;
    waitpid(p, &st, 0);
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    if (f) fclose(f);
    out[n] = 0;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status %d: %s", st, out);
    CHECK(strstr(out, "[rank 0] stopped by SIGINT; saved") != NULL, "%s", out);
    CHECK(access(ck, R_OK) == 0, "no checkpoint %s", ck);
    int rc = run("", "other.cfg --data . -n 2 --threads 1 --resume int.ckpt --max-steps 2000 --quiet");
    CHECK(rc == 0, "resume after SIGINT: exit %d: %s", rc, out);
}

/* SIGHUP on the launcher: rank 0 saves at a step all ranks agreed on and the job goes on;
 * a later SIGINT stops it at a later step. */
static void sighup_saves_and_goes_on(void)
{
    char log[512], ck[512];
    snprintf(log, sizeof log, "%s/hup.log", dir);
    snprintf(ck, sizeof ck, "%s/hup.ckpt", dir);
    pid_t p = fork();
    if (p == 0) {
        if (chdir(dir) != 0 || !freopen(log, "w", stdout) || dup2(1, 2) < 0) _exit(126);
        execl(sh_test_shoal_bin(), "shoal", "train", "other.cfg", "--data", ".", "-n", "2", "--threads", "1",
              "--max-steps", "100000000", "--save", "hup.ckpt", (char *)NULL);
        _exit(127);
    }
    usleep(1200000); /* training is under way */
    kill(p, SIGHUP);
    int saved = 0;
    for (int i = 0; i < 100 && !saved; i++) { /* up to 10 s for the save */
        usleep(100000);
        saved = access(ck, R_OK) == 0;
    }
    CHECK(saved, "no checkpoint %s after SIGHUP", ck);
    usleep(300000);
    CHECK(waitpid(p, NULL, WNOHANG) == 0, "the job ended after SIGHUP");
    kill(p, SIGINT);
    int st = 0;
    waitpid(p, &st, 0);
    /* the progress lines of ~100000 tiny steps run to megabytes: keep the lines that count */
    FILE *f = fopen(log, "r");
    char line[1024];
    size_t n = 0;
    out[0] = 0;
    while (f && fgets(line, sizeof line, f))
        if ((strstr(line, "saved") || strstr(line, "stopped") || strstr(line, "rror")) &&
            n + strlen(line) < sizeof out) {
            memcpy(out + n, line, strlen(line) + 1);
            n += strlen(line);
        }
    if (f) fclose(f);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status %d: %s", st, out);
    const char *h = strstr(out, "[rank 0] saved hup.ckpt at step "), *e = strstr(out, "(stop requested)");
    long hup_step = h ? atol(h + strlen("[rank 0] saved hup.ckpt at step ")) : -1, stop_step = -1;
    if (e) {
        const char *q = e;
        while (q > out && q[-1] != 'p') q--; /* back to "at step N " */
        stop_step = atol(q + 1);
    }
    CHECK(h && strstr(h, "(SIGHUP)"), "no SIGHUP save line from rank 0: %s", out);
    CHECK(!strstr(out, "[rank 1] saved"), "rank 1 saved too: %s", out);
    CHECK(hup_step > 0 && stop_step > hup_step, "SIGHUP save at step %ld, stop at %ld: %s", hup_step, stop_step, out);
}

static void usage_errors(void)
{
    CHECK(run("", "other.cfg --data . -n 2 --scaling medium") == 2 && strstr(out, "strong or weak"), "%s", out);
    CHECK(run("", "other.cfg --data . -n 2 --bucket-mb 0") == 2, "%s", out);
    CHECK(run("", "other.cfg --data . -n 2 --scaling strong --lr-scaling linear") == 2 && strstr(out, "weak scaling"),
          "%s", out);
    int rc = run("", "other.cfg --data . -n 3 --scaling strong --batch 16 --max-steps 2");
    CHECK(rc != 0 && strstr(out, "divisible"), "exit %d: %s", rc, out);
}

/* Rank 1 started with another SHOAL_DP_GRAD_ROWS, then with one that is not a number: every
 * rank stops at start-up (well inside SHOAL_TIMEOUT), naming the variable and both values. */
static void different_settings_stop_at_start_up(void)
{
    const char *vals[2] = {"16", "lots"};
    const char *want[2] = {"rank 1 was started with SHOAL_DP_GRAD_ROWS=16 but rank 0 with 32; start every rank with "
                           "the same settings",
                           "SHOAL_DP_GRAD_ROWS=\"lots\" is not an integer"};
    for (int i = 0; i < 2; i++) {
        char args[1024];
        snprintf(args, sizeof args,
                 "-n 2 -- sh -c '[ \"$SHOAL_RANK\" = 1 ] && export SHOAL_DP_GRAD_ROWS=%s; exec %s train other.cfg "
                 "--data . --max-steps 2 --threads 1'", vals[i], sh_test_shoal_bin());
        uint64_t t0 = sh_now_ns();
        int rc = sh_test_shoal_in(dir, "SHOAL_TIMEOUT=20000", "launch", args, out, sizeof out);
        double s = (double)(sh_now_ns() - t0) / 1e9;
        CHECK(rc != 0 && strstr(out, want[i]), "value %s: exit %d: %s", vals[i], rc, out);
        CHECK(i == 0 || (strstr(out, "rank 0: rank 1 was started") && strstr(out, "SHOAL_DP_GRAD_ROWS=an invalid value")),
              "rank 0 does not name rank 1's invalid setting: %s", out);
        CHECK(s < 15, "value %s: stopping took %.1f s", vals[i], s);
    }
}

/* A /dev/shm with room for the links but not for the shared copy of the weights on huge
 * pages (8 MB, in a mount namespace of the job's own): the copy goes on 4 KiB pages and the
 * job trains with it, saying nothing (src/comm/transport/window.c; where not even that
 * fits, each rank keeps its own copy). Skipped where mount namespaces are not allowed
 * (not root). */
static void small_dev_shm_still_shares_the_weights(void)
{
    if (system("unshare -m true >/dev/null 2>&1") != 0) {
        printf("test_train_dp: skipped small /dev/shm: unshare -m is not allowed here\n");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && unshare -m sh -c 'mount -t tmpfs -o size=8m tmpfs /dev/shm && exec %s train other.cfg "
             "--data . -n 2 --max-steps 20 --threads 1' 2>&1", dir, sh_test_shoal_bin());
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    int st = p ? pclose(p) : -1;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d: %s", st, out);
    CHECK(!strstr(out, "each rank keeps its own copy of the weights") && !strstr(out, "SIGBUS"),
          "the weights were not shared in 8 MB: %s", out);
    CHECK(strstr(out, "[rank 0] test accuracy") != NULL, "%s", out);
}

/* The "threads" field of the JSON line in out, or -1. */
static int json_threads(void)
{
    const char *p = strstr(out, "\"threads\":");
    return p ? atoi(p + strlen("\"threads\":")) : -1;
}

static int count_of(const char *needle)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* Without --threads a rank gets the CPUs it may use shared by the ranks on its host: under
 * shoal launch's binding each rank is pinned to its share (online / ranks), without
 * binding the CPUs are divided; at least 1 either way. Every rank says so at info level,
 * and the JSON report carries rank 0's count. */
static void ranks_without_threads_share_the_cpus(void)
{
    int online = sh_cpus_online(), avail = sh_cpus_available();
    int pinned = online / 2 > 0 ? online / 2 : 1, shared = avail / 2 > 0 ? avail / 2 : 1;
    char want[64];
    int rc = run("env -u SHOAL_THREADS SHOAL_LOG=info", "other.cfg --data . -n 2 --max-steps 3 --json");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(json_threads() == pinned, "bound ranks: threads %d, want %d of %d CPUs: %s", json_threads(), pinned,
          online, out);
    snprintf(want, sizeof want, "train: info: %d kernel thread", pinned);
    CHECK(count_of(want) == 2, "both ranks should log \"%s\": %s", want, out);
    rc = run("env -u SHOAL_THREADS SHOAL_LOG=info SHOAL_BIND=none", "other.cfg --data . -n 2 --max-steps 3 --json");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(json_threads() == shared, "unbound ranks: threads %d, want %d of %d CPUs: %s", json_threads(), shared,
          avail, out);
    CHECK(strstr(out, "shared by the ranks on this host") != NULL, "%s", out);
    rc = run("env -u SHOAL_THREADS", "other.cfg --data . --max-steps 3 --json");
    CHECK(rc == 0 && json_threads() == avail, "one process: threads %d, want %d: %s", json_threads(), avail, out);
    rc = run("SHOAL_THREADS=3", "other.cfg --data . -n 2 --max-steps 3 --json");
    CHECK(rc == 0 && json_threads() == 3, "SHOAL_THREADS=3: threads %d: %s", json_threads(), out);
    rc = run("SHOAL_THREADS=3", "other.cfg --data . -n 2 --max-steps 3 --threads 2 --json");
    CHECK(rc == 0 && json_threads() == 2, "--threads 2 wins: threads %d: %s", json_threads(), out);
}

int main(void)
{
    check_begin("test_train_dp", 300);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(trains_and_only_rank0_prints);
    RUN(ranks_without_threads_share_the_cpus);
    RUN(killed_rank_stops_all_and_checkpoint_resumes);
    RUN(sigint_stops_every_rank_at_one_step);
    RUN(sighup_saves_and_goes_on);
    RUN(usage_errors);
    RUN(different_settings_stop_at_start_up);
    RUN(small_dev_shm_still_shares_the_weights);
    tiny_remove_dir(dir);
    return check_end();
}
