/* train_api.c — the public training API (shoal/train.h): checks that the options fit
 * together, turns them into a job (job.h), runs it, and turns its report into the public one;
 * the stop and save requests.
 * Not here: options by name (train_opts.c), the report's JSON (train_json.c), the job and
 * its roles (job.c), training (trainer.c).
 * Proved by tests/train/test_api.c (each layout on real ranks, errors, and
 * examples/train_lenet.c built and run). */
#include "shoal/train.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "base/file_kind.h"
#include "nn/cfg.h"
#include "train/caffe_job.h"
#include "train/job.h"
#include "train/train_opts.h"
#include "train/timeline.h"

static volatile sig_atomic_t stop_flag, save_flag;

void shoal_train_request_stop(void) { stop_flag = 1; }
void shoal_train_request_save(void) { save_flag = 1; }

static const char *set_or_null(const char *s) { return s && *s ? s : NULL; }

/* Each path the run reads names a file (the data: a file or a directory), checked before
 * anything opens it, so that a FIFO or a directory is one line and never a wait in open(). */
static shoal_result check_input_kinds(const shoal_train_opts *o)
{
    SH_TRY(sh_file_check_regular(o->cfg_path, "the model", "the model's .cfg file"));
    SH_TRY(sh_file_check_regular(set_or_null(o->resume_path), "--resume", "the checkpoint file (.ckpt)"));
    SH_TRY(sh_file_check_regular(set_or_null(o->weights_path), "--weights", "a .weights file or a checkpoint"));
    SH_TRY(sh_file_check_data(set_or_null(o->data_dir), "--data"));
    return sh_file_check_data(set_or_null(o->test_data), "--test-data");
}

/* The layout the options name: "ps", or the model-parallel option that is set, or data
 * parallelism; an explicit layout must agree with its options. */
static shoal_result resolve_layout(const shoal_train_opts *o, sh_job_layout *out)
{
    int ps = o->layout == SHOAL_TRAIN_PARAM_SERVER, stages = o->pipeline_stages, tensor = o->tensor_ranks;
    const char *hybrid = set_or_null(o->hybrid);
    if (hybrid && (ps || stages || tensor))
        return SH_FAIL(SHOAL_ERR_INVALID, "--hybrid is its own layout (data-parallel convolutional layers, "
                       "model-parallel connected ones); leave out %s", ps ? "--ps" : stages ? "--pipeline"
                       : "--tensor-parallel");
    if (ps && tensor == 1 && !stages)
        return SH_FAIL(SHOAL_ERR_INVALID, "--ps --tensor-parallel 1 splits nothing; give T >= 2 or leave it out");
    /* --ps with --pipeline or --tensor-parallel: servers over model-parallel replicas */
    sh_job_layout l = ps ? SH_LAYOUT_PARAM_SERVER : stages ? SH_LAYOUT_PIPELINE : tensor > 1 ? SH_LAYOUT_TENSOR
                    : hybrid ? SH_LAYOUT_HYBRID : SH_LAYOUT_DATA_PARALLEL;
    switch (o->layout) {
    case SHOAL_TRAIN_DATA_PARALLEL:
    case SHOAL_TRAIN_PARAM_SERVER: break;
    case SHOAL_TRAIN_PIPELINE:
        if (l != SH_LAYOUT_PIPELINE)
            return SH_FAIL(SHOAL_ERR_INVALID, "layout SHOAL_TRAIN_PIPELINE needs pipeline_stages (--pipeline S)");
        break;
    case SHOAL_TRAIN_TENSOR:
        if (l != SH_LAYOUT_TENSOR)
            return SH_FAIL(SHOAL_ERR_INVALID, "layout SHOAL_TRAIN_TENSOR needs tensor_ranks >= 2 "
                           "(--tensor-parallel T) and no pipeline_stages (that is SHOAL_TRAIN_PIPELINE)");
        break;
    case SHOAL_TRAIN_HYBRID:
        if (l != SH_LAYOUT_HYBRID)
            return SH_FAIL(SHOAL_ERR_INVALID, "layout SHOAL_TRAIN_HYBRID needs hybrid, the scheme (--hybrid SCHEME)");
        break;
    default: return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: unknown layout %d", (int)o->layout);
    }
    *out = l;
    return SHOAL_OK;
}

