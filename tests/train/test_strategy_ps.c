/* test_strategy_ps.c — proves src/train/ps/worker.c with the real trainer and real
 * processes: one server and two workers in sync mode train to the same weights as one
 * process with the same global batch and data order (within 1e-5 relative after 50
 * steps); async with push/pull every 2 steps trains to finite weights and a falling loss; a
 * worker whose server is gone writes no checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/ranks.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/ps/ps.h"
#include "train/ps/worker.h"
#include "train/tiny_data.h"
#include "train/trainer.h"

static char dir[256], cfg[512];
enum { STEPS = 50, WORKER_BATCH = 16 };

static void opts_for(sh_train_opts *o, int batch, int64_t steps)
{
    sh_train_opts_default(o);
    o->cfg_path = cfg;
    o->data_dir = dir;
    o->threads = 1;
    o->quiet = 1;
    o->seed = 7;
    o->batch = batch;
    o->max_steps = steps;
    o->eval_each_epoch = 0;
}

static sh_ps_config ps_config(sh_net *net, sh_ps_consistency mode)
{
    sh_ps_config c = {0};
    c.nservers = 1;
    c.consistency = mode;
    c.nparams = sh_net_nparams(net);
    c.ranges = sh_net_param_ranges(net, &c.nranges);
    c.optim = sh_net_get_config(net)->optim;
    c.lr = sh_net_get_config(net)->lr;
    c.timeout_ms = 20000;
    return c;
}

static void job(shoal_comm *c, void *arg)
{
    sh_ps_consistency mode = *(sh_ps_consistency *)arg;
    int r = shoal_comm_rank(c), W = shoal_comm_world(c) - 1;
    sh_train_opts o;
    if (r == 0) {
        /* The server: the net only for its size, initial weights and optimizer settings. */
        opts_for(&o, WORKER_BATCH, 1);
        sh_trainer *t = NULL;
        CHECK(sh_trainer_create(&o, &t) == SHOAL_OK, "%s", shoal_last_error_message());
        if (!t) return;
        sh_net *net = sh_trainer_net(t);
        sh_ps_config pc = ps_config(net, mode);
        sh_ps_server *s = NULL;
        CHECK(sh_ps_server_create(c, &pc, sh_net_params(net), &s) == SHOAL_OK, "%s", shoal_last_error_message());
        CHECK(sh_ps_server_run(s) == SHOAL_OK, "%s", shoal_last_error_message());
        size_t lo, n;
        const float *p = sh_ps_server_params(s, &lo, &n);
        int finite = 1;
        for (size_t i = 0; i < n; i++) finite &= isfinite(p[i]);
        CHECK(finite, "server weights are not finite");
        if (mode == SH_PS_SYNC) {
            /* The reference: one process, the same global batch, the same data order. */
            sh_train_opts ro;
            opts_for(&ro, WORKER_BATCH * W, STEPS);
            sh_trainer *ref = NULL;
            sh_train_report rr;
            CHECK(sh_trainer_create(&ro, &ref) == SHOAL_OK && sh_trainer_run(ref, &rr) == SHOAL_OK, "%s",
                  shoal_last_error_message());
            const float *q = sh_net_params(sh_trainer_net(ref));
            double worst = 0;
            for (size_t i = 0; i < n; i++) {
                double d = fabs((double)p[i] - q[lo + i]) / (fabs((double)q[lo + i]) + 1e-3);
                if (d > worst) worst = d;
            }
            CHECK(worst < 1e-5, "sync parameter server vs one process: %.3g relative", worst);
            sh_trainer_destroy(ref);
        }
        sh_ps_server_destroy(s);
        sh_trainer_destroy(t);
        return;
    }
    /* A worker: the real trainer with the parameter-server strategy. */
    opts_for(&o, WORKER_BATCH, STEPS);
    sh_trainer *t0 = NULL;
    opts_for(&o, WORKER_BATCH, 1);
    CHECK(sh_trainer_create(&o, &t0) == SHOAL_OK, "%s", shoal_last_error_message());
    sh_ps_config pc = ps_config(sh_trainer_net(t0), mode);
    sh_trainer_destroy(t0);
    sh_ps_worker_opts wo = {mode == SH_PS_ASYNC ? 2 : 1, mode == SH_PS_ASYNC ? 2 : 1};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_ps_create(c, &pc, &wo, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    opts_for(&o, WORKER_BATCH, STEPS);
    o.strategy = st;
    sh_trainer *t = NULL;
    sh_train_report rep;
    CHECK(sh_trainer_create(&o, &t) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(t && sh_trainer_run(t, &rep) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(rep.steps == STEPS, "worker ran %lld steps", (long long)rep.steps);
    CHECK(isfinite(rep.train_loss) && rep.train_loss < 1.3, "loss %.3f did not fall (4 classes: 1.386 at chance)",
          rep.train_loss);
    sh_trainer_destroy(t);
    sh_strategy_destroy(st); /* says goodbye to the servers */
    (void)W;
}

static void t_sync_matches_one_process(void)
{
    sh_ps_consistency m = SH_PS_SYNC;
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(2, &o, job, &m);
    RUN_RANKS(3, &o, job, &m);
}

static void t_async_trains(void)
{
    sh_ps_consistency m = SH_PS_ASYNC;
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    RUN_RANKS(3, &o, job, &m);
}

/* A worker whose server is gone writes no checkpoint (it would lack the server's shard): the
 * server ends once the workers said goodbye, and its process exits; each worker then asks
 * for a checkpoint and is refused, naming the server, with no file written. */
static void save_job(shoal_comm *c, void *arg)
{
    (void)arg;
    sh_train_opts o;
    opts_for(&o, WORKER_BATCH, 1);
    sh_trainer *t0 = NULL;
    CHECK(sh_trainer_create(&o, &t0) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!t0) return;
    sh_ps_config pc = ps_config(sh_trainer_net(t0), SH_PS_SYNC);
    if (shoal_comm_rank(c) == 0) {
        sh_ps_server *s = NULL;
        CHECK(sh_ps_server_create(c, &pc, sh_net_params(sh_trainer_net(t0)), &s) == SHOAL_OK, "%s",
              shoal_last_error_message());
        CHECK(s && sh_ps_server_run(s) == SHOAL_OK, "%s", shoal_last_error_message());
        sh_ps_server_destroy(s);
        sh_trainer_destroy(t0);
        return; /* this process exits */
    }
    sh_trainer_destroy(t0);
    sh_ps_worker_opts wo = {1, 1};
    sh_strategy *st = NULL;
    CHECK(sh_strategy_ps_create(c, &pc, &wo, &st) == SHOAL_OK, "%s", shoal_last_error_message());
    opts_for(&o, WORKER_BATCH, 3);
    o.strategy = st;
    sh_trainer *t = NULL;
    sh_train_report rep;
    CHECK(sh_trainer_create(&o, &t) == SHOAL_OK && sh_trainer_run(t, &rep) == SHOAL_OK, "%s",
          shoal_last_error_message());
    int lead = 0;
    CHECK(sh_strategy_ps_close(st, &lead) == SHOAL_OK, "%s", shoal_last_error_message());
    for (int i = 0; i < 200 && shoal_peer_check(c, 0) == SHOAL_OK; i++) usleep(50000);
    char path[600];
    snprintf(path, sizeof path, "%s/gone-%d.ckpt", dir, shoal_comm_rank(c));
    shoal_result rc = t ? sh_trainer_save(t, path) : SHOAL_ERR_INTERNAL;
    CHECK(rc == SHOAL_ERR_PEER && strstr(shoal_last_error_message(), "parameter server 0 (rank 0) is gone") &&
              strstr(shoal_last_error_message(), "no checkpoint written"),
          "rc %d: %s", rc, shoal_last_error_message());
    CHECK(access(path, F_OK) != 0, "%s was written without its server", path);
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
}

static void t_no_checkpoint_without_the_servers(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    RUN_RANKS(3, &o, save_job, NULL);
}

int main(void)
{
    check_begin("test_strategy_ps", 240);
    if (tiny_make_dir(dir, sizeof dir) != 0) {
        CHECK(0, "cannot make the tiny dataset");
        return check_end();
    }
    snprintf(cfg, sizeof cfg, "%s/other.cfg", dir);
    RUN(t_sync_matches_one_process);
    RUN(t_async_trains);
    RUN(t_no_checkpoint_without_the_servers);
    tiny_remove_dir(dir);
    return check_end();
}
