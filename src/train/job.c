/* job.c — one process's part of a training job: alone, or a rank of the job's communicator
 * in the role its layout gives it (data-parallel rank, parameter server or worker, pipeline
 * stage, tensor-parallel rank, hybrid rank); every role that trains runs one way, a row of hooks.
 * Not here: flags (src/cli/cmd_train.c), the trainer (trainer.c), the data-parallel row's strategy
 * and figures (dp/job_dp.c), the strategies (dp/, ps/, mp/).
 * Proved by tests/cli/test_train_dp.c, test_train_ps.c, test_train_pipeline_tp.c, tests/train/test_api.c. */
#include "train/job.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "shoal/comm.h"
#include "nn/cfg.h"
#include "train/mp/mp.h"
#include "train/plan/auto.h"
#include "train/run_files.h"
#include "train/ps/layout.h"
#include "train/timeline.h"
#include "train/snapshot.h"

void sh_job_opts_default(sh_job_opts *o)
{
    memset(o, 0, sizeof *o);
    sh_train_opts_default(&o->train);
    o->layout = SH_LAYOUT_DATA_PARALLEL;
    o->bucket_mb = 1; /* LeNet on 2 ranks: 89% of the allreduce hidden at 1 MB, 22% at 4 (one bucket) */
    shoal_codec_opts_default(&o->codec);
    o->nservers = 1;
    o->consistency = SH_PS_SYNC;
    o->staleness = 3;
    o->worker.push_every = 1;
    o->worker.pull_every = 1;
    o->timeline_hi = -1;
}

int sh_job_is_launched(void)
{
    shoal_job_env e;
    return shoal_job_env_read(&e) == SHOAL_OK && e.world > 1;
}

shoal_result sh_job_check_compress(const sh_job_opts *o)
{
    if ((o->layout == SH_LAYOUT_PIPELINE || o->layout == SH_LAYOUT_TENSOR || o->layout == SH_LAYOUT_HYBRID) && o->sfb)
        return SH_FAIL(SHOAL_ERR_INVALID, "--sfb needs plain data parallelism (--%s exchanges gradients of "
                       "micro-batches or of layer shares, not per-image factors); use --compress alone",
                       o->layout == SH_LAYOUT_PIPELINE ? "pipeline"
                       : o->layout == SH_LAYOUT_TENSOR ? "tensor-parallel" : "hybrid");
    if (o->layout != SH_LAYOUT_PARAM_SERVER) return SHOAL_OK;
    if (o->codec.codec == SHOAL_CODEC_LOWRANK)
        return SH_FAIL(SHOAL_ERR_INVALID, "--compress lowrank needs data parallelism (PowerSGD sums its factors "
                       "over the ranks); with --ps use fp16, bf16, 1bit or topk:F");
    return SHOAL_OK;
}

const char *sh_job_role_name(sh_job_role role)
{
    switch (role) {
    case SH_ROLE_ALONE: return "alone";
    case SH_ROLE_DP_RANK: return "data-parallel rank";
    case SH_ROLE_PS_SERVER: return "server";
    case SH_ROLE_PS_WORKER: return "worker";
    case SH_ROLE_PIPE_STAGE: return "pipeline stage";
    case SH_ROLE_TP_RANK: return "tensor-parallel rank";
    case SH_ROLE_HYBRID_RANK: return "hybrid rank";
    }
    return "?";
}

/* The layout's role for this rank: the one place that maps ranks to work. */
static shoal_result plan_role(const sh_job_opts *o, int rank, int world, sh_job_role *role)
{
    switch (o->layout) {
    case SH_LAYOUT_DATA_PARALLEL:
        *role = SH_ROLE_DP_RANK;
        return SHOAL_OK;
    case SH_LAYOUT_PARAM_SERVER:
        if (o->nservers < 1 || o->nservers >= world)
            return SH_FAIL(SHOAL_ERR_INVALID, "--servers %d needs at least one worker among the %d ranks",
                           o->nservers, world);
        *role = rank < o->nservers ? SH_ROLE_PS_SERVER : SH_ROLE_PS_WORKER;
        return SHOAL_OK;
    case SH_LAYOUT_PIPELINE:
        if (o->stages < 1 || world % o->stages)
            return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d does not divide the %d ranks into replicas of "
                           "%d stages; run -n with a multiple of %d (replicas x stages)", o->stages, world,
                           o->stages, o->stages < 1 ? 1 : o->stages);
        if (o->tensor_ranks > 1 && world % (o->stages * o->tensor_ranks))
            return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d --tensor-parallel %d does not divide the %d ranks into "
                           "replicas of %d stages x %d tensor ranks; run -n with a multiple of %d (replicas x S x T)",
                           o->stages, o->tensor_ranks, world, o->stages, o->tensor_ranks,
                           o->stages * o->tensor_ranks);
        *role = SH_ROLE_PIPE_STAGE;
        return SHOAL_OK;
    case SH_LAYOUT_TENSOR:
        if (o->tensor_ranks < 2 || world % o->tensor_ranks)
            return SH_FAIL(SHOAL_ERR_INVALID, "--tensor-parallel %d does not divide the %d ranks into replicas "
                           "of %d; run -n with a multiple of %d (replicas x T)", o->tensor_ranks, world,
                           o->tensor_ranks, o->tensor_ranks < 2 ? 2 : o->tensor_ranks);
        *role = SH_ROLE_TP_RANK;
        return SHOAL_OK;
    case SH_LAYOUT_HYBRID:
        *role = SH_ROLE_HYBRID_RANK;
        return SHOAL_OK;
    }
    return SH_FAIL(SHOAL_ERR_INVALID, "job: unknown layout %d", (int)o->layout);
}