static const char *layout_name(sh_job_layout l)
{
    static const char *const names[] = {"data-parallel", "parameter-server", "pipeline", "tensor-parallel",
                                        "hybrid"};
    return (unsigned)l < sizeof names / sizeof names[0] ? names[l] : "?";
}

/* Counts a C caller may leave at 0 (the default) but not below. */
static shoal_result check_counts(const shoal_train_opts *o)
{
    const struct {
        const char *flag;
        int64_t v;
    } counts[] = {{"epochs", o->epochs}, {"max-steps", o->max_steps}, {"batch", o->batch},
                  {"threads", o->threads}, {"save-every", o->save_every_steps},
                  {"log-histograms", o->histogram_every_steps}, {"pipeline", o->pipeline_stages},
                  {"micro-batches", o->micro_batches}, {"tensor-parallel", o->tensor_ranks},
                  {"staleness", o->staleness}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].v < 0)
            return SH_FAIL(SHOAL_ERR_INVALID, "--%s %lld: must be >= 0 (0: the default)", counts[i].flag,
                           (long long)counts[i].v);
    if (!(o->time_limit_s >= 0)) /* NaN too */
        return SH_FAIL(SHOAL_ERR_INVALID, "--time-limit %g: must be >= 0 (0: none)", o->time_limit_s);
    return SHOAL_OK;
}

/* The values set straight into the struct, read as opts_set reads them. */
static shoal_result parse_values(const shoal_train_opts *o, sh_job_opts *j)
{
    const char *m = o->consistency ? o->consistency : "sync";
    if (!strcmp(m, "sync")) j->consistency = SH_PS_SYNC;
    else if (!strcmp(m, "async")) j->consistency = SH_PS_ASYNC;
    else if (!strcmp(m, "ssp")) j->consistency = SH_PS_SSP;
    else return SH_FAIL(SHOAL_ERR_INVALID, "--consistency \"%s\": use sync, async or ssp", m);
    if (set_or_null(o->compress) && shoal_codec_parse(o->compress, &j->codec) != SHOAL_OK) {
        sh_err_prefix("--compress: ");
        return SHOAL_ERR_INVALID;
    }
    if (set_or_null(o->hybrid)) SH_TRY(sh_hybrid_scheme_parse(o->hybrid, &j->hybrid));
    if (set_or_null(o->timeline_steps))
        SH_TRY(sh_timeline_parse_steps(o->timeline_steps, &j->timeline_lo, &j->timeline_hi));
    return SHOAL_OK;
}

/* --sfb on a model with no [connected] section: said once, before any rank starts. A cfg
 * that cannot be read is left for the training to name. */
static shoal_result check_sfb(const char *cfg_path)
{
    sh_cfg *cfg = NULL;
    if (sh_cfg_load(cfg_path, &cfg) != SHOAL_OK) return SHOAL_OK;
    int connected = 0;
    for (int i = 0; i < sh_cfg_nsections(cfg); i++)
        connected += !strcmp(sh_cfg_section_name(sh_cfg_section_at(cfg, i)), "connected");
    sh_cfg_destroy(cfg);
    if (connected) return SHOAL_OK;
    return SH_FAIL(SHOAL_ERR_INVALID, "--sfb: %s has no [connected] layer, so there are no sufficient factors "
                   "to send; leave out --sfb (or use --compress)", cfg_path);
}

