/* cmd_train.c — `shoal train CFG [options]`: flags, signal handling (SIGINT stops and saves,
 * SIGHUP saves and goes on), -n N (starting the ranks through the launcher), the fault-drill
 * hooks of the --debug-* flags, the final lines or JSON object, the exit code.
 * Not here: the job and its roles (src/train/job.c), the training (src/train/trainer.c).
 * Proved by tests/cli/test_train_cli.c. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "cli/cli.h"
#include "cli/launch.h"
#include "nn/cfg.h"
#include "train/job.h"
#include "train/timeline.h"

static const char usage_text[] =
    "usage: shoal train CFG [options]\n"
    "\n"
    "Train the network described by CFG (a Darknet-style .cfg) on an IDX or CIFAR-10\n"
    "dataset, or on any text file as characters, printing the test accuracy after every\n"
    "epoch.\n"
    "\n"
    "  --data DIR         dataset directory (default $SHOAL_DATA_DIR or\n"
    "                     /usr/share/datasets/fashion-mnist)\n"
    "  --data FILE.txt    character-level text, as darknet rnn train: each byte a one-hot\n"
    "                     of 256 inputs, the next byte its label; one stream per batch row\n"
    "                     (the cfg's batch, times [net] time_steps characters per step),\n"
    "                     the last tenth (at most 1 MiB) held out; losses in bits/char\n"
    "  --target input     a net ending in [cost] type=sse, L1 or smooth (no softmax) learns\n"
    "                     to reproduce its input (an autoencoder): test loss, no accuracy\n"
    "  --target DIR       ... or the images of a second dataset, item for item with --data's\n"

    "  --epochs N         passes over the training set (default: the cfg's max_batches\n"
    "                     steps, or 1 epoch)\n"
    "  --max-steps N      stop once N steps are done in total (counting resumed ones)\n"
    "  --time-limit S     end after the step that passes S seconds of training (then\n"
    "                     evaluate and save as at the planned end): fixed-time comparisons\n"
    "  --batch N          images per step (default: the cfg's batch); recurrent nets:\n"
    "                     streams, each time_steps rows\n"
    "  --threads N        kernel threads per rank (default $SHOAL_THREADS, else this\n"
    "                     process's CPUs shared by the ranks on this host)\n"
    "  --seed S           seed of the weights, the shuffling and dropout (default 1)\n"
    "  --save FILE        write a checkpoint at the end (and every --save-every steps)\n"
    "  --save-every N     also checkpoint every N steps (needs --save; overwrites FILE)\n"
    "  --weights FILE     start from these weights: a shoal checkpoint, or Darknet's\n"
    "                     FILE.weights (a name ending in .weights) for the same cfg;\n"
    "                     under --pipeline, --tensor-parallel, --hybrid each rank takes\n"
    "                     its part of the whole model in FILE; after shoal pretrain --save\n"
    "                     FILE it fine-tunes the pretrained [rbm] layers (sigmoid layers here)\n"
    "  --save-darknet FILE  write Darknet's .weights at the end (darknet reads it): the\n"
    "                     whole model under every layout (the ranks' parts gathered);\n"
    "                     a model Darknet cannot hold is refused before training\n"
    "  --resume FILE      continue exactly where the checkpoint FILE stopped\n"
    "  --logdir DIR       write TensorBoard event files to DIR (one run directory for all\n"
    "                     ranks): loss, accuracy, learning rate, images/s, gradient norm,\n"
    "                     step parts, communication wait, share hidden behind backward,\n"
    "                     bytes sent, bus bandwidth; with --ps the servers' clock spread\n"
    "  --log-histograms N with --logdir: weight and gradient histograms of every layer\n"
    "                     every N steps\n"
    "  --timeline FILE    write a Chrome trace (chrome://tracing, ui.perfetto.dev) of the\n"
    "                     run: one process per rank, a track per activity (data, forward\n"
    "                     and backward per layer, each gradient bucket's allreduce, waiting,\n"
    "                     optimizer, checkpoints, parameter-server pulls and pushes); rank\n"
    "                     clocks aligned to rank 0's; `shoal plot --timeline FILE` draws it\n"
    "  --timeline-steps A:B  record only steps A..B-1 (counted from 0; A: to the end)\n"
    "  --json             end with one JSON object on stdout (lines go to stderr):\n"
    "                     accuracy, loss, images_per_s, epochs, steps, seconds, peak_rss_mb,\n"
    "                     threads (kernel threads per rank), history (every evaluation:\n"
    "                     step, epoch, seconds, train_loss, test_accuracy, test_loss;\n"
    "                     `shoal plot FILE.json` draws it); on text also train_bpc,\n"
    "                     test_bpc, chars_per_s; compressed: compress, bytes_sent_per_step,\n"
    "                     dense_bytes_per_step, compression_ratio, residual_norm; --hybrid:\n"
    "                     hybrid, bytes_sent_per_step, activity_bytes_per_step, comm_ms\n"
    "  --quiet            no progress lines\n"
    "  -n N               train on N ranks of this machine (shoal starts them); under\n"
    "                     shoal launch, mpirun or srun the job's ranks are used instead\n"
    "  --nnodes H --node-rank K --master-addr ADDR\n"
    "                     with -n N: machine K of H (N ranks each; ranks K*N..K*N+N-1),\n"
    "                     node 0 at ADDR; SHOAL_JOB_KEY must be the same on every machine\n"
    "  --scaling MODE     with ranks: weak (default: every rank trains on the cfg's\n"
    "                     batch) or strong (the cfg's batch is split across the ranks)\n"
    "  --lr-scaling MODE  weak scaling: none (default) or linear (learning rate x ranks;\n"
    "                     pair it with burn_in in the cfg for a warm-up)\n"
    "  --bucket-mb X      gradients travel in buckets of X MB (default 1), last layers first,\n"
    "                     each allreduce starting while backward goes on\n"
    "  --profile          per-step times: data, forward, backward, waiting for the\n"
    "                     allreduce, optimizer, and the share of communication hidden;\n"
    "                     with --pipeline per stage: forward, backward, bubble (idle), comm;\n"
    "                     with --hybrid the bytes a rank sends per step\n"
    "  --pipeline S       pipeline parallelism: the layers cut into S stages (balanced by\n"
    "                     estimated cost, or by stage=K keys in the cfg), one rank each;\n"
    "                     -n N with N a multiple of S runs N/S replicas of the pipeline\n"
    "  --micro-batches M  with --pipeline: each batch runs as M micro-batches, one forward\n"
    "                     one backward (default S); M divides the batch\n"
    "  --tensor-parallel T  split pairs of layers across T ranks as Megatron-LM: the first\n"
    "                     by output columns (a [convolutional]: filters), the second by\n"
    "                     input rows (channels), one allreduce each way per pair; pairs of\n"
    "                     [connected], of [convolutional], or conv then connected (pooling\n"
    "                     between), chosen by multiply-adds against bytes allreduced and\n"
    "                     printed at start-up; -n N with N a multiple of T runs N/T\n"
    "                     data-parallel replicas of the T ranks; with --pipeline S each\n"
    "                     stage is split across T ranks (its own pairs) and N/(S T) replicas\n"
    "                     run: -n 8 --pipeline 2 --tensor-parallel 2 gives 2\n"
    "  --hybrid SCHEME    with -n N: Krizhevsky's \"one weird trick\": the layers before the\n"
    "                     first [connected] run data-parallel (each rank 1/N of the batch,\n"
    "                     which is the global one), every [connected] layer is split by\n"
    "                     outputs across the N ranks on the whole batch; SCHEME moves the\n"
    "                     activities: broadcast (all to all at once), vertical (one rank's\n"
    "                     per chunk, the next in flight) or horizontal (1/N of every rank's\n"
    "                     per chunk, the next in flight; N x N divides the batch)\n"
    "  --compress C       with ranks: send compressed gradients; C is none (default,\n"
    "                     float32), fp16, bf16, 1bit (CNTK's 1-bit SGD), topk:F (the\n"
    "                     fraction F of largest entries, e.g. topk:0.01) or lowrank:R\n"
    "                     (PowerSGD of rank R); 1bit, topk and lowrank carry their\n"
    "                     error to the next step (kept in checkpoints, per rank; with\n"
    "                     --ps, --pipeline, --tensor-parallel, --hybrid each rank's in\n"
    "                     FILE.worker<k> beside --save FILE); topk with momentum sends\n"
    "                     velocities (momentum correction). Model-parallel layouts\n"
    "                     compress what their replicas (a hybrid: its conv part) sum\n"
    "  --sfb              with ranks: connected layers send their sufficient factors\n"
    "                     (per-image inputs and output gradients) where batch x (in + out)\n"
    "                     < in x out; the other layers use --compress (data parallel)\n"
    "  --ps               parameter-server training: the first S ranks serve (in addition\n"
    "                     to the N workers of -n), the others are workers\n"
    "  --servers S        parameter servers (default 1)\n"
    "  --consistency M    sync (bulk-synchronous, default), async (Downpour) or ssp\n"
    "  --staleness s      ssp: a worker may run s clocks ahead of the slowest (default 3)\n"
    "  --push-every m     async: push the mean gradient of m steps (default 1)\n"
    "  --pull-every n     async: refresh the weights every n steps (default 1)\n"
    "  --debug-delay-rank R, --debug-delay-ms D   worker R sleeps D ms every step\n"
    "  --debug-die-rank R, --debug-die-step S     rank R kills itself at step S (fault drills;\n"
    "                     with --ps, server R after S rounds of updates)\n"
    "  --help             this text\n"
    "\n"
    "Signals: SIGINT (Ctrl-C) stops after the current step, saves a checkpoint (to --save\n"
    "or CFGNAME.ckpt in the current directory) and exits 0; SIGHUP saves and continues.\n"
    "Same seed and threads give bitwise identical weights; --resume continues bit for bit.\n";

static volatile sig_atomic_t stop_requested, save_requested;

/* Holds the signal's number, so the exit message can name it. */
static void on_sigint(int sig) { stop_requested = sig; }

