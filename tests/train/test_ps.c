/* test_ps.c — proves the parameter server (src/train/ps/server.c, server_rounds.c, ps/client.c) with real
 * processes: sync equals allreduce training, SSP's staleness bound holds and fast workers
 * wait, async never waits, dead workers are dropped (async) or stop the job (sync),
 * malformed pushes are refused without touching the parameters, and a worker started with
 * other settings stops the job at its first contact. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/ranks.h"
#include "nn/optim.h"
#include "shoal/comm.h"
#include "train/ps/ps.h"
#include "train/ps/proto.h"

enum { NPARAMS = 10007 };

typedef struct {
    int nservers;
    sh_ps_consistency mode;
    int staleness;
    int steps;
    int slow_worker;  /* worker index slowed down, or -1 */
    int slow_ms;
    int die_worker;   /* worker index killed after 3 steps, or -1 */
    int bad_pushes;   /* 1: worker 0 sends malformed messages first */
    int timeout_ms;
} ps_arg;

static void init_params(float *p)
{
    for (size_t i = 0; i < NPARAMS; i++) p[i] = (float)((i % 13) - 6) * 0.05f;
}

/* A gradient that depends on the parameters, the worker and the step, like a real one. */
static void gradient(const float *p, int w, int t, float *g)
{
    for (size_t i = 0; i < NPARAMS; i++)
        g[i] = 0.1f * p[i] + 0.01f * (float)((w + 1) * (int)(i % 7)) - 0.002f * (float)t;
}

static sh_ps_config config(const ps_arg *a)
{
    sh_ps_config cfg = {0};
    cfg.nservers = a->nservers;
    cfg.consistency = a->mode;
    cfg.staleness = a->staleness;
    cfg.nparams = NPARAMS;
    cfg.optim.kind = SH_OPTIM_SGD;
    cfg.optim.momentum = 0.9f;
    cfg.optim.decay = 0;
    cfg.lr.kind = SH_LR_CONSTANT;
    cfg.lr.base_lr = 0.05f;
    cfg.lr.power = 4;
    cfg.timeout_ms = a->timeout_ms;
    return cfg;
}

static void send_raw(shoal_comm *c, int server, const ps_hdr *h, const float *payload, size_t n)
{
    unsigned char *b = malloc(sizeof *h + n * 4 + 1);
    memcpy(b, h, sizeof *h);
    if (n) memcpy(b + sizeof *h, payload, n * 4);
    shoal_send(c, b, sizeof *h + n * 4, SHOAL_UINT8, server, PS_TAG_TO_SERVER);
    free(b);
}