/* --solver lbfgs (and --history) with the rest: what a full-batch line search cannot share. */
static shoal_result check_lbfgs(const shoal_train_opts *o, const sh_job_opts *j)
{
    if (!o->lbfgs) {
        if (o->lbfgs_history) return SH_FAIL(SHOAL_ERR_INVALID, "--history goes with --solver lbfgs");
        return SHOAL_OK;
    }
    if (o->lbfgs_history < 0) return SH_FAIL(SHOAL_ERR_INVALID, "--history %d: must be >= 1", o->lbfgs_history);
    if (j->layout == SH_LAYOUT_PARAM_SERVER)
        return SH_FAIL(SHOAL_ERR_INVALID, "--solver lbfgs with --ps: the line search needs every rank's loss and "
                       "gradient at the same weights (%s servers apply stale pushes); leave out --ps: rank 0 "
                       "coordinates the ranks", j->consistency == SH_PS_SYNC ? "the" : "asynchronous");
    if (j->layout != SH_LAYOUT_DATA_PARALLEL)
        return SH_FAIL(SHOAL_ERR_INVALID, "--solver lbfgs runs on data-parallel ranks (each its shard of the whole "
                       "set); leave out --%s", j->layout == SH_LAYOUT_PIPELINE ? "pipeline"
                       : j->layout == SH_LAYOUT_TENSOR ? "tensor-parallel" : "hybrid");
    if (j->codec.codec != SHOAL_CODEC_NONE || o->sfb)
        return SH_FAIL(SHOAL_ERR_INVALID, "--solver lbfgs with --%s: the line search compares losses and slopes "
                       "that compressed gradients would blur; leave it out (L-BFGS sends one gradient per "
                       "evaluation)", o->sfb ? "sfb" : "compress");
    if (o->strong_scaling || o->lr_linear)
        return SH_FAIL(SHOAL_ERR_INVALID, "--solver lbfgs: every step is the whole training set whatever the ranks, "
                       "so --%s does not apply; leave it out", o->strong_scaling ? "scaling strong" : "lr-scaling linear");
    return SHOAL_OK;
}

/* --parallel auto chooses the layout: no layout option may be set beside it. */
static shoal_result check_auto(const shoal_train_opts *o)
{
    if (!o->parallel_auto) return SHOAL_OK;
    const char *set = o->layout == SHOAL_TRAIN_PARAM_SERVER ? "--ps" : o->pipeline_stages ? "--pipeline"
                    : o->micro_batches ? "--micro-batches" : o->tensor_ranks ? "--tensor-parallel"
                    : set_or_null(o->hybrid) ? "--hybrid" : set_or_null(o->compress) ? "--compress"
                    : o->sfb ? "--sfb" : o->lbfgs ? "--solver lbfgs" : o->strong_scaling ? "--scaling strong"
                    : o->elastic_min ? "--elastic" : o->hogwild ? "--hogwild" : o->quorum > 0 ? "--quorum" : NULL;
    if (set)
        return SH_FAIL(SHOAL_ERR_INVALID, "--parallel auto chooses the layout itself; leave out %s (or leave out "
                       "--parallel auto to choose yourself)", set);
    return SHOAL_OK;
}

/* --hogwild and --quorum against the layout and the exchange: one line each for what makes
 * no sense (they replace the synchronous exchange of plain data parallelism). */