static void on_sighup(int sig)
{
    (void)sig;
    save_requested = 1;
}

/* The --debug-* flags: fault drills installed as the job's hooks, so that no library
 * strategy kills or stalls its own process. */
typedef struct {
    int ps;                 /* --ps: die_* name a server and its rounds, delay_* a worker */
    int die_rank;           /* < 0: none */
    int64_t die_step;       /* < 0: never */
    int delay_rank;         /* < 0: none */
    int delay_ms;
} debug_hooks;

static void debug_before_step(void *ctx, int rank, int64_t step)
{
    const debug_hooks *h = ctx;
    if (!h->ps && rank == h->die_rank && step == h->die_step) raise(SIGKILL);
    if (h->ps && rank == h->delay_rank && h->delay_ms > 0) { /* this worker plays the straggler */
        struct timespec ts = {h->delay_ms / 1000, (long)(h->delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void debug_after_server_round(void *ctx, int server, int64_t rounds)
{
    const debug_hooks *h = ctx;
    if (h->die_step > 0 && server == h->die_rank && rounds >= h->die_step) raise(SIGKILL);
}

static void print_server_stats(const sh_job_report *jr, const sh_job_opts *jo)
{
    const sh_ps_stats *st = &jr->server_stats;
    const char *mode = jo->consistency == SH_PS_SYNC ? "sync" : jo->consistency == SH_PS_ASYNC ? "async" : "ssp";
    fprintf(stderr,
            "server %d (%s): %lld pushes, %lld pulls (%lld waited), %.1f MB pushed, "
            "CPU %.2f s (%.2f ms per MB), largest clock spread %lld, %d workers dropped, "
            "%lld messages refused\n",
            jr->rank, mode, (long long)st->pushes, (long long)st->pulls, (long long)st->deferred_pulls,
            st->pushed_mb, st->cpu_s, st->pushed_mb > 0 ? st->cpu_s * 1e3 / st->pushed_mb : 0.0,
            (long long)st->max_spread, st->dropped_workers, (long long)st->refused);
}

static void print_pipe_profile(const sh_job_report *jr)
{
    for (int k = 0; k < jr->pipe_nstages; k++) {
        const sh_pipe_profile *q = &jr->pipe_profile[k];
        fprintf(stderr, "profile stage %d (layers %d-%d) per step (ms): forward %.2f, backward %.2f, bubble %.2f "
                "(%.1f%% of the pass), comm %.2f, pass %.2f\n", k, q->lo, q->hi - 1, q->forward * 1e3,
                q->backward * 1e3, q->bubble * 1e3, q->step > 0 ? 100 * q->bubble / q->step : 0.0,
                q->comm * 1e3, q->step * 1e3);
    }
}

/* Compressed gradients (data parallel or parameter-server pushes): the bytes and residual. */
static void print_compression(const sh_job_report *jr)
{
    const sh_dp_profile *pr = &jr->dp_profile;
    if (!jr->has_comm_stats) return;
    fprintf(stderr, "compression: %.3f MB sent per step (float32 would send %.3f MB: %.1fx less), "
            "residual norm %.4g%s\n", pr->wire_nbytes / 1e6, pr->dense_nbytes / 1e6,
            pr->wire_nbytes > 0 ? pr->dense_nbytes / pr->wire_nbytes : 1.0, pr->residual_norm,
            pr->sfb_layers ? ", sufficient factors for some connected layers" : "");
}

static void print_profile(const sh_job_report *jr)
{
    const sh_step_profile *p = &jr->train.profile;
    if (jr->has_pipe_profile) {
        print_pipe_profile(jr);
        return;
    }
    if (jr->has_hybrid_profile) {
        const sh_hybrid_profile *h = &jr->hybrid_profile;
        /* broadcast's own steps inside backward and after the sum are the optimizer's (trainer.c) */
        fprintf(stderr, "profile per step (ms): data %.2f, forward and backward %.2f, waiting for the "
                "convolutional gradients %.2f, optimizer %.2f; communication %.2f ms per step, %.3f MB sent per "
                "rank (%.3f MB of it activities and their gradients)\n", p->data * 1e3,
                (p->forward + p->backward) * 1e3, p->comm_wait * 1e3, p->optimizer * 1e3, h->comm_s * 1e3,
                h->sent_nbytes / 1e6, h->act_nbytes / 1e6);
        return;
    }
    double step = p->data + p->forward + p->backward + p->comm_wait + p->optimizer;
    if (!jr->has_dp_profile) { /* one process, or a parameter-server worker */
        fprintf(stderr, "profile per step (ms): data %.2f, forward %.2f, backward %.2f, optimizer %.2f, "
                "total %.2f\n", p->data * 1e3, p->forward * 1e3, p->backward * 1e3, p->optimizer * 1e3,
                step * 1e3);
        print_compression(jr);
        return;
    }
    const sh_dp_profile *pr = &jr->dp_profile;
    double comm = pr->steps ? pr->comm_s / (double)pr->steps : 0;
    double hidden = comm > 0 ? 1.0 - p->comm_wait / comm : 0;
    if (hidden < 0) hidden = 0;
    fprintf(stderr,
            "profile per step (ms): data %.2f, forward %.2f, backward %.2f, waiting for allreduce %.2f, "
            "optimizer %.2f, total %.2f; allreduce in flight %.2f ms per step (%.1f MB), %.0f%% of it "
            "hidden behind backward\n",
            p->data * 1e3, p->forward * 1e3, p->backward * 1e3, p->comm_wait * 1e3, p->optimizer * 1e3,
            step * 1e3, comm * 1e3, pr->steps ? pr->bytes / (double)pr->steps / 1e6 : 0.0, 100 * hidden);
    print_compression(jr);
}

/* --sfb on a model with no [connected] section: said once, before any rank starts. */
static int check_sfb(const char *cfg_path)
{
    sh_cfg *cfg = NULL;
    if (sh_cfg_load(cfg_path, &cfg) != SHOAL_OK) return SH_EXIT_OK; /* the training names the problem */
    int connected = 0;
    for (int i = 0; i < sh_cfg_nsections(cfg); i++)
        connected += !strcmp(sh_cfg_section_name(sh_cfg_section_at(cfg, i)), "connected");
    sh_cfg_destroy(cfg);
    if (connected) return SH_EXIT_OK;
    return sh_cli_usage_error("train", "--sfb: %s has no [connected] layer, so there are no sufficient factors "
                              "to send; leave out --sfb (or use --compress)", cfg_path);
}

/* -n N outside a job: start N ranks (plus the servers) of this same command without -n. */
static int relaunch(int argc, char **argv, int nranks, const sh_launch_opts *nodes)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "shoal train: cannot find its own executable to start the ranks\n");
        return SH_EXIT_FAIL;
    }
    self[len] = 0;
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return SH_EXIT_FAIL;
    int k = 0;
    args[k++] = self;
    args[k++] = "train";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--nranks") || !strcmp(argv[i], "--nnodes") ||
            !strcmp(argv[i], "--node-rank") || !strcmp(argv[i], "--master-addr")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--nranks=", 9) || !strncmp(argv[i], "--nnodes=", 9) ||
            !strncmp(argv[i], "--node-rank=", 12) || !strncmp(argv[i], "--master-addr=", 14))
            continue;
        args[k++] = argv[i];
    }
    args[k] = NULL;
    sh_launch_opts lo = {.nranks = nranks, .output_dir = NULL, .grace_ms = 5000, .tag = "train",
                         .nnodes = nodes->nnodes, .node_rank = nodes->node_rank, .master_addr = nodes->master_addr};
    int code = sh_launch_run(&lo, args);
    free(args);
    return code;
}