/* The batch train.batch or the cfg's gives each replica: under --scaling strong the global
 * batch, split across the replicas; 0 where none is given and nothing splits it (the
 * strategy reads the cfg's). replicas 0: the role does not scale. */
shoal_result sh_job_replica_batch(const sh_job_opts *o, int replicas, int *batch)
{
    *batch = o->train.batch;
    if (!o->strong_scaling || replicas < 2) return SHOAL_OK;
    if (!*batch) SH_TRY(sh_net_cfg_batch(o->train.cfg_path, batch));
    if (*batch % replicas)
        return SH_FAIL(SHOAL_ERR_INVALID, "--scaling strong: the global batch %d does not split into %d equal "
                       "shares, one per replica; choose a batch divisible by %d (--batch)", *batch, replicas,
                       replicas);
    *batch /= replicas;
    return SHOAL_OK;
}

shoal_result sh_job_whole_net(const sh_job_opts *o, int *batch, sh_net **out)
{
    if (!*batch) SH_TRY(sh_net_cfg_batch(o->train.cfg_path, batch));
    return sh_net_load(o->train.cfg_path, *batch, o->train.seed, out);
}

static shoal_result train_alone(const sh_job_opts *o, sh_job_report *r);

/* --logdir: this run's folder in it (run_files.c), chosen by rank 0 and told to the others (c
 * NULL: alone). A rank 0 that fails still sends: the others learn it from the empty name. */
static shoal_result run_logdir(const sh_job_opts *o, shoal_comm *c, char *dir, size_t nbytes)
{
    memset(dir, 0, nbytes);
    shoal_result rc = SHOAL_OK;
    if (!c || shoal_comm_rank(c) == 0)
        rc = sh_run_files_run_dir(o->train.logdir, o->run_name, o->train.cfg_path, o->train.resume_path != NULL,
                                  dir, nbytes);
    if (rc != SHOAL_OK) memset(dir, 0, nbytes);
    if (!c) return rc;
    shoal_result b = shoal_broadcast(c, dir, dir, nbytes, SHOAL_UINT8, 0);
    if (rc != SHOAL_OK) return rc;
    SH_TRY(b);
    if (!dir[0]) return SH_FAIL(SHOAL_ERR_IO, "--logdir %s: rank 0 could not make this run's folder", o->train.logdir);
    return SHOAL_OK;
}

static shoal_result run_alone(const sh_job_opts *o_in, sh_job_report *r)
{
    sh_job_opts jo = *o_in; /* the same, with the run's own folder under --logdir */
    const sh_job_opts *o = &jo;
    char logdir[4096];
    if (o->parallel_auto && o->layout_out)
        fprintf(o->layout_out, "--parallel auto: one process, nothing to divide; training alone\n");
    if (o->layout == SH_LAYOUT_TENSOR && o->tensor_ranks > 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "--tensor-parallel %d needs %d ranks: add -n %d, or run under "
                       "shoal launch, mpirun or srun", o->tensor_ranks, o->tensor_ranks, o->tensor_ranks);
    if (o->layout == SH_LAYOUT_HYBRID)
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid needs ranks to split the connected layers across: add -n N, or "
                       "run under shoal launch, mpirun or srun");
    if (o->layout == SH_LAYOUT_PIPELINE && o->stages * (o->tensor_ranks > 1 ? o->tensor_ranks : 1) > 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "--pipeline %d needs %d ranks or a multiple: add -n %d, or run "
                       "under shoal launch, mpirun or srun", o->stages, o->stages, o->stages);
    if (o->train.logdir) {
        SH_TRY(run_logdir(o_in, NULL, logdir, sizeof logdir));
        jo.train.logdir = logdir;
    }
    sh_timeline *tl = NULL;
    if (o->timeline_path) SH_TRY(sh_timeline_start(NULL, o->timeline_path, o->timeline_lo, o->timeline_hi,
                                                   "alone", &tl));
    shoal_result rc = train_alone(o, r);
    if (rc == SHOAL_OK && tl) rc = sh_timeline_finish(tl);
    else sh_timeline_abandon(tl);
    return rc;
}

static shoal_result train_alone(const sh_job_opts *o, sh_job_report *r)
{
    if (o->layout == SH_LAYOUT_PARAM_SERVER)
        return SH_FAIL(SHOAL_ERR_INVALID, "--ps needs ranks: add -n WORKERS, or run under shoal launch, "
                       "mpirun or srun");
    if (o->codec.codec != SHOAL_CODEC_NONE || o->sfb)
        SH_LOG_W("train", "--compress/--sfb: one process has no gradients to send; training uncompressed");
    sh_train_opts to = o->train;
    sh_strategy *st = NULL;
    shoal_result rc = o->lbfgs ? sh_job_dp_lbfgs_create(o, NULL, &st) : SHOAL_OK;
    to.strategy = st; /* NULL: the trainer's single-process strategy */
    sh_trainer *t = NULL;
    if (rc == SHOAL_OK) rc = sh_trainer_create(&to, &t);
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, &r->train);
    sh_trainer_destroy(t);
    sh_strategy_destroy(st);
    r->reporter = rc == SHOAL_OK;
    return rc;
}