static shoal_result check_stragglers(const shoal_train_opts *o, const sh_job_opts *j)
{
    const char *codec = set_or_null(o->compress);
    int compressed = (codec && strcmp(codec, "none")) || o->sfb;
    const char *mp = o->pipeline_stages ? "--pipeline" : o->tensor_ranks > 1 ? "--tensor-parallel"
                     : set_or_null(o->hybrid) ? "--hybrid" : NULL;
    if (o->hogwild) {
        if (j->layout == SH_LAYOUT_PARAM_SERVER)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hogwild shares one copy of the weights among the ranks of a host; "
                           "with --ps the servers hold them (--consistency async is the servers' lock-free mode)");
        if (mp)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hogwild needs whole-model replicas (each applies its own gradient "
                           "to the shared weights); %s splits the model: leave out one", mp);
        if (compressed)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hogwild sends no gradients (each rank applies its own to the shared "
                           "weights); leave out --compress/--sfb");
        if (o->quorum > 0)
            return SH_FAIL(SHOAL_ERR_INVALID, "--hogwild never waits for another rank, so there is no quorum; leave "
                           "out --quorum");
    }
    if (o->quorum > 0) {
        if (j->layout == SH_LAYOUT_PARAM_SERVER && j->consistency != SH_PS_SYNC)
            return SH_FAIL(SHOAL_ERR_INVALID, "--quorum is for synchronous training; --consistency %s never waits for "
                           "all workers: use --consistency sync, or leave out --quorum", o->consistency);
        if (mp)
            return SH_FAIL(SHOAL_ERR_INVALID, "--quorum goes with data parallelism or --ps --consistency sync; the "
                           "ranks of %s each hold a part of the model, so none may be left behind", mp);
        if (compressed && j->layout != SH_LAYOUT_PARAM_SERVER)
            return SH_FAIL(SHOAL_ERR_INVALID, "--quorum adds float32 gradients as they come in; leave out "
                           "--compress/--sfb");
    }
    if (j->layout == SH_LAYOUT_PARAM_SERVER && mp) {
        if (compressed)
            return SH_FAIL(SHOAL_ERR_INVALID, "--ps with %s pushes float32 shards of each part; leave out "
                           "--compress/--sfb", mp);
        if (o->push_every > 1 || o->pull_every > 1)
            return SH_FAIL(SHOAL_ERR_INVALID, "--ps with %s pushes and pulls every step (a replica's parts move "
                           "together); leave out --push-every/--pull-every", mp);
    }
    if ((o->hogwild || o->quorum > 0) && (o->elastic_min || o->lbfgs))
        return SH_FAIL(SHOAL_ERR_INVALID, "--%s with %s: %s; leave out one", o->hogwild ? "hogwild" : "quorum",
                       o->elastic_min ? "--elastic" : "--solver lbfgs",
                       o->elastic_min ? "its shared window holds a fixed set of ranks on one host, which an elastic "
                                        "job changes"
                                      : "the line search needs every rank's loss and gradient at the same weights");
    if (j->layout == SH_LAYOUT_PARAM_SERVER && o->sfb && o->quorum > 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "--ps --sfb: every worker takes part in every step's exchange of factors, "
                       "so no step can go on without one; leave out --quorum or --sfb");
    if (j->layout == SH_LAYOUT_PARAM_SERVER && o->sfb && j->consistency != SH_PS_SYNC)
        return SH_FAIL(SHOAL_ERR_INVALID, "--ps --sfb: the workers exchange sufficient factors with each other every "
                       "step, which is synchronous; use --consistency sync");
    return SHOAL_OK;
}

