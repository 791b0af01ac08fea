/* cmd_pretrain.c — `shoal pretrain CFG`: greedy layer-wise pretraining of the [rbm] layers of
 * a deep belief net, without labels, alone or on -n N ranks (re-run under the launcher), then
 * the whole net's weights for `shoal train CFG --weights FILE`, through shoal_pretrain_run.
 * Not here: the pretraining (src/train/pretrain.c), CD-k (src/nn/layer_rbm.c), parsing (flags.c).
 * Proved by tests/cli/test_pretrain.c. */
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/launch.h"
#include "shoal/comm.h"
#include "shoal/train.h"

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
    "sigmoid [connected] layers there).\n";

typedef struct {
    shoal_train_opts o;
    int nranks;
    const char *stop_at;    /* --debug-stop-at R:S */
    int stop_stage, stage;  /* the drill's stage and the one running */
    int64_t stop_step;
} pretrain_cli;

static volatile sig_atomic_t stop_signal;

static void on_sigint(int sig)
{
    stop_signal = sig;
    shoal_train_request_stop();
}

/* A row whose value goes through shoal_train_opts_set under the row's name. */
static int set_option(void *dst, const sh_flag *f, const char *spelled, const char *value, const char *cmd)
{
    (void)spelled;
    pretrain_cli *t = dst;
    if (shoal_train_opts_set(&t->o, f->name, value) != SHOAL_OK)
        return sh_cli_usage_error(cmd, "%s", shoal_last_error_message());
    return 0;
}

static int set_cfg(void *dst, const char *arg, const char *cmd)
{
    pretrain_cli *t = dst;
    if (t->o.cfg_path) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    t->o.cfg_path = arg;
    return 0;
}

#define AT(field) offsetof(pretrain_cli, field)
#define OPT(name, arg, help) {name, 0, arg, SH_FLAG_CALL, 0, 0, 0, "Options", help, NULL, NULL, set_option}

static const sh_flag flags[] = {
    OPT("data", "DIR", "dataset directory, as shoal train's (its labels are not read)"),
    OPT("epochs", "N", "passes over the training set for each [rbm] (default 1)"),
    OPT("max-steps", "N", "at most N steps for each [rbm]"),
    OPT("batch", "N", "images per step and rank (default: the cfg's batch)"),
    OPT("threads", "N", "kernel threads per rank"),
    OPT("seed", "S", "seed of the starting weights, the shuffling and the Gibbs chains (default 1)"),
    OPT("save", "FILE", "the pretrained weights, written at the end (shoal train --weights, shoal sample "
                        "--weights); with --save-every also the checkpoint of the [rbm] being trained, every N "
                        "steps and at each [rbm]'s end"),
    OPT("save-every", "N", "checkpoint every N steps (needs --save)"),
    OPT("resume", "FILE", "continue from such a checkpoint: the [rbm] it belongs to, then the ones above it"),
    OPT("logdir", "DIR", "TensorBoard events, one run directory DIR/rbm<layer> per [rbm]"),
    OPT("bucket-mb", "X", "data parallel: gradient buckets of X MB (default 1)"),
    OPT("quiet", NULL, "no progress lines"),
    OPT("json", NULL, "print one JSON object: each [rbm]'s losses, images/s, seconds"),
    {"nranks", 'n', "N", SH_FLAG_INT, AT(nranks), 1, 4096, "Options",
     "N data-parallel ranks on this machine (CD's gradients averaged by allreduce, as shoal train's); under "
     "mpirun/srun: their ranks", NULL, NULL, NULL},
    {"debug-stop-at", 0, "R:S", SH_FLAG_STR, AT(stop_at), 0, 0, "Fault drills",
     "stop before step S of the R-th [rbm] (0-based) as Ctrl-C does, saving its checkpoint (a resume drill)",
     NULL, NULL, NULL},
};

static const sh_flag_table table = {
    .cmd = "pretrain", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .style = SH_FLAGS_EXPECTED, .positional = set_cfg,
};

static void debug_before_stage(void *ctx, int stage, int layer)
{
    (void)layer;
    ((pretrain_cli *)ctx)->stage = stage;
}