/* What servers and workers agree on, from the model's [net] section (optimizer and schedule)
 * and, on a plain parameter server, its size and decay ranges. */
static sh_ps_config ps_config(const sh_job_opts *o, const sh_net_config *nc)
{
    sh_ps_config c;
    memset(&c, 0, sizeof c);
    c.nservers = o->nservers;
    c.consistency = o->consistency;
    c.staleness = o->staleness;
    c.optim = nc->optim;
    c.lr = nc->lr;
    c.codec = o->codec;
    c.quorum = o->quorum;
    c.save_path = o->train.save_path;
    c.save_every = o->train.save_every_steps;
    c.resume_path = o->train.resume_path;
    c.after_round = o->after_server_round;
    c.hook_ctx = o->train.hook_ctx;
    c.settings = o->agreed; /* compared again at each worker's first contact */
    return c;
}

static int over_layout(const sh_job_opts *o) { return o->stages > 0 || o->tensor_ranks > 1; }

/* A server of cfg's vector from init (copied: the caller may free it once this returns),
 * its clock lines and server 0's TensorBoard file set up. */
static shoal_result server_open(const sh_job_opts *o, shoal_comm *c, sh_ps_config *cfg, const float *init,
                                sh_ps_server **srv, sh_tb **tb, int rank)
{
    long log_ms = 5000;
    SH_TRY(sh_env_long("SHOAL_PS_LOG_MS", &log_ms));
    cfg->clock_log = o->server_log; /* each worker's clock and the spread */
    cfg->clock_log_ms = (int)log_ms;
    cfg->on_drop = shoal_job_note_dropped; /* the launcher stops waiting for that rank */
    /* Server 0 writes the workers' clocks into the run's TensorBoard directory, beside
     * worker 0's event file: TensorBoard shows one run with both. */
    if (o->train.logdir && rank == 0) SH_TRY(sh_tb_open(o->train.logdir, tb));
    if (*tb) sh_tb_set_autoflush(*tb, 0);
    cfg->tb = *tb;
    return sh_ps_server_create(c, cfg, init, srv);
}

static shoal_result server_serve(sh_ps_server *s, sh_tb *tb, sh_job_report *r)
{
    shoal_result rc = s ? sh_ps_server_run(s) : SHOAL_OK;
    if (s) {
        sh_ps_server_stats(s, &r->server_stats);
        r->has_server_stats = 1;
        sh_ps_server_destroy(s);
    }
    sh_tb_close(tb);
    return rc;
}

/* A server of model-parallel replicas' parts: the workers' communicator split off (the
 * servers take no part in it), the vector's layout and first weights from the workers. */
static shoal_result run_ps_layout_server(const sh_job_opts *o, shoal_comm *c, sh_job_report *r)
{
    shoal_comm *servers = NULL;
    SH_TRY(shoal_comm_split(c, 1, r->rank, &servers)); /* collective: the workers split theirs */
    shoal_comm_destroy(servers);
    sh_ps_layout l;
    SH_TRY(sh_ps_layout_agree(c, o->nservers, -1, NULL, &l));
    sh_cfg *cfgf = NULL;
    sh_net_config nc;
    float *vec = NULL;
    sh_ps_server *s = NULL;
    sh_tb *tb = NULL;
    shoal_result rc = sh_calloc(l.nparams ? l.nparams : 1, sizeof *vec, (void **)&vec);
    if (rc == SHOAL_OK) rc = sh_ps_layout_start(c, &l, 0, NULL, vec);
    if (rc == SHOAL_OK) rc = sh_cfg_load(o->train.cfg_path, &cfgf);
    if (rc == SHOAL_OK) rc = sh_net_config_parse(sh_cfg_section_at(cfgf, 0), &nc);
    sh_ps_config cfg;
    if (rc == SHOAL_OK) {
        cfg = ps_config(o, &nc);
        cfg.nparams = l.nparams;
        cfg.ranges = l.ranges;
        cfg.nranges = l.nranges;
        cfg.worker_lo = l.worker_lo;
        cfg.worker_count = l.worker_count;
        rc = server_open(o, c, &cfg, vec, &s, &tb, r->rank);
    }
    free(vec);
    sh_cfg_destroy(cfgf);
    if (rc == SHOAL_OK) rc = server_serve(s, tb, r);
    else sh_tb_close(tb);
    sh_ps_layout_fini(&l);
    return rc;
}

/* A server starts from --weights, else from the weights every rank would draw from the
 * seed; the net is built for them (one thread, no pool) and freed before serving. */
