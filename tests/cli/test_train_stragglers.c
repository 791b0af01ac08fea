/* test_train_stragglers.c — proves `shoal train --hogwild` (src/train/dp/hogwild.c) and
 * `--quorum F` (dp/quorum.c; the parameter server's in ps/server_rounds.c) end to end, ranks as real
 * processes: hogwild trains and reports its staleness, checkpoints and resumes; a quorum of 1
 * is synchronous training bit for bit (data parallel and --ps), one of 0.5 does not wait for
 * a straggler and still learns, resumes bit for bit; a killed rank is named under each; one
 * host only where the ranks share memory, said in one line; the debug-delay drill slows a
 * data-parallel rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "lib/ckpt_read.h"
#include "lib/cli_usage_checks.h"
#include "lib/run.h"
#include "shoal/result.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_env(const char *env, const char *args) { return sh_test_shoal_in(dir, env, "train", args, out, sizeof out); }
static int run(const char *args) { return run_env("", args); }

/* The number after "key": in the JSON object at the end of out (the launcher prefixes lines). */
static double json(const char *key)
{
    const char *doc = strrchr(out, '{') ? strstr(out, "{\"accuracy\"") : NULL;
    return doc ? sh_test_json_number(doc, key) : -1;
}

/* Two checkpoints of mlp.cfg hold the same parameters and optimizer state, bit for bit. */
static void same_bits(const char *a, const char *b)
{
    const char *sec[2] = {"params", "optim"};
    for (int k = 0; k < 2; k++) {
        size_t n = 0, m = 0;
        float *x = sh_test_ckpt_section(dir, "mlp.cfg", a, sec[k], &n);
        float *y = sh_test_ckpt_section(dir, "mlp.cfg", b, sec[k], &m);
        CHECK(x && y && n == m && !memcmp(x, y, n * sizeof *x), "%s of %s and %s differ", sec[k], a, b);
        free(x);
        free(y);
    }
}

static void hogwild_trains_and_reports_staleness(void)
{
    int rc = run("mlp.cfg --data . -n 2 --hogwild --max-steps 60 --threads 1 --json");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "\"hogwild\":{\"updates\":120,") != NULL, "2 ranks x 60 steps, each one update: %s", out);
    CHECK(json("staleness_mean") >= 0 && json("staleness_max") >= 0, "%s", out);
    CHECK(json("accuracy") > 0.9, "hogwild learns the tiny set: %s", out);
    rc = run("mlp.cfg --data . -n 2 --hogwild --max-steps 10 --threads 1");
    CHECK(rc == 0 && strstr(out, "hogwild: 20 updates to the shared weights; staleness"), "%s", out);
}

static void hogwild_checkpoints_each_ranks_momentum_and_resumes(void)
{
    int rc = run("mlp.cfg --data . -n 2 --hogwild --max-steps 16 --threads 1 --save hw.ckpt");
    CHECK(rc == 0 && strstr(out, "saved hw.ckpt at step 16"), "exit %d: %s", rc, out);
    CHECK(sh_test_file_nbytes(dir, "hw.ckpt.worker1") > 0, "rank 1's own momentum is not kept: %s", out);
    rc = run("mlp.cfg --data . -n 2 --hogwild --max-steps 32 --threads 1 --resume hw.ckpt --json");
    CHECK(rc == 0 && strstr(out, "steps 17..32"), "exit %d: %s", rc, out);
    CHECK(json("accuracy") > 0.9, "%s", out);
}

