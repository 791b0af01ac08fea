/* test_train_logdir.c — proves `shoal train --logdir` (trainer.c's log_step, the parameter
 * servers' clocks, tb_events.c's histograms) by reading the event files back with an
 * independent reader (tests/lib/tfrecord.c: framing, masked CRC-32C, protobuf fields): -n 2
 * writes one run directory with one event file; every step carries the loss, accuracy,
 * learning rate, images/s, gradient norm, communication wait, hidden share, bytes sent and
 * bus bandwidth with values that follow from the model; the gradient norm of two ranks that
 * split the update equals one process's; --log-histograms writes each
 * layer's weights and gradients as histograms whose buckets add up; with --ps, server 0
 * adds the clock spread, never past the staleness bound; bad flags are usage errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/run.h"
#include "lib/tfrecord.h"
#include "train/tiny_data.h"

static char dir[256], out[1 << 16];

static int run(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s train %s 2>&1", dir, sh_test_shoal_bin(), args);
    return sh_test_run(cmd, out, sizeof out);
}

static int read_logdir(const char *name, tbr_event **ev, int *nfiles)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int n = tbr_read_dir(path, ev, nfiles, err, sizeof err);
    CHECK(n > 0, "%s: %s", path, err);
    return n;
}

static const tbr_event *find(const tbr_event *ev, int n, const char *tag, int64_t step)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ev[i].tag, tag) && ev[i].step == step) return &ev[i];
    return NULL;
}

/* other.cfg: connected 64 -> 12 (780 parameters), connected 12 -> 4 (52). */
#define L0_PARAMS 780
#define L1_PARAMS 52

static void two_ranks_write_one_run_with_communication(void)
{
    int rc = run("other.cfg --data . -n 2 --max-steps 6 --threads 1 --quiet --logdir lg2 --log-histograms 3");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    tbr_event *ev = NULL;
    int nfiles = 0, n = read_logdir("lg2", &ev, &nfiles);
    CHECK(nfiles == 1, "%d event files for one run of two ranks", nfiles);
    if (n <= 0) return;
    CHECK(!strcmp(ev[0].file_version, "brain.Event:2"), "first record: \"%s\"", ev[0].file_version);
    for (int64_t s = 1; s <= 6; s++) {
        static const char *tags[] = {"train/loss", "train/accuracy", "train/learning_rate", "train/images_per_s",
                                     "train/gradient_norm", "comm/wait_ms", "comm/hidden_fraction", "comm/time_ms",
                                     "comm/bytes_sent", "comm/busbw_gb_s", "time/forward_ms", "time/backward_ms"};
        for (size_t k = 0; k < sizeof tags / sizeof tags[0]; k++) {
            const tbr_event *e = find(ev, n, tags[k], s);
            CHECK(e && e->has_value && isfinite(e->value), "step %lld: no %s", (long long)s, tags[k]);
        }
        const tbr_event *lr = find(ev, n, "train/learning_rate", s), *ips = find(ev, n, "train/images_per_s", s),
                        *gn = find(ev, n, "train/gradient_norm", s), *hid = find(ev, n, "comm/hidden_fraction", s),
                        *sent = find(ev, n, "comm/bytes_sent", s), *bw = find(ev, n, "comm/busbw_gb_s", s);
        if (!lr || !ips || !gn || !hid || !sent || !bw) continue;
        CHECK_NEAR(lr->value, 0.05, 1e-7); /* the cfg's learning_rate, constant policy */
        CHECK(ips->value > 0 && gn->value > 0 && bw->value > 0, "images/s %g, gradient norm %g, busbw %g",
              ips->value, gn->value, bw->value);
        CHECK(hid->value >= 0 && hid->value <= 1, "hidden share %g", hid->value);
        /* a bandwidth-optimal allreduce on 2 ranks sends 2(n-1)/n = 1 x the gradient bytes */
        CHECK_NEAR(sent->value, (L0_PARAMS + L1_PARAMS) * 4.0, 0.5);
    }
    CHECK(find(ev, n, "test/accuracy", 6) != NULL, "no test accuracy at the end");
    for (int64_t s = 3; s <= 6; s += 3) {
        static const struct {
            const char *tag;
            double count;
        } h[] = {{"weights/connected 0", L0_PARAMS}, {"gradients/connected 0", L0_PARAMS},
                 {"weights/connected 1", L1_PARAMS}, {"gradients/connected 1", L1_PARAMS}};
        for (int k = 0; k < 4; k++) {
            const tbr_event *e = find(ev, n, h[k].tag, s);
            CHECK(e && e->has_histo, "step %lld: no histogram %s", (long long)s, h[k].tag);
            if (!e || !e->has_histo) continue;
            double total = 0;
            for (int b = 0; b < e->ncounts; b++) total += e->count[b];
            CHECK(e->hnum == h[k].count && total == h[k].count, "%s: num %g, buckets add to %g, want %g", h[k].tag,
                  e->hnum, total, h[k].count);
            CHECK(e->nlimits == e->ncounts && e->ncounts > 1, "%s: %d limits, %d buckets", h[k].tag, e->nlimits,
                  e->ncounts);
            CHECK(e->hmin <= e->hmax && e->limit[e->nlimits - 1] == e->hmax, "%s: min %g max %g last limit %g",
                  h[k].tag, e->hmin, e->hmax, e->limit[e->nlimits - 1]);
            CHECK(e->hsum >= e->hnum * e->hmin - 1e-9 && e->hsum <= e->hnum * e->hmax + 1e-9 &&
                  e->hsum_sq >= 0, "%s: sum %g outside num x [min, max]", h[k].tag, e->hsum);
            for (int b = 1; b < e->nlimits; b++)
                CHECK(e->limit[b] >= e->limit[b - 1], "%s: limits not ascending at %d", h[k].tag, b);
        }
        CHECK(!find(ev, n, "weights/connected 0", s - 1), "histogram at step %lld, not every 3", (long long)s - 1);
    }
    free(ev);
}