static shoal_result run_ps_server(const sh_job_opts *o, shoal_comm *c, sh_job_report *r)
{
    if (over_layout(o)) return run_ps_layout_server(o, c, r);
    if (o->sfb) { /* the workers' communicator for their factors: the servers take no part */
        shoal_comm *servers = NULL;
        SH_TRY(shoal_comm_split(c, 1, r->rank, &servers));
        shoal_comm_destroy(servers);
    }
    sh_net *model = NULL;
    int batch = o->train.batch;
    SH_TRY(sh_job_whole_net(o, &batch, &model));
    shoal_result rc = SHOAL_OK;
    /* --weights: the servers' shards start from the file (workers pull them) */
    if (o->train.weights_path && !o->train.resume_path) rc = sh_snapshot_load_weights(model, o->train.weights_path);
    sh_ps_config cfg = ps_config(o, sh_net_get_config(model));
    cfg.nparams = sh_net_nparams(model);
    cfg.ranges = sh_net_param_ranges(model, &cfg.nranges);
    const float *init = sh_net_params(model);
    sh_ps_pieces pieces = {0};
    float *packed = NULL;
    if (rc == SHOAL_OK && o->sfb) { /* --sfb: all but the factors' layers */
        rc = sh_ps_pieces_sfb(model, &pieces);
        if (rc == SHOAL_OK) rc = sh_calloc(pieces.total + 1, sizeof *packed, (void **)&packed);
        if (rc == SHOAL_OK) sh_ps_pieces_gather(&pieces, init, packed);
        cfg.nparams = pieces.total;
        cfg.ranges = pieces.ranges;
        cfg.nranges = pieces.nranges;
        init = packed;
    }
    sh_ps_server *s = NULL;
    sh_tb *tb = NULL;
    if (rc == SHOAL_OK) rc = server_open(o, c, &cfg, init, &s, &tb, r->rank);
    free(packed);
    sh_ps_pieces_fini(&pieces);
    sh_net_destroy(model);
    if (rc != SHOAL_OK) {
        sh_ps_server_destroy(s);
        sh_tb_close(tb);
        return rc;
    }
    return server_serve(s, tb, r);
}

/* ---- the roles that train: each a row of hooks, run by run_trainer_role ---- */

typedef struct {
    sh_job_role role;
    /* Replicas of the model the job's ranks form: under --scaling strong they split the global
     * batch, under --lr-scaling linear they multiply the learning rate. 0: no scaling. */
    int (*replicas)(const sh_job_opts *o, int world);
    /* The strategy and the net at batch images a replica (0: the cfg's), compression set up. */
    shoal_result (*create)(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net);
    void (*describe)(const sh_strategy *s, FILE *out); /* the layout lines rank 0 prints; NULL: none */
    /* 1: ranks reach checkpoints on their own (parameter-server workers): only the lead
     * writes the model, the others only their own state. 0: every rank takes part. */
    int solo_checkpoints;
    /* After training that went well: the role's figures into r; *reports (preset: job rank 0)
     * says whether this rank's report is the job's. NULL: nothing to add. */
    shoal_result (*finish)(const sh_job_opts *o, shoal_comm *c, sh_strategy *st, sh_job_report *r, int *reports);
} trainer_role;

static int all_ranks(const sh_job_opts *o, int world) { (void)o; return world; }
static int no_scaling(const sh_job_opts *o, int world) { (void)o, (void)world; return 0; }
static int tensor_width(const sh_job_opts *o) { return o->tensor_ranks > 1 ? o->tensor_ranks : 1; }
static int pipe_replicas(const sh_job_opts *o, int world) { return world / (o->stages * tensor_width(o)); }
static int tp_replicas(const sh_job_opts *o, int world) { return world / o->tensor_ranks; }

/* A worker whose replica is model-parallel (DistBelief): the layout on the workers'
 * communicator, its part's place in the servers' vector, the servers that hold it. */
static shoal_result ps_layout_create(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net)
{
    shoal_comm *wc = NULL;
    SH_TRY(shoal_comm_split(c, 0, shoal_comm_rank(c), &wc)); /* collective: the servers split theirs */
    int T = tensor_width(o), parts = (o->stages ? o->stages : 1) * T, g = shoal_comm_rank(wc);
    shoal_result rc;
    if (o->stages) {
        sh_pipe_opts po = {o->train.cfg_path, o->stages, o->micro_batches ? o->micro_batches : o->stages, batch,
                           o->train.seed};
        rc = sh_strategy_pipeline_tp_create(wc, &po, T, st, net);
    } else {
        sh_tp_opts to = {o->train.cfg_path, o->tensor_ranks, batch, o->train.seed};
        rc = sh_strategy_tensor_create(wc, &to, st, net);
    }
    if (rc != SHOAL_OK) {
        shoal_comm_destroy(wc);
        return rc;
    }
    sh_ps_layout l;
    rc = sh_ps_layout_agree(c, o->nservers, g % parts, *net, &l); /* rank g holds part g % parts */
    if (rc != SHOAL_OK) {
        shoal_comm_destroy(wc);
        return rc;
    }
    sh_ps_config cfg = ps_config(o, sh_net_get_config(*net));
    return sh_mp_servers_create(*st, c, wc, &cfg, &l, g < parts); /* takes wc and l */
}

