/* trainer.c — a training run: builds the data, optimizer and strategy around the net, then
 * runs epochs of steps with evaluation, log lines, TensorBoard and periodic checkpoints.
 * Not here: one step (step.c), the save/stop agreement (agree.c), evaluation (eval.c),
 * checkpoint content (snapshot.c), flags (src/cli/cmd_train.c).
 * Proved by tests/train/test_trainer.c, test_snapshot.c and tests/cli/test_train_cli.c. */
#include "train/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/cpus.h"
#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/trace.h"
#include "base/util.h"
#include "io/progress.h"
#include "nn/darknet_weights.h"
#include "train/agree.h"
#include "train/eval.h"
#include "train/run_files.h"
#include "train/snapshot.h"
#include "train/trainer_internal.h"

/* Steps left out of the throughput figure at the start of a run: first-touch page faults
 * and cold caches make them slow (benchmarks report the steady state). */
#define WARMUP_STEPS_MAX 20

void sh_train_opts_default(sh_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->eval_each_epoch = 1;
    o->log_every_steps = 100;
    o->out = stdout;
}

/* "<basename of cfg without .cfg>.ckpt", in the current directory. */
static void default_save_path(const char *cfg_path, char *out, size_t out_nbytes)
{
    const char *base = strrchr(cfg_path, '/');
    base = base ? base + 1 : cfg_path;
    size_t len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, ".cfg") == 0) len -= 4;
    snprintf(out, out_nbytes, "%.*s.ckpt", (int)len, base);
}

void sh_train_data_opts(const sh_net *net, const char *path, const char *test_path, uint64_t seed, int strict,
                        sh_data_opts *d)
{
    const sh_net_config *cfg = sh_net_get_config(net);
    const sh_net_pictures *p = &cfg->pictures;
    memset(d, 0, sizeof *d);
    d->path = path;
    d->test_path = test_path;
    d->nclasses = sh_net_nclasses(net);
    d->seed = seed;
    d->strict = strict;
    sh_image_opts *im = &d->image;
    sh_image_opts_default(im, cfg->channels, cfg->height, cfg->width);
    im->min_crop = p->min_crop;
    im->max_crop = p->max_crop;
    im->test_resize = p->test_resize;
    im->flip = p->flip;
    im->aspect = p->aspect;
    im->angle = p->angle;
    im->hue = p->hue;
    im->saturation = p->saturation;
    im->exposure = p->exposure;
    memcpy(im->mean, p->mean, sizeof im->mean);
    memcpy(im->std, p->std, sizeof im->std);
}

static int64_t plan_steps(const sh_train_opts *o, const sh_net_config *cfg, int64_t per_epoch)
{
    int64_t planned;
    if (o->epochs > 0) planned = (int64_t)o->epochs * per_epoch;
    else if (o->max_steps > 0) planned = o->max_steps;
    else if (cfg->max_batches > 0) planned = cfg->max_batches;
    else planned = per_epoch;
    if (o->max_steps > 0 && o->max_steps < planned) planned = o->max_steps;
    return planned;
}

shoal_result sh_trainer_create(const sh_train_opts *o, sh_trainer **out)
{
    return sh_trainer_create_with_net(o, NULL, out);
}

/* The training and test sets, their loaders and the batch buffers. */
static shoal_result open_data(sh_trainer *t)
{
    const sh_train_opts *o = &t->opts;
    sh_strategy *s = t->strategy;
    if (o->train_set && o->test_set) { /* the caller's, kept across runs of one job (--elastic) */
        t->train_set = o->train_set;
        t->test_set = o->test_set;
    } else {
        sh_data_opts dopt; /* what --data names: a dataset, pictures, text, synthetic (data/open.c) */
        sh_train_data_opts(t->net, o->data_dir, o->test_data, o->seed, o->strict_data, &dopt);
        SH_TRY(sh_data_open(&dopt, &t->train_set, &t->test_set));
    }
    t->text = t->train_set->text;
    if (s->full_batch && (t->text || t->train_set->source))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: a full-batch step (--solver lbfgs) reads a training set held in "
                       "memory (IDX or CIFAR-10 images), not %s; use SGD", t->train_set->name,
                       t->text ? "text" : "pictures decoded as they are read");
    if (s->full_batch) t->global_batch = t->train_set->count; /* a step is the whole set */
    SH_TRY(sh_eval_check_data(t->train_set, t->net, o->cfg_path, t->labelled));
    SH_TRY(sh_eval_check_data(t->test_set, t->net, o->cfg_path, t->labelled));
    SH_TRY(sh_trainer_open_targets(t));
    if (!t->text && t->train_set->count < t->global_batch)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "dataset %s has %d training images, fewer than one batch of %d; use a "
                       "smaller --batch",
                       t->train_set->name, t->train_set->count, t->global_batch);
    int dthreads = o->data_threads > 0 ? o->data_threads : (t->threads + 1) / 2; /* picture decoders */
    sh_loader_opts lo = {.global_batch = t->global_batch, .rank = s->rank, .world = s->world,
                         .seed = o->seed, .shuffle = 1, .drop_last = 1, .time_steps = sh_net_time_steps(t->net),
                         .threads = dthreads, .prefetch = o->data_prefetch,
                         .targets = t->train_target, .target_out = t->target};
    SH_TRY(sh_loader_create(t->train_set, &lo, &t->loader));
    /* The test set in dataset order, keeping its tail: every rank alone, or where the
     * strategy sums, each rank its shard; one step decoded ahead (the copy out frees it). */
    int split = sh_strategy_splits_eval(s);
    sh_loader_opts to = {.global_batch = t->batch * (split ? s->world : 1), .rank = split ? s->rank : 0,
                         .world = split ? s->world : 1, .seed = 0, .shuffle = 0, .drop_last = 0,
                         .time_steps = sh_net_time_steps(t->net), .threads = dthreads, .prefetch = 1,
                         .targets = t->test_target, .target_out = t->target};
    SH_TRY(sh_loader_create(t->test_set, &to, &t->test_loader));
    t->x_cap = (size_t)t->batch * (size_t)sh_net_input_count(t->net);
    SH_TRY(sh_alloc_aligned(t->x_cap * sizeof(float), (void **)&t->x));
    SH_TRY(sh_alloc_aligned((size_t)t->batch * sizeof(int32_t), (void **)&t->y));
    (void)sh_net_state(t->net, &t->nstate);
    if (t->nstate) {
        size_t all = t->nstate * (size_t)s->world;
        SH_TRY(sh_calloc(t->nstate, sizeof(float), (void **)&t->state_keep));
        SH_TRY(sh_calloc(all, sizeof(float), (void **)&t->state_all));
        SH_TRY(sh_calloc(all, sizeof(double), (void **)&t->state_sum));
    }
    return SHOAL_OK;
}

