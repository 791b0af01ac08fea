/* test_train_ps_layouts.c — proves parameter servers over model-parallel replicas
 * (src/train/ps/layout.c, the servers' ranges in ps/server.c and client.c, mp/mp.c's pulls
 * and pushes) and Poseidon's --ps --sfb (ps/worker.c) end to end, ranks as real processes:
 * in sync mode each layout with servers ends with the same weights as the layout alone
 * (within 1e-5; here bit for bit), async and ssp learn, a killed server is named, servers'
 * shards and the workers' checkpoint resume to the uninterrupted run's weights; --sfb sends
 * fewer bytes to the servers and ends with --ps alone's weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/ckpt_read.h"
#include "lib/cli_usage_checks.h"
#include "lib/layout_cfgs.h"
#include "lib/run.h"
#include "shoal/result.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];
static const char deep_cfg[] = SH_TEST_STAGED_CFG;

static int run(const char *args) { return sh_test_shoal_in(dir, "SHOAL_TIMEOUT=20000", "train", args, out, sizeof out); }

/* The largest |a - b| / (|b| + 1e-3) over two checkpoints' parameters; 1e9 when unreadable. */
static double worst(const char *cfg, const char *a, const char *b)
{
    size_t n = 0, m = 0;
    float *x = sh_test_ckpt_section(dir, cfg, a, "params", &n);
    float *y = sh_test_ckpt_section(dir, cfg, b, "params", &m);
    double w = x && y && n == m ? 0 : 1e9;
    for (size_t i = 0; x && y && n == m && i < n; i++) {
        double d = fabs((double)x[i] - y[i]) / (fabs((double)y[i]) + 1e-3);
        if (d > w) w = d;
    }
    free(x);
    free(y);
    return w;
}

/* The layout (flags) trained 50 steps with and without servers in sync mode. */
static void sync_equals_layout(const char *cfg, const char *flags)
{
    char args[600];
    snprintf(args, sizeof args, "%s --data . %s --max-steps 50 --threads 1 --quiet --save alone.ckpt", cfg, flags);
    int rc = run(args);
    CHECK(rc == 0, "%s alone: exit %d: %s", flags, rc, out);
    snprintf(args, sizeof args, "%s --data . --ps %s --max-steps 50 --threads 1 --save served.ckpt", cfg, flags);
    rc = run(args);
    CHECK(rc == 0 && strstr(out, "server 0 (sync)"), "%s with --ps: exit %d: %s", flags, rc, out);
    double w = worst(cfg, "served.ckpt", "alone.ckpt");
    CHECK(w <= 1e-5, "%s: with servers %.3g relative from the layout alone after 50 steps", flags, w);
}

static void sync_servers_give_the_layouts_weights(void)
{
    sync_equals_layout("deep.cfg", "-n 4 --tensor-parallel 2");          /* 2 replicas of 2 shares */
    sync_equals_layout("mlp.cfg", "-n 4 --pipeline 2");                  /* 2 replicas of 2 stages, dropout */
    sync_equals_layout("deep.cfg", "-n 4 --pipeline 2 --tensor-parallel 2"); /* 1 replica, 4 parts */
    sync_equals_layout("deep.cfg", "-n 2 --tensor-parallel 2 --servers 2"); /* a server per share */
}

static void async_and_ssp_learn(void)
{
    const char *modes[2] = {"async", "ssp"};
    for (int k = 0; k < 2; k++) {
        char args[600];
        snprintf(args, sizeof args, "deep.cfg --data . --ps --servers 2 -n 4 --tensor-parallel 2 --consistency %s "
                 "--max-steps 60 --threads 1 --json", modes[k]);
        int rc = run(args);
        const char *doc = strstr(out, "{\"accuracy\"");
        CHECK(rc == 0 && doc && sh_test_json_number(doc, "accuracy") > 0.9, "%s: exit %d: %s", modes[k], rc, out);
        snprintf(args, sizeof args, "mlp.cfg --data . --ps -n 4 --pipeline 2 --consistency %s --max-steps 60 "
                 "--threads 1 --json", modes[k]);
        rc = run(args);
        doc = strstr(out, "{\"accuracy\"");
        CHECK(rc == 0 && doc && sh_test_json_number(doc, "accuracy") > 0.9, "%s: exit %d: %s", modes[k], rc, out);
    }
}