static shoal_result ps_create(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net)
{
    if (over_layout(o)) return ps_layout_create(o, c, batch, st, net);
    SH_TRY(sh_job_whole_net(o, &batch, net));
    sh_ps_config cfg = ps_config(o, sh_net_get_config(*net));
    cfg.nparams = sh_net_nparams(*net); /* workers do not apply the optimizer: no decay ranges */
    if (!o->sfb) return sh_strategy_ps_create(c, &cfg, &o->worker, st);
    shoal_comm *wc = NULL; /* --sfb: the workers' own, for their factors */
    sh_ps_pieces pieces;
    SH_TRY(shoal_comm_split(c, 0, shoal_comm_rank(c), &wc));
    shoal_result rc = sh_ps_pieces_sfb(*net, &pieces);
    cfg.nparams = pieces.total;
    sh_ps_pieces_fini(&pieces);
    if (rc == SHOAL_OK) rc = sh_strategy_ps_create(c, &cfg, &o->worker, st);
    if (rc != SHOAL_OK) {
        shoal_comm_destroy(wc);
        return rc;
    }
    sh_strategy_ps_sfb(*st, wc); /* takes wc */
    return SHOAL_OK;
}

/* Say goodbye to the servers: the lowest worker they did not drop reports (over model-parallel
 * replicas the workers' rank 0). */
static shoal_result ps_finish(const sh_job_opts *o, shoal_comm *c, sh_strategy *st, sh_job_report *r, int *reports)
{
    (void)c, (void)r;
    if (!over_layout(o)) return sh_strategy_ps_close(st, reports);
    *reports = st->job_rank == 0;
    return sh_mp_servers_close(st);
}

/* --compress under a model-parallel layout: the codec of its data-parallel group (set before
 * attach), or one line where the layout has no such group. */
static void layout_compress(const sh_job_opts *o, shoal_comm *c, sh_strategy *st, int replicas, const char *flag)
{
    sh_mp_compress(st, &o->codec);
    if (o->codec.codec != SHOAL_CODEC_NONE && replicas < 2 && shoal_comm_rank(c) == 0)
        SH_LOG_W("train", "--compress: %s with one replica has no data-parallel group to compress; add ranks "
                 "(-n) for replicas", flag);
}

static shoal_result pipe_create(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net)
{
    sh_pipe_opts po = {o->train.cfg_path, o->stages, o->micro_batches ? o->micro_batches : o->stages, batch,
                       o->train.seed};
    SH_TRY(sh_strategy_pipeline_tp_create(c, &po, tensor_width(o), st, net));
    layout_compress(o, c, *st, pipe_replicas(o, shoal_comm_world(c)), "--pipeline");
    return SHOAL_OK;
}

/* Replica 0's stages' profiles, gathered to every rank (each rank's 8 figures). */
static shoal_result pipe_finish(const sh_job_opts *o, shoal_comm *c, sh_strategy *st, sh_job_report *r, int *reports)
{
    (void)reports;
    if (!o->train.profile) return SHOAL_OK;
    enum { NF = 8 };
    int world = shoal_comm_world(c), T = tensor_width(o);
    double *all = NULL;
    sh_pipe_profile p;
    sh_strategy_pipeline_profile(st, &p);
    double mine[NF] = {p.lo, p.hi, p.forward, p.backward, p.bubble, p.comm, p.step, p.stage};
    SH_TRY(sh_calloc((size_t)world * NF, sizeof *all, (void **)&all));
    shoal_result rc = shoal_allgather(c, mine, all, NF, SHOAL_FLOAT64);
    int n = o->stages < SH_JOB_MAX_PROFILED_STAGES ? o->stages : SH_JOB_MAX_PROFILED_STAGES;
    for (int k = 0; rc == SHOAL_OK && k < n; k++) { /* rank k T is replica 0's stage k */
        const double *a = all + (size_t)k * T * NF;
        sh_pipe_profile *q = &r->pipe_profile[k];
        q->stage = k;
        q->replica = 0;
        q->lo = (int)a[0];
        q->hi = (int)a[1];
        q->forward = a[2];
        q->backward = a[3];
        q->bubble = a[4];
        q->comm = a[5];
        q->step = a[6];
    }
    free(all);
    if (rc == SHOAL_OK) {
        r->pipe_nstages = n;
        r->has_pipe_profile = 1;
    }
    return rc;
}

static shoal_result tp_create(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net)
{
    sh_tp_opts to = {o->train.cfg_path, o->tensor_ranks, batch, o->train.seed};
    SH_TRY(sh_strategy_tensor_create(c, &to, st, net));
    layout_compress(o, c, *st, tp_replicas(o, shoal_comm_world(c)), "--tensor-parallel");
    return SHOAL_OK;
}

/* Hybrid: the batch (train.batch or the cfg's) is the global one whatever the scaling. */
static shoal_result hybrid_create(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net)
{
    sh_hybrid_opts ho = {o->train.cfg_path, o->hybrid, batch, o->train.seed};
    SH_TRY(sh_strategy_hybrid_create(c, &ho, st, net));
    sh_mp_compress(*st, &o->codec); /* the convolutional part's sums */
    return SHOAL_OK;
}

static shoal_result hybrid_finish(const sh_job_opts *o, shoal_comm *c, sh_strategy *st, sh_job_report *r,
                                  int *reports)
{
    (void)o, (void)c, (void)reports;
    sh_strategy_hybrid_profile(st, &r->hybrid_profile);
    r->has_hybrid_profile = 1;
    return SHOAL_OK;
}