/* Where the run starts (the seed's weights, --weights or a checkpoint), TensorBoard, and the
 * strategy attached to the net with the state it keeps per rank. */
static shoal_result start_state(sh_trainer *t)
{
    const sh_train_opts *o = &t->opts;
    sh_strategy *s = t->strategy;
    /* A run that is to end with a Darknet file is refused now, not after its last step. */
    if (o->save_darknet_path) SH_TRY(sh_darknet_weights_check(t->net));
    if (o->weights_path && !o->resume_path) SH_TRY(sh_snapshot_load_start_weights(t, o->weights_path));
    if (o->resume_path) SH_TRY(sh_snapshot_restore(t, o->resume_path, &t->resume_meta));
    if (o->logdir && s->rank == 0) {
        SH_TRY(sh_tb_open(o->logdir, &t->tb));
        sh_tb_set_autoflush(t->tb, 0); /* log_step flushes once per step */
    }
    s->opt = t->opt;
    s->lr = &t->lr;
    s->grad_sq_wanted = o->logdir != NULL || o->job_logs;
    s->train_set = t->train_set;
    SH_TRY(s->ops->attach(s, t->net));
    if (o->resume_path) SH_TRY(sh_snapshot_restore_rank_file(t, o->resume_path, &t->resume_meta));
    if (o->resume_path) SH_TRY(sh_snapshot_restore_solver(t, o->resume_path, &t->resume_meta));
    t->params = sh_net_params(t->net); /* the strategy may have moved them (shared weights) */
    t->grads = sh_net_grads(t->net);
    t->steps_planned = plan_steps(o, t->cfg, sh_loader_steps_per_epoch(t->loader));
    s->steps_planned = t->steps_planned;
    /* every file this rank writes can be written: said now, not after the last step */
    return sh_run_files_check(t);
}

shoal_result sh_trainer_create_with_net(const sh_train_opts *o, sh_net *net, sh_trainer **out)
{
    shoal_result rc = SHOAL_OK;
    sh_trainer *t = NULL;
    *out = NULL;
    if (!o->cfg_path) {
        sh_net_destroy(net);
        return SH_FAIL(SHOAL_ERR_INVALID, "train: no model file (.cfg) given");
    }
    rc = sh_calloc(1, sizeof *t, (void **)&t);
    if (rc != SHOAL_OK) {
        sh_net_destroy(net);
        return rc;
    }
    t->net = net; /* ours now, freed by sh_trainer_destroy */
    t->opts = *o;
    if (!t->opts.out) t->opts.out = stdout;
    if (!t->opts.data_dir) t->opts.data_dir = sh_env_str("SHOAL_DATA_DIR");
    default_save_path(o->cfg_path, t->default_save_path, sizeof t->default_save_path);

    if (o->strategy) {
        t->strategy = o->strategy;
    } else {
        SH_TRY_GOTO(sh_strategy_local_create(&t->strategy), rc, fail);
        t->owns_strategy = 1;
    }
    /* A resumed run shuffles with the seed it started with, whatever --seed says now. The
     * checkpoint's meta is read here once; the restore below loads only the blocks. */
    if (o->resume_path) {
        SH_TRY_GOTO(sh_snapshot_read_meta(o->resume_path, &t->resume_meta), rc, fail);
        t->opts.seed = sh_snapshot_meta_seed(&t->resume_meta);
    }

    /* A net built by the caller used o->seed; on resume its weights, statistics and
     * dropout state are all overwritten from the checkpoint, so the seed there is moot. */
    if (!t->net) SH_TRY_GOTO(sh_net_load(o->cfg_path, o->batch, t->opts.seed, &t->net), rc, fail);
    SH_TRY_GOTO(sh_net_check_trainable(t->net), rc, fail);
    t->labelled = sh_net_has_labels(t->net);
    t->cfg = sh_net_get_config(t->net);
    t->lr = t->cfg->lr;
    if (o->lr_scale > 0) t->lr.base_lr = (float)(t->lr.base_lr * o->lr_scale);
    sh_cpus_source why;
    t->threads = sh_cpus_threads_per_rank(o->threads, o->local_ranks, &why);
    sh_net_set_threads(t->net, t->threads); /* the one pool this net gets */
    SH_LOG_I("train", "%d kernel thread%s per rank (from %s; %d of %d CPUs available, %d rank%s on "
             "this host)", t->threads, t->threads == 1 ? "" : "s", sh_cpus_source_name(why),
             sh_cpus_available(), sh_cpus_online(), o->local_ranks > 0 ? o->local_ranks : 1,
             o->local_ranks > 1 ? "s" : "");
    t->batch = t->strategy->batch > 0 ? t->strategy->batch : sh_net_batch(t->net);
    t->global_batch = t->batch * t->strategy->world;
    t->nparams = sh_net_nparams(t->net);
    t->params = sh_net_params(t->net);
    t->grads = sh_net_grads(t->net);
    int nranges = 0;
    const sh_param_range *ranges = sh_net_param_ranges(t->net, &nranges);
    SH_TRY_GOTO(sh_optim_create(&t->cfg->optim, t->nparams, ranges, nranges, &t->opt), rc, fail);
    SH_TRY_GOTO(open_data(t), rc, fail);
    SH_TRY_GOTO(start_state(t), rc, fail);
    *out = t;
    return SHOAL_OK;
fail:
    sh_trainer_destroy(t);
    return rc;
}

