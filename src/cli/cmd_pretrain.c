/* cmd_pretrain.c — `shoal pretrain CFG`: greedy layer-wise pretraining of the [rbm] layers of
 * a deep belief net, without labels, alone or on -n N ranks (re-run under the launcher), then
 * the whole net's weights for `shoal train CFG --weights FILE`.
 * Not here: the pretraining (src/train/pretrain.c), CD-k (src/nn/layer_rbm.c).
 * Proved by tests/cli/test_pretrain.c. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "cli/cli.h"
#include "cli/launch.h"
#include "train/job.h"
#include "train/pretrain.h"

static const char usage_text[] =
    "usage: shoal pretrain CFG [options]\n"
    "\n"
    "Pretrain the [rbm] layers of the deep belief net in CFG greedily, bottom up: each is a\n"
    "restricted Boltzmann machine trained by contrastive divergence (CD-k, or persistent CD)\n"
    "on the hidden activations of the layers below it, without labels, with its own\n"
    "learning_rate, momentum, decay and sparsity target ([rbm] keys, docs/cfg.md). Each epoch\n"
    "prints the training and test loss: minus the pseudo-likelihood (binary visible units,\n"
    "as scikit-learn's BernoulliRBM scores it) or the reconstruction error (Gaussian ones).\n"
    "Then fine-tune with labels: shoal train CFG --weights FILE (the [rbm] layers act as\n"
    "sigmoid [connected] layers there).\n"
    "\n"
    "  --data DIR         dataset directory, as shoal train's (its labels are not read)\n"
    "  --epochs N         passes over the training set for each [rbm] (default 1)\n"
    "  --max-steps N      at most N steps for each [rbm]\n"
    "  --batch N          images per step and rank (default: the cfg's batch)\n"
    "  --threads N        kernel threads per rank\n"
    "  --seed S           seed of the starting weights, the shuffling and the Gibbs chains\n"
    "  --save FILE        the pretrained weights, written at the end (shoal train --weights,\n"
    "                     shoal sample --weights); with --save-every also the [rbm] being\n"
    "                     trained's checkpoint, every N steps and at each [rbm]'s end\n"
    "  --save-every N     checkpoint every N steps (needs --save)\n"
    "  --resume FILE      continue from such a checkpoint: the [rbm] it belongs to, then the\n"
    "                     ones above it\n"
    "  --logdir DIR       TensorBoard events, one run directory DIR/rbm<layer> per [rbm]\n"
    "  -n N               N data-parallel ranks on this machine (CD's gradients averaged by\n"
    "                     allreduce, as shoal train's); under mpirun/srun: their ranks\n"
    "  --bucket-mb X      data parallel: gradient buckets of X MB (default 1)\n"
    "  --quiet            no progress lines\n"
    "  --json             print one JSON object: each [rbm]'s losses, images/s, seconds\n"
    "  --debug-stop-at R:S  stop before step S of the R-th [rbm] (0-based) as Ctrl-C does,\n"
    "                     saving its checkpoint (a resume drill)\n"
    "  --help             this text\n";

static volatile sig_atomic_t stop_requested, save_requested;
static void on_sigint(int sig) { stop_requested = sig; }

/* --debug-stop-at RBM:STEP: a stop request (as Ctrl-C's) before step STEP of the RBM-th [rbm]
 * trained (0-based): the drill that proves resume. */
typedef struct {
    int stage, stop_stage;
    int64_t stop_step;
} debug_stop;

static void debug_before_stage(void *ctx, int stage, int layer)
{
    (void)layer;
    ((debug_stop *)ctx)->stage = stage;
}

static void debug_before_step(void *ctx, int rank, int64_t step)
{
    (void)rank;
    const debug_stop *d = ctx;
    if (d->stage == d->stop_stage && step == d->stop_step) stop_requested = SIGINT;
}

/* -n N outside a job: this same command N times under the launcher, without -n. */
static int relaunch(int argc, char **argv, int nranks)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "shoal pretrain: cannot find its own executable to start the ranks\n");
        return SH_EXIT_FAIL;
    }
    self[len] = 0;
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return SH_EXIT_FAIL;
    int k = 0;
    args[k++] = self;
    args[k++] = "pretrain";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "-n=", 3)) continue;
        args[k++] = argv[i];
    }
    sh_launch_opts lo = {.nranks = nranks, .grace_ms = 5000, .tag = "pretrain"};
    int code = sh_launch_run(&lo, args);
    free(args);
    return code;
}

static void print_json(const sh_pretrain_report *r)
{
    printf("{\"ranks\":%d,\"seconds\":%.3f,\"saved\":\"%s\",\"rbms\":[", r->world, r->seconds, r->saved_path);
    for (int s = r->first; s <= r->last; s++) {
        const sh_pretrain_stage *st = &r->stages[s];
        printf("%s{\"layer\":%d,\"resumed\":%s,\"train_loss\":%.6f,\"test_loss\":%.6f,\"images_per_s\":%.1f,"
               "\"steps\":%" PRId64 ",\"seconds\":%.3f}", s > r->first ? "," : "", st->layer,
               st->resumed ? "true" : "false", st->train.train_loss, st->train.test_loss,
               st->train.images_per_s, st->train.steps, st->train.seconds);
    }
    printf("],\"stopped\":%s}\n", r->stopped ? "true" : "false");
}