int sh_cmd_train(int argc, char **argv)
{
    sh_job_opts jo;
    sh_job_opts_default(&jo);
    sh_train_opts *o = &jo.train;
    int json = 0, ps = 0, timeline_steps = 0;
    int64_t time_limit = 0;
    long long stages = 0, micro = 0, tensor = 0;
    const char *hybrid = NULL;
    const char *cfg = NULL;
    int64_t nranks = 0, nnodes = 0, node_rank = 0;
    const char *master_addr = NULL;
    debug_hooks dbg = {.die_rank = -1, .die_step = -1, .delay_rank = -1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int64_t x = 0;
        int got;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return SH_EXIT_OK;
        }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
        if (!strcmp(a, "--ps")) { ps = 1; continue; }
        if (!strcmp(a, "--profile")) { o->profile = 1; continue; }
        if (!strcmp(a, "--sfb")) { jo.sfb = 1; continue; }
        if ((got = sh_cli_take_value(argc, argv, &i, "--compress", &v)) != 0) {
            if (got < 0) return sh_cli_usage_error("train", "--compress needs a value: none, fp16, bf16, 1bit, "
                                                   "topk:F or lowrank:R");
            if (shoal_codec_parse(v, &jo.codec) != SHOAL_OK)
                return sh_cli_usage_error("train", "--compress: %s", shoal_last_error_message());
            continue;
        }
        if ((got = sh_cli_take_value(argc, argv, &i, "--scaling", &v)) != 0) {
            if (got < 0) return sh_cli_usage_error("train", "--scaling needs a value");
            if (!strcmp(v, "strong")) jo.strong_scaling = 1;
            else if (!strcmp(v, "weak")) jo.strong_scaling = 0;
            else return sh_cli_usage_error("train", "--scaling \"%s\": use strong or weak", v);
            continue;
        }
        if ((got = sh_cli_take_value(argc, argv, &i, "--lr-scaling", &v)) != 0) {
            if (got < 0) return sh_cli_usage_error("train", "--lr-scaling needs a value");
            if (!strcmp(v, "linear")) jo.lr_linear = 1;
            else if (!strcmp(v, "none")) jo.lr_linear = 0;
            else return sh_cli_usage_error("train", "--lr-scaling \"%s\": use none or linear", v);
            continue;
        }
        if ((got = sh_cli_take_value(argc, argv, &i, "--bucket-mb", &v)) != 0) {
            char *end = NULL;
            if (got < 0) return sh_cli_usage_error("train", "--bucket-mb needs a value");
            jo.bucket_mb = strtod(v, &end);
            if (!end || *end || !(jo.bucket_mb > 0) || jo.bucket_mb > 4096)
                return sh_cli_usage_error("train", "--bucket-mb \"%s\": expected megabytes in (0, 4096]", v);
            continue;
        }
        if ((got = sh_cli_take_value(argc, argv, &i, "--consistency", &v)) != 0) {
            if (got < 0) return sh_cli_usage_error("train", "--consistency needs a value");
            if (!strcmp(v, "sync")) jo.consistency = SH_PS_SYNC;
            else if (!strcmp(v, "async")) jo.consistency = SH_PS_ASYNC;
            else if (!strcmp(v, "ssp")) jo.consistency = SH_PS_SSP;
            else return sh_cli_usage_error("train", "--consistency \"%s\": use sync, async or ssp", v);
            continue;
        }
        if (a[0] != '-') {
            if (cfg) return sh_cli_usage_error("train", "unexpected argument \"%s\"", a);
            cfg = a;
            continue;
        }
#define STR_FLAG(name, field)                                                                 \
        if ((got = sh_cli_take_value(argc, argv, &i, name, &v)) != 0) {                       \
            if (got < 0) return sh_cli_usage_error("train", "%s needs a value", name);       \
            field = v;                                                                        \
            continue;                                                                         \
        }
#define INT_FLAG(name, min, max, field)                                                       \
        if ((got = sh_cli_take_value(argc, argv, &i, name, &v)) != 0) {                       \
            if (got < 0) return sh_cli_usage_error("train", "%s needs a value", name);       \
            if (!sh_cli_parse_i64(v, min, max, &x))                                           \
                return sh_cli_usage_error("train", "%s \"%s\": expected an integer in "       \
                                          "%lld..%lld", name, v, (long long)(min),            \
                                          (long long)(max));                                  \
            field = x;                                                                        \
            continue;                                                                         \
        }
        STR_FLAG("--data", o->data_dir)
        STR_FLAG("--target", o->target)
        STR_FLAG("--save", o->save_path)
        STR_FLAG("--resume", o->resume_path)
        STR_FLAG("--weights", o->weights_path)
        STR_FLAG("--save-darknet", o->save_darknet_path)
        STR_FLAG("--logdir", o->logdir)
        STR_FLAG("--master-addr", master_addr)
        STR_FLAG("--hybrid", hybrid)
        INT_FLAG("--nnodes", 1, 4096, nnodes)
        INT_FLAG("--node-rank", 0, 4095, node_rank)
        STR_FLAG("--timeline", jo.timeline_path)
        INT_FLAG("--log-histograms", 1, INT64_MAX / 2, o->histogram_every_steps)
        if ((got = sh_cli_take_value(argc, argv, &i, "--timeline-steps", &v)) != 0) {
            if (got < 0) return sh_cli_usage_error("train", "--timeline-steps needs a value");
            if (sh_timeline_parse_steps(v, &jo.timeline_lo, &jo.timeline_hi) != SHOAL_OK)
                return sh_cli_usage_error("train", "%s", shoal_last_error_message());
            timeline_steps = 1;
            continue;
        }
        INT_FLAG("--epochs", 1, 1000000, o->epochs)
        INT_FLAG("--max-steps", 1, INT64_MAX / 2, o->max_steps)
        INT_FLAG("--batch", 1, 1 << 20, o->batch)
        INT_FLAG("--threads", 1, 1024, o->threads)
        INT_FLAG("--seed", 0, INT64_MAX, o->seed)
        INT_FLAG("--save-every", 1, INT64_MAX / 2, o->save_every_steps)
        INT_FLAG("--time-limit", 1, INT64_MAX / 2, time_limit)
        INT_FLAG("-n", 1, 4096, nranks)
        INT_FLAG("--nranks", 1, 4096, nranks)
        INT_FLAG("--servers", 1, 1024, jo.nservers)
        INT_FLAG("--pipeline", 1, 4096, stages)
        INT_FLAG("--tensor-parallel", 1, 4096, tensor)
        INT_FLAG("--micro-batches", 1, 1 << 20, micro)
        INT_FLAG("--staleness", 0, 1000000, jo.staleness)
        INT_FLAG("--push-every", 1, 1000000, jo.worker.push_every)
        INT_FLAG("--pull-every", 1, 1000000, jo.worker.pull_every)
        INT_FLAG("--debug-delay-rank", 0, 1 << 20, dbg.delay_rank)
        INT_FLAG("--debug-delay-ms", 0, 3600000, dbg.delay_ms)
        INT_FLAG("--debug-die-rank", 0, 1 << 20, dbg.die_rank)
        INT_FLAG("--debug-die-step", 0, INT64_MAX / 2, dbg.die_step)
#undef STR_FLAG
#undef INT_FLAG
        return sh_cli_usage_error("train", "unknown option \"%s\"", a);
    }
    if (!cfg) return sh_cli_usage_error("train", "missing the model file CFG");
    if (jo.strong_scaling && jo.lr_linear)
        return sh_cli_usage_error("train", "--lr-scaling linear is for weak scaling: with --scaling strong the "
                                  "global batch stays the cfg's, and so does the learning rate");
    if (jo.sfb) {
        int code = check_sfb(cfg);
        if (code != SH_EXIT_OK) return code;
    }
    if (hybrid && (ps || stages || tensor))
        return sh_cli_usage_error("train", "--hybrid is its own layout (data-parallel convolutional layers, "
                                  "model-parallel connected ones); leave out %s", ps ? "--ps" : stages ? "--pipeline"
                                  : "--tensor-parallel");
    if (hybrid && sh_hybrid_scheme_parse(hybrid, &jo.hybrid) != SHOAL_OK)
        return sh_cli_usage_error("train", "%s", shoal_last_error_message());
    jo.layout = ps ? SH_LAYOUT_PARAM_SERVER : stages ? SH_LAYOUT_PIPELINE
              : tensor > 1 ? SH_LAYOUT_TENSOR : hybrid ? SH_LAYOUT_HYBRID : SH_LAYOUT_DATA_PARALLEL;
    if (sh_job_check_compress(&jo) != SHOAL_OK) return sh_cli_usage_error("train", "%s", shoal_last_error_message());
    int in_job = sh_job_is_launched();
    if ((nnodes > 1 || node_rank > 0 || master_addr) && (nranks == 0 || in_job))
        return sh_cli_usage_error("train", "--nnodes, --node-rank and --master-addr go with -n N (ranks on "
                                  "this machine), outside mpirun/srun");
    if (node_rank >= (nnodes > 1 ? nnodes : 1))
        return sh_cli_usage_error("train", "--node-rank %lld is outside 0..%lld (--nnodes)", (long long)node_rank,
                                  (long long)(nnodes > 1 ? nnodes - 1 : 0));
    if (nnodes > 1 && ps)
        return sh_cli_usage_error("train", "--ps with --nnodes: start the whole job with shoal launch -n N --nnodes %lld "
                                  "--node-rank K --master-addr ADDR -- shoal train CFG --ps --servers S (the job's first "
                                  "S ranks serve)", (long long)nnodes);
    sh_launch_opts nodes = {.nnodes = (int)nnodes, .node_rank = (int)node_rank, .master_addr = master_addr};
    if (stages && ps) return sh_cli_usage_error("train", "--pipeline and --ps are different layouts; choose one");
    if (tensor && ps)
        return sh_cli_usage_error("train", "--tensor-parallel is not combined with --ps; choose one");
    char got[32] = "no -n"; /* what the line says was given */
    if (nranks) snprintf(got, sizeof got, "-n %lld", (long long)nranks);
    if (tensor > 1 && stages && !in_job && (nranks == 0 || nranks % (stages * tensor)))
        return sh_cli_usage_error("train", "--pipeline %lld --tensor-parallel %lld runs on -n %lld ranks or a multiple "
                                  "(replicas x S x T; got %s)", stages, tensor, stages * tensor, got);
    if (tensor > 1 && !in_job && (nranks == 0 || nranks % tensor))
        return sh_cli_usage_error("train", "--tensor-parallel %lld runs on -n %lld ranks or a multiple (replicas x "
                                  "T; got %s)", tensor, tensor, got);
    if (hybrid && !in_job && nranks < 2)
        return sh_cli_usage_error("train", "--hybrid %s needs ranks to split the connected layers across: add -n N "
                                  "(N >= 2)", hybrid);
    if (micro && !stages) return sh_cli_usage_error("train", "--micro-batches goes with --pipeline S");
    if (stages > 1 && nranks > 0 && !in_job && nranks % stages)
        return sh_cli_usage_error("train", "--pipeline %lld does not divide -n %lld into replicas of %lld stages; "
                                  "use -n %lld or another multiple of %lld", stages, (long long)nranks, stages,
                                  stages, stages);
    if (stages > 1 && nranks == 0 && !in_job)
        return sh_cli_usage_error("train", "--pipeline %lld needs ranks: add -n %lld (or a multiple of %lld)",
                                  stages, stages, stages);
    if (nranks > 0 && !in_job) return relaunch(argc, argv, (int)nranks + (ps ? jo.nservers : 0), &nodes);
    if (ps && !in_job)
        return sh_cli_usage_error("train", "--ps needs ranks: add -n WORKERS, or run under shoal launch, "
                                  "mpirun or srun");
    if (o->save_every_steps && !o->save_path)
        return sh_cli_usage_error("train", "--save-every needs --save FILE");
    if (timeline_steps && !jo.timeline_path)
        return sh_cli_usage_error("train", "--timeline-steps needs --timeline FILE.json");
    if (o->histogram_every_steps && !o->logdir)
        return sh_cli_usage_error("train", "--log-histograms needs --logdir DIR");
    o->cfg_path = cfg;
    o->out = json ? stderr : stdout;
    o->time_limit_s = (double)time_limit;
    o->stop_requested = &stop_requested;
    o->save_requested = &save_requested;
    jo.tensor_ranks = (int)tensor;
    jo.stages = (int)stages;
    jo.micro_batches = (int)micro;
    jo.layout_out = o->quiet ? NULL : o->out;
    jo.server_log = o->quiet ? NULL : stderr;
    dbg.ps = ps;
    if (dbg.die_rank >= 0 || dbg.delay_rank >= 0) {
        o->before_step = debug_before_step;
        o->hook_ctx = &dbg;
        if (ps) jo.after_server_round = debug_after_server_round;
    }

    /* A second Ctrl-C while the last step finishes kills at once (SA_RESETHAND). */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_sighup;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGHUP, &sa, NULL);

    sh_job_report jr;
    shoal_result rc = sh_job_run(&jo, &jr);
    if (jr.has_server_stats && !o->quiet) print_server_stats(&jr, &jo); /* also when the job failed */
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    if (!jr.reporter) return SH_EXIT_OK;
    if (o->profile) print_profile(&jr);
    const sh_train_report *r = &jr.train;

    if (r->stopped)
        fprintf(stderr, "stopped by %s; saved %s\n",
                stop_requested == SIGTERM ? "SIGTERM" : "SIGINT", r->saved_path);
    if (json) {
        char text_fields[160] = "";
        if (r->text) /* character-level text: an image is a character */
            snprintf(text_fields, sizeof text_fields,
                     ",\"train_bpc\":%.6f,\"test_bpc\":%.6f,\"chars_per_s\":%.1f", r->train_bpc,
                     r->test_bpc, r->images_per_s);
        printf("{\"accuracy\":%.6f,\"loss\":%.6f,\"test_loss\":%.6f,\"images_per_s\":%.1f,"
               "\"epochs\":%.4f,\"steps\":%" PRId64 ",\"seconds\":%.3f,\"peak_rss_mb\":%.1f,"
               "\"stopped\":%s,\"threads\":%d%s",
               r->test_accuracy, r->train_loss, r->test_loss, r->images_per_s, r->epochs, r->steps,
               r->seconds, (double)r->peak_rss_nbytes / (1024.0 * 1024.0),
               r->stopped ? "true" : "false", r->threads, text_fields);
        if (jr.has_comm_stats) {
            const sh_dp_profile *pr = &jr.dp_profile;
            char spec[48];
            /* --hybrid reports its bytes sent (activities too) below: here the gradients' */
            printf(",\"compress\":\"%s\",\"sfb\":%s,\"sfb_layers\":%d,\"%sbytes_sent_per_step\":%.0f,"
                   "\"dense_bytes_per_step\":%.0f,\"compression_ratio\":%.3f,\"residual_norm\":%.6g",
                   shoal_codec_format(&jo.codec, spec, sizeof spec), jo.sfb ? "true" : "false", pr->sfb_layers,
                   jr.has_hybrid_profile ? "gradient_" : "",
                   pr->wire_nbytes, pr->dense_nbytes, pr->wire_nbytes > 0 ? pr->dense_nbytes / pr->wire_nbytes : 1.0,
                   pr->residual_norm);
        }
        if (jr.has_hybrid_profile) {
            const sh_hybrid_profile *h = &jr.hybrid_profile;
            printf(",\"hybrid\":\"%s\",\"bytes_sent_per_step\":%.0f,\"activity_bytes_per_step\":%.0f,"
                   "\"comm_ms\":%.3f,\"fused_update_ms\":%.6g,\"rest_update_ms\":%.6g",
                   sh_hybrid_scheme_name(jo.hybrid), h->sent_nbytes, h->act_nbytes, h->comm_s * 1e3,
                   h->fused_update_s * 1e3, h->rest_update_s * 1e3);
        }
        if (jr.has_pipe_profile) {
            printf(",\"pipeline\":[");
            for (int k = 0; k < jr.pipe_nstages; k++) {
                const sh_pipe_profile *q = &jr.pipe_profile[k];
                printf("%s{\"stage\":%d,\"first_layer\":%d,\"last_layer\":%d,\"forward_ms\":%.3f,"
                       "\"backward_ms\":%.3f,\"bubble_ms\":%.3f,\"comm_ms\":%.3f,\"pass_ms\":%.3f,"
                       "\"bubble_share\":%.4f}", k ? "," : "", k, q->lo, q->hi - 1, q->forward * 1e3,
                       q->backward * 1e3, q->bubble * 1e3, q->comm * 1e3, q->step * 1e3,
                       q->step > 0 ? q->bubble / q->step : 0.0);
            }
            printf("]");
        }
        printf(",\"history\":[");
        for (int i = 0; i < r->nhistory; i++) {
            const sh_epoch_point *h = &r->history[i];
            printf("%s{\"step\":%" PRId64 ",\"epoch\":%.4f,\"seconds\":%.3f,\"train_loss\":%.6f,"
                   "\"test_accuracy\":%.6f,\"test_loss\":%.6f}", i ? "," : "", h->step, h->epoch, h->seconds,
                   h->train_loss, h->test_accuracy, h->test_loss);
        }
        printf("]}\n");
    } else if (!o->quiet && !r->stopped && r->text) {
        printf("test %.4f bits/char (accuracy %.2f%%) after %" PRId64 " steps (%.2f epochs) in "
               "%.1f s, %.0f chars/s, peak RSS %.1f MB\n",
               r->test_bpc, 100 * r->test_accuracy, r->steps, r->epochs, r->seconds,
               r->images_per_s, (double)r->peak_rss_nbytes / (1024.0 * 1024.0));
    } else if (!o->quiet && !r->stopped && r->test_accuracy < 0) { /* no labels: a regression */
        printf("test loss %.4f after %" PRId64 " steps (%.2f epochs) in %.1f s, %.0f images/s, peak RSS %.1f MB\n",
               r->test_loss, r->steps, r->epochs, r->seconds, r->images_per_s,
               (double)r->peak_rss_nbytes / (1024.0 * 1024.0));
    } else if (!o->quiet && !r->stopped) {
        printf("test accuracy %.2f%%, test loss %.4f after %" PRId64 " steps (%.2f epochs) in "
               "%.1f s, %.0f images/s, peak RSS %.1f MB\n",
               100 * r->test_accuracy, r->test_loss, r->steps, r->epochs, r->seconds, r->images_per_s,
               (double)r->peak_rss_nbytes / (1024.0 * 1024.0));
    }
    return SH_EXIT_OK;
}