void sh_trainer_destroy(sh_trainer *t)
{
    if (!t) return;
    sh_tb_close(t->tb);
    free(t->state_sum);
    free(t->state_all);
    free(t->state_keep);
    sh_free_aligned(t->y);
    sh_free_aligned(t->x);
    sh_loader_destroy(t->test_loader);
    sh_loader_destroy(t->loader);
    if (!t->opts.train_set) sh_dataset_destroy(t->test_set);
    if (!t->opts.train_set) sh_dataset_destroy(t->train_set);
    sh_dataset_destroy(t->test_target);
    sh_dataset_destroy(t->train_target);
    sh_free_aligned(t->target);
    sh_optim_destroy(t->opt);
    sh_net_destroy(t->net);
    if (t->owns_strategy) sh_strategy_destroy(t->strategy);
    free(t);
}

sh_net *sh_trainer_net(sh_trainer *t) { return t->net; }
int64_t sh_trainer_steps_done(const sh_trainer *t) { return t->steps_done; }
int64_t sh_trainer_steps_planned(const sh_trainer *t) { return t->steps_planned; }
const char *sh_trainer_default_save_path(const sh_trainer *t) { return t->default_save_path; }

/* Epochs done: the loader's epoch and its place in it (steps over steps per epoch, also
 * after an elastic job went on mid-epoch at another batch). */
static double epochs_done(const sh_trainer *t)
{
    double per = (double)sh_loader_steps_per_epoch(t->loader);
    double B = t->text ? 1.0 : (double)t->global_batch;
    return (double)sh_loader_epoch(t->loader) + (double)sh_loader_image(t->loader) / (per * B);
}

/* Every rank's recurrent state into t->state_all (a collective step, like saving). */
static shoal_result gather_state(sh_trainer *t)
{
    if (!t->nstate) return SHOAL_OK;
    const float *st = sh_net_state(t->net, NULL);
    int world = t->strategy->world, rank = t->strategy->rank;
    if (!sh_strategy_splits_eval(t->strategy)) {
        memcpy(t->state_all + (size_t)rank * t->nstate, st, t->nstate * sizeof(float));
        return SHOAL_OK;
    }
    size_t all = t->nstate * (size_t)world;
    memset(t->state_sum, 0, all * sizeof(double));
    for (size_t i = 0; i < t->nstate; i++) t->state_sum[(size_t)rank * t->nstate + i] = st[i];
    SH_TRY(t->strategy->ops->sum(t->strategy, t->state_sum, (int)all));
    for (size_t i = 0; i < all; i++) t->state_all[i] = (float)t->state_sum[i];
    return SHOAL_OK;
}

shoal_result sh_trainer_save(sh_trainer *t, const char *path)
{
    sh_strategy *s = t->strategy;
    if (s->ops->sync_state) SH_TRY(s->ops->sync_state(s));
    /* each rank's own file first: the checkpoint then names its size */
    SH_TRY(sh_snapshot_save_rank_file(t, path));
    if (s->part) return sh_snapshot_save_whole(t, path, sh_strategy_leads(s)); /* all take part */
    SH_TRY(gather_state(t));
    return s->rank == 0 ? sh_snapshot_save(t, path) : SHOAL_OK;
}

/* Lines go only from the lead (rank 0 unless the strategy says) and never under --quiet. */
static int may_print(const sh_trainer *t) { return !t->opts.quiet && sh_strategy_leads(t->strategy); }

