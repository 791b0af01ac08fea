/* cmd_train.c — `shoal train CFG [options]`: its flag table (every training option is a row
 * of shoal/train.h's, set by shoal_train_opts_set; -n and the machines, the --debug-* fault
 * drills are this file's), -n N (starting the ranks through the launcher), signals (SIGINT
 * stops and saves, SIGHUP saves and goes on), the final lines or JSON object, the exit code.
 * Not here: the options and the job (src/train/train_opts.c, train_api.c), parsing (flags.c).
 * Proved by tests/cli/test_train_cli.c and the other tests/cli/test_train_*.c. */
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "cli/launch.h"
#include "shoal/comm.h"
#include "shoal/train.h"

static const char usage_text[] =
    "usage: shoal train CFG [options]\n"
    "\n"
    "Train the network described by CFG (a Darknet-style .cfg, or Caffe's .prototxt) on your\n"
    "own pictures, an IDX or CIFAR-10 dataset, or any text file as characters, printing the\n"
    "test accuracy after every epoch (docs/data.md).\n";

static const char tail_text[] =
    "Signals: SIGINT (Ctrl-C) or SIGTERM stops after the current step, saves a checkpoint\n"
    "(to --save, else CFGNAME.ckpt in the current directory, or CFGNAME-1.ckpt, -2, ... when\n"
    "that exists: a file you did not name is never replaced), prints how to resume and exits\n"
    "130 (SIGTERM: 143); a second one ends at once, leaving no partial file. SIGHUP saves and\n"
    "continues. Every output file is checked before the first step; one that cannot be\n"
    "written at the end goes to the current directory or /tmp instead (said, exit 1).\n"
    "Same seed and threads give bitwise identical weights; --resume continues bit for bit.\n";

/* The --debug-* flags: fault drills installed as the job's hooks, so that no library
 * strategy kills or stalls its own process. */
typedef struct {
    int ps;                 /* --ps: die_* name a server and its rounds, delay_rank a worker */
    int die_rank;           /* < 0: none */
    int64_t die_step;       /* < 0: never */
    int delay_rank;         /* < 0: none */
    int delay_ms;
    int freeze_rank;        /* < 0: none; it stops itself (SIGSTOP) before that step */
    int64_t freeze_step;
} debug_hooks;

typedef struct {
    shoal_train_opts o;     /* every option of the library's table */
    const char *cfg;
    int nranks, nnodes, node_rank; /* -n N here, and this machine's place among several */
    const char *master_addr;
    debug_hooks dbg;
} train_cli;

static volatile sig_atomic_t stop_signal; /* the signal that asked to stop, for the last line */

/* The first SIGINT or SIGTERM asks the job to stop after its step and save; a second one ends
 * the process at once, removing the temporaries of a save in progress. */
static void on_stop(int sig)
{
    if (stop_signal) {
        sh_atomic_unlink_pending();
        _exit(128 + sig);
    }
    stop_signal = sig;
    shoal_train_request_stop();
}

static void on_sighup(int sig)
{
    (void)sig;
    shoal_train_request_save();
}

