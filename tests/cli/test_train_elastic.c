/* test_train_elastic.c — `shoal train -n N --elastic MIN[:MAX]` end to end (src/train/
 * elastic.c over src/comm/boot/elastic.c, the launcher's side in src/cli/launch.c): a rank
 * killed at a chosen step leaves and the job finishes on the others, with one line naming
 * it and the step, counted in --json and TensorBoard, losing at most the step in flight;
 * so when the rank lost is rank 0 (its store with it); a frozen rank is left after the
 * timeout; a rank started later with the job's variables joins; below MIN every rank stops
 * naming who is gone; strong scaling's batch must split for every world MIN..MAX; without
 * --elastic a lost rank still stops the job.
 * Not here: the regroup on its own (tests/comm/test_elastic.c), the random drill and the
 * accuracy comparison (bench/faults/elastic.sh). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/run.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

static int run(const char *env, const char *args)
{
    return sh_test_shoal_in(dir, env, "train", args, out, sizeof out);
}

/* The job's report: the one line that is a JSON object (the launcher passes it untagged). */
static const char *report_in(const char *text)
{
    if (!strncmp(text, "{\"", 2)) return text;
    const char *p = strstr(text, "\n{\"");
    return p ? p + 1 : NULL;
}

static double seconds_since(uint64_t t0) { return (double)(sh_now_ns() - t0) * 1e-9; }

/* 3 ranks, rank `victim` killed before step 12 (steps 0..11 done): the job ends on 2. */
static void killed_rank(int victim)
{
    char args[512];
    snprintf(args, sizeof args, "mlp.cfg --data . -n 3 --elastic 2 --max-steps 40 --threads 1 --json "
             "--debug-die-rank %d --debug-die-step 12", victim);
    uint64_t t0 = sh_now_ns();
    int rc = run("SHOAL_TIMEOUT=20000", args);
    double s = seconds_since(t0);
    CHECK(rc == 0, "victim %d: exit %d: %s", victim, rc, out);
    char want[160];
    snprintf(want, sizeof want, "rank %d was killed by SIGKILL", victim);
    CHECK(strstr(out, want) && strstr(out, "(an elastic job: the other ranks were not stopped)"),
          "the launcher does not say it: %s", out);
    snprintf(want, sizeof want, "] elastic: rank %d left after step 12; training goes on with 2 ranks (paused ", victim);
    CHECK(sh_test_count(out, want) == 1, "one line naming the rank and the step: %s", out);
    /* the new rank 0 reports (the old rank 1 when rank 0 was lost), one document */
    const char *json = report_in(out);
    CHECK(json != NULL && !report_in(json + 1), "not one report: %s", out);
    if (!json) return;
    CHECK(sh_test_json_number(json, "steps") == 40, "steps: %s", json);
    CHECK(sh_test_json_number(json, "changes") == 1 && sh_test_json_number(json, "ranks_left") == 1 &&
          sh_test_json_number(json, "ranks_joined") == 0 && sh_test_json_number(json, "world") == 2,
          "the counts: %s", json);
    CHECK(sh_test_json_number(json, "step") == 12 && sh_test_json_number(json, "steps_redone") <= 1,
          "at most the step in flight lost: %s", json);
    CHECK(sh_test_json_number(json, "accuracy") > 0.5, "it still learns: %s", json);
    /* a kill is seen at once: no timeout in the pause */
    CHECK(sh_test_json_number(json, "pause_s") < 5 && s < 60, "pause %.2f s, job %.1f s: %s",
          sh_test_json_number(json, "pause_s"), s, json);
}

static void a_killed_rank_leaves_and_the_job_finishes_on_two(void) { killed_rank(2); }

static void the_job_goes_on_when_rank_0_and_its_store_are_lost(void) { killed_rank(0); }

/* A frozen rank answers nothing: it is left out once SHOAL_TIMEOUT passes, and the launcher
 * ends it once the job drops it. The change is in TensorBoard too. */
static void a_frozen_rank_is_left_after_the_timeout(void)
{
    uint64_t t0 = sh_now_ns();
    int rc = run("SHOAL_TIMEOUT=2000", "mlp.cfg --data . -n 3 --elastic 2 --max-steps 30 --threads 1 --json "
                 "--logdir tb --debug-freeze-rank 1 --debug-freeze-step 8");
    double s = seconds_since(t0);
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "] elastic: rank 1 left after step 8; training goes on with 2 ranks") != NULL, "%s", out);
    CHECK(strstr(out, "rank 1 was dropped by the job (it stopped answering); killed it"),
          "the launcher did not end the frozen rank: %s", out);
    const char *json = report_in(out);
    double pause = json ? sh_test_json_number(json, "pause_s") : -1;
    /* SHOAL_TIMEOUT + 2 s, with room for a loaded machine */
    CHECK(pause >= 1.5 && pause < 6, "pause %.2f s (timeout 2 s): %s", pause, out);
    CHECK(s < 60, "the job took %.1f s", s);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cat %s/tb/*/events.out.tfevents.* 2>/dev/null | grep -c elastic/changes", dir);
    char got[64];
    CHECK(sh_test_run(cmd, got, sizeof got) == 0 && atoi(got) >= 1, "no elastic/changes in TensorBoard: %s", got);
}

/* Below MIN: every rank stops, naming who is gone and the minimum; the job fails. */
static void below_min_every_rank_stops_naming_who_is_gone(void)
{
    int rc = run("SHOAL_TIMEOUT=20000", "mlp.cfg --data . -n 3 --elastic 3 --max-steps 40 --threads 1 "
                 "--debug-die-rank 2 --debug-die-step 12");
    CHECK(rc != 0, "the job went on below its minimum: %s", out);
    CHECK(strstr(out, "--elastic: after step 12: job rank 2 on ") && strstr(out, "(gone) left; 2 ranks remain, fewer "
          "than the job's minimum of 3: stopping"), "the reason: %s", out);
    CHECK(strstr(out, "shoal: rank 0: ") && strstr(out, "shoal: rank 1: "), "both survivors say it: %s", out);
}

