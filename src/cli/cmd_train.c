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
#include "train/job.h"

static const char usage_text[] =
    "usage: shoal train CFG [options]\n"
    "\n"
    "Train the network described by CFG (a Darknet-style .cfg) on an IDX or CIFAR-10\n"
    "dataset, printing the test accuracy after every epoch.\n"
    "\n"
    "  --data DIR         dataset directory (default $SHOAL_DATA_DIR or\n"
    "                     /usr/share/datasets/fashion-mnist)\n"
    "  --epochs N         passes over the training set (default: the cfg's max_batches\n"
    "                     steps, or 1 epoch)\n"
    "  --max-steps N      stop once N steps are done in total (counting resumed ones)\n"
    "  --batch N          images per step (default: the cfg's batch)\n"
    "  --threads N        kernel threads per rank (default $SHOAL_THREADS, else this\n"
    "                     process's CPUs shared by the ranks on this host)\n"
    "  --seed S           seed of the weights, the shuffling and dropout (default 1)\n"
    "  --save FILE        write a checkpoint at the end (and every --save-every steps)\n"
    "  --save-every N     also checkpoint every N steps (needs --save; overwrites FILE)\n"
    "  --resume FILE      continue exactly where the checkpoint FILE stopped\n"
    "  --logdir DIR       write TensorBoard event files (scalars) to DIR\n"
    "  --json             end with one JSON object on stdout (lines go to stderr):\n"
    "                     accuracy, loss, images_per_s, epochs, steps, seconds, peak_rss_mb,\n"
    "                     threads (kernel threads per rank)\n"
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
    "                     with --pipeline per stage: forward, backward, bubble (idle), comm\n"
    "  --pipeline S       pipeline parallelism: the layers cut into S stages (balanced by\n"
    "                     estimated cost, or by stage=K keys in the cfg), one rank each;\n"
    "                     -n N with N a multiple of S runs N/S replicas of the pipeline\n"
    "  --micro-batches M  with --pipeline: each batch runs as M micro-batches, one forward\n"
    "                     one backward (default S); M divides the batch\n"
    "  --tensor-parallel T  split pairs of [connected] layers across T ranks as Megatron-LM:\n"
    "                     the first by output columns, the second by input rows, one\n"
    "                     allreduce each way per pair; -n N with N a multiple of T runs N/T\n"
    "                     data-parallel replicas of the T ranks\n"
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

static void print_profile(const sh_job_report *jr)
{
    const sh_step_profile *p = &jr->train.profile;
    if (jr->has_pipe_profile) {
        print_pipe_profile(jr);
        return;
    }
    double step = p->data + p->forward + p->backward + p->comm_wait + p->optimizer;
    if (!jr->has_dp_profile) { /* one process: nothing to wait for */
        fprintf(stderr, "profile per step (ms): data %.2f, forward %.2f, backward %.2f, optimizer %.2f, "
                "total %.2f\n", p->data * 1e3, p->forward * 1e3, p->backward * 1e3, p->optimizer * 1e3,
                step * 1e3);
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
    int json = 0, ps = 0;
    long long stages = 0, micro = 0, tensor = 0;
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
        STR_FLAG("--save", o->save_path)
        STR_FLAG("--resume", o->resume_path)
        STR_FLAG("--logdir", o->logdir)
        STR_FLAG("--master-addr", master_addr)
        INT_FLAG("--nnodes", 1, 4096, nnodes)
        INT_FLAG("--node-rank", 0, 4095, node_rank)
        INT_FLAG("--epochs", 1, 1000000, o->epochs)
        INT_FLAG("--max-steps", 1, INT64_MAX / 2, o->max_steps)
        INT_FLAG("--batch", 1, 1 << 20, o->batch)
        INT_FLAG("--threads", 1, 1024, o->threads)
        INT_FLAG("--seed", 0, INT64_MAX, o->seed)
        INT_FLAG("--save-every", 1, INT64_MAX / 2, o->save_every_steps)
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
    int in_job = sh_job_is_launched();
    if ((nnodes > 1 || node_rank > 0 || master_addr) && (nranks == 0 || in_job))
        return sh_cli_usage_error("train", "--nnodes, --node-rank and --master-addr go with -n N (ranks on "
                                  "this machine), outside mpirun/srun");
    if (node_rank >= (nnodes > 1 ? nnodes : 1))
        return sh_cli_usage_error("train", "--node-rank %lld is outside 0..%lld (--nnodes)", (long long)node_rank,
                                  (long long)(nnodes > 1 ? nnodes - 1 : 0));
    sh_launch_opts nodes = {.nnodes = (int)nnodes, .node_rank = (int)node_rank, .master_addr = master_addr};
    if (stages && ps) return sh_cli_usage_error("train", "--pipeline and --ps are different layouts; choose one");
    if (tensor && (ps || stages))
        return sh_cli_usage_error("train", "--tensor-parallel is not combined with %s yet; choose one",
                                  ps ? "--ps" : "--pipeline");
    if (tensor > 1 && !in_job && (nranks == 0 || nranks % tensor))
        return sh_cli_usage_error("train", "--tensor-parallel %lld runs on -n %lld ranks or a multiple (replicas x "
                                  "T; got %s)", tensor, tensor, nranks ? "another -n" : "no -n");
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
    o->cfg_path = cfg;
    o->out = json ? stderr : stdout;
    o->stop_requested = &stop_requested;
    o->save_requested = &save_requested;
    jo.layout = ps ? SH_LAYOUT_PARAM_SERVER : stages ? SH_LAYOUT_PIPELINE
              : tensor > 1 ? SH_LAYOUT_TENSOR : SH_LAYOUT_DATA_PARALLEL;
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
        printf("{\"accuracy\":%.6f,\"loss\":%.6f,\"test_loss\":%.6f,\"images_per_s\":%.1f,"
               "\"epochs\":%.4f,\"steps\":%" PRId64 ",\"seconds\":%.3f,\"peak_rss_mb\":%.1f,"
               "\"stopped\":%s,\"threads\":%d",
               r->test_accuracy, r->train_loss, r->test_loss, r->images_per_s, r->epochs, r->steps,
               r->seconds, (double)r->peak_rss_nbytes / (1024.0 * 1024.0),
               r->stopped ? "true" : "false", r->threads);
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
        printf("}\n");
    } else if (!o->quiet && !r->stopped) {
        printf("test accuracy %.2f%%, test loss %.4f after %" PRId64 " steps (%.2f epochs) in "
               "%.1f s, %.0f images/s, peak RSS %.1f MB\n",
               100 * r->test_accuracy, r->test_loss, r->steps, r->epochs, r->seconds, r->images_per_s,
               (double)r->peak_rss_nbytes / (1024.0 * 1024.0));
    }
    return SH_EXIT_OK;
}