/* The writer's line for a file it wrote, even when another rank leads. */
static void say_saved(const sh_trainer *t, sh_progress *prog, const char *path, const char *kind, const char *why)
{
    if (!may_print(t) || !sh_strategy_writes(t->strategy)) return;
    if (prog) sh_progress_clear(prog);
    fprintf(t->opts.out, "saved %s%s at step %" PRId64 "%s%s%s\n", path, kind, t->steps_done, why ? " (" : "",
            why ? why : "", why ? ")" : "");
    fflush(t->opts.out);
}

/* A checkpoint on the way (--save-every, SIGHUP): one that cannot be written is a warning, and
 * training goes on; only errors that are not about the file end the run. */
static shoal_result save_midway(sh_trainer *t, sh_progress *prog, const char *path, sh_train_report *r,
                                const char *why)
{
    uint64_t t0 = sh_trace_on() ? sh_now_ns() : 0;
    shoal_result rc = sh_trainer_save(t, path);
    if (rc == SHOAL_ERR_IO || rc == SHOAL_ERR_INVALID) {
        if (prog) sh_progress_clear(prog);
        SH_LOG_W("train", "checkpoint at step %" PRId64 " (%s) not written: %s; training goes on, the next save "
                 "tries again", t->steps_done, why, shoal_last_error_message());
        return SHOAL_OK;
    }
    SH_TRY(rc);
    if (t0) sh_trace_span(SH_TRACK_CKPT, "checkpoint", t0, sh_now_ns(), "steps_done", t->steps_done, NULL, 0);
    snprintf(r->saved_path, sizeof r->saved_path, "%s", path);
    say_saved(t, prog, path, "", why);
    return SHOAL_OK;
}

/* A file at the end: where its path fails, a copy under a free name in the current directory
 * or /tmp (run_files.c), recorded in the report for the run's last word. */
static shoal_result save_final(sh_trainer *t, sh_run_file_kind kind, const char *path, sh_train_report *r,
                               const char *why)
{
    static const char *const kinds[] = {"", " (Darknet weights)", " (Caffe weights)"};
    char written[sizeof r->saved_path], fallback[sizeof r->save_error];
    uint64_t t0 = sh_trace_on() && kind == SH_RUN_FILE_CKPT ? sh_now_ns() : 0;
    SH_TRY(sh_run_files_save(t, kind, path, written, sizeof written, fallback, sizeof fallback));
    if (t0) sh_trace_span(SH_TRACK_CKPT, "checkpoint", t0, sh_now_ns(), "steps_done", t->steps_done, NULL, 0);
    if (fallback[0] && !r->save_error[0]) snprintf(r->save_error, sizeof r->save_error, "%s", fallback);
    if (!written[0]) return SHOAL_OK;
    if (kind == SH_RUN_FILE_CKPT) snprintf(r->saved_path, sizeof r->saved_path, "%s", written);
    say_saved(t, NULL, written, kinds[kind], why);
    return SHOAL_OK;
}

static shoal_result evaluate(sh_trainer *t, sh_train_report *r)
{
    int64_t nimg = 0, ncorrect = 0;
    double loss_sum = 0;
    uint64_t t0 = sh_trace_on() ? sh_now_ns() : 0;
    int64_t step = sh_trace_step();
    sh_trace_set_step(-1); /* the timeline shows evaluation as one event, not its layers */
    /* A recurrent net reads the held-out text from a zero state; training then goes on from
     * where it was. */
    float *state = sh_net_state(t->net, NULL);
    if (t->nstate) {
        memcpy(t->state_keep, state, t->nstate * sizeof(float));
        sh_net_reset_state(t->net);
    }
    shoal_result rc = t->strategy->ops->pass
                          ? sh_eval_sums_pass(t->strategy, t->test_loader, t->x, t->y, &nimg, &ncorrect, &loss_sum)
                          : sh_eval_sums(t->net, t->test_loader, t->x, t->y, &nimg, &ncorrect, &loss_sum);
    if (t->nstate) memcpy(state, t->state_keep, t->nstate * sizeof(float));
    sh_trace_set_step(step);
    SH_TRY(rc);
    if (t0) sh_trace_span(SH_TRACK_EVAL, "evaluation", t0, sh_now_ns(), "images", nimg, NULL, 0);
    if (sh_strategy_splits_eval(t->strategy)) {
        double v[3] = {(double)nimg, (double)ncorrect, loss_sum};
        SH_TRY(t->strategy->ops->sum(t->strategy, v, 3));
        nimg = (int64_t)v[0];
        ncorrect = (int64_t)v[1];
        loss_sum = v[2];
    }
    if (nimg == 0) return SH_FAIL(SHOAL_ERR_INVALID, "evaluation: the test set has no images");
    r->test_accuracy = t->labelled ? (double)ncorrect / (double)nimg : -1; /* none without labels */
    r->test_loss = loss_sum / (double)nimg;
    if (r->nhistory < SH_HISTORY_MAX) {
        sh_epoch_point *h = &r->history[r->nhistory++];
        h->step = t->steps_done;
        h->epoch = epochs_done(t);
        h->seconds = (double)(sh_now_ns() - t->run_start_ns) * 1e-9;
        h->train_loss = r->train_loss;
        h->test_accuracy = r->test_accuracy;
        h->test_loss = r->test_loss;
    }
    if (!t->tb) return SHOAL_OK;
    if (t->labelled) SH_TRY(sh_tb_scalar(t->tb, "test/accuracy", t->steps_done, (float)r->test_accuracy));
    SH_TRY(sh_tb_scalar(t->tb, "test/loss", t->steps_done, (float)r->test_loss));
    SH_TRY(sh_tb_flush(t->tb));
    return SHOAL_OK;
}