/* Stopped at step 10 and resumed to 20 (servers from their shards, workers from the whole
 * model's checkpoint), the weights are the uninterrupted run's. */
static void resume_continues_the_run(void)
{
    int rc = run("deep.cfg --data . --ps -n 4 --pipeline 2 --max-steps 10 --threads 1 --quiet --save r.ckpt");
    CHECK(rc == 0 && sh_test_file_nbytes(dir, "r.ckpt.server0") > 0, "exit %d: %s", rc, out);
    rc = run("deep.cfg --data . --ps -n 4 --pipeline 2 --max-steps 20 --threads 1 --resume r.ckpt --save r2.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 11..20"), "resume: exit %d: %s", rc, out);
    rc = run("deep.cfg --data . --ps -n 4 --pipeline 2 --max-steps 20 --threads 1 --quiet --save r3.ckpt");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double w = worst("deep.cfg", "r2.ckpt", "r3.ckpt");
    CHECK(w <= 1e-6, "resumed vs uninterrupted: %.3g relative", w);
}

static void killed_server_is_named(void)
{
    int rc = run("deep.cfg --data . --ps -n 2 --tensor-parallel 2 --max-steps 100000 --threads 1 --quiet "
                 "--debug-die-rank 0 --debug-die-step 5");
    CHECK(rc != 0 && strstr(out, "rank 0 was killed by SIGKILL"), "exit %d: %s", rc, out);
}

/* The server's "%f MB pushed" figure in out. */
static double pushed_mb(void)
{
    const char *p = strstr(out, "pulls (");
    p = p ? strstr(p, " waited), ") : NULL;
    return p ? strtod(p + 10, NULL) : -1;
}

static void sfb_sends_factors_and_ends_with_the_servers_weights(void)
{
    int rc = run("deep.cfg --data . --ps -n 2 --max-steps 40 --threads 1 --save plain.ckpt");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double plain = pushed_mb();
    rc = run("deep.cfg --data . --ps -n 2 --sfb --max-steps 40 --threads 1 --save sfb.ckpt");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    double sfb = pushed_mb();
    CHECK(sfb > 0 && sfb < 0.5 * plain, "the servers took %.2f MB with --sfb, %.2f MB without", sfb, plain);
    double w = worst("deep.cfg", "sfb.ckpt", "plain.ckpt");
    CHECK(w <= 1e-5, "--ps --sfb against --ps: %.3g relative", w);
    rc = run("deep.cfg --data . --ps -n 3 --sfb --max-steps 20 --threads 1 --quiet --save sfb3.ckpt");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("deep.cfg --data . --ps -n 3 --max-steps 20 --threads 1 --quiet --save plain3.ckpt");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    w = worst("deep.cfg", "sfb3.ckpt", "plain3.ckpt");
    CHECK(w <= 1e-5, "3 workers, --ps --sfb against --ps: %.3g relative", w);
    rc = run("deep.cfg --data . --ps -n 2 --sfb --max-steps 60 --threads 1 --resume sfb.ckpt");
    CHECK(rc == 0 && strstr(out, "steps 41..60"), "resume: exit %d: %s", rc, out);
}

static void usage_errors(void)
{
    static const usage_case bad[] = {
        {"--ps --hybrid broadcast -n 2", "--hybrid is its own layout"},
        {"--ps --pipeline 2 --compress fp16 -n 2", "pushes float32 shards"},
        {"--ps --sfb --consistency async -n 2", "use --consistency sync"},
        {"--ps --sfb --quorum 0.5 -n 2", "leave out --quorum or --sfb"},
        {"--ps --tensor-parallel 2 --quorum 0.5 -n 2", "--quorum goes with data parallelism"},
    };
    check_usage_errors(dir, "deep.cfg --data . --max-steps 2", bad, sizeof bad / sizeof bad[0], out, sizeof out);
}

int main(void)
{
    check_begin("test_train_ps_layouts", 400);
    if (tiny_make_dir(dir, sizeof dir) != 0 || tiny_write_file(dir, "deep.cfg", deep_cfg)) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(sync_servers_give_the_layouts_weights);
    RUN(async_and_ssp_learn);
    RUN(resume_continues_the_run);
    RUN(killed_server_is_named);
    RUN(sfb_sends_factors_and_ends_with_the_servers_weights);
    RUN(usage_errors);
    tiny_remove_dir(dir);
    return check_end();
}