int sh_cmd_pretrain(int argc, char **argv)
{
    sh_pretrain_opts po;
    sh_pretrain_opts_default(&po);
    sh_train_opts *o = &po.train;
    int json = 0, nranks = 0, epochs = 0;
    int64_t max_steps = 0, seed = 1, save_every = 0;
    const char *bucket = NULL, *stop_at = NULL;
    debug_stop dbg = {.stop_stage = -1};
    sh_cli_args a = {"pretrain", argc, argv, 1, 0};
    for (; a.i < argc; a.i++) {
        if (sh_cli_help(&a, usage_text)) return SH_EXIT_OK;
        if (!strcmp(argv[a.i], "--json")) { json = 1; continue; }
        if (!strcmp(argv[a.i], "--quiet")) { o->quiet = 1; continue; }
        if (sh_cli_arg_cfg(&a, &o->cfg_path) || sh_cli_flag_str(&a, "--data", "a directory", &o->data_dir) ||
            sh_cli_flag_str(&a, "--save", "a file", &o->save_path) ||
            sh_cli_flag_str(&a, "--resume", "a file", &o->resume_path) ||
            sh_cli_flag_str(&a, "--logdir", "a directory", &o->logdir) ||
            sh_cli_flag_str(&a, "--bucket-mb", "megabytes", &bucket) ||
            sh_cli_flag_str(&a, "--debug-stop-at", "RBM:STEP", &stop_at) ||
            sh_cli_flag_int(&a, "--epochs", 1, 1000000, &epochs) ||
            sh_cli_flag_i64(&a, "--max-steps", 1, INT64_MAX / 2, &max_steps) ||
            sh_cli_flag_int(&a, "--batch", 1, 1 << 20, &o->batch) ||
            sh_cli_flag_int(&a, "--threads", 1, 1024, &o->threads) ||
            sh_cli_flag_i64(&a, "--seed", 0, INT64_MAX, &seed) ||
            sh_cli_flag_i64(&a, "--save-every", 1, INT64_MAX / 2, &save_every) ||
            sh_cli_flag_int(&a, "-n", 1, 4096, &nranks)) {
            if (a.bad) return SH_EXIT_USAGE;
            continue;
        }
        return sh_cli_usage_error("pretrain", "unknown option \"%s\"", argv[a.i]);
    }
    if (!o->cfg_path) return sh_cli_usage_error("pretrain", "missing the model file CFG");
    if (save_every && !o->save_path) return sh_cli_usage_error("pretrain", "--save-every needs --save FILE");
    if (bucket) {
        char *end = NULL;
        po.bucket_mb = strtod(bucket, &end);
        if (!end || *end || !(po.bucket_mb > 0) || po.bucket_mb > 4096)
            return sh_cli_usage_error("pretrain", "--bucket-mb \"%s\": expected megabytes in (0, 4096]", bucket);
    }
    if (stop_at) {
        long long st = -1, sp = -1;
        char tail = 0;
        if (sscanf(stop_at, "%lld:%lld%c", &st, &sp, &tail) != 2 || st < 0 || sp < 0)
            return sh_cli_usage_error("pretrain", "--debug-stop-at \"%s\": expected RBM:STEP (0-based)", stop_at);
        dbg.stop_stage = (int)st;
        dbg.stop_step = sp;
        po.before_stage = debug_before_stage;
        o->before_step = debug_before_step;
        o->hook_ctx = &dbg;
    }
    if (nranks > 1 && !sh_job_is_launched()) return relaunch(argc, argv, nranks);
    o->epochs = epochs;
    o->max_steps = max_steps;
    o->seed = (uint64_t)seed;
    o->save_every_steps = save_every;
    o->out = json ? stderr : stdout;
    o->stop_requested = &stop_requested;
    o->save_requested = &save_requested;
    signal(SIGINT, on_sigint);
    sh_pretrain_report r;
    shoal_result rc = sh_pretrain_run(&po, &r);
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    if (r.rank != 0) return SH_EXIT_OK;
    if (r.stopped) {
        fprintf(stderr, "shoal pretrain: stopped by signal %d in [rbm] layer %d; continue with --resume and the "
                "checkpoint named above\n", (int)stop_requested, r.stages[r.last].layer);
        return SH_EXIT_FAIL;
    }
    if (json) {
        print_json(&r);
    } else if (!o->quiet) {
        for (int s = r.first; s <= r.last; s++)
            printf("[rbm] layer %d: test loss %.4f, train loss %.4f, %.0f images/s%s\n", r.stages[s].layer,
                   r.stages[s].train.test_loss, r.stages[s].train.train_loss, r.stages[s].train.images_per_s,
                   r.stages[s].resumed ? " (resumed)" : "");
        if (r.saved_path[0])
            printf("saved the pretrained weights to %s (fine-tune: shoal train %s --weights %s)\n", r.saved_path,
                   o->cfg_path, r.saved_path);
    }
    return SH_EXIT_OK;
}