/* A NaN or inf in the weights is caught within this many steps (the loss alone can hide
 * it: cross-entropy clamps the probability it takes the log of). Scanning the weights costs
 * one pass over them, a small fraction of the step's forward and backward passes. */
#define DIVERGENCE_SCAN_STEPS 100

static shoal_result check_diverged(const sh_trainer *t, float loss, int scan_params)
{
    int bad = !isfinite(loss);
    for (size_t i = 0; scan_params && !bad && i < t->nparams; i++) bad = !isfinite(t->params[i]);
    if (!bad) return SHOAL_OK;
    return SH_FAIL(SHOAL_ERR_INVALID,
                   "%s: training diverged: %s at step %" PRId64 "; lower learning_rate in the "
                   "[net] section (now %g) or check the data",
                   t->opts.cfg_path, isfinite(loss) ? "the weights hold NaN or inf" : "the loss is not finite",
                   t->steps_done + 1, (double)t->lr.base_lr);
}

/* Histograms of every layer's weights and gradients, tagged "weights/conv 0". */
static shoal_result log_histograms(sh_trainer *t)
{
    for (int i = 0; i < sh_net_nlayers(t->net); i++) {
        size_t off = 0, cnt = 0;
        sh_net_layer_params(t->net, i, &off, &cnt);
        if (!cnt) continue;
        char tag[96];
        snprintf(tag, sizeof tag, "weights/%s", sh_net_layer_name(t->net, i));
        SH_TRY(sh_tb_histogram(t->tb, tag, t->steps_done, t->params + off, cnt));
        snprintf(tag, sizeof tag, "gradients/%s", sh_net_layer_name(t->net, i));
        SH_TRY(sh_tb_histogram(t->tb, tag, t->steps_done, t->grads + off, cnt));
    }
    return SHOAL_OK;
}

/* One step's TensorBoard scalars (rank 0): learning curves, throughput, where the time went,
 * communication; histograms every opts.histogram_every_steps. One flush per step. */
static shoal_result log_step(sh_trainer *t, int64_t step, float loss, double acc, double step_s)
{
    sh_tb *tb = t->tb;
    const sh_strategy *s = t->strategy;
    int64_t at = t->steps_done;
    SH_TRY(sh_tb_scalar(tb, "train/loss", at, loss));
    if (acc >= 0) SH_TRY(sh_tb_scalar(tb, "train/accuracy", at, (float)acc)); /* < 0: no labels */
    SH_TRY(sh_tb_scalar(tb, "train/learning_rate", at, sh_lr_at(&t->lr, step)));
    /* epochs done, so `shoal plot --x epoch` can place every point */
    SH_TRY(sh_tb_scalar(tb, "train/epoch", at, (float)epochs_done(t)));
    /* images of every rank: each takes the same step time (they wait for each other) */
    SH_TRY(sh_tb_scalar(tb, "train/images_per_s", at,
                        step_s > 0 ? (float)((double)t->last_n * s->world / step_s) : 0));
    static const char *part[5] = {"time/data_ms", "time/forward_ms", "time/backward_ms",
                                  "comm/wait_ms", "time/optimizer_ms"};
    for (int i = 0; i < 5; i++) SH_TRY(sh_tb_scalar(tb, part[i], at, (float)(t->last_ns[i] * 1e-6)));
    if (s->ops->step_comm) {
        sh_step_comm sc;
        s->ops->step_comm(s, &sc);
        double wait_s = t->last_ns[3] * 1e-9;
        double hidden = sc.comm_s > 0 ? 1.0 - wait_s / sc.comm_s : 0;
        SH_TRY(sh_tb_scalar(tb, "comm/time_ms", at, (float)(sc.comm_s * 1e3)));
        SH_TRY(sh_tb_scalar(tb, "comm/hidden_fraction", at, (float)(hidden < 0 ? 0 : hidden > 1 ? 1 : hidden)));
        SH_TRY(sh_tb_scalar(tb, "comm/bytes_sent", at, (float)sc.sent_nbytes));
        if (sc.busbw_gb_s > 0) SH_TRY(sh_tb_scalar(tb, "comm/busbw_gb_s", at, (float)sc.busbw_gb_s));
    }
    if (s->ops->figures) {
        sh_figure fig[8];
        int n = s->ops->figures(s, fig, 8);
        for (int i = 0; i < n; i++) SH_TRY(sh_tb_scalar(tb, fig[i].tag, at, (float)fig[i].value));
    }
    if (t->opts.histogram_every_steps > 0 && at % t->opts.histogram_every_steps == 0)
        SH_TRY(log_histograms(t));
    SH_TRY(sh_tb_flush(tb));
    return SHOAL_OK;
}