/* Everything opts_check says, and the job's options from them on success. */
static shoal_result to_job(const shoal_train_opts *o, sh_job_opts *j)
{
    sh_job_opts_default(j);
    if (!o) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: o is NULL");
    if (!o->cfg_path) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: no cfg_path (the model file)");
    SH_TRY(check_input_kinds(o));
    SH_TRY(check_counts(o));
    SH_TRY(parse_values(o, j));
    if (o->strong_scaling && o->lr_linear)
        return SH_FAIL(SHOAL_ERR_INVALID, "--lr-scaling linear is for weak scaling: with --scaling strong the "
                       "global batch stays the cfg's, and so does the learning rate");
    if (o->sfb) SH_TRY(check_sfb(o->cfg_path));
    SH_TRY(sh_caffe_job_check(o->cfg_path, set_or_null(o->solver_path), set_or_null(o->save_caffe_path)));
    SH_TRY(check_auto(o));
    SH_TRY(resolve_layout(o, &j->layout));
    j->sfb = o->sfb;
    SH_TRY(check_lbfgs(o, j));
    j->stages = o->pipeline_stages;
    j->tensor_ranks = o->tensor_ranks;
    SH_TRY(sh_job_check_compress(j));
    SH_TRY(check_stragglers(o, j));
    j->hogwild = o->hogwild;
    j->quorum = o->quorum;
    if (o->micro_batches && !o->pipeline_stages)
        return SH_FAIL(SHOAL_ERR_INVALID, "--micro-batches goes with --pipeline S");
    if (o->save_every_steps && !o->save_path) return SH_FAIL(SHOAL_ERR_INVALID, "--save-every needs --save FILE");
    if (set_or_null(o->timeline_steps) && !o->timeline_path)
        return SH_FAIL(SHOAL_ERR_INVALID, "--timeline-steps needs --timeline FILE.json");
    if (o->histogram_every_steps && !o->logdir)
        return SH_FAIL(SHOAL_ERR_INVALID, "--log-histograms needs --logdir DIR");
    if (set_or_null(o->run_name) && !set_or_null(o->logdir))
        return SH_FAIL(SHOAL_ERR_INVALID, "--run-name names a run's folder under --logdir DIR; give --logdir too");
    if (o->elastic_min && j->layout != SH_LAYOUT_DATA_PARALLEL)
        return SH_FAIL(SHOAL_ERR_INVALID, "--elastic is for data parallelism (with or without --compress/--sfb): "
                       "%s cannot lose a rank (with --ps the servers already drop a lost worker); leave out one",
                       j->layout == SH_LAYOUT_PARAM_SERVER ? "--ps" : "a model-parallel layout");
    if (o->elastic_min && o->timeline_path)
        return SH_FAIL(SHOAL_ERR_INVALID, "--timeline does not go with --elastic (a trace's ranks must stay the same); "
                       "leave out one");
    sh_train_opts *t = &j->train;
    t->cfg_path = o->cfg_path;
    t->data_dir = o->data_dir;
    t->test_data = set_or_null(o->test_data);
    t->strict_data = o->strict_data;
    t->data_threads = o->data_threads;
    t->data_prefetch = o->data_prefetch;
    t->target = set_or_null(o->target);
    t->epochs = o->epochs;
    t->max_steps = o->max_steps;
    t->batch = o->batch;
    t->threads = o->threads;
    t->seed = o->seed;
    t->save_path = o->save_path;
    t->save_every_steps = o->save_every_steps;
    t->resume_path = o->resume_path;
    t->weights_path = o->weights_path;
    t->save_darknet_path = o->save_darknet_path;
    t->save_caffe_path = set_or_null(o->save_caffe_path);
    t->logdir = set_or_null(o->logdir);
    j->run_name = set_or_null(o->run_name);
    t->histogram_every_steps = o->histogram_every_steps;
    t->quiet = o->quiet;
    t->profile = o->profile;
    t->time_limit_s = o->time_limit_s;
    t->out = o->json ? stderr : stdout;
    t->stop_requested = &stop_flag;
    t->save_requested = &save_flag;
    t->before_step = o->before_step;
    t->hook_ctx = o->hook_ctx;
    j->strong_scaling = o->strong_scaling;
    j->elastic_min = o->elastic_min;
    j->elastic_max = o->elastic_max;
    j->lr_linear = o->lr_linear;
    if (o->bucket_mb > 0) j->bucket_mb = o->bucket_mb;
    j->nservers = o->nservers;
    j->staleness = o->staleness;
    j->worker.push_every = o->push_every > 0 ? o->push_every : 1;
    j->worker.pull_every = o->pull_every > 0 ? o->pull_every : 1;
    j->server_log = o->quiet ? NULL : stderr;
    j->after_server_round = o->after_server_round;
    j->timeline_path = o->timeline_path;
    j->stages = o->pipeline_stages;
    j->micro_batches = o->micro_batches;
    j->tensor_ranks = o->tensor_ranks;
    j->parallel_auto = o->parallel_auto;
    j->lbfgs = o->lbfgs;
    j->lbfgs_history = o->lbfgs_history;
    j->layout_out = o->quiet ? NULL : t->out;
    return SHOAL_OK;
}