static void parameter_server_logs_clock_spread(void)
{
    int rc = run("other.cfg --data . --ps -n 2 --max-steps 8 --threads 1 --quiet --consistency ssp "
                 "--staleness 1 --logdir lgps");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    tbr_event *ev = NULL;
    int nfiles = 0, n = read_logdir("lgps", &ev, &nfiles);
    CHECK(nfiles == 2, "%d event files: worker 0's and server 0's", nfiles);
    int spreads = 0, clocks[2] = {0, 0}, losses = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(ev[i].tag, "ps/clock_spread")) {
            spreads++;
            CHECK(ev[i].value >= 0 && ev[i].value <= 1 + 1, "spread %g past staleness 1 + 1", ev[i].value);
        }
        clocks[0] += !strcmp(ev[i].tag, "ps/clock/w0");
        clocks[1] += !strcmp(ev[i].tag, "ps/clock/w1");
        losses += !strcmp(ev[i].tag, "train/loss");
    }
    CHECK(spreads >= 4 && clocks[0] >= 4 && clocks[1] >= 4, "spread %d, clocks %d %d", spreads, clocks[0], clocks[1]);
    CHECK(losses == 8, "%d loss values from worker 0", losses);
    free(ev);
}

/* The gradient norm is the whole averaged gradient's, whatever the ranks: two ranks splitting
 * the update (each reduces only its block) log what one process with the same global batch
 * logs, step for step. */
static void gradient_norm_is_the_whole_gradients(void)
{
    int rc = run("other.cfg --data . --max-steps 5 --threads 1 --quiet --logdir gn1");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    rc = run("other.cfg --data . -n 2 --scaling strong --max-steps 5 --threads 1 --quiet --logdir gn2");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    tbr_event *e1 = NULL, *e2 = NULL;
    int f1 = 0, f2 = 0, n1 = read_logdir("gn1", &e1, &f1), n2 = read_logdir("gn2", &e2, &f2);
    for (int64_t s = 1; n1 > 0 && n2 > 0 && s <= 5; s++) {
        const tbr_event *a = find(e1, n1, "train/gradient_norm", s), *b = find(e2, n2, "train/gradient_norm", s);
        CHECK(a && b, "step %lld: gradient norm missing (one process %d, two ranks %d)", (long long)s, a != NULL,
              b != NULL);
        if (a && b)
            CHECK(a->value > 0 && fabs(a->value - b->value) <= 1e-4 * a->value,
                  "step %lld: one process %.7g, two ranks %.7g", (long long)s, a->value, b->value);
    }
    free(e1);
    free(e2);
}

static void histogram_flag_needs_logdir(void)
{
    int rc = run("other.cfg --data . --log-histograms 5");
    CHECK(rc == 2 && strstr(out, "--log-histograms needs --logdir"), "exit %d: %s", rc, out);
    rc = run("other.cfg --data . --logdir x --log-histograms 0");
    CHECK(rc == 2 && strstr(out, "--log-histograms"), "exit %d: %s", rc, out);
}

int main(void)
{
    check_begin("test_train_logdir", 120);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    RUN(two_ranks_write_one_run_with_communication);
    RUN(parameter_server_logs_clock_spread);
    RUN(gradient_norm_is_the_whole_gradients);
    RUN(histogram_flag_needs_logdir);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/lg2' '%s/lgps' '%s/gn1' '%s/gn2'", dir, dir, dir, dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove the log directories\n");
    tiny_remove_dir(dir);
    return check_end();
}