static void quorum_one_is_synchronous_training_bit_for_bit(void)
{
    int rc = run("mlp.cfg --data . -n 2 --quorum 1 --max-steps 30 --threads 1 --save q1.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("mlp.cfg --data . -n 2 --max-steps 30 --threads 1 --save dp.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    same_bits("q1.ckpt", "dp.ckpt");
    rc = run("mlp.cfg --data . --ps -n 2 --quorum 1 --max-steps 30 --threads 1 --save pq.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("mlp.cfg --data . --ps -n 2 --max-steps 30 --threads 1 --save ps.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    same_bits("pq.ckpt", "ps.ckpt");
    long long a = sh_test_file_nbytes(dir, "pq.ckpt.server0"), b = sh_test_file_nbytes(dir, "ps.ckpt.server0");
    char cmd[900];
    snprintf(cmd, sizeof cmd, "cmp %s/pq.ckpt.server0 %s/ps.ckpt.server0", dir, dir);
    CHECK(a > 0 && a == b && sh_test_run(cmd, out, sizeof out) == 0, "the servers' shards differ: %s", out);
}

/* Resumed at F = 1, the run ends where an uninterrupted synchronous one does. */
static void quorum_resumes_bit_for_bit(void)
{
    int rc = run("mlp.cfg --data . -n 2 --quorum 1 --max-steps 12 --threads 1 --save qa.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("mlp.cfg --data . -n 2 --quorum 1 --max-steps 24 --threads 1 --resume qa.ckpt --save qb.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("mlp.cfg --data . -n 2 --max-steps 24 --threads 1 --save qc.ckpt --quiet");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    same_bits("qb.ckpt", "qc.ckpt");
}

/* One rank sleeps 25 ms before each step. Synchronous training waits for it every step; a
 * quorum of half goes on with the other's gradients, takes the sleeper's late ones into later
 * steps, and learns as well. The same for the parameter server's sync rounds. */
static void quorum_half_leaves_the_straggler_behind(void)
{
    const char *drill = "--max-steps 40 --threads 1 --debug-delay-rank 1 --debug-delay-ms 25";
    const char *layouts[2] = {"-n 2", "--ps -n 2"};
    for (int k = 0; k < 2; k++) {
        char args[512];
        snprintf(args, sizeof args, "mlp.cfg --data . %s %s --json", layouts[k], drill);
        int rc = run(args);
        double sync_s = json("seconds"); /* rank 0's (worker 0's) training, start-up left out */
        CHECK(rc == 0, "%s: exit %d: %s", layouts[k], rc, out);
        snprintf(args, sizeof args, "mlp.cfg --data . %s --quorum 0.5 %s --json", layouts[k], drill);
        rc = run(args);
        double quorum_s = json("seconds");
        CHECK(rc == 0, "%s: exit %d: %s", layouts[k], rc, out);
        CHECK(sync_s > 0.9 && quorum_s < 0.5 * sync_s, "%s: --quorum 0.5 trained %.2f s, synchronous %.2f s (40 "
              "steps of 25 ms at least)", layouts[k], quorum_s, sync_s);
        CHECK(json("steps") == 40 && json("accuracy") > 0.9, "%s: %s", layouts[k], out);
        if (k == 0) CHECK(json("late") >= 1 && json("ranks") == 1, "the sleeper's gradients came late: %s", out);
        else CHECK(strstr(out, "late pushes added to the next round"), "%s", out);
    }
}

static void killed_rank_is_named(void)
{
    const char *modes[3] = {"--hogwild", "--quorum 0.5", "--quorum 1"};
    for (int k = 0; k < 3; k++) {
        char args[512];
        snprintf(args, sizeof args, "mlp.cfg --data . -n 2 %s --max-steps 100000 --threads 1 --quiet "
                 "--debug-die-rank 1 --debug-die-step 5", modes[k]);
        double t0 = now_s();
        int rc = run_env("SHOAL_TIMEOUT=5000", args);
        CHECK(rc != 0 && strstr(out, "rank 1 was killed by SIGKILL"), "%s: exit %d: %s", modes[k], rc, out);
        CHECK(now_s() - t0 < 30, "%s: stopping took %.1f s", modes[k], now_s() - t0);
    }
}

/* Where the ranks cannot share memory (here: TCP forced), one line says why and what to do;
 * the parameter server's quorum works over TCP. */
static void one_host_or_a_clear_line(void)
{
    int rc = run_env("SHOAL_TRANSPORT=tcp", "mlp.cfg --data . -n 2 --hogwild --max-steps 5 --threads 1");
    CHECK(rc == 1 && strstr(out, "--hogwild needs every rank on one host"), "exit %d: %s", rc, out);
    rc = run_env("SHOAL_TRANSPORT=tcp", "mlp.cfg --data . -n 2 --quorum 0.5 --max-steps 5 --threads 1");
    CHECK(rc == 1 && strstr(out, "across hosts use --ps --consistency sync --quorum F"), "exit %d: %s", rc, out);
    rc = run_env("SHOAL_TRANSPORT=tcp", "mlp.cfg --data . --ps -n 2 --quorum 0.5 --max-steps 10 --threads 1 --json");
    CHECK(rc == 0 && json("steps") == 10, "exit %d: %s", rc, out);
}

static void usage_errors(void)
{
    static const usage_case bad[] = {
        {"--hogwild --ps -n 2", "--hogwild shares one copy"},
        {"--hogwild --pipeline 2 -n 2", "--hogwild needs whole-model replicas"},
        {"--hogwild --compress fp16 -n 2", "--hogwild sends no gradients"},
        {"--quorum 0.5 --ps --consistency async -n 2", "--quorum is for synchronous training"},
        {"--quorum 0 -n 2", "expected the fraction of ranks"},
        {"--quorum 0.5 --hybrid broadcast -n 2", "--quorum goes with data parallelism"},
    };
    check_usage_errors(dir, "mlp.cfg --data . --max-steps 2", bad, sizeof bad / sizeof bad[0], out, sizeof out);
}

int main(void)
{
    check_begin("test_train_stragglers", 400);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(hogwild_trains_and_reports_staleness);
    RUN(hogwild_checkpoints_each_ranks_momentum_and_resumes);
    RUN(quorum_one_is_synchronous_training_bit_for_bit);
    RUN(quorum_resumes_bit_for_bit);
    RUN(quorum_half_leaves_the_straggler_behind);
    RUN(killed_rank_is_named);
    RUN(one_host_or_a_clear_line);
    RUN(usage_errors);
    tiny_remove_dir(dir);
    return check_end();
}
