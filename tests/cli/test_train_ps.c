/* test_train_ps.c — proves `shoal train --ps` end to end (src/cli/train_dist.c, cmd_train.c's
 * -n relaunch): servers and workers as real processes started by shoal itself, in sync,
 * async and ssp modes, with a deliberately slowed worker; and the usage errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 20];

static int run(const char *args)
{
    const char *bin = getenv("SHOAL_BIN");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s train %s 2>&1", dir, bin ? bin : "build/shoal", args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

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
    RUN(two_servers_split_the_weights);
    RUN(dead_server_stops_job_and_shards_resume);
    RUN(usage_errors);
    tiny_remove_dir(dir);
    return check_end();
}