/* Over model-parallel replicas: the layout's lines. */
static void ps_describe(const sh_strategy *s, FILE *out)
{
    if (!strcmp(s->ops->name, "tensor")) sh_strategy_tensor_describe(s, out);
    else if (!strcmp(s->ops->name, "pipeline")) sh_strategy_pipeline_describe(s, out);
}

static const trainer_role trainer_roles[] = {
    {SH_ROLE_DP_RANK, all_ranks, sh_job_dp_create, NULL, 0, sh_job_dp_finish},
    {SH_ROLE_PS_WORKER, no_scaling, ps_create, ps_describe, 1, ps_finish},
    {SH_ROLE_PIPE_STAGE, pipe_replicas, pipe_create, sh_strategy_pipeline_describe, 0, pipe_finish},
    {SH_ROLE_TP_RANK, tp_replicas, tp_create, sh_strategy_tensor_describe, 0, NULL},
    {SH_ROLE_HYBRID_RANK, no_scaling, hybrid_create, sh_strategy_hybrid_describe, 0, hybrid_finish},
};

/* A compressing strategy's figures (comm_stats) into the report. */
static void report_comm_stats(const sh_strategy *st, sh_job_report *r)
{
    sh_dp_profile *pr = &r->dp_profile;
    if (!st->ops->comm_stats || !st->ops->comm_stats(st, &pr->wire_nbytes, &pr->dense_nbytes, &pr->residual_norm))
        return;
    pr->compressed = 1;
    r->has_comm_stats = 1;
}

/* Every training role, one way: the replica's batch, the learning rate's scaling, the strategy
 * and its net, the layout lines, who logs and saves, training, the role's figures. */
static shoal_result run_trainer_role(const trainer_role *tr, const sh_job_opts *o, shoal_comm *c, sh_job_report *r)
{
    sh_train_opts wo = o->train;
    wo.local_ranks = shoal_comm_local_world(c);
    int replicas = tr->replicas(o, shoal_comm_world(c)), batch = 0;
    SH_TRY(sh_job_replica_batch(o, replicas, &batch));
    if (replicas > 0 && !o->strong_scaling && o->lr_linear) wo.lr_scale = (double)replicas;
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    shoal_result rc = tr->create(o, c, batch, &st, &net);
    if (rc != SHOAL_OK) {
        sh_net_destroy(net);
        sh_strategy_destroy(st);
        return rc;
    }
    if (st->job_rank == 0 && o->layout_out && tr->describe) {
        tr->describe(st, o->layout_out);
        fflush(o->layout_out);
    }
    /* Every rank helps with the job-wide figures; the lead alone writes TensorBoard. Where
     * ranks save on their own, the others keep only their own state (PATH.worker<k>). */
    wo.job_logs = wo.logdir != NULL;
    if (st->job_rank != 0) {
        wo.logdir = NULL;
        /* (ranks that hold parts of the model all take part in writing it) */
        if (tr->solo_checkpoints && !st->part && !sh_strategy_rank_state_count(st)) wo.save_path = NULL;
    }
    wo.strategy = st;
    sh_trainer *t = NULL;
    rc = sh_trainer_create_with_net(&wo, net, &t); /* takes net */
    if (rc == SHOAL_OK) rc = sh_trainer_run(t, &r->train);
    sh_trainer_destroy(t);
    int reports = r->rank == 0;
    if (rc == SHOAL_OK) report_comm_stats(st, r);
    if (rc == SHOAL_OK && tr->finish) rc = tr->finish(o, c, st, r, &reports);
    r->reporter = rc == SHOAL_OK && reports;
    sh_strategy_destroy(st);
    return rc;
}

/* The layout flags in words, for the check below. */
static void layout_words(const int64_t *v, char *buf, size_t nbytes)
{
    static const char *const names[] = {"data parallel", "--ps", "--pipeline", "--tensor-parallel", "--hybrid"};
    int n = snprintf(buf, nbytes, "%s", v[0] >= 0 && v[0] <= SH_LAYOUT_HYBRID ? names[v[0]] : "?");
    if (v[0] == SH_LAYOUT_PIPELINE) n += snprintf(buf + n, nbytes - (size_t)n, " %lld", (long long)v[1]);
    if (v[0] == SH_LAYOUT_PARAM_SERVER && v[1]) n += snprintf(buf + n, nbytes - (size_t)n, " --pipeline %lld", (long long)v[1]);
    if (v[2] > 1 && v[0] != SH_LAYOUT_DATA_PARALLEL && v[0] != SH_LAYOUT_HYBRID)
        n += snprintf(buf + n, nbytes - (size_t)n, "%s %lld", v[0] == SH_LAYOUT_TENSOR ? "" : " --tensor-parallel",
                      (long long)v[2]);
    if (v[3]) n += snprintf(buf + n, nbytes - (size_t)n, " --hogwild");
    if (v[4]) snprintf(buf + n, nbytes - (size_t)n, " --quorum %g", (double)v[4] / 1e6);
}

/* The settings every rank must share besides the layout flags: each changes which collectives a
 * rank starts and when (the data-parallel exchange's buckets, chunks and overlap; the pipeline's
 * deferred weight products), so a rank started with another value would wait on the others. */