/* Under --scaling strong every world the job may have, MIN..MAX, must split the global batch:
 * said at start-up, not at the change that would need it. */
static void strong_scaling_needs_a_batch_every_world_splits(void)
{
    int rc = run("", "mlp.cfg --data . -n 2 --elastic 2:3 --scaling strong --batch 40 --max-steps 5 --threads 1");
    CHECK(rc != 0 && strstr(out, "--elastic 2:3 with --scaling strong: the global batch 40 does not split into 3 equal "
                            "shares"), "exit %d: %s", rc, out);
    rc = run("", "mlp.cfg --data . -n 2 --elastic 2:3 --scaling strong --batch 48 --max-steps 5 --threads 1");
    CHECK(rc == 0, "48 splits into 2 and 3: exit %d: %s", rc, out);
}

/* Without --elastic nothing changed: the launcher stops every rank, naming the lost one. */
static void without_elastic_a_lost_rank_stops_the_job(void)
{
    int rc = run("SHOAL_TIMEOUT=20000", "mlp.cfg --data . -n 3 --max-steps 40 --threads 1 --debug-die-rank 2 "
                 "--debug-die-step 12");
    CHECK(rc != 0, "the job went on: %s", out);
    CHECK(strstr(out, "rank 2 was killed by SIGKILL") && strstr(out, "stopped the other ranks") &&
          !strstr(out, "elastic"), "%s", out);
}

/* A job of 3 started by hand (SHOAL_* variables) loses rank 2; a process started later as
 * rank 2 of the same job joins at a step's end and the job ends on 3 again. */
static void a_rank_started_later_joins(void)
{
    int port = sh_test_free_ports(1);
    char env[256], cmd[2048], log[600];
    snprintf(env, sizeof env, "SHOAL_JOB_KEY=elastic-test-key SHOAL_MASTER_PORT=%d SHOAL_TIMEOUT=20000", port);
    snprintf(log, sizeof log, "%s/join-launch.log", dir);
    const char *args = "mlp.cfg --data . --elastic 2:3 --max-steps 1000000000 --time-limit 10 --threads 1 --json --quiet";
    snprintf(cmd, sizeof cmd, "cd %s && %s %s launch -n 3 -- %s train %s --debug-die-rank 2 --debug-die-step 12 "
             "> %s 2>&1", dir, env, sh_test_shoal_bin(), sh_test_shoal_bin(), args, log);
    pid_t job = fork();
    if (job == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* once the job has gone on without rank 2, start it again */
    uint64_t t0 = sh_now_ns();
    int left = 0;
    char logtext[1 << 16];
    while (!left && seconds_since(t0) < 30) {
        FILE *f = fopen(log, "r");
        size_t n = f ? fread(logtext, 1, sizeof logtext - 1, f) : 0;
        if (f) fclose(f);
        logtext[n] = 0;
        left = strstr(logtext, "elastic: rank 2 left after step 12") != NULL;
        usleep(100000);
    }
    CHECK(left, "the job did not go on without rank 2: %s", logtext);
    char jenv[400];
    snprintf(jenv, sizeof jenv, "%s SHOAL_RANK=2 SHOAL_WORLD_SIZE=3 SHOAL_MASTER_ADDR=127.0.0.1", env);
    int rc = left ? run(jenv, args) : -1;
    CHECK(rc == 0, "the late rank: exit %d: %s", rc, out);
    int st = 0;
    waitpid(job, &st, 0);
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(logtext, 1, sizeof logtext - 1, f) : 0;
    if (f) fclose(f);
    logtext[n] = 0;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the job: status %d: %s", st, logtext);
    CHECK(strstr(logtext, "] elastic: rank 2 joined after step ") &&
          strstr(logtext, "training goes on with 3 ranks"), "no line for the join: %s", logtext);
    const char *json = report_in(logtext);
    CHECK(json && sh_test_json_number(json, "changes") == 2 && sh_test_json_number(json, "ranks_joined") == 1 &&
          sh_test_json_number(json, "world") == 3, "the counts: %s", json ? json : logtext);
}

int main(void)
{
    check_begin("test_train_elastic", 300);
    signal(SIGPIPE, SIG_IGN);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(a_killed_rank_leaves_and_the_job_finishes_on_two);
    RUN(the_job_goes_on_when_rank_0_and_its_store_are_lost);
    RUN(a_frozen_rank_is_left_after_the_timeout);
    RUN(below_min_every_rank_stops_naming_who_is_gone);
    RUN(strong_scaling_needs_a_batch_every_world_splits);
    RUN(without_elastic_a_lost_rank_stops_the_job);
    RUN(a_rank_started_later_joins);
    tiny_remove_dir(dir);
    return check_end();
}