/* Compressed gradients' figures after a step (TensorBoard, rank 0). */
static shoal_result log_compression(sh_trainer *t)
{
    const sh_strategy *s = t->strategy;
    double wire, dense, res;
    if (!s->ops->comm_stats || !s->ops->comm_stats(s, &wire, &dense, &res)) return SHOAL_OK;
    SH_TRY(sh_tb_scalar(t->tb, "comm/bytes_sent_per_step", t->steps_done, (float)wire));
    SH_TRY(sh_tb_scalar(t->tb, "comm/compression_ratio", t->steps_done, wire > 0 ? (float)(dense / wire) : 1.0f));
    SH_TRY(sh_tb_scalar(t->tb, "comm/residual_norm", t->steps_done, (float)res));
    return SHOAL_OK;
}

static shoal_result open_progress(sh_trainer *t, int64_t per_epoch, sh_progress **out)
{
    *out = NULL;
    /* A strategy that decides who leads keeps a progress line on every rank; the lead's shows. */
    if (t->opts.quiet || (!t->strategy->ops->leads && !may_print(t))) return SHOAL_OK;
    sh_progress_opts po;
    sh_progress_opts_default(&po);
    po.epochs = (t->steps_planned + per_epoch - 1) / per_epoch;
    po.steps_per_epoch = per_epoch;
    po.last_step = t->steps_planned; /* --max-steps may end the last epoch early */
    po.time_limit_s = t->opts.time_limit_s;
    po.images_per_step = t->global_batch;
    po.log_every_steps = t->opts.log_every_steps;
    po.out = t->opts.out;
    if (t->text) {
        po.loss_name = "bits/char";
        po.item_name = "char";
    }
    SH_TRY(sh_progress_create(&po, out));
    return SHOAL_OK;
}

/* One run's state between its steps (sh_trainer_run). */
typedef struct {
    sh_train_report *r;
    sh_progress *prog;
    int64_t per_epoch, first, last, warmup;
    uint64_t start_ns, steady_ns;
    int64_t steady_steps;
    double epoch_loss_sum;
    int64_t epoch_loss_n;
    int evaluated_at_end;
    sh_agree agree;
} run_state;

/* The run's first line: what is trained on what, and where TensorBoard writes. */
static void print_start(const sh_trainer *t, const run_state *rs)
{
    FILE *out = t->opts.out;
    if (t->text)
        fprintf(out,
                "train %s: %d training and %d held-out characters of %s, %d streams x %d "
                "time steps, %" PRId64 " steps per epoch, steps %" PRId64 "..%" PRId64
                ", %zu parameters\n",
                t->opts.cfg_path, t->train_set->count, t->test_set->count, t->opts.data_dir,
                t->global_batch / sh_net_time_steps(t->net), sh_net_time_steps(t->net),
                rs->per_epoch, rs->first + 1, rs->last, t->nparams);
    else
        fprintf(out,
                "train %s: %d training and %d test images from %s, batch %d, %" PRId64
                " steps per epoch, steps %" PRId64 "..%" PRId64 ", %zu parameters\n",
                t->opts.cfg_path, t->train_set->count, t->test_set->count, t->opts.data_dir,
                t->global_batch, rs->per_epoch, rs->first + 1, rs->last,
                t->strategy->part ? t->strategy->part->nparams_whole : t->nparams);
    if (t->tb) fprintf(out, "TensorBoard events: %s\n", sh_tb_path(t->tb));
}

/* An epoch ended: evaluation (with eval_each_epoch) and the epoch's line. */
static shoal_result end_epoch(sh_trainer *t, run_state *rs)
{
    sh_train_report *r = rs->r;
    char extra[160] = "";
    if (t->opts.eval_each_epoch) {
        SH_TRY(evaluate(t, r));
        rs->evaluated_at_end = t->steps_done == rs->last;
        double secs = (double)(sh_now_ns() - rs->start_ns) * 1e-9;
        if (t->text)
            snprintf(extra, sizeof extra, "train %.4f bits/char, test %.4f bits/char, test accuracy %.2f%% (%.1f s)",
                     r->train_loss / M_LN2, r->test_loss / M_LN2, 100 * r->test_accuracy, secs);
        else if (!t->labelled)
            snprintf(extra, sizeof extra, "train loss %.4f, test loss %.4f (%.1f s)", r->train_loss, r->test_loss,
                     secs);
        else
            snprintf(extra, sizeof extra, "train loss %.4f, test accuracy %.2f%%, test loss %.4f (%.1f s)",
                     r->train_loss, 100 * r->test_accuracy, r->test_loss, secs);
    }
    if (rs->prog && may_print(t)) sh_progress_epoch_end(rs->prog, extra[0] ? extra : NULL);
    rs->epoch_loss_sum = 0;
    rs->epoch_loss_n = 0;
    return SHOAL_OK;
}

/* 1 when steps (from, to] pass a multiple of every: one step passes its own count; a rank
 * that skips to the job's step (strategy.h's job_steps) passes the multiples it skipped. */
static int passes(int64_t from, int64_t to, int64_t every) { return every > 0 && to / every > from / every; }

/* The step (from, to] ended an epoch: where the loader now stands (an elastic job's epoch may
 * start mid-order), or for a rank that skips to the job's step (a quorum's late rank, whose
 * loader reads on in its own order) an epoch's multiple of steps passed. */
static int epoch_ended(const sh_trainer *t, const run_state *rs, int64_t from, int64_t to)
{
    if (t->strategy->job_steps) return passes(from, to, rs->per_epoch);
    return sh_loader_step(t->loader) == 0;
}

