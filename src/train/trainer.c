/* trainer.c — a training run: builds the net, data, optimizer and strategy, then runs
 * epochs of steps with evaluation, log lines, periodic checkpoints and stop/save requests.
 * Not here: one step (step.c), evaluation (eval.c), checkpoint content (snapshot.c), flags
 * (src/cli/cmd_train.c).
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
#include "train/eval.h"
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

static shoal_result check_dataset_fits(const sh_dataset *d, const sh_net *net, const char *cfg, int labelled)
{
    int count = d->c * d->h * d->w;
    if (count != sh_net_input_count(net))
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "dataset %s has %dx%dx%d images (%d values) but %s expects %d values "
                       "per image; set width, height and channels in its [net] section to "
                       "the dataset's",
                       d->name, d->c, d->h, d->w, count, cfg, sh_net_input_count(net));
    if (labelled && d->nclasses > sh_net_nclasses(net))
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "dataset %s has %d classes but %s outputs %d; make the last layer's "
                       "output %d",
                       d->name, d->nclasses, cfg, sh_net_nclasses(net), d->nclasses);
    return SHOAL_OK;
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

    struct stat st;
    t->text = t->opts.data_dir && stat(t->opts.data_dir, &st) == 0 && S_ISREG(st.st_mode);
    if (t->text) { /* a file: character-level text, as `darknet rnn train` reads it */
        SH_TRY_GOTO(sh_text_load(t->opts.data_dir, 1, &t->train_set), rc, fail);
        SH_TRY_GOTO(sh_text_load(t->opts.data_dir, 0, &t->test_set), rc, fail);
    } else {
        SH_TRY_GOTO(sh_dataset_open_dir(t->opts.data_dir, 1, &t->train_set), rc, fail);
        SH_TRY_GOTO(sh_dataset_open_dir(t->opts.data_dir, 0, &t->test_set), rc, fail);
    }
    SH_TRY_GOTO(check_dataset_fits(t->train_set, t->net, o->cfg_path, t->labelled), rc, fail);
    SH_TRY_GOTO(check_dataset_fits(t->test_set, t->net, o->cfg_path, t->labelled), rc, fail);
    SH_TRY_GOTO(sh_trainer_open_targets(t), rc, fail);
    if (!t->text && t->train_set->count < t->global_batch) {
        rc = SH_FAIL(SHOAL_ERR_INVALID,
                     "dataset %s has %d training images, fewer than one batch of %d; use a "
                     "smaller --batch",
                     t->train_set->name, t->train_set->count, t->global_batch);
        goto fail;
    }
    sh_loader_opts lo = {.global_batch = t->global_batch, .rank = t->strategy->rank,
                         .world = t->strategy->world, .seed = t->opts.seed, .shuffle = 1,
                         .drop_last = 1, .time_steps = sh_net_time_steps(t->net),
                         .targets = t->train_target, .target_out = t->target};
    SH_TRY_GOTO(sh_loader_create(t->train_set, &lo, &t->loader), rc, fail);
    /* Every rank evaluates the whole test set alone: no shard, no shuffle, keep the tail. */
    /* With a strategy that can sum across ranks, each rank tests its shard of the test set. */
    int split_eval = t->strategy->ops->sum && t->strategy->world > 1;
    sh_loader_opts to = {.global_batch = t->batch * (split_eval ? t->strategy->world : 1),
                         .rank = split_eval ? t->strategy->rank : 0,
                         .world = split_eval ? t->strategy->world : 1, .seed = 0,
                         .shuffle = 0, .drop_last = 0, .time_steps = sh_net_time_steps(t->net),
                         .targets = t->test_target, .target_out = t->target};
    SH_TRY_GOTO(sh_loader_create(t->test_set, &to, &t->test_loader), rc, fail);

    SH_TRY_GOTO(sh_alloc_aligned((size_t)t->batch * (size_t)sh_net_input_count(t->net) *
                                     sizeof(float), (void **)&t->x), rc, fail);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)t->batch * sizeof(int32_t), (void **)&t->y), rc, fail);
    (void)sh_net_state(t->net, &t->nstate);
    if (t->nstate) {
        size_t all = t->nstate * (size_t)t->strategy->world;
        SH_TRY_GOTO(sh_calloc(t->nstate, sizeof(float), (void **)&t->state_keep), rc, fail);
        SH_TRY_GOTO(sh_calloc(all, sizeof(float), (void **)&t->state_all), rc, fail);
        SH_TRY_GOTO(sh_calloc(all, sizeof(double), (void **)&t->state_sum), rc, fail);
    }

    /* A run that is to end with a Darknet file is refused now, not after its last step. */
    if (o->save_darknet_path) SH_TRY_GOTO(sh_darknet_weights_check(t->net), rc, fail);
    if (o->weights_path && !o->resume_path)
        SH_TRY_GOTO(sh_snapshot_load_start_weights(t, o->weights_path), rc, fail);
    if (o->resume_path) SH_TRY_GOTO(sh_snapshot_restore(t, o->resume_path, &t->resume_meta), rc, fail);
    if (o->logdir && t->strategy->rank == 0) {
        SH_TRY_GOTO(sh_tb_open(o->logdir, &t->tb), rc, fail);
        sh_tb_set_autoflush(t->tb, 0); /* log_step flushes once per step */
    }
    t->strategy->opt = t->opt;
    t->strategy->lr = &t->lr;
    t->strategy->grad_sq_wanted = o->logdir != NULL || o->job_logs;
    SH_TRY_GOTO(t->strategy->ops->attach(t->strategy, t->net), rc, fail);
    if (o->resume_path && t->strategy->rank_state_restore)
        t->strategy->rank_state_restore(t->strategy, t->rank_state, t->rank_state_count, t->rank_state_world);
    if (o->resume_path && t->strategy->rank_state_set)
        SH_TRY_GOTO(sh_snapshot_restore_rank_file(t, o->resume_path, &t->resume_meta), rc, fail);
    free(t->rank_state); /* kept only for the restore */
    t->rank_state = NULL;
    t->rank_state_count = 0;
    t->params = sh_net_params(t->net); /* the strategy may have moved them (shared weights) */
    t->grads = sh_net_grads(t->net);
    t->steps_planned = plan_steps(&t->opts, t->cfg, sh_loader_steps_per_epoch(t->loader));
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
    sh_dataset_destroy(t->test_set);
    sh_dataset_destroy(t->train_set);
    sh_dataset_destroy(t->test_target);
    sh_dataset_destroy(t->train_target);
    sh_free_aligned(t->target);
    sh_optim_destroy(t->opt);
    sh_net_destroy(t->net);
    if (t->owns_strategy) sh_strategy_destroy(t->strategy);
    free(t->rank_state);
    free(t);
}