static void debug_before_step(void *ctx, int rank, int64_t step)
{
    (void)rank;
    const pretrain_cli *t = ctx;
    if (t->stage == t->stop_stage && step == t->stop_step) on_sigint(SIGINT);
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
        if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--nranks")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "-n=", 3) || !strncmp(argv[i], "--nranks=", 9)) continue;
        args[k++] = argv[i];
    }
    sh_launch_opts lo = {.nranks = nranks, .grace_ms = 5000, .tag = "pretrain"};
    int code = sh_launch_run(&lo, args);
    free(args);
    return code;
}

static void print_result(const pretrain_cli *t, const shoal_pretrain_report *r)
{
    if (t->o.json) {
        printf("{\"ranks\":%d,\"seconds\":%.3f,\"saved\":\"%s\",\"rbms\":[", r->world, r->seconds, r->saved_path);
        for (int s = r->first; s <= r->last; s++) {
            const shoal_pretrain_stage *st = &r->stages[s];
            printf("%s{\"layer\":%d,\"resumed\":%s,\"train_loss\":%.6f,\"test_loss\":%.6f,\"images_per_s\":%.1f,"
                   "\"steps\":%" PRId64 ",\"seconds\":%.3f}", s > r->first ? "," : "", st->layer,
                   st->resumed ? "true" : "false", st->train_loss, st->test_loss, st->images_per_s, st->steps,
                   st->seconds);
        }
        printf("],\"stopped\":%s}\n", r->stopped ? "true" : "false");
        return;
    }
    if (t->o.quiet) return;
    for (int s = r->first; s <= r->last; s++)
        printf("[rbm] layer %d: test loss %.4f, train loss %.4f, %.0f images/s%s\n", r->stages[s].layer,
               r->stages[s].test_loss, r->stages[s].train_loss, r->stages[s].images_per_s,
               r->stages[s].resumed ? " (resumed)" : "");
    if (r->saved_path[0])
        printf("saved the pretrained weights to %s (fine-tune: shoal train %s --weights %s)\n", r->saved_path,
               t->o.cfg_path, r->saved_path);
}

int sh_cmd_pretrain(int argc, char **argv)
{
    pretrain_cli t = {.stop_stage = -1};
    shoal_train_opts_default(&t.o);
    int code = sh_flags_parse(&table, argc, argv, 1, &t, NULL);
    if (code == 0 && !t.o.cfg_path) code = sh_cli_usage_error("pretrain", "missing the model file CFG");
    if (code == 0 && t.o.save_every_steps && !t.o.save_path)
        code = sh_cli_usage_error("pretrain", "--save-every needs --save FILE");
    if (code == 0 && t.stop_at) {
        long long st = -1, sp = -1;
        char tail = 0;
        if (sscanf(t.stop_at, "%lld:%lld%c", &st, &sp, &tail) != 2 || st < 0 || sp < 0)
            code = sh_cli_usage_error("pretrain", "--debug-stop-at \"%s\": expected RBM:STEP (0-based)", t.stop_at);
        t.stop_stage = (int)st;
        t.stop_step = sp;
        t.o.before_step = debug_before_step;
        t.o.hook_ctx = &t;
    }
    shoal_job_env e;
    shoal_job_env_read(&e); /* cannot fail with an argument */
    if (code == 0 && t.nranks > 1 && e.world <= 1) code = relaunch(argc, argv, t.nranks);
    else if (code == 0) {
        signal(SIGINT, on_sigint);
        shoal_pretrain_report r;
        shoal_result rc = shoal_pretrain_run(&t.o, t.stop_at ? debug_before_stage : NULL, &r);
        if (rc != SHOAL_OK) code = sh_cli_fail(rc);
        else if (r.rank == 0 && r.stopped) {
            fprintf(stderr, "shoal pretrain: stopped by signal %d in [rbm] layer %d; continue with --resume and the "
                    "checkpoint named above\n", (int)stop_signal, r.stages[r.last].layer);
            code = SH_EXIT_FAIL;
        } else if (r.rank == 0) {
            print_result(&t, &r);
        }
    }
    shoal_train_opts_fini(&t.o);
    return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
}