/* train_api.h: the same mapping for shoal_pretrain_run, and the requests' reset after it. */
shoal_result sh_train_api_job(const shoal_train_opts *o, sh_job_opts *j) { return to_job(o, j); }
void sh_train_api_forget_requests(void)
{
    stop_flag = 0;
    save_flag = 0;
}

shoal_result shoal_train_opts_check(const shoal_train_opts *o)
{
    sh_job_opts j;
    return to_job(o, &j);
}

/* Seconds per step by part, and what the layout measured, in the public report's units. */
static void fill_profiles(const sh_job_opts *j, const sh_job_report *jr, int profile, shoal_train_report *r)
{
    const sh_step_profile *p = &jr->train.profile;
    r->has_profile = profile;
    r->profile.data_ms = p->data * 1e3;
    r->profile.forward_ms = p->forward * 1e3;
    r->profile.backward_ms = p->backward * 1e3;
    r->profile.comm_wait_ms = p->comm_wait * 1e3;
    r->profile.optimizer_ms = p->optimizer * 1e3;
    r->profile.step_ms = (p->data + p->forward + p->backward + p->comm_wait + p->optimizer) * 1e3;
    const sh_dp_profile *pr = &jr->dp_profile;
    r->has_allreduce = jr->has_dp_profile;
    double comm = pr->steps ? pr->comm_s / (double)pr->steps : 0;
    double hidden = comm > 0 ? 1.0 - p->comm_wait / comm : 0;
    r->allreduce.ms = comm * 1e3;
    r->allreduce.mb = pr->steps ? pr->bytes / (double)pr->steps / 1e6 : 0.0;
    r->allreduce.hidden_share = hidden < 0 ? 0 : hidden;
    r->has_compression = jr->has_comm_stats;
    shoal_codec_format(&j->codec, r->compression.spec, sizeof r->compression.spec);
    r->compression.sfb = j->sfb;
    r->compression.sfb_layers = pr->sfb_layers;
    r->compression.bytes_sent_per_step = pr->wire_nbytes;
    r->compression.dense_bytes_per_step = pr->dense_nbytes;
    r->compression.ratio = pr->wire_nbytes > 0 ? pr->dense_nbytes / pr->wire_nbytes : 1.0;
    r->compression.residual_norm = pr->residual_norm;
    const sh_hybrid_profile *h = &jr->hybrid_profile;
    r->has_hybrid = jr->has_hybrid_profile;
    snprintf(r->hybrid.scheme, sizeof r->hybrid.scheme, "%s", j->hybrid ? sh_hybrid_scheme_name(j->hybrid) : "");
    r->hybrid.bytes_sent_per_step = h->sent_nbytes;
    r->hybrid.activity_bytes_per_step = h->act_nbytes;
    r->hybrid.comm_ms = h->comm_s * 1e3;
    r->hybrid.fused_update_ms = h->fused_update_s * 1e3;
    r->hybrid.rest_update_ms = h->rest_update_s * 1e3;
    r->has_stages = jr->has_pipe_profile;
    r->nstages = jr->pipe_nstages < SHOAL_TRAIN_STAGES_MAX ? jr->pipe_nstages : SHOAL_TRAIN_STAGES_MAX;
    for (int k = 0; k < r->nstages; k++) {
        const sh_pipe_profile *q = &jr->pipe_profile[k];
        r->stages[k] = (shoal_train_stage){q->lo, q->hi - 1, q->forward * 1e3, q->backward * 1e3,
                                           q->bubble * 1e3, q->comm * 1e3, q->step * 1e3,
                                           q->step > 0 ? q->bubble / q->step : 0.0};
    }
}