static int save_every_at(const sh_trainer *t, int64_t from, int64_t done)
{
    return t->opts.save_path && passes(from, done, t->opts.save_every_steps);
}

/* What a finished step leaves: the figures, the lines and TensorBoard, the epoch's end, a
 * periodic checkpoint. */
static shoal_result after_step(sh_trainer *t, run_state *rs, int64_t step, float loss, uint64_t step_ns)
{
    sh_train_report *r = rs->r;
    if (step - rs->first >= rs->warmup) {
        rs->steady_ns += step_ns;
        rs->steady_steps++;
    }
    rs->epoch_loss_sum += loss;
    rs->epoch_loss_n++;
    r->train_loss = rs->epoch_loss_sum / (double)rs->epoch_loss_n;
    /* The batch's training accuracy from the forward pass the step already did. */
    int hits = t->strategy->ops->pass || t->strategy->ops->step ? t->last_correct : sh_net_correct(t->net, t->y);
    double acc = t->labelled ? (double)hits / (double)t->last_n : -1; /* -1: the line shows none */
    /* The step just done in its epoch, from where the loader now stands (an epoch's steps
     * start mid-order when an elastic job changed its world there), or from the job's step. */
    int ended = epoch_ended(t, rs, step, t->steps_done);
    int64_t ep = step / rs->per_epoch, in_ep = step % rs->per_epoch;
    if (!t->strategy->job_steps) {
        ep = sh_loader_epoch(t->loader) - ended;
        in_ep = ended ? rs->per_epoch - 1
                      : (t->text ? sh_loader_image(t->loader) : sh_loader_image(t->loader) / t->global_batch) - 1;
    }
    if (rs->prog && may_print(t)) sh_progress_step(rs->prog, ep, in_ep, t->text ? loss / M_LN2 : loss, acc);
    if (t->tb) SH_TRY(log_step(t, step, loss, acc, (double)step_ns * 1e-9));
    if (t->tb) SH_TRY(log_compression(t));
    if (ended) SH_TRY(end_epoch(t, rs));
    if (save_every_at(t, step, t->steps_done) && t->steps_done != rs->last)
        SH_TRY(save_midway(t, rs->prog, t->opts.save_path, r, "--save-every"));
    return SHOAL_OK;
}

/* One step of the run and what follows it. *ends: the run ends after it (a stop request or
 * the time limit, agreed by the ranks). */
static shoal_result run_step(sh_trainer *t, run_state *rs, int64_t step, int *ends)
{
    sh_strategy *s = t->strategy;
    float loss = 0;
    if (t->opts.before_step) t->opts.before_step(t->opts.hook_ctx, s->job_rank, step);
    sh_trace_set_step(step); /* --timeline-steps: recording follows the step */
    uint64_t t0 = sh_now_ns();
    SH_TRY(sh_train_step(t, step, &loss));
    uint64_t t1 = sh_now_ns();
    int scan = t->steps_done % DIVERGENCE_SCAN_STEPS == 0 || t->steps_done == rs->last;
    int64_t done = step + 1;
    if (s->job_steps > done) done = s->job_steps < rs->last ? s->job_steps : rs->last; /* it was late */
    /* rests (the same on every rank): nothing but the next step reads the weights or
     * gradients after this one (TensorBoard jobs never rest: grad_sq_wanted) */
    int rests = !s->grad_sq_wanted && !scan && !epoch_ended(t, rs, step, done) && done != rs->last &&
                !save_every_at(t, step, done);
    SH_TRY(sh_agree_settle(&rs->agree, rests));
    SH_TRY(check_diverged(t, loss, scan));
    t->steps_done = done;
    SH_TRY(after_step(t, rs, step, loss, t1 - t0));
    if (t->opts.keep_state) t->opts.keep_state(t->opts.elastic_ctx, t); /* what a regroup restores */
    sh_agree_votes v = {
        .save = t->opts.save_requested && *t->opts.save_requested,
        .stop = t->opts.stop_requested && *t->opts.stop_requested,
        .out_of_time = t->opts.time_limit_s > 0 && (double)(sh_now_ns() - rs->start_ns) * 1e-9 >= t->opts.time_limit_s,
        .regroup = t->opts.regroup_wanted && t->opts.regroup_wanted(t->opts.elastic_ctx),
        .grad_sq = s->grad_sq_wanted && s->ops->grad_sq_part ? s->ops->grad_sq_part(s) : -1,
    };
    SH_TRY(sh_agree_vote(&rs->agree, &v, t->opts.save_requested));
    if (t->tb) { /* the averaged gradient's norm, its shares summed over the ranks */
        double sq = v.grad_sq >= 0 ? v.grad_sq : sh_sum_squares(t->grads, t->nparams);
        SH_TRY(sh_tb_scalar(t->tb, "train/gradient_norm", t->steps_done, (float)sqrt(sq)));
    }
    if (v.save) { /* a file nobody named never replaces one that exists (run_files.c) */
        const char *path = t->opts.save_path;
        if (!path) SH_TRY(sh_run_files_unnamed(t, &path));
        SH_TRY(save_midway(t, rs->prog, path, rs->r, "SIGHUP"));
    }
    rs->r->stopped = v.stop;
    rs->r->regroup = v.regroup && !v.stop && !v.out_of_time && t->steps_done < rs->last;
    *ends = v.stop || v.out_of_time || rs->r->regroup; /* out of time: as if the planned steps were done */
    return SHOAL_OK;
}