sh_net *sh_trainer_net(sh_trainer *t) { return t->net; }
int64_t sh_trainer_steps_done(const sh_trainer *t) { return t->steps_done; }
int64_t sh_trainer_steps_planned(const sh_trainer *t) { return t->steps_planned; }
const char *sh_trainer_default_save_path(const sh_trainer *t) { return t->default_save_path; }

/* Every rank's recurrent state into t->state_all (a collective step, like saving). */
static shoal_result gather_state(sh_trainer *t)
{
    if (!t->nstate) return SHOAL_OK;
    const float *st = sh_net_state(t->net, NULL);
    int world = t->strategy->world, rank = t->strategy->rank;
    if (world == 1 || !t->strategy->ops->sum) {
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
    if (t->strategy->sync_state) SH_TRY(t->strategy->sync_state(t->strategy));
    if (t->strategy->part) { /* parts of the model: all take part, the lead writes */
        if (t->strategy->rank_state_get) SH_TRY(sh_snapshot_save_rank_file(t, path)); /* --compress */
        return sh_snapshot_save_whole(t, path, t->strategy->leads(t->strategy));
    }
    SH_TRY(gather_state(t));
    /* each rank's own file first: the checkpoint rank 0 writes then names its size */
    if (t->strategy->rank_state_get) SH_TRY(sh_snapshot_save_rank_file(t, path));
    if (t->strategy->rank_state_gather) {
        SH_TRY(t->strategy->rank_state_gather(t->strategy, &t->rank_state, &t->rank_state_count));
        t->rank_state_world = t->strategy->world;
    }
    shoal_result rc = t->strategy->rank == 0 ? sh_snapshot_save(t, path) : SHOAL_OK;
    free(t->rank_state);
    t->rank_state = NULL;
    t->rank_state_count = 0;
    return rc;
}

/* Lines go only from the lead (rank 0 unless the strategy says) and never under --quiet. */
static int may_print(const sh_trainer *t)
{
    const sh_strategy *s = t->strategy;
    return !t->opts.quiet && (s->leads ? s->leads(s) : s->rank == 0);
}

static shoal_result save_to(sh_trainer *t, sh_progress *prog, const char *path,
                            sh_train_report *r, const char *why)
{
    uint64_t t0 = sh_trace_on() ? sh_now_ns() : 0;
    SH_TRY(sh_trainer_save(t, path));
    if (t0) sh_trace_span(SH_TRACK_CKPT, "checkpoint", t0, sh_now_ns(), "steps_done", t->steps_done, NULL, 0);
    snprintf(r->saved_path, sizeof r->saved_path, "%s", path);
    int wrote = t->strategy->part ? t->strategy->leads(t->strategy) : t->strategy->rank == 0;
    if (may_print(t) && wrote) { /* rank 0 wrote it, even when another leads */
        if (prog) sh_progress_clear(prog);
        fprintf(t->opts.out, "saved %s at step %" PRId64 " (%s)\n", path, t->steps_done, why);
        fflush(t->opts.out);
    }
    return SHOAL_OK;
}

/* sh_eval_sums through the strategy's pass (a pipeline: the batch goes through its stages). */
static shoal_result eval_through_strategy(sh_trainer *t, int64_t *nimg, int64_t *ncorrect, double *loss_sum)
{
    sh_strategy *s = t->strategy;
    SH_TRY(sh_loader_seek(t->test_loader, 0, 0));
    int64_t nsteps = sh_loader_steps_per_epoch(t->test_loader);
    *nimg = *ncorrect = 0;
    *loss_sum = 0;
    for (int64_t k = 0; k < nsteps; k++) {
        int n = 0, hits = 0;
        float loss = 0;
        SH_TRY(sh_loader_next(t->test_loader, t->x, t->y, &n));
        if (n <= 0 && !s->pass_takes_empty) continue;
        SH_TRY(s->ops->pass(s, t->x, t->y, n, 0, &loss, &hits));
        *loss_sum += (double)loss * n;
        *ncorrect += hits;
        *nimg += n;
    }
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
    shoal_result rc = t->strategy->ops->pass ? eval_through_strategy(t, &nimg, &ncorrect, &loss_sum)
                                             : sh_eval_sums(t->net, t->test_loader, t->x, t->y, &nimg, &ncorrect,
                                                            &loss_sum);
    if (t->nstate) memcpy(state, t->state_keep, t->nstate * sizeof(float));
    sh_trace_set_step(step);
    SH_TRY(rc);
    if (t0) sh_trace_span(SH_TRACK_EVAL, "evaluation", t0, sh_now_ns(), "images", nimg, NULL, 0);
    if (t->strategy->ops->sum && t->strategy->world > 1) {
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
        h->epoch = (double)t->steps_done / (double)sh_loader_steps_per_epoch(t->loader);
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
                   t->steps_done, (double)t->lr.base_lr);
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
    int64_t at = t->steps_done;
    SH_TRY(sh_tb_scalar(tb, "train/loss", at, loss));
    if (acc >= 0) SH_TRY(sh_tb_scalar(tb, "train/accuracy", at, (float)acc)); /* < 0: no labels */
    SH_TRY(sh_tb_scalar(tb, "train/learning_rate", at, sh_lr_at(&t->lr, step)));
    /* epochs done, so `shoal plot --x epoch` can place every point */
    SH_TRY(sh_tb_scalar(tb, "train/epoch", at, (float)((double)at / (double)sh_loader_steps_per_epoch(t->loader))));
    /* images of every rank: each takes the same step time (they wait for each other) */
    SH_TRY(sh_tb_scalar(tb, "train/images_per_s", at,
                        step_s > 0 ? (float)((double)t->last_n * t->strategy->world / step_s) : 0));
    static const char *part[5] = {"time/data_ms", "time/forward_ms", "time/backward_ms",
                                  "comm/wait_ms", "time/optimizer_ms"};
    for (int i = 0; i < 5; i++) SH_TRY(sh_tb_scalar(tb, part[i], at, (float)(t->last_ns[i] * 1e-6)));
    if (t->strategy->step_comm) {
        sh_step_comm sc;
        t->strategy->step_comm(t->strategy, &sc);
        double wait_s = t->last_ns[3] * 1e-9;
        double hidden = sc.comm_s > 0 ? 1.0 - wait_s / sc.comm_s : 0;
        SH_TRY(sh_tb_scalar(tb, "comm/time_ms", at, (float)(sc.comm_s * 1e3)));
        SH_TRY(sh_tb_scalar(tb, "comm/hidden_fraction", at, (float)(hidden < 0 ? 0 : hidden > 1 ? 1 : hidden)));
        SH_TRY(sh_tb_scalar(tb, "comm/bytes_sent", at, (float)sc.sent_nbytes));
        if (sc.busbw_gb_s > 0) SH_TRY(sh_tb_scalar(tb, "comm/busbw_gb_s", at, (float)sc.busbw_gb_s));
    }
    if (t->opts.histogram_every_steps > 0 && at % t->opts.histogram_every_steps == 0)
        SH_TRY(log_histograms(t));
    SH_TRY(sh_tb_flush(tb));
    return SHOAL_OK;
}

static shoal_result open_progress(sh_trainer *t, int64_t per_epoch, sh_progress **out)
{
    *out = NULL;
    /* A strategy whose lead can move keeps a progress line on every rank; the lead's shows. */
    if (t->opts.quiet || (!t->strategy->leads && !may_print(t))) return SHOAL_OK;
    sh_progress_opts po;
    sh_progress_opts_default(&po);
    po.epochs = (t->steps_planned + per_epoch - 1) / per_epoch;
    po.steps_per_epoch = per_epoch;
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

shoal_result sh_trainer_run(sh_trainer *t, sh_train_report *r_out)
{
    shoal_result rc = SHOAL_OK;
    sh_train_report rep, *r = r_out ? r_out : &rep;
    memset(r, 0, sizeof *r);
    r->test_accuracy = -1;
    r->test_loss = -1;
    FILE *out = t->opts.out;
    int64_t per_epoch = sh_loader_steps_per_epoch(t->loader);
    int64_t first = t->steps_done, last = t->steps_planned;
    int64_t nsteps = last > first ? last - first : 0;
    int64_t warmup = nsteps / 10 < WARMUP_STEPS_MAX ? nsteps / 10 : WARMUP_STEPS_MAX;
    uint64_t start_ns = sh_now_ns(), steady_ns = 0;
    t->run_start_ns = start_ns;
    int64_t steady_steps = 0;
    double epoch_loss_sum = 0;
    int64_t epoch_loss_n = 0;
    int evaluated_at_end = 0;
    sh_progress *prog = NULL;

    if (may_print(t)) {
        if (t->text)
            fprintf(out,
                    "train %s: %d training and %d held-out characters of %s, %d streams x %d "
                    "time steps, %" PRId64 " steps per epoch, steps %" PRId64 "..%" PRId64
                    ", %zu parameters\n",
                    t->opts.cfg_path, t->train_set->count, t->test_set->count, t->opts.data_dir,
                    t->global_batch / sh_net_time_steps(t->net), sh_net_time_steps(t->net),
                    per_epoch, first + 1, last, t->nparams);
        else
            fprintf(out,
                    "train %s: %d training and %d test images from %s, batch %d, %" PRId64
                    " steps per epoch, steps %" PRId64 "..%" PRId64 ", %zu parameters\n",
                    t->opts.cfg_path, t->train_set->count, t->test_set->count, t->opts.data_dir,
                    t->global_batch, per_epoch, first + 1, last,
                    t->strategy->part ? t->strategy->part->nparams_whole : t->nparams);
        if (t->tb) fprintf(out, "TensorBoard events: %s\n", sh_tb_path(t->tb));
    }
    SH_TRY(open_progress(t, per_epoch, &prog));
    /* Data parallelism may leave a step's last exchanges in flight for the next forward
     * (strategy.h, may_defer); the agreement on saving and stopping then travels behind
     * them and is read one step later. */
    sh_strategy *st = t->strategy;
    st->may_defer = st->drain && st->sum_start && st->ops->sum && st->world > 1;
    shoal_request *agree_req = NULL;
    double agree_buf[3] = {0, 0, 0};

    for (int64_t step = first; step < last; step++) {
        float loss = 0;
        if (t->opts.before_step)
            t->opts.before_step(t->opts.hook_ctx, t->strategy->has_drill_rank ? t->strategy->drill_rank
                                                                               : t->strategy->rank, step);
        sh_trace_set_step(step); /* --timeline-steps: recording follows the step */
        uint64_t t0 = sh_now_ns();
        SH_TRY_GOTO(sh_train_step(t, step, &loss), rc, done);
        uint64_t t1 = sh_now_ns();
        int scan = t->steps_done % DIVERGENCE_SCAN_STEPS == 0 || t->steps_done == last;
        int64_t now_done = step + 1;
        /* quiet (the same on every rank): nothing but the next step reads the weights or
         * gradients after this one (TensorBoard jobs are never quiet: grad_sq_wanted) */
        int quiet = st->may_defer && !st->grad_sq_wanted && !scan && now_done % per_epoch != 0 && now_done != last &&
                    !(t->opts.save_path && t->opts.save_every_steps > 0 && now_done % t->opts.save_every_steps == 0);
        if (!quiet && st->drain) SH_TRY_GOTO(st->drain(st), rc, done);
        SH_TRY_GOTO(check_diverged(t, loss, scan), rc, done);
        t->steps_done = step + 1;
        if (step - first >= warmup) {
            steady_ns += t1 - t0;
            steady_steps++;
        }
        epoch_loss_sum += loss;
        epoch_loss_n++;
        r->train_loss = epoch_loss_sum / (double)epoch_loss_n;
        /* The batch's training accuracy from the forward pass the step already did. */
        int hits = t->strategy->ops->pass ? t->last_correct : sh_net_correct(t->net, t->y);
        double acc = t->labelled ? (double)hits / (double)t->last_n : -1; /* -1: the line shows none */
        if (prog && may_print(t))
            sh_progress_step(prog, step / per_epoch, step % per_epoch,
                             t->text ? loss / M_LN2 : loss, acc);
        if (t->tb) SH_TRY_GOTO(log_step(t, step, loss, acc, (double)(t1 - t0) * 1e-9), rc, done);
        if (t->tb && t->strategy->comm_stats) {
            double wire, dense, res;
            t->strategy->comm_stats(t->strategy, &wire, &dense, &res);
            SH_TRY_GOTO(sh_tb_scalar(t->tb, "comm/bytes_sent_per_step", t->steps_done, (float)wire), rc, done);
            SH_TRY_GOTO(sh_tb_scalar(t->tb, "comm/compression_ratio", t->steps_done,
                                     wire > 0 ? (float)(dense / wire) : 1.0f), rc, done);
            SH_TRY_GOTO(sh_tb_scalar(t->tb, "comm/residual_norm", t->steps_done, (float)res), rc, done);
        }
        if (t->steps_done % per_epoch == 0) {
            char extra[160] = "";
            if (t->opts.eval_each_epoch) {
                SH_TRY_GOTO(evaluate(t, r), rc, done);
                evaluated_at_end = t->steps_done == last;
                if (t->text)
                    snprintf(extra, sizeof extra,
                             "train %.4f bits/char, test %.4f bits/char, test accuracy %.2f%% "
                             "(%.1f s)", r->train_loss / M_LN2, r->test_loss / M_LN2,
                             100 * r->test_accuracy, (double)(sh_now_ns() - start_ns) * 1e-9);
                else if (!t->labelled)
                    snprintf(extra, sizeof extra, "train loss %.4f, test loss %.4f (%.1f s)", r->train_loss,
                             r->test_loss, (double)(sh_now_ns() - start_ns) * 1e-9);
                else
                    snprintf(extra, sizeof extra,
                             "train loss %.4f, test accuracy %.2f%%, test loss %.4f (%.1f s)",
                             r->train_loss, 100 * r->test_accuracy, r->test_loss,
                             (double)(sh_now_ns() - start_ns) * 1e-9);
            }
            if (prog && may_print(t)) sh_progress_epoch_end(prog, extra[0] ? extra : NULL);
            epoch_loss_sum = 0;
            epoch_loss_n = 0;
        }
        if (t->opts.save_path && t->opts.save_every_steps > 0 &&
            t->steps_done % t->opts.save_every_steps == 0 && t->steps_done != last)
            SH_TRY_GOTO(save_to(t, prog, t->opts.save_path, r, "--save-every"), rc, done);
        int want_save = t->opts.save_requested && *t->opts.save_requested;
        int want_stop = t->opts.stop_requested && *t->opts.stop_requested;
        double grad_sq = t->strategy->grad_sq_wanted && t->strategy->grad_sq_part
                             ? t->strategy->grad_sq_part(t->strategy) : -1;
        int out_of_time = t->opts.time_limit_s > 0 &&
                          (double)(sh_now_ns() - start_ns) * 1e-9 >= t->opts.time_limit_s;
        if (t->strategy->ops->sum && (t->strategy->world > 1 || t->strategy->many_ranks)) {
            /* Ranks see a signal (or the clock) at slightly different moments: they agree
             * after every step (a 24-byte allreduce), so all save and stop at the same step. */
            double f[4] = {want_save, want_stop, out_of_time, grad_sq}, prev[3] = {0, 0, 0};
            if (agree_req) { /* the last step's, sent without waiting */
                shoal_result ar = shoal_wait(agree_req);
                agree_req = NULL;
                SH_TRY_GOTO(ar, rc, done);
                memcpy(prev, agree_buf, sizeof prev);
            }
            if (quiet) { /* this rank's requests go out now and are acted on after the next step */
                if (want_save && t->opts.save_requested) *t->opts.save_requested = 0;
                memcpy(agree_buf, f, sizeof agree_buf);
                SH_TRY_GOTO(st->sum_start(st, agree_buf, 3, &agree_req), rc, done);
                memcpy(f, prev, sizeof prev);
                if (f[0] > 0 || f[1] > 0 || f[2] > 0) SH_TRY_GOTO(st->drain(st), rc, done);
            } else {
                SH_TRY_GOTO(t->strategy->ops->sum(t->strategy, f, grad_sq >= 0 ? 4 : 3), rc, done);
            }
            want_save = f[0] > 0 || prev[0] > 0;
            want_stop = f[1] > 0 || prev[1] > 0;
            out_of_time = f[2] > 0 || prev[2] > 0;
            grad_sq = f[3];
        }
        if (t->tb) { /* the averaged gradient's norm, its shares summed over the ranks above */
            if (grad_sq < 0) grad_sq = sh_sum_squares(t->grads, t->nparams);
            SH_TRY_GOTO(sh_tb_scalar(t->tb, "train/gradient_norm", t->steps_done, (float)sqrt(grad_sq)), rc, done);
        }
        if (want_save) {
            if (t->opts.save_requested && !quiet) *t->opts.save_requested = 0;
            SH_TRY_GOTO(save_to(t, prog, t->opts.save_path ? t->opts.save_path
                                                           : t->default_save_path,
                                r, "SIGHUP"), rc, done);
        }
        if (want_stop) {
            r->stopped = 1;
            break;
        }
        if (out_of_time) break; /* as if the planned steps were done: evaluate, save */
    }
    if (agree_req) { /* stopped on the last step's agreement: this one's is not needed */
        rc = shoal_wait(agree_req);
        agree_req = NULL;
        if (rc != SHOAL_OK) goto done;
    }
    st->may_defer = 0;
    if (st->drain) SH_TRY_GOTO(st->drain(st), rc, done);
    sh_progress_destroy(prog);
    prog = NULL;
    if (r->stopped) {
        SH_TRY(save_to(t, NULL, t->opts.save_path ? t->opts.save_path : t->default_save_path, r,
                       "stop requested"));
    } else {
        if (!evaluated_at_end) SH_TRY(evaluate(t, r));
        if (t->opts.save_path) SH_TRY(save_to(t, NULL, t->opts.save_path, r, "end of training"));
    }
    if (t->opts.save_darknet_path) {
        /* Darknet counts images seen: steps times the global batch. Parts of the model are
         * gathered into the whole first (collective: every rank calls it). */
        SH_TRY(sh_snapshot_save_darknet(t, t->opts.save_darknet_path,
                                        (uint64_t)t->steps_done * (uint64_t)t->global_batch));
        int wrote = t->strategy->part ? t->strategy->leads(t->strategy) : t->strategy->rank == 0;
        if (may_print(t) && wrote) {
            fprintf(t->opts.out, "saved %s (Darknet weights) at step %" PRId64 "\n",
                    t->opts.save_darknet_path, t->steps_done);
            fflush(t->opts.out);
        }
    }
    r->seconds = (double)(sh_now_ns() - start_ns) * 1e-9;
    r->steps = t->steps_done;
    r->steps_this_run = t->steps_done - first;
    r->epochs = (double)t->steps_done / (double)per_epoch;
    r->images_per_s =
        steady_ns ? (double)steady_steps * t->global_batch / ((double)steady_ns * 1e-9) : 0;
    r->peak_rss_nbytes = sh_peak_rss_nbytes();
    r->threads = t->threads;
    r->text = t->text;
    r->train_bpc = r->train_loss / M_LN2;
    r->test_bpc = r->test_loss / M_LN2;
    if (t->opts.profile && r->steps_this_run > 0) {
        double k = 1e-9 / (double)r->steps_this_run;
        r->profile.data = t->prof_ns[0] * k;
        r->profile.forward = t->prof_ns[1] * k;
        r->profile.backward = t->prof_ns[2] * k;
        r->profile.comm_wait = t->prof_ns[3] * k;
        r->profile.optimizer = t->prof_ns[4] * k;
        /* a strategy's own steps inside backward (its threads' summed time) and in finish */
        double in_bwd = (double)__atomic_load_n(&st->update_in_backward_ns, __ATOMIC_RELAXED) / t->threads * k;
        double in_fin = (double)st->update_in_finish_ns * k;
        r->profile.backward -= in_bwd;
        r->profile.comm_wait -= in_fin;
        r->profile.optimizer += in_bwd + in_fin;
    }
done:
    if (rc != SHOAL_OK && (agree_req || st->drain)) {
        /* the exchanges still in flight end (or fail) before the caller frees the weights
         * they update; the error above is the one to report */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", shoal_last_error_message());
        if (agree_req) shoal_wait(agree_req);
        if (st->drain) st->drain(st);
        SH_FAIL(rc, "%s", msg);
    }
    st->may_defer = 0;
    sh_progress_destroy(prog);
    return rc;
}