static const char *const same_knobs[] = {"SHOAL_DP_SHARD",    "SHOAL_DP_WINDOW",   "SHOAL_DP_OVERLAP", "SHOAL_DP_CHUNK_KB",
                                         "SHOAL_DP_AHEAD_KB", "SHOAL_DP_GRAD_ROWS", "SHOAL_PIPE_DEFER"};
enum { NLAYOUT = 5, NKNOBS = sizeof same_knobs / sizeof same_knobs[0], NV = NLAYOUT + NKNOBS };
#define KNOB_BAD INT64_MIN /* a value sh_env_long refused: this rank stops with its own error */

/* A knob's value in words, for the check below. */
static void knob_words(int64_t v, char *buf, size_t nbytes)
{
    if (v == KNOB_BAD) snprintf(buf, nbytes, "an invalid value");
    else snprintf(buf, nbytes, "%lld", (long long)v);
}

/* Ranks started with different layouts or settings would wait on each other's collectives:
 * they stop here, before any role, naming the first rank that differs from rank 0. A rank whose
 * own setting is invalid takes part first, so that the others stop at once too. */
static shoal_result same_job_layout(const sh_job_opts *o, shoal_comm *c)
{
    int world = shoal_comm_world(c);
    int64_t mine[NV] = {o->layout, o->layout == SH_LAYOUT_PIPELINE || o->layout == SH_LAYOUT_PARAM_SERVER ? o->stages : 0,
                        o->tensor_ranks > 1 ? o->tensor_ranks : 1, o->hogwild, (int64_t)llround(o->quorum * 1e6)};
    shoal_result own = SHOAL_OK;
    for (int k = 0; k < NKNOBS; k++) {
        long v = 0;
        shoal_result e = sh_env_long(same_knobs[k], &v);
        if (e != SHOAL_OK && own == SHOAL_OK) own = e;
        mine[NLAYOUT + k] = e == SHOAL_OK ? v : KNOB_BAD;
    }
    int64_t *all = NULL;
    SH_TRY(sh_calloc((size_t)world * NV, sizeof *all, (void **)&all));
    shoal_result rc = shoal_allgather(c, mine, all, NV, SHOAL_INT64);
    if (rc == SHOAL_OK && own != SHOAL_OK) rc = own; /* its message names the variable */
    for (int r = 1; rc == SHOAL_OK && r < world; r++)
        if (memcmp(all + NV * r, all, NLAYOUT * sizeof *all)) {
            char theirs[160], lead[160];
            layout_words(all + NV * r, theirs, sizeof theirs);
            layout_words(all, lead, sizeof lead);
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d was started with %s but rank 0 with %s; start every rank "
                         "with the same layout flags", r, theirs, lead);
        } else {
            for (int k = 0; rc == SHOAL_OK && k < NKNOBS; k++) {
                int64_t a = all[NV * r + NLAYOUT + k], b = all[NLAYOUT + k];
                if (a == b) continue;
                char theirs[32], lead[32];
                knob_words(a, theirs, sizeof theirs);
                knob_words(b, lead, sizeof lead);
                rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d was started with %s=%s but rank 0 with %s; start every "
                             "rank with the same settings", r, same_knobs[k], theirs, lead);
            }
        }
    free(all);
    return rc;
}

/* FNV-1a of one line (without its '\n'). */
static uint64_t line_hash(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

/* Line i of text (no '\n'), or "" past the last. */
static size_t line_at(const char *text, int i, const char **start)
{
    for (; i > 0 && text; i--) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    *start = text ? text : "";
    const char *e = strchr(*start, '\n');
    return e ? (size_t)(e - *start) : strlen(*start);
}

/* "compress" from "--compress 1bit", "no --compress", "--save (given)". */
static void line_option(const char *line, char *name, size_t nbytes)
{
    const char *p = strstr(line, "--");
    p = p ? p + 2 : line;
    size_t n = strcspn(p, " \n");
    snprintf(name, nbytes, "%.*s", (int)(n < nbytes ? n : nbytes - 1), p);
}

enum { MAX_AGREED = 96, AGREED_LINE_NBYTES = 160 };

/* Every option the ranks must share (o->agreed), compared line by line: the first rank that
 * differs from rank 0 stops the job, naming the option and both values. Collective. */
static shoal_result same_options(const sh_job_opts *o, shoal_comm *c)
{
    int world = shoal_comm_world(c), nl = 0;
    int64_t mine[1 + MAX_AGREED] = {0};
    for (const char *p = o->agreed; p && *p && nl < MAX_AGREED; nl++) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        mine[1 + nl] = (int64_t)line_hash(p, n);
        p = e ? e + 1 : p + n;
    }
    mine[0] = nl;
    int64_t *all = NULL;
    SH_TRY(sh_calloc((size_t)world * (1 + MAX_AGREED), sizeof *all, (void **)&all));
    shoal_result rc = shoal_allgather(c, mine, all, 1 + MAX_AGREED, SHOAL_INT64);
    int bad_rank = -1, bad_line = -1;
    for (int r = 1; rc == SHOAL_OK && r < world && bad_rank < 0; r++)
        for (int i = 0; i < MAX_AGREED + 1 && bad_rank < 0; i++)
            if (all[(size_t)r * (1 + MAX_AGREED) + i] != all[i]) bad_rank = r, bad_line = i - 1;
    free(all);
    if (rc != SHOAL_OK || bad_rank < 0) return rc;
    /* every rank knows who differs: the two lines in words, from everyone (collective) */
    char line[AGREED_LINE_NBYTES] = "", *lines = NULL;
    if (bad_line >= 0) {
        const char *p;
        size_t n = line_at(o->agreed, bad_line, &p);
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
    }
    SH_TRY(sh_calloc((size_t)world, sizeof line, (void **)&lines));
    rc = shoal_allgather(c, line, lines, sizeof line, SHOAL_UINT8);
    if (rc == SHOAL_OK) {
        const char *theirs = lines + (size_t)bad_rank * sizeof line, *lead = lines;
        const char *host = shoal_comm_host(c, bad_rank);
        char name[64];
        line_option(lead[0] ? lead : theirs, name, sizeof name);
        if (bad_line < 0 || !lead[0] || !theirs[0])
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d (%s) runs another shoal than rank 0 (its options differ in "
                         "number); start every rank with the same build", bad_rank, host ? host : "?");
        else if (strstr(lead, "(given)") || strstr(theirs, "(given)"))
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d (%s) was started with %s but rank 0 with %s; give --%s on every "
                         "rank (each machine may name its own file) or on none", bad_rank, host ? host : "?", theirs,
                         lead, name);
        else
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "rank %d (%s) was started with %s but rank 0 with %s; start every rank "
                         "with the same --%s", bad_rank, host ? host : "?", theirs, lead, name);
    }
    free(lines);
    return rc;
}

