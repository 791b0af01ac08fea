/* train_dist.c — one rank's part of a distributed `shoal train`: joins the communicator
 * from the environment; in a parameter-server job the first S ranks serve the parameters
 * and the others train as workers.
 * Not here: flags and the -n relaunch (cmd_train.c), the servers and strategy (src/train).
 * Proved by tests/cli/test_train_ps.c. */
#include "cli/train_dist.h"

#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "shoal/comm.h"

int sh_train_in_job(void)
{
    static const char *worlds[] = {"SHOAL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
        long w = 0;
        if (sh_env_is_set(worlds[i]) && sh_env_long(worlds[i], &w) == SHOAL_OK && w > 1) return 1;
    }
    return 0;
}

/* The model alone (no dataset, no optimizer): its size, batch, optimizer settings and the
 * initial weights every rank would draw from the seed, which the servers start from. */
static shoal_result load_model(const sh_train_opts *o, sh_net **out)
{
    return sh_net_load(o->cfg_path, o->batch, o->seed, out);
}

static sh_ps_config ps_config(sh_net *net, const sh_train_ps_opts *p)
{
    sh_ps_config c;
    memset(&c, 0, sizeof c);
    c.nservers = p->nservers;
    c.consistency = p->consistency;
    c.staleness = p->staleness;
    c.nparams = sh_net_nparams(net);
    c.ranges = sh_net_param_ranges(net, &c.nranges);
    c.optim = sh_net_get_config(net)->optim;
    c.lr = sh_net_get_config(net)->lr;
    c.die_rank = p->die_rank;
    c.die_after = p->die_after > 0 ? p->die_after : 0;
    return c;
}

static const char *mode_name(sh_ps_consistency m)
{
    return m == SH_PS_SYNC ? "sync" : m == SH_PS_ASYNC ? "async" : "ssp";
}

shoal_result sh_train_ps_rank(const sh_train_opts *o, const sh_train_ps_opts *p, sh_train_report *r,
                              int *reporter)
{
    *reporter = 0;
    shoal_comm *c = NULL;
    SH_TRY(shoal_comm_create(NULL, &c));
    int rank = shoal_comm_rank(c), world = shoal_comm_world(c);
    shoal_result rc = SHOAL_OK;
    if (p->nservers < 1 || p->nservers >= world) {
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--servers %d needs at least one worker among the %d ranks",
                     p->nservers, world);
        goto out;
    }
    sh_net *model = NULL;
    rc = load_model(o, &model);
    if (rc != SHOAL_OK) goto out;
    sh_ps_config cfg = ps_config(model, p);
    cfg.save_path = o->save_path;
    cfg.save_every = o->save_every_steps;
    cfg.resume_path = o->resume_path;
    if (rank < p->nservers) {
        long log_ms = 5000;
        rc = sh_env_long("SHOAL_PS_LOG_MS", &log_ms);
        if (rc != SHOAL_OK) {
            sh_net_destroy(model);
            goto out;
        }
        cfg.clock_log = o->quiet ? NULL : stderr; /* each worker's clock and the spread */
        cfg.clock_log_ms = (int)log_ms;
        sh_ps_server *s = NULL;
        rc = sh_ps_server_create(c, &cfg, sh_net_params(model), &s);
        sh_net_destroy(model);
        if (rc == SHOAL_OK) rc = sh_ps_server_run(s);
        if (s) {
            sh_ps_stats st;
            sh_ps_server_stats(s, &st);
            if (!o->quiet)
                fprintf(stderr,
                        "server %d (%s): %lld pushes, %lld pulls (%lld waited), %.1f MB pushed, "
                        "CPU %.2f s (%.2f ms per MB), largest clock spread %lld, %d workers dropped, "
                        "%lld messages refused\n",
                        rank, mode_name(p->consistency), (long long)st.pushes, (long long)st.pulls,
                        (long long)st.deferred_pulls, st.pushed_mb, st.cpu_s,
                        st.pushed_mb > 0 ? st.cpu_s * 1e3 / st.pushed_mb : 0.0, (long long)st.max_spread,
                        st.dropped_workers, (long long)st.refused);
            sh_ps_server_destroy(s);
        }
        goto out;
    }
    sh_net_destroy(model);
    cfg.ranges = NULL; /* pointed into the model; workers do not apply the optimizer */
    cfg.nranges = 0;
    sh_ps_worker_opts wo = p->worker;
    if (rank - p->nservers == p->delay_rank) wo.delay_ms = p->delay_ms;
    sh_strategy *st = NULL;
    rc = sh_strategy_ps_create(c, &cfg, &wo, &st);
    if (rc != SHOAL_OK) goto out;
    sh_train_opts wopts = *o;
    wopts.strategy = st;
    wopts.local_ranks = shoal_comm_local_world(c);
    if (st->rank != 0) {
        wopts.save_path = NULL; /* worker 0 reports and saves */
        wopts.logdir = NULL;
    }
    sh_trainer *t = NULL;
    rc = sh_trainer_create(&wopts, &t);
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, r);
    *reporter = rc == SHOAL_OK && st->rank == 0;
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
out:
    if (rc != SHOAL_OK) sh_err_prefix("rank %d: ", rank);
    shoal_comm_destroy(c);
    return rc;
}