static void fill_report(const sh_job_opts *j, const sh_job_report *jr, int profile, shoal_train_report *r)
{
    const sh_train_report *t = &jr->train;
    r->rank = jr->rank;
    r->world = jr->world;
    r->role = sh_job_role_name(jr->role);
    r->is_result = jr->reporter;
    r->test_accuracy = t->test_accuracy;
    r->test_loss = t->test_loss;
    r->train_loss = t->train_loss;
    r->images_per_s = t->images_per_s;
    r->seconds = t->seconds;
    r->epochs = t->epochs;
    r->steps = t->steps;
    r->threads = t->threads;
    snprintf(r->saved_path, sizeof r->saved_path, "%s", t->saved_path);
    r->layout = layout_name(j->layout);
    r->stopped = t->stopped;
    r->peak_rss_mb = (double)t->peak_rss_nbytes / (1024.0 * 1024.0);
    r->text = t->text;
    r->train_bpc = t->train_bpc;
    r->test_bpc = t->test_bpc;
    r->streamed = t->streamed;
    r->data_wait_s = t->data_wait_s;
    r->bad_files = t->bad_files;
    fill_profiles(j, jr, profile, r);
    const sh_ps_stats *st = &jr->server_stats;
    r->has_server = jr->has_server_stats;
    r->server.consistency = j->consistency == SH_PS_SYNC ? "sync" : j->consistency == SH_PS_ASYNC ? "async" : "ssp";
    r->server.pushes = st->pushes;
    r->server.pulls = st->pulls;
    r->server.deferred_pulls = st->deferred_pulls;
    r->server.refused = st->refused;
    r->server.max_spread = st->max_spread;
    r->server.dropped_workers = st->dropped_workers;
    r->server.pushed_mb = st->pushed_mb;
    r->server.cpu_s = st->cpu_s;
    const sh_elastic_report *e = &jr->elastic;
    r->elastic = e->on;
    r->nchanges = e->nchanges;
    r->ranks_left = e->ranks_left;
    r->ranks_joined = e->ranks_joined;
    r->keep_ms = e->keep_ms;
    for (int i = 0; i < e->nchanges && i < SHOAL_TRAIN_CHANGES_MAX && i < SH_ELASTIC_CHANGES_MAX; i++)
        r->changes[i] = e->changes[i];
    r->server.late_pushes = st->late_pushes;
    r->has_hogwild = jr->has_hogwild;
    r->hogwild.updates = jr->hogwild.updates;
    r->hogwild.staleness_mean = jr->hogwild.updates ? jr->hogwild.staleness_sum / (double)jr->hogwild.updates : 0;
    r->hogwild.staleness_max = jr->hogwild.staleness_max;
    r->has_quorum = jr->has_quorum;
    r->quorum.fraction = j->quorum;
    r->quorum.ranks = jr->quorum.ranks;
    r->quorum.updates = jr->quorum.updates;
    r->quorum.fresh = jr->quorum.fresh;
    r->quorum.late = jr->quorum.late;
    r->nhistory = t->nhistory < SHOAL_TRAIN_HISTORY_MAX ? t->nhistory : SHOAL_TRAIN_HISTORY_MAX;
    for (int i = 0; i < r->nhistory; i++) {
        const sh_epoch_point *h = &t->history[i];
        r->history[i] = (shoal_train_eval){h->step, h->epoch, h->seconds, h->train_loss, h->test_accuracy,
                                           h->test_loss};
    }
}

shoal_result shoal_train_run(const shoal_train_opts *o, shoal_train_report *r)
{
    if (r) memset(r, 0, sizeof *r);
    sh_job_opts j;
    SH_TRY(to_job(o, &j));
    char agreed[SH_TRAIN_AGREED_NBYTES];
    SH_TRY(sh_train_opts_agreed(o, agreed, sizeof agreed));
    j.agreed = agreed;
    sh_caffe_job_setup(o->cfg_path, set_or_null(o->solver_path), o->data_dir, &j.train);
    sh_job_report jr;
    memset(&jr, 0, sizeof jr);
    shoal_result rc = sh_job_run(&j, &jr);
    if (r) fill_report(&j, &jr, o->profile, r);
    /* a final file written elsewhere than asked: the run's result stands, the call fails */
    if (rc == SHOAL_OK && jr.train.save_error[0]) rc = SH_FAIL(SHOAL_ERR_IO, "%s", jr.train.save_error);
    stop_flag = 0;
    save_flag = 0;
    return rc;
}