static shoal_result run_role(const sh_job_opts *o, shoal_comm *c, sh_job_report *r)
{
    if (r->role == SH_ROLE_PS_SERVER) return run_ps_server(o, c, r);
    for (size_t i = 0; i < sizeof trainer_roles / sizeof trainer_roles[0]; i++)
        if (trainer_roles[i].role == r->role) return run_trainer_role(&trainer_roles[i], o, c, r);
    return SH_FAIL(SHOAL_ERR_INTERNAL, "job: role %d has no runner", (int)r->role);
}

shoal_result sh_job_run(const sh_job_opts *o_in, sh_job_report *r)
{
    memset(r, 0, sizeof *r);
    r->world = 1;
    r->role = SH_ROLE_ALONE;
    if (o_in->train.strategy) return SH_FAIL(SHOAL_ERR_INVALID, "job: the job chooses the strategy; leave it NULL");
    if (!sh_job_is_launched()) return run_alone(o_in, r);
    shoal_comm *c = NULL;
    shoal_comm_opts co;
    shoal_comm_opts_default(&co);
    co.elastic_min = o_in->elastic_min;
    co.elastic_max = o_in->elastic_max;
    SH_TRY(shoal_comm_create(&co, &c));
    r->rank = shoal_comm_rank(c);
    r->world = shoal_comm_world(c);
    sh_job_opts jo = *o_in; /* the same, with the run's own folder under --logdir */
    const sh_job_opts *o = &jo;
    char logdir[4096];
    shoal_regroup g = {0};
    int joined = o->elastic_min > 0 && shoal_comm_last_regroup(c, &g) == SHOAL_OK && g.generation > 0;
    shoal_result rc = SHOAL_OK;
    if (o->parallel_auto) rc = sh_plan_auto(c, &jo); /* the layout, chosen from the planner's predictions */
    if (rc == SHOAL_OK && !joined) rc = same_job_layout(o, c); /* a rank that joined later: the job checked */
    if (rc == SHOAL_OK && !joined) rc = same_options(o, c);
    if (rc == SHOAL_OK) rc = plan_role(o, r->rank, r->world, &r->role);
    if (rc == SHOAL_OK && o->train.logdir && !joined) {
        rc = run_logdir(o_in, c, logdir, sizeof logdir);
        jo.train.logdir = logdir;
    }
    if (o->elastic_min > 0) { /* data parallelism that regroups (train_api.c checked the layout) */
        int job_rank = shoal_comm_job_rank(c, r->rank); /* errors name it, as the launcher's lines do */
        if (rc == SHOAL_OK) rc = sh_elastic_run(o, &c, r);
        if (rc != SHOAL_OK) sh_err_prefix_rank(job_rank);
        shoal_comm_destroy(c);
        return rc;
    }
    sh_timeline *tl = NULL;
    if (rc == SHOAL_OK && o->timeline_path)
        rc = sh_timeline_start(c, o->timeline_path, o->timeline_lo, o->timeline_hi, sh_job_role_name(r->role), &tl);
    if (rc == SHOAL_OK) rc = sh_job_check_compress(o);
    if (rc == SHOAL_OK) rc = run_role(o, c, r);
    if (rc == SHOAL_OK && tl) rc = sh_timeline_finish(tl); /* collective: rank 0 writes */
    else sh_timeline_abandon(tl);
    if (rc != SHOAL_OK) sh_err_prefix_rank(r->rank); /* once, whoever named it first */
    shoal_comm_destroy(c);
    return rc;
}