static void ps_job(shoal_comm *c, void *arg)
{
    const ps_arg *a = arg;
    int r = shoal_comm_rank(c), S = a->nservers, W = shoal_comm_world(c) - S;
    sh_ps_config cfg = config(a);
    float *p = malloc(NPARAMS * 4), *g = malloc(NPARAMS * 4);
    init_params(p);
    /* Workers also train a replica by allreduce among themselves: the reference. */
    shoal_comm *workers = NULL;
    CHECK(shoal_comm_split(c, r < S ? -1 : 1, r, &workers) == SHOAL_OK, "%s", shoal_last_error_message());
    if (r < S) {
        sh_ps_server *s = NULL;
        CHECK(sh_ps_server_create(c, &cfg, p, &s) == SHOAL_OK, "%s", shoal_last_error_message());
        shoal_result rc = sh_ps_server_run(s);
        sh_ps_stats st;
        sh_ps_server_stats(s, &st);
        if (a->die_worker >= 0 && a->mode == SH_PS_SYNC) {
            CHECK(rc == SHOAL_ERR_PEER, "sync server went on without a worker: rc %d", rc);
            char want[32];
            snprintf(want, sizeof want, "worker rank %d", S + a->die_worker);
            CHECK(strstr(shoal_last_error_message(), want) != NULL, "%s", shoal_last_error_message());
        } else {
            CHECK(rc == SHOAL_OK, "server %d: %s", r, shoal_last_error_message());
        }
        if (a->mode == SH_PS_SSP) {
            CHECK(st.ssp_violations == 0, "%lld pulls broke the staleness bound", (long long)st.ssp_violations);
            CHECK(st.max_spread <= a->staleness + 1, "clock spread %lld > s + 1 = %d", (long long)st.max_spread,
                  a->staleness + 1);
            if (a->slow_worker >= 0)
                CHECK(st.deferred_pulls > 0, "fast workers never waited for the slow one");
        }
        if (a->mode == SH_PS_ASYNC) CHECK(st.deferred_pulls == 0, "async made %lld pulls wait", (long long)st.deferred_pulls);
        if (a->mode == SH_PS_ASYNC && a->die_worker >= 0) CHECK(st.dropped_workers == 1, "dropped %d", st.dropped_workers);
        /* The clock line: every worker named, the dead one marked and left out of the spread. */
        char line[512], want[64];
        size_t len = sh_ps_server_clock_line(s, line, sizeof line);
        CHECK(len == strlen(line) && !strncmp(line, "ps server ", 10), "%s", line);
        for (int w = 0; w < W; w++) {
            snprintf(want, sizeof want, " w%d=", w);
            CHECK(strstr(line, want) != NULL, "%s names no %s", line, want);
        }
        if (a->die_worker >= 0 && a->mode != SH_PS_SYNC) {
            snprintf(want, sizeof want, " w%d=3 (dropped)", a->die_worker);
            CHECK(strstr(line, want) != NULL, "%s", line);
            CHECK(strstr(line, ", spread 0 (slowest w0)") != NULL, "%s", line);
        }
        char small[16];
        len = sh_ps_server_clock_line(s, small, sizeof small);
        CHECK(len == strlen(small) && len == sizeof small - 1, "cut line: %zu \"%s\"", len, small);
        if (a->bad_pushes) CHECK(st.refused >= 5, "refused only %lld bad messages", (long long)st.refused);
        if (a->slow_worker < 0 && a->die_worker < 0 && !a->bad_pushes && a->mode != SH_PS_ASYNC)
            CHECK(st.pushes == (int64_t)W * a->steps, "pushes %lld", (long long)st.pushes);
        sh_ps_server_destroy(s);
    } else {
        int w = r - S;
        sh_ps_client *cl = NULL;
        CHECK(sh_ps_client_create(c, &cfg, &cl) == SHOAL_OK, "%s", shoal_last_error_message());
        if (a->bad_pushes && w == 0) {
            size_t lo, cnt;
            sh_ps_shard(NPARAMS, S, 0, &lo, &cnt);
            float *junk = calloc(cnt + 10, 4);
            for (size_t i = 0; i < cnt + 10; i++) junk[i] = 1e30f;
            ps_hdr h1 = {PS_MAGIC, PS_PUSH, 0, lo, cnt + 1, 0, {0, 0, 0}};    /* wrong length */
            ps_hdr h2 = {PS_MAGIC, PS_PUSH, 0, lo + 1, cnt, 0, {0, 0, 0}};    /* unknown shard */
            ps_hdr h3 = {PS_MAGIC, PS_PUSH, 7, lo, cnt, 0, {0, 0, 0}};        /* stale clock */
            ps_hdr h4 = {PS_MAGIC, 99, 0, 0, 0, 0, {0, 0, 0}};                /* unknown kind */
            ps_hdr h5 = {0xdeadbeef, PS_PUSH, 0, lo, cnt, 0, {0, 0, 0}};      /* bad magic */
            send_raw(c, 0, &h1, junk, cnt + 1);
            send_raw(c, 0, &h2, junk, cnt);
            send_raw(c, 0, &h3, junk, cnt);
            send_raw(c, 0, &h4, NULL, 0);
            send_raw(c, 0, &h5, junk, cnt);
            free(junk);
        }
        float *ref = malloc(NPARAMS * 4), *gref = malloc(NPARAMS * 4);
        init_params(ref);
        sh_param_range all = {0, NPARAMS, 1};
        sh_optim *opt = NULL;
        sh_optim_create(&cfg.optim, NPARAMS, &all, 1, &opt);
        shoal_result rc = SHOAL_OK;
        for (int t = 0; t < a->steps && rc == SHOAL_OK; t++) {
            if (w == a->die_worker && t == 3) raise(SIGKILL);
            rc = sh_ps_client_pull(cl, p);
            if (rc != SHOAL_OK) break;
            if (w == a->slow_worker) usleep((useconds_t)a->slow_ms * 1000);
            gradient(p, w, t, g);
            rc = sh_ps_client_push(cl, g);
            if (a->mode == SH_PS_SYNC && a->die_worker < 0) {
                gradient(ref, w, t, gref);
                CHECK(shoal_allreduce(workers, gref, gref, NPARAMS, SHOAL_FLOAT32, SHOAL_AVG) == SHOAL_OK, "%s",
                      shoal_last_error_message());
                sh_optim_step(opt, ref, gref, cfg.lr.base_lr);
            }
        }
        if (a->die_worker >= 0 && a->mode == SH_PS_SYNC) {
            CHECK(rc == SHOAL_ERR_PEER, "worker %d: rc %d", w, rc);
            char want[32];
            snprintf(want, sizeof want, "worker rank %d", S + a->die_worker);
            CHECK(strstr(shoal_last_error_message(), want) != NULL, "worker %d: %s", w, shoal_last_error_message());
        } else {
            CHECK(rc == SHOAL_OK, "worker %d: %s", w, shoal_last_error_message());
            CHECK(sh_ps_client_pull(cl, p) == SHOAL_OK, "final pull: %s", shoal_last_error_message());
            int finite = 1;
            for (size_t i = 0; i < NPARAMS; i++) finite &= isfinite(p[i]);
            CHECK(finite, "worker %d: parameters are not finite (a bad push got through?)", w);
            if (a->mode == SH_PS_SYNC) {
                double worst = 0;
                for (size_t i = 0; i < NPARAMS; i++) {
                    double d = fabs((double)p[i] - ref[i]) / (fabs((double)ref[i]) + 1e-3);
                    if (d > worst) worst = d;
                }
                CHECK(worst < 1e-5, "sync PS differs from allreduce training by %.3g relative", worst);
            }
            CHECK(sh_ps_client_close(cl) == SHOAL_OK, "%s", shoal_last_error_message());
        }
        sh_optim_destroy(opt);
        free(ref);
        free(gref);
        sh_ps_client_destroy(cl);
    }
    shoal_comm_destroy(workers);
    free(p);
    free(g);
}