static void debug_before_step(void *ctx, int rank, int64_t step)
{
    const debug_hooks *h = ctx;
    if (!h->ps && rank == h->die_rank && step == h->die_step) raise(SIGKILL);
    if (!h->ps && rank == h->freeze_rank && step == h->freeze_step) raise(SIGSTOP);
    if (rank == h->delay_rank && h->delay_ms > 0) { /* this rank (worker) plays the straggler */
        struct timespec ts = {h->delay_ms / 1000, (long)(h->delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void debug_after_server_round(void *ctx, int server, int64_t rounds)
{
    const debug_hooks *h = ctx;
    if (h->die_step > 0 && server == h->die_rank && rounds >= h->die_step) raise(SIGKILL);
}

/* A row of the library's table: its value goes through shoal_train_opts_set. */
static int set_option(void *dst, const sh_flag *f, const char *spelled, const char *value, const char *cmd)
{
    train_cli *t = dst;
    if (shoal_train_opts_set(&t->o, f->name, value) != SHOAL_OK)
        return sh_cli_usage_error(cmd, "%s", shoal_last_error_message());
    return 0;
}

static int set_cfg(void *dst, const char *arg, const char *cmd)
{
    train_cli *t = dst;
    if (t->cfg) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    t->cfg = arg;
    return 0;
}

#define AT(field) offsetof(train_cli, field)
#define BIG (INT64_MAX / 2)

/* This command's own rows: the ranks it starts, listed before the library's "Scaling". */
static const sh_flag rank_rows[] = {
    {"nranks", 'n', "N", SH_FLAG_INT, AT(nranks), 1, 4096, "Ranks",
     "train on N ranks of this machine (shoal starts them); under shoal launch, mpirun or srun the job's "
     "ranks are used instead", NULL, NULL, NULL},
    {"nnodes", 0, "H", SH_FLAG_INT, AT(nnodes), 1, 4096, "Ranks",
     "with -n N: H machines of N ranks each, one shoal train per machine (needs --node-rank and "
     "--master-addr; SHOAL_JOB_KEY must be the same on every machine)", NULL, NULL, NULL},
    {"node-rank", 0, "K", SH_FLAG_INT, AT(node_rank), 0, 4095, "Ranks",
     "with --nnodes: this is machine K of H, its ranks K*N..K*N+N-1", NULL, NULL, NULL},
    {"master-addr", 0, "ADDR", SH_FLAG_STR, AT(master_addr), 0, 0, "Ranks", "with --nnodes: node 0's address",
     NULL, NULL, NULL},
};

static const sh_flag debug_rows[] = {
    {"debug-delay-rank", 0, "R", SH_FLAG_INT, AT(dbg.delay_rank), 0, 1 << 20, "Fault drills",
     "rank R (with --ps: worker R) sleeps --debug-delay-ms before every step: a straggler", NULL, NULL, NULL},
    {"debug-delay-ms", 0, "D", SH_FLAG_INT, AT(dbg.delay_ms), 0, 3600000, "Fault drills",
     "milliseconds the straggler sleeps", NULL, NULL, NULL},
    {"debug-die-rank", 0, "R", SH_FLAG_INT, AT(dbg.die_rank), 0, 1 << 20, "Fault drills",
     "rank R kills itself at step --debug-die-step (with --ps: server R after that many rounds of updates)",
     NULL, NULL, NULL},
    {"debug-die-step", 0, "S", SH_FLAG_I64, AT(dbg.die_step), 0, BIG, "Fault drills", "the step (or rounds)", NULL,
     NULL, NULL},
    {"debug-freeze-rank", 0, "R", SH_FLAG_INT, AT(dbg.freeze_rank), 0, 1 << 20, "Fault drills",
     "rank R stops itself (SIGSTOP) before step --debug-freeze-step, as a hung process would", NULL, NULL, NULL},
    {"debug-freeze-step", 0, "S", SH_FLAG_I64, AT(dbg.freeze_step), 0, BIG, "Fault drills", "the step", NULL, NULL,
     NULL},
};

#define MAX_ROWS 96
static sh_flag rows[MAX_ROWS];
static sh_flag_table table = {
    .cmd = "train", .usage = usage_text, .tail = tail_text, .flags = rows, .style = SH_FLAGS_EXPECTED,
    .positional = set_cfg,
};

/* The table: the library's options (shoal_train_option_at), this file's rank rows before its
 * "Scaling" heading, the fault drills last. */
static void build_table(void)
{
    enum { NRANK_ROWS = sizeof rank_rows / sizeof rank_rows[0], NDEBUG_ROWS = sizeof debug_rows / sizeof debug_rows[0] };
    size_t n = 0;
    int ranks_listed = 0;
    if (table.nflags) return;
    for (size_t i = 0; shoal_train_option_at(i) && n + NRANK_ROWS + NDEBUG_ROWS < MAX_ROWS; i++) {
        const shoal_train_option *op = shoal_train_option_at(i);
        if (!strcmp(op->group, "Scaling") && !ranks_listed) {
            for (size_t k = 0; k < NRANK_ROWS; k++) rows[n++] = rank_rows[k];
            ranks_listed = 1;
        }
        rows[n++] = (sh_flag){op->name, 0, op->arg, SH_FLAG_CALL, 0, 0, 0, op->group, op->help, NULL, NULL,
                              set_option};
    }
    for (size_t k = 0; k < NRANK_ROWS && !ranks_listed; k++) rows[n++] = rank_rows[k];
    for (size_t k = 0; k < NDEBUG_ROWS; k++) rows[n++] = debug_rows[k];
    table.nflags = n;
}

/* -n N outside a job: start N ranks (plus the servers) of this same command without -n. */
static int relaunch(int argc, char **argv, int nranks, const train_cli *t)
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
        if (!strncmp(argv[i], "-n=", 3) || !strncmp(argv[i], "--nranks=", 9) || !strncmp(argv[i], "--nnodes=", 9) ||
            !strncmp(argv[i], "--node-rank=", 12) || !strncmp(argv[i], "--master-addr=", 14))
            continue;
        args[k++] = argv[i];
    }
    args[k] = NULL;
    sh_launch_opts lo = {.nranks = nranks, .output_dir = NULL, .grace_ms = 5000, .tag = "train",
                         .nnodes = t->nnodes, .node_rank = t->node_rank, .master_addr = t->master_addr};
    int code = sh_launch_run(&lo, args);
    free(args);
    return code;
}

/* What -n and the machines need of the layout, said before any rank starts. */
static int check_ranks(const train_cli *t, int in_job)
{
    const shoal_train_opts *o = &t->o;
    int ps = o->layout == SHOAL_TRAIN_PARAM_SERVER, n = t->nranks * (t->nnodes > 1 ? t->nnodes : 1); /* the job's */
    long long stages = o->pipeline_stages, tensor = o->tensor_ranks;
    if ((t->nnodes > 1 || t->node_rank > 0 || t->master_addr) && (n == 0 || in_job))
        return sh_cli_usage_error("train", "--nnodes, --node-rank and --master-addr go with -n N (ranks on "
                                  "this machine), outside mpirun/srun");
    if (t->node_rank >= (t->nnodes > 1 ? t->nnodes : 1))
        return sh_cli_usage_error("train", "--node-rank %d is outside 0..%d (--nnodes)", t->node_rank,
                                  t->nnodes > 1 ? t->nnodes - 1 : 0);
    if (t->nnodes > 1 && ps)
        return sh_cli_usage_error("train", "--ps with --nnodes: start the whole job with shoal launch -n N --nnodes %d "
                                  "--node-rank K --master-addr ADDR -- shoal train CFG --ps --servers S (the job's first "
                                  "S ranks serve)", t->nnodes);
    if (in_job) return SH_EXIT_OK; /* the job's ranks are given: the job checks them */
    char got[48] = "no -n"; /* what the line says was given */
    if (n) snprintf(got, sizeof got, t->nnodes > 1 ? "-n %d x --nnodes %d" : "-n %d", t->nranks, t->nnodes);
    if (tensor > 1 && stages && (n == 0 || n % (stages * tensor)))
        return sh_cli_usage_error("train", "--pipeline %lld --tensor-parallel %lld runs on -n %lld ranks or a multiple "
                                  "(replicas x S x T; got %s)", stages, tensor, stages * tensor, got);
    if (tensor > 1 && (n == 0 || n % tensor))
        return sh_cli_usage_error("train", "--tensor-parallel %lld runs on -n %lld ranks or a multiple (replicas x "
                                  "T; got %s)", tensor, tensor, got);
    if (o->hybrid && n < 2)
        return sh_cli_usage_error("train", "--hybrid %s needs ranks to split the connected layers across: add -n N "
                                  "(N >= 2)", o->hybrid);
    if (stages > 1 && n > 0 && n % stages)
        return sh_cli_usage_error("train", "--pipeline %lld does not divide -n %d into replicas of %lld stages; "
                                  "use -n %lld or another multiple of %lld", stages, n, stages, stages, stages);
    if (stages > 1 && n == 0)
        return sh_cli_usage_error("train", "--pipeline %lld needs ranks: add -n %lld (or a multiple of %lld)",
                                  stages, stages, stages);
    if (ps && n == 0)
        return sh_cli_usage_error("train", "--ps needs ranks: add -n WORKERS, or run under shoal launch, "
                                  "mpirun or srun");
    return SH_EXIT_OK;
}

static void print_server_stats(const shoal_train_report *r)
{
    char late[96];
    snprintf(late, sizeof late, ", %lld late pushes added to the next round (--quorum)",
             (long long)r->server.late_pushes);
    fprintf(stderr,
            "server %d (%s): %lld pushes, %lld pulls (%lld waited), %.1f MB pushed, "
            "CPU %.2f s (%.2f ms per MB), largest clock spread %lld, %d workers dropped, "
            "%lld messages refused%s\n",
            r->rank, r->server.consistency, (long long)r->server.pushes, (long long)r->server.pulls,
            (long long)r->server.deferred_pulls, r->server.pushed_mb, r->server.cpu_s,
            r->server.pushed_mb > 0 ? r->server.cpu_s * 1e3 / r->server.pushed_mb : 0.0,
            (long long)r->server.max_spread, r->server.dropped_workers, (long long)r->server.refused,
            r->server.late_pushes ? late : "");
}

/* Compressed gradients (data parallel or parameter-server pushes): the bytes and residual. */
static void print_compression(const shoal_train_report *r)
{
    if (!r->has_compression) return;
    fprintf(stderr, "compression: %.3f MB sent per step (float32 would send %.3f MB: %.1fx less), "
            "residual norm %.4g%s\n", r->compression.bytes_sent_per_step / 1e6,
            r->compression.dense_bytes_per_step / 1e6, r->compression.ratio, r->compression.residual_norm,
            r->compression.sfb_layers ? ", sufficient factors for some connected layers" : "");
}

static void print_profile(const shoal_train_report *r)
{
    for (int k = 0; r->has_stages && k < r->nstages; k++) {
        const shoal_train_stage *q = &r->stages[k];
        fprintf(stderr, "profile stage %d (layers %d-%d) per step (ms): forward %.2f, backward %.2f, bubble %.2f "
                "(%.1f%% of the pass), comm %.2f, pass %.2f\n", k, q->first_layer, q->last_layer, q->forward_ms,
                q->backward_ms, q->bubble_ms, 100 * q->bubble_share, q->comm_ms, q->pass_ms);
    }
    if (r->has_stages) return;
    if (r->has_hybrid) { /* broadcast's own steps inside backward and after the sum are the optimizer's */
        fprintf(stderr, "profile per step (ms): data %.2f, forward and backward %.2f, waiting for the "
                "convolutional gradients %.2f, optimizer %.2f; communication %.2f ms per step, %.3f MB sent per "
                "rank (%.3f MB of it activities and their gradients)\n", r->profile.data_ms,
                r->profile.forward_ms + r->profile.backward_ms, r->profile.comm_wait_ms, r->profile.optimizer_ms,
                r->hybrid.comm_ms, r->hybrid.bytes_sent_per_step / 1e6,
                r->hybrid.activity_bytes_per_step / 1e6);
        return;
    }
    if (!r->has_allreduce) /* one process, or a parameter-server worker */
        fprintf(stderr, "profile per step (ms): data %.2f, forward %.2f, backward %.2f, optimizer %.2f, "
                "total %.2f\n", r->profile.data_ms, r->profile.forward_ms, r->profile.backward_ms,
                r->profile.optimizer_ms, r->profile.step_ms);
    else
        fprintf(stderr, "profile per step (ms): data %.2f, forward %.2f, backward %.2f, waiting for allreduce %.2f, "
                "optimizer %.2f, total %.2f; allreduce in flight %.2f ms per step (%.1f MB), %.0f%% of it "
                "hidden behind backward\n", r->profile.data_ms, r->profile.forward_ms, r->profile.backward_ms,
                r->profile.comm_wait_ms, r->profile.optimizer_ms, r->profile.step_ms, r->allreduce.ms, r->allreduce.mb, 100 * r->allreduce.hidden_share);
    print_compression(r);
}

/* --hogwild's staleness, --quorum's late gradients: the job's, from rank 0. */
static void print_stragglers(const shoal_train_report *r)
{
    if (r->has_hogwild)
        fprintf(stderr, "hogwild: %lld updates to the shared weights; staleness (other ranks' updates between a "
                "rank's read and its write) %.2f on average, %lld at most\n", (long long)r->hogwild.updates,
                r->hogwild.staleness_mean, (long long)r->hogwild.staleness_max);
    if (r->has_quorum)
        fprintf(stderr, "quorum %g (%d of %d ranks): %lld steps; %lld gradients in time, %lld late (added to a later "
                "step)\n", r->quorum.fraction, r->quorum.ranks, r->world, (long long)r->quorum.updates,
                (long long)r->quorum.fresh, (long long)r->quorum.late);
}

/* The command that continues a stopped run: this one with --resume PATH instead of any
 * earlier --resume, words quoted for the shell where they need it. */
static void print_resume(FILE *f, int argc, char **argv, const char *path)
{
    fprintf(f, "to resume: shoal");
    for (int i = 0; i <= argc; i++) {
        const char *a = i < argc ? argv[i] : "--resume";
        if (i < argc && (!strcmp(a, "--resume") || !strncmp(a, "--resume=", 9))) {
            i += !strcmp(a, "--resume");
            continue;
        }
        const char *words[2] = {a, i == argc ? path : NULL};
        for (int w = 0; w < 2 && words[w]; w++) {
            const char *x = words[w];
            if (*x && !x[strcspn(x, " \t\n'\"\\$`*?[]{}()<>|&;#~!")]) fprintf(f, " %s", x);
            else {
                fputs(" '", f);
                for (; *x; x++) x[0] == '\'' ? fputs("'\\''", f) : fputc(*x, f);
                fputc('\'', f);
            }
        }
    }
    fputc('\n', f);
}

/* The job's result, on its reporting rank: the JSON object or the last line (also under
 * --quiet). A stopped run says where it saved and how to resume. Returns the exit code. */
static int print_result(const train_cli *t, const shoal_train_report *r, int argc, char **argv)
{
    static char json[SHOAL_TRAIN_REPORT_JSON_NBYTES];
    int sig = stop_signal ? (int)stop_signal : SIGINT;
    if (t->o.profile) print_profile(r);
    if (t->o.profile || !t->o.quiet) print_stragglers(r);
    if (t->o.profile && r->streamed)
        fprintf(stderr, "data: waited %.3f s for decoded pictures (%.1f%% of %.1f s), %" PRId64 " bad files "
                "skipped\n", r->data_wait_s, r->seconds > 0 ? 100 * r->data_wait_s / r->seconds : 0.0, r->seconds,
                r->bad_files);
    else if (r->bad_files > 0 && !t->o.quiet)
        fprintf(stderr, "data: %" PRId64 " picture files could not be read and were skipped (named in the "
                "warnings above)\n", r->bad_files);
    if (r->stopped && r->saved_path[0]) {
        fprintf(stderr, "stopped by %s; saved %s after step %" PRId64 "\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                r->saved_path, r->steps);
        print_resume(stderr, argc, argv, r->saved_path);
    } else if (r->stopped) {
        fprintf(stderr, "stopped by %s after step %" PRId64 "; no checkpoint could be written\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT", r->steps);
    }
    if (t->o.json) {
        shoal_result rc = shoal_train_report_json(r, json, sizeof json);
        if (rc != SHOAL_OK) return sh_cli_fail(rc);
        sh_cli_stdout_is_result(); /* one document on stdout, also under shoal launch */
        printf("%s\n", json);
    } else if (!r->stopped && r->text) {
        printf("test %.4f bits/char (accuracy %.2f%%) after %" PRId64 " steps (%.2f epochs) in "
               "%.1f s, %.0f chars/s, peak RSS %.1f MB\n", r->test_bpc, 100 * r->test_accuracy, r->steps, r->epochs,
               r->seconds, r->images_per_s, r->peak_rss_mb);
    } else if (!r->stopped && r->test_accuracy < 0) { /* no labels: a regression */
        printf("test loss %.4f after %" PRId64 " steps (%.2f epochs) in %.1f s, %.0f images/s, peak RSS %.1f MB\n",
               r->test_loss, r->steps, r->epochs, r->seconds, r->images_per_s, r->peak_rss_mb);
    } else if (!r->stopped) {
        printf("test accuracy %.2f%%, test loss %.4f after %" PRId64 " steps (%.2f epochs) in "
               "%.1f s, %.0f images/s, peak RSS %.1f MB\n", 100 * r->test_accuracy, r->test_loss, r->steps,
               r->epochs, r->seconds, r->images_per_s, r->peak_rss_mb);
    }
    fflush(stdout);
    return r->stopped ? 128 + sig : SH_EXIT_OK;
}

/* This process's part of the job, with the signals and the drills installed. */
static int run_job(train_cli *t, int argc, char **argv)
{
    t->dbg.ps = t->o.layout == SHOAL_TRAIN_PARAM_SERVER;
    if (t->dbg.die_rank >= 0 || t->dbg.delay_rank >= 0 || t->dbg.freeze_rank >= 0) {
        t->o.before_step = debug_before_step;
        t->o.hook_ctx = &t->dbg;
        if (t->dbg.ps) t->o.after_server_round = debug_after_server_round;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_sighup;
    sigaction(SIGHUP, &sa, NULL);
    /* A file-size limit (ulimit -f) fails the write (EFBIG) and the temporary is removed,
     * instead of killing the process with the temporary left behind. */
    signal(SIGXFSZ, SIG_IGN);

    static shoal_train_report r; /* large: not on the stack */
    shoal_result rc = shoal_train_run(&t->o, &r);
    if (r.has_server && !t->o.quiet) print_server_stats(&r); /* also when the job failed */
    /* the result stands also when a final file went elsewhere (rc then says where) */
    /* every rank of a stopped run ends as stopped (a launcher on another host exits 130 too) */
    int code = r.is_result ? print_result(t, &r, argc, argv)
               : r.stopped ? 128 + (stop_signal ? (int)stop_signal : SIGINT) : SH_EXIT_OK;
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    return code;
}

/* A stopped run ends as the signal would have ended it (exit status 128 + signal), so the
 * shell and scripts see the interruption; ranks under shoal launch report the same. */
static int end_as_signalled(int code)
{
    if (code <= 128 || code > 128 + 64) return code;
    fflush(NULL);
    signal(code - 128, SIG_DFL);
    raise(code - 128);
    return code;
}

int sh_cmd_train(int argc, char **argv)
{
    static train_cli t;
    shoal_train_opts_default(&t.o);
    t.dbg = (debug_hooks){.die_rank = -1, .die_step = -1, .delay_rank = -1, .freeze_rank = -1, .freeze_step = -1};
    build_table();
    int code = sh_flags_parse(&table, argc, argv, 1, &t, NULL);
    if (!code && !t.cfg) code = sh_cli_usage_error("train", "missing the model file CFG");
    t.o.cfg_path = t.cfg;
    if (!code && shoal_train_opts_check(&t.o) != SHOAL_OK)
        code = sh_cli_usage_error("train", "%s", shoal_last_error_message());
    shoal_job_env e;
    int in_job = shoal_job_env_read(&e) == SHOAL_OK && e.world > 1;
    if (!code) code = check_ranks(&t, in_job);
    if (!code && t.nranks > 0 && !in_job) {
        int servers = t.o.layout == SHOAL_TRAIN_PARAM_SERVER ? t.o.nservers : 0;
        code = relaunch(argc, argv, t.nranks + servers, &t);
    } else if (!code) {
        code = end_as_signalled(run_job(&t, argc, argv));
    }
    shoal_train_opts_fini(&t.o);
    return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
}