shoal_result sh_train_dp_rank(const sh_train_opts *o, const sh_train_dp_opts *d, sh_train_report *r,
                              int *reporter)
{
    *reporter = 0;
    shoal_comm *c = NULL;
    SH_TRY(shoal_comm_create(NULL, &c));
    int rank = shoal_comm_rank(c), world = shoal_comm_world(c);
    shoal_result rc = SHOAL_OK;
    sh_train_opts wo = *o;
    wo.local_ranks = shoal_comm_local_world(c);
    int batch = o->batch;
    if (!batch) { /* the cfg's batch */
        sh_net *model = NULL;
        rc = load_model(o, &model);
        if (rc != SHOAL_OK) goto out;
        batch = sh_net_batch(model);
        sh_net_destroy(model);
    }
    if (d->strong) {
        if (batch % world) {
            rc = SH_FAIL(SHOAL_ERR_INVALID, "--scaling strong: the global batch %d does not split into %d "
                         "equal shares; choose a batch divisible by the rank count (--batch)", batch, world);
            goto out;
        }
        wo.batch = batch / world;
    } else {
        wo.batch = batch;
        if (d->lr_linear) wo.lr_scale = (double)world;
    }
    sh_dp_opts dopts = {d->bucket_mb, wo.batch, d->die_rank, d->die_step};
    sh_strategy *st = NULL;
    rc = sh_strategy_allreduce_create(c, &dopts, &st);
    if (rc != SHOAL_OK) goto out;
    wo.strategy = st;
    /* Every rank keeps save_path: a checkpoint is a collective step (the ranks that split the
     * optimizer's update first make its state whole), and only rank 0 writes the file. */
    if (rank != 0) wo.logdir = NULL;
    sh_trainer *t = NULL;
    rc = sh_trainer_create(&wo, &t);
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, r);
    if (rc == SHOAL_OK && rank == 0 && o->profile) {
        sh_dp_profile pr;
        sh_strategy_allreduce_profile(st, &pr);
        double step = r->profile.data + r->profile.forward + r->profile.backward + r->profile.comm_wait +
                      r->profile.optimizer;
        double comm = pr.steps ? pr.comm_s / (double)pr.steps : 0;
        double hidden = comm > 0 ? 1.0 - r->profile.comm_wait / comm : 0;
        if (hidden < 0) hidden = 0;
        fprintf(stderr,
                "profile per step (ms): data %.2f, forward %.2f, backward %.2f, waiting for allreduce %.2f, "
                "optimizer %.2f, total %.2f; allreduce in flight %.2f ms per step (%.1f MB), %.0f%% of it "
                "hidden behind backward\n",
                r->profile.data * 1e3, r->profile.forward * 1e3, r->profile.backward * 1e3,
                r->profile.comm_wait * 1e3, r->profile.optimizer * 1e3, step * 1e3, comm * 1e3,
                pr.steps ? pr.bytes / (double)pr.steps / 1e6 : 0.0, 100 * hidden);
    }
    *reporter = rc == SHOAL_OK && rank == 0;
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
out:
    if (rc != SHOAL_OK) sh_err_prefix("rank %d: ", rank);
    shoal_comm_destroy(c);
    return rc;
}