static void run(int world, ps_arg a, unsigned dying)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .dying_mask = dying, .timeout_ms = 20000, .deadline_s = 120};
    RUN_RANKS(world, &o, ps_job, &a);
}

static void t_sync_equals_allreduce(void)
{
    run(3, (ps_arg){1, SH_PS_SYNC, 0, 50, -1, 0, -1, 0, 0}, 0);
    run(4, (ps_arg){2, SH_PS_SYNC, 0, 50, -1, 0, -1, 0, 0}, 0);
    run(5, (ps_arg){2, SH_PS_SYNC, 0, 30, -1, 0, -1, 0, 0}, 0);
}

static void t_ssp_bound(void)
{
    run(4, (ps_arg){1, SH_PS_SSP, 2, 30, 2, 15, -1, 0, 0}, 0);
    run(5, (ps_arg){2, SH_PS_SSP, 1, 20, 0, 15, -1, 0, 0}, 0);
    run(4, (ps_arg){1, SH_PS_SSP, 3, 20, -1, 0, -1, 0, 0}, 0);
}

static void t_async_never_waits(void)
{
    run(4, (ps_arg){1, SH_PS_ASYNC, 0, 30, 1, 10, -1, 0, 0}, 0);
}

static void t_dead_worker(void)
{
    /* async: dropped after the timeout, the others finish */
    run(4, (ps_arg){1, SH_PS_ASYNC, 0, 20, -1, 0, 1, 0, 1000}, 1u << 2);
    /* ssp: same, and the slowest-clock rule ignores it */
    run(4, (ps_arg){1, SH_PS_SSP, 1, 20, -1, 0, 1, 0, 1000}, 1u << 2);
    /* sync: the job stops with a message naming it */
    run(4, (ps_arg){1, SH_PS_SYNC, 0, 20, -1, 0, 1, 0, 1000}, 1u << 2);
}