/* After the last step: the final checkpoint (and evaluation), Darknet's and Caffe's weights. */
static shoal_result end_run(sh_trainer *t, run_state *rs)
{
    sh_train_report *r = rs->r;
    if (r->stopped) {
        const char *path = t->opts.save_path;
        if (!path) SH_TRY(sh_run_files_unnamed(t, &path));
        SH_TRY(save_final(t, SH_RUN_FILE_CKPT, path, r, "stop requested"));
    } else {
        if (!rs->evaluated_at_end) SH_TRY(evaluate(t, r));
        if (t->opts.save_path) SH_TRY(save_final(t, SH_RUN_FILE_CKPT, t->opts.save_path, r, "end of training"));
    }
    /* The whole model, the parts gathered first where ranks hold parts (collective). */
    if (t->opts.save_darknet_path) SH_TRY(save_final(t, SH_RUN_FILE_DARKNET, t->opts.save_darknet_path, r, NULL));
    if (t->opts.save_caffe_path) SH_TRY(save_final(t, SH_RUN_FILE_CAFFE, t->opts.save_caffe_path, r, NULL));
    return SHOAL_OK;
}

static void fill_report(const sh_trainer *t, const run_state *rs)
{
    sh_train_report *r = rs->r;
    const sh_strategy *s = t->strategy;
    r->seconds = (double)(sh_now_ns() - rs->start_ns) * 1e-9;
    r->steps = t->steps_done;
    r->steps_this_run = t->steps_done - rs->first;
    r->epochs = epochs_done(t);
    r->images_per_s = rs->steady_ns ? (double)rs->steady_steps * t->global_batch / ((double)rs->steady_ns * 1e-9) : 0;
    r->peak_rss_nbytes = sh_peak_rss_nbytes();
    r->threads = t->threads;
    r->text = t->text;
    r->streamed = t->train_set->source != NULL;
    r->data_wait_s = sh_loader_wait_s(t->loader);
    r->bad_files = sh_dataset_bad_files(t->train_set) + sh_dataset_bad_files(t->test_set);
    r->train_bpc = r->train_loss / M_LN2;
    r->test_bpc = r->test_loss / M_LN2;
    if (!t->opts.profile || r->steps_this_run <= 0) return;
    double k = 1e-9 / (double)r->steps_this_run;
    r->profile.data = t->prof_ns[0] * k;
    r->profile.forward = t->prof_ns[1] * k;
    r->profile.backward = t->prof_ns[2] * k;
    r->profile.comm_wait = t->prof_ns[3] * k;
    r->profile.optimizer = t->prof_ns[4] * k;
    /* a strategy's own steps inside backward (its threads' summed time) and in finish */
    double in_bwd = (double)__atomic_load_n(&s->update_in_backward_ns, __ATOMIC_RELAXED) / t->threads * k;
    double in_fin = (double)s->update_in_finish_ns * k;
    r->profile.backward -= in_bwd;
    r->profile.comm_wait -= in_fin;
    r->profile.optimizer += in_bwd + in_fin;
}

shoal_result sh_trainer_run(sh_trainer *t, sh_train_report *r_out)
{
    sh_train_report rep;
    run_state rs;
    memset(&rs, 0, sizeof rs);
    rs.r = r_out ? r_out : &rep;
    memset(rs.r, 0, sizeof *rs.r);
    rs.r->test_accuracy = -1;
    rs.r->test_loss = -1;
    rs.per_epoch = sh_loader_steps_per_epoch(t->loader);
    rs.first = t->steps_done;
    rs.last = t->steps_planned;
    int64_t nsteps = rs.last > rs.first ? rs.last - rs.first : 0;
    rs.warmup = nsteps / 10 < WARMUP_STEPS_MAX ? nsteps / 10 : WARMUP_STEPS_MAX;
    rs.start_ns = t->run_start_ns = sh_now_ns();
    if (may_print(t) && !t->opts.quiet_start) print_start(t, &rs);
    SH_TRY(open_progress(t, rs.per_epoch, &rs.prog));
    /* Data parallelism may leave a step's last exchanges in flight for the next forward; the
     * agreement on saving and stopping then travels behind them (agree.c). */
    sh_agree_begin(&rs.agree, t->strategy);
    shoal_result rc = SHOAL_OK;
    int ends = 0;
    for (int64_t step = rs.first; step < rs.last && !ends && rc == SHOAL_OK; step = t->steps_done)
        rc = run_step(t, &rs, step, &ends);
    if (rc == SHOAL_OK) rc = sh_agree_end(&rs.agree);
    else sh_agree_abandon(&rs.agree, rc);
    if (rc == SHOAL_OK && t->strategy->ops->end) rc = t->strategy->ops->end(t->strategy);
    sh_progress_destroy(rs.prog);
    if (rc == SHOAL_OK && !rs.r->regroup) rc = end_run(t, &rs);
    if (rc == SHOAL_OK) fill_report(t, &rs);
    return rc;
}