static void t_malformed_refused(void)
{
    run(3, (ps_arg){1, SH_PS_SYNC, 0, 10, -1, 0, -1, 1, 0}, 0);
}

/* A worker started with other settings than its server (here another --compress, another
 * --consistency, another job option): the server stops the job at its first contact, and
 * every worker's next wait ends with the reason, naming the option and both ranks. */
typedef struct {
    int differ; /* 0: the codec, 1: the consistency, 2: a line of the job's options */
} hello_arg;

static void hello_job(shoal_comm *c, void *arg)
{
    const hello_arg *a = arg;
    int r = shoal_comm_rank(c);
    ps_arg pa = {1, SH_PS_SYNC, 3, 5, -1, 0, -1, 0, 20000};
    sh_ps_config cfg = config(&pa);
    cfg.settings = "--batch 16\n--seed 1 (the default)\n";
    if (r == 2) { /* the odd worker */
        if (a->differ == 0) shoal_codec_parse("1bit", &cfg.codec);
        if (a->differ == 1) cfg.consistency = SH_PS_ASYNC;
        if (a->differ == 2) cfg.settings = "--batch 16\n--seed 7\n";
    }
    static const char *const want[] = {"was started with --compress 1bit but this server (rank 0) with --compress "
                                       "none; start every rank with the same --compress",
                                       "was started with --consistency async but this server (rank 0) with "
                                       "--consistency sync; start every rank with the same --consistency",
                                       "was started with --seed 7 but this server (rank 0) with --seed 1 (the "
                                       "default); start every rank with the same --seed"};
    float *p = malloc(NPARAMS * 4);
    init_params(p);
    uint64_t t0 = sh_now_ns();
    shoal_result rc;
    if (r == 0) {
        sh_ps_server *s = NULL;
        CHECK(sh_ps_server_create(c, &cfg, p, &s) == SHOAL_OK, "%s", shoal_last_error_message());
        rc = s ? sh_ps_server_run(s) : SHOAL_ERR_INTERNAL;
        sh_ps_server_destroy(s);
    } else {
        sh_ps_client *cl = NULL;
        rc = sh_ps_client_create(c, &cfg, &cl);
        for (int t = 0; t < pa.steps && rc == SHOAL_OK; t++) rc = sh_ps_client_pull(cl, p);
        sh_ps_client_destroy(cl);
    }
    double s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc != SHOAL_OK && strstr(shoal_last_error_message(), "worker rank 2 (") &&
              strstr(shoal_last_error_message(), want[a->differ]),
          "rank %d: rc %d: %s", r, rc, shoal_last_error_message());
    CHECK(s < 5, "rank %d: the mismatch took %.1f s to stop it", r, s);
    free(p);
}

static void t_settings_checked_at_first_contact(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .timeout_ms = 20000, .deadline_s = 60};
    for (int d = 0; d < 3; d++) {
        hello_arg a = {d};
        RUN_RANKS(3, &o, hello_job, &a);
    }
}

int main(void)
{
    check_begin("test_ps", 300);
    RUN(t_sync_equals_allreduce);
    RUN(t_ssp_bound);
    RUN(t_async_never_waits);
    RUN(t_dead_worker);
    RUN(t_malformed_refused);
    RUN(t_settings_checked_at_first_contact);
    return check_end();
}
