/* train_opts.c — the options of a training job by name (shoal_train_opts_set): one row per
 * option of `shoal train`: its name, argument, heading and help (which `shoal train --help`
 * prints), the field it sets and how its text is read and checked; copies of the strings.
 * Not here: whether options fit together and the job they make (train_api.c), flags and
 * --help's layout (src/cli/flags.c).
 * Proved by tests/train/test_api.c (every name, good and bad values), tests/cli/test_train_cli.c. */
#include "shoal/train.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "shoal/comm.h"
#include "train/mp/hybrid.h"
#include "train/timeline.h"
#include "train/train_opts.h"

typedef enum { K_SWITCH, K_INT, K_I64, K_U64, K_STR, K_CALL } opt_kind;

/* Whether the ranks of a job must share an option, checked when they start (job.c), so that
 * a rank started with another value stops the job at once, naming the option, instead of
 * waiting on collectives the others never start. Every row says which (test_train_opts). */
typedef enum {
    A_UNMARKED = 0, /* a row that forgot to say: compared, as SAME, and test_train_opts fails */
    A_SAME,         /* changes the arithmetic or the collectives: every rank the same value */
    A_GIVEN,        /* a path each machine names its own way: given on every rank or on none */
    A_OWN,          /* this rank's own business (its threads, its output, where its data is) */
} agree_kind;

typedef struct opt_row opt_row;
/* A K_CALL row's reader: value is never NULL; SH_FAIL with the message on a bad one. */
typedef shoal_result (*opt_call_fn)(shoal_train_opts *o, const opt_row *row, const char *value);
/* A row's value in canonical words for the agreement check ("" when not set). */
typedef void (*opt_show_fn)(const shoal_train_opts *o, char *buf, size_t nbytes);

struct opt_row {
    shoal_train_option info; /* name, arg, group, help */
    opt_kind kind;
    size_t offset;            /* the field in shoal_train_opts */
    int64_t min, max;         /* K_INT, K_I64, K_U64 */
    opt_call_fn call;
    agree_kind agree;
    opt_show_fn show;         /* K_CALL rows and "ps": the value for the agreement check */
};

/* The copies opts_set made, each freed by fini or when its option is set again. */
typedef struct str_copy {
    struct str_copy *next;
    char text[];
} str_copy;

static shoal_result set_str(shoal_train_opts *o, const char **field, const char *value)
{
    size_t n = strlen(value);
    str_copy *c = malloc(sizeof *c + n + 1);
    if (!c) return SH_FAIL(SHOAL_ERR_NOMEM, "shoal_train_opts_set: out of memory copying \"%.40s\"", value);
    memcpy(c->text, value, n + 1);
    for (str_copy **p = (str_copy **)&o->copies; *p; p = &(*p)->next)
        if ((*p)->text == *field) { /* the old copy is no longer anyone's */
            str_copy *old = *p;
            *p = old->next;
            free(old);
            break;
        }
    c->next = o->copies;
    o->copies = c;
    *field = c->text;
    return SHOAL_OK;
}

#define FIELD(o, row, type) ((type *)((char *)(o) + (row)->offset))

static shoal_result set_scaling(shoal_train_opts *o, const opt_row *row, const char *v)
{
    if (!strcmp(v, "strong")) o->strong_scaling = 1;
    else if (!strcmp(v, "weak")) o->strong_scaling = 0;
    else return SH_FAIL(SHOAL_ERR_INVALID, "--scaling \"%s\": use strong or weak", v);
    return SHOAL_OK;
}

static shoal_result set_lr_scaling(shoal_train_opts *o, const opt_row *row, const char *v)
{
    if (!strcmp(v, "linear")) o->lr_linear = 1;
    else if (!strcmp(v, "none")) o->lr_linear = 0;
    else return SH_FAIL(SHOAL_ERR_INVALID, "--lr-scaling \"%s\": use none or linear", v);
    return SHOAL_OK;
}

/* "MIN" or "MIN:MAX", 1 <= MIN <= MAX. */
static shoal_result set_elastic(shoal_train_opts *o, const opt_row *row, const char *v)
{
    char *end = NULL;
    errno = 0;
    long lo = strtol(v, &end, 10), hi = 0;
    int ok = !errno && end != v && lo >= 1 && lo <= 4096;
    if (ok && *end == ':') {
        const char *m = end + 1;
        hi = strtol(m, &end, 10);
        ok = !errno && end != m && hi >= lo && hi <= 4096;
    }
    if (!ok || *end)
        return SH_FAIL(SHOAL_ERR_INVALID, "--elastic \"%s\": expected MIN or MIN:MAX ranks, 1 <= MIN <= MAX <= 4096 "
                       "(e.g. 2 or 2:4)", v);
    o->elastic_min = (int)lo;
    o->elastic_max = (int)hi;
    return SHOAL_OK;
}

static shoal_result set_bucket_mb(shoal_train_opts *o, const opt_row *row, const char *v)
{
    char *end = NULL;
    double mb = strtod(v, &end);
    if (!end || end == v || *end || !(mb > 0) || mb > 4096)
        return SH_FAIL(SHOAL_ERR_INVALID, "--bucket-mb \"%s\": expected megabytes in (0, 4096]", v);
    o->bucket_mb = mb;
    return SHOAL_OK;
}

static shoal_result set_time_limit(shoal_train_opts *o, const opt_row *row, const char *v)
{
    char *end = NULL;
    errno = 0;
    long long s = strtoll(v, &end, 10);
    if (errno || end == v || *end || s < row->min || s > row->max)
        return SH_FAIL(SHOAL_ERR_INVALID, "--time-limit \"%s\": expected an integer in %lld..%lld", v,
                       (long long)row->min, (long long)row->max);
    o->time_limit_s = (double)s;
    return SHOAL_OK;
}

static shoal_result set_consistency(shoal_train_opts *o, const opt_row *row, const char *v)
{
    if (strcmp(v, "sync") && strcmp(v, "async") && strcmp(v, "ssp"))
        return SH_FAIL(SHOAL_ERR_INVALID, "--consistency \"%s\": use sync, async or ssp", v);
    return set_str(o, &o->consistency, v);
}

static shoal_result set_compress(shoal_train_opts *o, const opt_row *row, const char *v)
{
    shoal_codec_opts c;
    shoal_codec_opts_default(&c);
    if (shoal_codec_parse(v, &c) != SHOAL_OK) {
        sh_err_prefix("--compress: ");
        return SHOAL_ERR_INVALID;
    }
    return set_str(o, &o->compress, v);
}

static shoal_result set_hybrid(shoal_train_opts *o, const opt_row *row, const char *v)
{
    sh_hybrid_scheme s;
    SH_TRY(sh_hybrid_scheme_parse(v, &s));
    return set_str(o, &o->hybrid, v);
}

static shoal_result set_parallel(shoal_train_opts *o, const opt_row *row, const char *v)
{
    if (!strcmp(v, "auto")) o->parallel_auto = 1;
    else if (!strcmp(v, "none")) o->parallel_auto = 0;
    else return SH_FAIL(SHOAL_ERR_INVALID, "--parallel \"%s\": use auto (or none: the layout flags decide)", v);
    return SHOAL_OK;
}

/* "lbfgs" chooses the batch solver; any other value is a Caffe solver.prototxt. */
static shoal_result set_solver(shoal_train_opts *o, const opt_row *row, const char *v)
{
    if (strcmp(v, "lbfgs")) return set_str(o, &o->solver_path, v);
    o->lbfgs = 1;
    return SHOAL_OK;
}

static shoal_result set_timeline_steps(shoal_train_opts *o, const opt_row *row, const char *v)
{
    int64_t lo, hi;
    SH_TRY(sh_timeline_parse_steps(v, &lo, &hi));
    return set_str(o, &o->timeline_steps, v);
}

static shoal_result set_quorum(shoal_train_opts *o, const opt_row *row, const char *v)
{
    char *end = NULL;
    double f = strtod(v, &end);
    if (!end || end == v || *end || !(f > 0) || f > 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "--quorum \"%s\": expected the fraction of ranks a step waits for, in "
                       "(0, 1] (0.75: three of four)", v);
    o->quorum = f;
    return SHOAL_OK;
}

/* The switch "ps" chooses the layout; turned off, it leaves the others' choice. */
static shoal_result set_ps(shoal_train_opts *o, int on)
{
    if (on) o->layout = SHOAL_TRAIN_PARAM_SERVER;
    else if (o->layout == SHOAL_TRAIN_PARAM_SERVER) o->layout = SHOAL_TRAIN_DATA_PARALLEL;
    return SHOAL_OK;
}

/* ---- each K_CALL row's value for the agreement check, canonical ---- */

static void show_time_limit(const shoal_train_opts *o, char *b, size_t n)
{
    if (o->time_limit_s > 0) snprintf(b, n, "%g", o->time_limit_s);
}
static void show_scaling(const shoal_train_opts *o, char *b, size_t n)
{
    snprintf(b, n, "%s", o->strong_scaling ? "strong" : "weak");
}
static void show_lr_scaling(const shoal_train_opts *o, char *b, size_t n)
{
    snprintf(b, n, "%s", o->lr_linear ? "linear" : "none");
}
static void show_bucket_mb(const shoal_train_opts *o, char *b, size_t n)
{
    snprintf(b, n, "%g", o->bucket_mb > 0 ? o->bucket_mb : 1.0);
}
static void show_consistency(const shoal_train_opts *o, char *b, size_t n)
{
    snprintf(b, n, "%s", o->consistency && *o->consistency ? o->consistency : "sync");
}
static void show_compress(const shoal_train_opts *o, char *b, size_t n)
{
    shoal_codec_opts c;
    shoal_codec_opts_default(&c);
    if (o->compress && *o->compress && shoal_codec_parse(o->compress, &c) != SHOAL_OK) {
        snprintf(b, n, "%s", o->compress); /* opts_check names it */
        return;
    }
    shoal_codec_format(&c, b, n);
}
static void show_text(const char *v, char *b, size_t n)
{
    if (v) snprintf(b, n, "%s", v);
}
static void show_hybrid(const shoal_train_opts *o, char *b, size_t n) { show_text(o->hybrid, b, n); }
static void show_elastic(const shoal_train_opts *o, char *b, size_t n)
{
    if (o->elastic_min > 0) snprintf(b, n, "%d:%d", o->elastic_min, o->elastic_max);
}
static void show_quorum(const shoal_train_opts *o, char *b, size_t n)
{
    if (o->quorum > 0) snprintf(b, n, "%.17g", o->quorum);
}
static void show_parallel(const shoal_train_opts *o, char *b, size_t n) { show_text(o->parallel_auto ? "auto" : NULL, b, n); }
static void show_solver(const shoal_train_opts *o, char *b, size_t n)
{
    show_text(o->lbfgs ? "lbfgs" : o->solver_path && *o->solver_path ? "a Caffe solver" : NULL, b, n);
}
static void show_target(const shoal_train_opts *o, char *b, size_t n)
{
    show_text(!o->target || !*o->target ? NULL : strcmp(o->target, "input") ? "a dataset" : "input", b, n);
}
static void show_timeline_steps(const shoal_train_opts *o, char *b, size_t n) { show_text(o->timeline_steps, b, n); }
static void show_ps(const shoal_train_opts *o, char *b, size_t n)
{
    if (o->layout == SHOAL_TRAIN_PARAM_SERVER) snprintf(b, n, "on");
}

#define AT(field) offsetof(shoal_train_opts, field)
#define BIG (INT64_MAX / 2)

static const opt_row rows[] = {
    {{"data", "DIR|LIST|FILE.txt", "Data and model",
      "the dataset: a directory of IDX or CIFAR-10 files (default $SHOAL_DATA_DIR or "
      "/usr/share/datasets/fashion-mnist); a folder of class folders of .jpg/.png pictures (DIR/cat/1.jpg; "
      "classes sorted by name; DIR/val, or DIR/train beside DIR/val, holds the test pictures; the cfg's "
      "[net] says how they are cut: min_crop, max_crop, aspect, angle, flip, hue, saturation, exposure, "
      "test_resize, mean, std); a list of pictures when its first line is `PATH LABEL` with PATH ending "
      ".jpg, .jpeg or .png (Caffe's list files); \"synthetic\": random pictures of the cfg's shape; any "
      "other file: character-level text, as darknet rnn train: each byte a one-hot of 256 inputs, the next "
      "byte its label, one stream per batch row, the last tenth (at most 1 MiB) held out; losses in "
      "bits/char (docs/data.md)"},
     K_STR, AT(data_dir), 0, 0, NULL, A_OWN, NULL},
    {{"test-data", "P", "Data and model", "the held-out pictures: a folder of class folders or a list file"},
     K_STR, AT(test_data), 0, 0, NULL, A_OWN, NULL},
    {{"strict-data", NULL, "Data and model",
      "a picture file that cannot be read stops the run (default: it is skipped with one warning naming "
      "it, and counted)"},
     K_SWITCH, AT(strict_data), 0, 0, NULL, A_SAME, NULL},
    {{"data-threads", "N", "Data and model",
      "picture-decoding threads per rank (default: one per two kernel threads)"},
     K_INT, AT(data_threads), 1, 256, NULL, A_OWN, NULL},
    {{"data-prefetch", "N", "Data and model", "steps of pictures decoded ahead of training (default 2)"},
     K_INT, AT(data_prefetch), 1, 64, NULL, A_OWN, NULL},
    {{"target", "input|DIR", "Data and model",
      "a net ending in [cost] type=sse, L1 or smooth (a regression, no softmax) learns to reproduce its input "
      "(input: an autoencoder) or the images of a second dataset, item for item with --data's (DIR, as --data); "
      "its lines and --json give losses and no accuracy. After shoal pretrain --save FILE, --weights FILE "
      "fine-tunes the pretrained [rbm] layers (sigmoid layers here)"},
     K_STR, AT(target), 0, 0, NULL, A_SAME, show_target},
    {{"batch", "N", "Data and model",
      "images per step (default: the cfg's batch); recurrent nets: streams, each time_steps rows"},
     K_INT, AT(batch), 1, 1 << 20, NULL, A_SAME, NULL},
    {{"seed", "S", "Data and model", "seed of the weights, the shuffling and dropout (default 1)"},
     K_U64, AT(seed), 0, INT64_MAX, NULL, A_SAME, NULL},
    {{"threads", "N", "Data and model",
      "kernel threads per rank (default $SHOAL_THREADS, else this process's CPUs shared by the ranks on "
      "this host)"},
     K_INT, AT(threads), 1, 1024, NULL, A_OWN, NULL},
    {{"weights", "FILE", "Data and model",
      "start from these weights: a shoal checkpoint, Darknet's .weights or Caffe's .caffemodel (told by the file's content, not its name) "
      "for the same cfg; under --pipeline, --tensor-parallel, --hybrid each rank takes its part of the whole "
      "model in FILE"},
     K_STR, AT(weights_path), 0, 0, NULL, A_GIVEN, NULL},
    {{"epochs", "N", "How long",
      "passes over the training set (default: the cfg's max_batches steps, or 1 epoch)"},
     K_INT, AT(epochs), 1, 1000000, NULL, A_SAME, NULL},
    {{"max-steps", "N", "How long", "stop once N steps are done in total (counting resumed ones)"},
     K_I64, AT(max_steps), 1, BIG, NULL, A_SAME, NULL},
    {{"time-limit", "S", "How long",
      "end after the step that passes S seconds of training (then evaluate and save as at the planned end): "
      "fixed-time comparisons"},
     K_CALL, 0, 1, BIG, set_time_limit, A_SAME, show_time_limit},
    {{"save", "FILE", "Checkpoints", "write a checkpoint at the end (and every --save-every steps)"},
     K_STR, AT(save_path), 0, 0, NULL, A_GIVEN, NULL},
    {{"save-every", "N", "Checkpoints", "also checkpoint every N steps (needs --save; overwrites FILE)"},
     K_I64, AT(save_every_steps), 1, BIG, NULL, A_SAME, NULL},
    {{"resume", "FILE", "Checkpoints", "continue exactly where the checkpoint FILE stopped"},
     K_STR, AT(resume_path), 0, 0, NULL, A_GIVEN, NULL},
    {{"save-darknet", "FILE", "Checkpoints",
      "write Darknet's .weights at the end (darknet reads it): the whole model under every layout (the "
      "ranks' parts gathered); a model Darknet cannot hold is refused before training"},
     K_STR, AT(save_darknet_path), 0, 0, NULL, A_GIVEN, NULL},
    {{"solver", "lbfgs|FILE", "Data and model",
      "lbfgs: train by full-batch L-BFGS instead of the cfg's optimizer: each step is one iteration over the "
      "whole training set (--max-steps N: N iterations), a strong-Wolfe line search (PyTorch's LBFGS), the "
      "cfg's learning_rate as the first trial step (set 1) and its decay as an L2 term; with -n N every rank "
      "sums its shard and rank 0 keeps the history and chooses every step (Sandblaster), the same iterates as "
      "one rank; exact and free of tuning, but every step reads the whole set. Any other value: with a Caffe "
      "MODEL.prototxt, its solver.prototxt (base_lr, lr_policy, momentum, weight_decay, max_iter, snapshot); CFG "
      "may also be the solver itself, naming its net; --weights then takes Caffe's FILE.caffemodel "
      "(docs/caffe.md; a file named lbfgs: ./lbfgs)"},
     K_CALL, 0, 0, 0, set_solver, A_SAME, show_solver},
    {{"history", "M", "Data and model",
      "with --solver lbfgs: the (s, y) pairs kept (default 10); rank 0 holds 2 M + 8 copies of the parameters "
      "in double"},
     K_INT, AT(lbfgs_history), 1, 100000, NULL, A_SAME, NULL},
    {{"save-caffe", "FILE", "Checkpoints", "write Caffe's FILE.caffemodel at the end (Caffe models only)"},
     K_STR, AT(save_caffe_path), 0, 0, NULL, A_GIVEN, NULL},
    {{"quiet", NULL, "Output and logs",
      "no progress, epoch or start-up lines: only the result's one line (the test accuracy, or the stop and "
      "where it saved) and errors; --json gives the result as a document"},
     K_SWITCH, AT(quiet), 0, 0, NULL, A_OWN, NULL},
    {{"json", NULL, "Output and logs",
      "end with one JSON object on stdout (lines go to stderr): accuracy, loss, test_loss, images_per_s, "
      "epochs, steps, seconds, peak_rss_mb, stopped, threads (kernel threads per rank), history (every "
      "evaluation: step, epoch, seconds, train_loss, test_accuracy, test_loss; `shoal plot FILE.json` draws "
      "it); on text also train_bpc, test_bpc, chars_per_s; compressed: compress, sfb, sfb_layers, "
      "bytes_sent_per_step, dense_bytes_per_step, compression_ratio, residual_norm; --hybrid: hybrid, "
      "bytes_sent_per_step, activity_bytes_per_step, comm_ms; --pipeline with --profile: pipeline, per stage; "
      "--hogwild: hogwild (updates, staleness_mean, staleness_max); --quorum: quorum (fraction, ranks, updates, "
      "fresh, late)"},
     K_SWITCH, AT(json), 0, 0, NULL, A_OWN, NULL},
    {{"profile", NULL, "Output and logs",
      "per-step times: data, forward, backward, waiting for the allreduce, optimizer, and the share of "
      "communication hidden; with --pipeline per stage: forward, backward, bubble (idle), comm; with "
      "--hybrid the bytes a rank sends per step"},
     K_SWITCH, AT(profile), 0, 0, NULL, A_SAME, NULL},
    {{"logdir", "DIR", "Output and logs",
      "write TensorBoard event files into a folder of this run's own in DIR, DIR/CFGNAME-YYYYmmdd-HHMMSS "
      "(or --run-name), one for all ranks, so tensorboard --logdir DIR and shoal plot DIR show each run apart: "
      "loss, accuracy, learning rate, images/s, gradient norm, step parts, communication wait, share hidden "
      "behind backward, bytes sent, bus bandwidth; with --ps the servers' clock spread"},
     K_STR, AT(logdir), 0, 0, NULL, A_GIVEN, NULL},
    {{"run-name", "NAME", "Output and logs",
      "with --logdir: this run's folder, DIR/NAME; an existing one is continued (a resumed run's curves go on)"},
     K_STR, AT(run_name), 0, 0, NULL, A_OWN, NULL},
    {{"log-histograms", "N", "Output and logs",
      "with --logdir: weight and gradient histograms of every layer every N steps"},
     K_I64, AT(histogram_every_steps), 1, BIG, NULL, A_SAME, NULL},
    {{"timeline", "FILE", "Output and logs",
      "write a Chrome trace (chrome://tracing, ui.perfetto.dev) of the run: one process per rank, a track "
      "per activity (data, forward and backward per layer, each gradient bucket's allreduce, waiting, "
      "optimizer, checkpoints, parameter-server pulls and pushes); rank clocks aligned to rank 0's; `shoal "
      "plot --timeline FILE` draws it"},
     K_STR, AT(timeline_path), 0, 0, NULL, A_GIVEN, NULL},
    {{"timeline-steps", "A:B", "Output and logs", "record only steps A..B-1 (counted from 0; A: to the end)"},
     K_CALL, 0, 0, 0, set_timeline_steps, A_SAME, show_timeline_steps},
    {{"scaling", "MODE", "Scaling",
      "with ranks: weak (default: every rank trains on the cfg's batch) or strong (the cfg's batch is "
      "split across the ranks)"},
     K_CALL, 0, 0, 0, set_scaling, A_SAME, show_scaling},
    {{"lr-scaling", "MODE", "Scaling",
      "weak scaling: none (default) or linear (learning rate x ranks; pair it with burn_in in the cfg for a "
      "warm-up)"},
     K_CALL, 0, 0, 0, set_lr_scaling, A_SAME, show_lr_scaling},
    {{"elastic", "MIN[:MAX]", "Scaling",
      "data parallelism that keeps training when ranks are lost: the others notice (a killed rank at once, a "
      "frozen or cut-off one after SHOAL_TIMEOUT), agree on who is left, go on from the last step they all "
      "completed (kept in memory) with the data and the batch (or with --lr-scaling linear the learning "
      "rate) of the new number of ranks, while at least MIN remain; ranks started later with the same job "
      "variables join at a step's end, up to MAX (default: the ranks the job started with). Each change is "
      "one line, counted in --json and TensorBoard"},
     K_CALL, 0, 0, 0, set_elastic, A_SAME, show_elastic},
    {{"bucket-mb", "X", "Scaling",
      "gradients travel in buckets of X MB (default 1), last layers first, each allreduce starting while "
      "backward goes on"},
     K_CALL, 0, 0, 0, set_bucket_mb, A_SAME, show_bucket_mb},
    {{"parallel", "auto", "Scaling",
      "with ranks: choose the layout for you: every rank probes the links (allreduces within a host and "
      "across hosts) and times the model's layers on its share of the cores, rank 0 predicts the images/s of "
      "data parallelism (plain, fp16, 1bit, topk:0.01, --sfb), pipelines, tensor parallelism, both, and the "
      "hybrid schemes, prints the table and trains with the fastest; `shoal plan` prints the same without "
      "training (docs/plan.md). The prediction is a model: a close second may win in practice"},
     K_CALL, 0, 0, 0, set_parallel, A_SAME, show_parallel},
    {{"pipeline", "S", "Model parallelism",
      "pipeline parallelism: the layers cut into S stages (balanced by estimated cost, or by stage=K keys "
      "in the cfg), one rank each; -n N with N a multiple of S runs N/S replicas of the pipeline"},
     K_INT, AT(pipeline_stages), 1, 4096, NULL, A_SAME, NULL},
    {{"micro-batches", "M", "Model parallelism",
      "with --pipeline: each batch runs as M micro-batches, one forward one backward (default S); M divides "
      "the batch"},
     K_INT, AT(micro_batches), 1, 1 << 20, NULL, A_SAME, NULL},
    {{"tensor-parallel", "T", "Model parallelism",
      "split pairs of layers across T ranks as Megatron-LM: the first by output columns (a "
      "[convolutional]: filters), the second by input rows (channels), one allreduce each way per pair; "
      "pairs of [connected], of [convolutional], or conv then connected (pooling between), chosen by "
      "multiply-adds against bytes allreduced and printed at start-up; -n N with N a multiple of T runs N/T "
      "data-parallel replicas of the T ranks; with --pipeline S each stage is split across T ranks (its own "
      "pairs) and N/(S T) replicas run: -n 8 --pipeline 2 --tensor-parallel 2 gives 2"},
     K_INT, AT(tensor_ranks), 1, 4096, NULL, A_SAME, NULL},
    {{"hybrid", "SCHEME", "Model parallelism",
      "with -n N: Krizhevsky's \"one weird trick\": the layers before the first [connected] run "
      "data-parallel (each rank 1/N of the batch, which is the global one), every [connected] layer is split "
      "by outputs across the N ranks on the whole batch; SCHEME moves the activities: broadcast (all to all "
      "at once), vertical (one rank's per chunk, the next in flight) or horizontal (1/N of every rank's per "
      "chunk, the next in flight; N x N divides the batch)"},
     K_CALL, 0, 0, 0, set_hybrid, A_SAME, show_hybrid},
    {{"compress", "C", "Gradient compression",
      "with ranks: send compressed gradients; C is none (default, float32), fp16, bf16, 1bit (CNTK's 1-bit "
      "SGD), topk:F (the fraction F of largest entries, e.g. topk:0.01) or lowrank:R (PowerSGD of rank R); "
      "1bit, topk and lowrank carry their error to the next step (kept in checkpoints, per rank; with --ps, "
      "--pipeline, --tensor-parallel, --hybrid each rank's in FILE.worker<k> beside --save FILE); topk with "
      "momentum sends velocities (momentum correction). Model-parallel layouts compress what their replicas "
      "(a hybrid: its conv part) sum"},
     K_CALL, 0, 0, 0, set_compress, A_SAME, show_compress},
    {{"sfb", NULL, "Gradient compression",
      "with ranks: connected layers send their sufficient factors (per-image inputs and output gradients) "
      "where batch x (in + out) < in x out; the other layers use --compress (data parallel), or go through the "
      "servers (--ps --consistency sync: Poseidon; the factors travel between workers, fewer bytes to the servers)"},
     K_SWITCH, AT(sfb), 0, 0, NULL, A_SAME, NULL},
    {{"hogwild", NULL, "Stragglers and lock-free updates",
      "with -n N on one host (Hogwild!, Project Adam): the ranks share one copy of the weights in shared "
      "memory and each applies its own gradient to it as soon as it has it, without locks, barriers or "
      "allreduce; each keeps its own momentum. Gains: no rank waits for another. Gives up: exactness and "
      "reproducibility (updates race; runs differ bit for bit). --json reports the staleness: how many "
      "other ranks' updates landed between a rank's read of the weights and its write"},
     K_SWITCH, AT(hogwild), 0, 0, NULL, A_SAME, NULL},
    {{"quorum", "F", "Stragglers and lock-free updates",
      "synchronous training that does not wait for stragglers (Project Adam; backup workers): a step goes "
      "on once ceil(F N) of the N ranks' gradients are in; a late gradient is added to the next step (not "
      "dropped: its images still count), and counted (--json, TensorBoard). F = 1 is synchronous training, "
      "bit for bit. A slow rank never stops the job; a dead one does. Data parallelism on one host (the "
      "gradients meet in shared memory), or --ps --consistency sync on any hosts"},
     K_CALL, 0, 0, 0, set_quorum, A_SAME, show_quorum},
    {{"ps", NULL, "Parameter servers",
      "parameter-server training: the first S ranks serve (in addition to the N workers of -n), the others "
      "are workers; with --pipeline and/or --tensor-parallel each worker holds a part of a replica and pushes and "
      "pulls that part (DistBelief): sync equals the layout alone, the replicas' allreduce becomes a push and a "
      "pull"},
     K_SWITCH, 0, 0, 0, NULL, A_SAME, show_ps},
    {{"servers", "S", "Parameter servers", "parameter servers (default 1)"}, K_INT, AT(nservers), 1, 1024, NULL, A_SAME, NULL},
    {{"consistency", "M", "Parameter servers", "sync (bulk-synchronous, default), async (Downpour) or ssp"},
     K_CALL, 0, 0, 0, set_consistency, A_SAME, show_consistency},
    {{"staleness", "s", "Parameter servers", "ssp: a worker may run s clocks ahead of the slowest (default 3)"},
     K_INT, AT(staleness), 0, 1000000, NULL, A_SAME, NULL},
    {{"push-every", "m", "Parameter servers", "async: push the mean gradient of m steps (default 1)"},
     K_INT, AT(push_every), 1, 1000000, NULL, A_SAME, NULL},
    {{"pull-every", "n", "Parameter servers", "async: refresh the weights every n steps (default 1)"},
     K_INT, AT(pull_every), 1, 1000000, NULL, A_SAME, NULL},
};
#define NROWS (sizeof rows / sizeof rows[0])

const shoal_train_option *shoal_train_option_at(size_t i) { return i < NROWS ? &rows[i].info : NULL; }

void shoal_train_opts_default(shoal_train_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->layout = SHOAL_TRAIN_DATA_PARALLEL;
    o->bucket_mb = 1;
    o->nservers = 1;
    o->consistency = "sync";
    o->staleness = 3;
    o->push_every = 1;
    o->pull_every = 1;
}

void shoal_train_opts_fini(shoal_train_opts *o)
{
    if (!o) return;
    for (str_copy *c = o->copies, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    shoal_train_opts_default(o);
}

/* name as the table spells it: no leading dashes, '_' for '-'. 0 when it cannot be one. */
static int canonical(const char *name, char *out, size_t nbytes)
{
    while (*name == '-') name++;
    size_t n = strlen(name);
    if (!n || n >= nbytes) return 0;
    for (size_t i = 0; i <= n; i++) out[i] = name[i] == '_' ? '-' : name[i];
    return 1;
}

/* The option a mistyped name meant: one it begins (a shortened name), else the fewest edits. */
static const opt_row *nearest(const char *name)
{
    const opt_row *best = &rows[0];
    int best_d = INT_MAX;
    for (size_t i = 0; i < NROWS; i++) {
        int d = strncmp(rows[i].info.name, name, strlen(name)) ? sh_edit_distance(name, rows[i].info.name) : 0;
        if (d < best_d) {
            best_d = d;
            best = &rows[i];
        }
    }
    return best;
}

static shoal_result set_switch(shoal_train_opts *o, const opt_row *row, const char *v)
{
    int on;
    if (!v || !strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) on = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) on = 0;
    else return SH_FAIL(SHOAL_ERR_INVALID, "--%s \"%s\": a switch takes true or false (1 or 0)", row->info.name, v);
    if (!strcmp(row->info.name, "ps")) return set_ps(o, on);
    *FIELD(o, row, int) = on;
    return SHOAL_OK;
}

static shoal_result set_number(shoal_train_opts *o, const opt_row *row, const char *v)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < row->min || x > row->max)
        return SH_FAIL(SHOAL_ERR_INVALID, "--%s \"%s\": expected an integer in %lld..%lld", row->info.name, v,
                       (long long)row->min, (long long)row->max);
    if (row->kind == K_INT) *FIELD(o, row, int) = (int)x;
    else if (row->kind == K_I64) *FIELD(o, row, int64_t) = x;
    else *FIELD(o, row, uint64_t) = (uint64_t)x;
    return SHOAL_OK;
}

shoal_result shoal_train_opts_set(shoal_train_opts *o, const char *name, const char *value)
{
    char key[64];
    if (!o || !name) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_opts_set: %s is NULL", o ? "name" : "o");
    if (!canonical(name, key, sizeof key))
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_opts_set: \"%.63s\" is not an option name", name);
    const opt_row *row = NULL;
    for (size_t i = 0; i < NROWS && !row; i++)
        if (!strcmp(rows[i].info.name, key)) row = &rows[i];
    if (!row)
        return SH_FAIL(SHOAL_ERR_INVALID, "unknown option \"%s\" (did you mean \"%s\"?); see shoal train --help",
                       name, nearest(key)->info.name);
    if (row->kind == K_SWITCH) return set_switch(o, row, value);
    if (!value) {
        if (row->kind == K_CALL && row->call == set_compress)
            return SH_FAIL(SHOAL_ERR_INVALID, "--compress needs a value: none, fp16, bf16, 1bit, topk:F or lowrank:R");
        return SH_FAIL(SHOAL_ERR_INVALID, "--%s needs a value", key);
    }
    switch (row->kind) {
    case K_INT:
    case K_I64:
    case K_U64: return set_number(o, row, value);
    case K_STR: return set_str(o, FIELD(o, row, const char *), value);
    case K_CALL: return row->call(o, row, value);
    case K_SWITCH: break;
    }
    return SH_FAIL(SHOAL_ERR_INTERNAL, "shoal_train_opts_set: option %s has no reader", key);
}

/* ---- what the ranks of a job must share (job.c compares it when they start) ---- */

#define CFIELD(o, row, type) ((const type *)((const char *)(o) + (row)->offset))

/* The row's value in canonical words; "" when not set (a number below the row's range is
 * "not set": 0 epochs is the cfg's). */
static void row_value(const shoal_train_opts *o, const opt_row *row, char *b, size_t n)
{
    b[0] = 0;
    if (row->show) {
        row->show(o, b, n);
        return;
    }
    switch (row->kind) {
    case K_SWITCH:
        if (*CFIELD(o, row, int)) snprintf(b, n, "on");
        break;
    case K_INT:
        if (*CFIELD(o, row, int) >= row->min) snprintf(b, n, "%d", *CFIELD(o, row, int));
        break;
    case K_I64:
        if (*CFIELD(o, row, int64_t) >= row->min) snprintf(b, n, "%lld", (long long)*CFIELD(o, row, int64_t));
        break;
    case K_U64: snprintf(b, n, "%llu", (unsigned long long)*CFIELD(o, row, uint64_t)); break;
    case K_STR:
        if (*CFIELD(o, row, const char *)) snprintf(b, n, "%s", *CFIELD(o, row, const char *));
        break;
    case K_CALL: break;
    }
}

int sh_train_opts_agree_kind(size_t i) { return i < NROWS ? (int)rows[i].agree : -1; }

shoal_result sh_train_opts_agreed(const shoal_train_opts *o, char *buf, size_t nbytes)
{
    shoal_train_opts dflt;
    shoal_train_opts_default(&dflt);
    size_t pos = 0;
    buf[0] = 0;
    for (size_t i = 0; i < NROWS; i++) {
        const opt_row *row = &rows[i];
        if (row->agree == A_OWN) continue;
        char v[128], d[128], line[300];
        row_value(o, row, v, sizeof v);
        row_value(&dflt, row, d, sizeof d);
        const char *name = row->info.name;
        if (!v[0]) snprintf(line, sizeof line, "no --%s", name);
        else if (row->agree == A_GIVEN) snprintf(line, sizeof line, "--%s (given)", name);
        else if (!strcmp(v, d)) snprintf(line, sizeof line, "--%s %s (the default)", name, v);
        else snprintf(line, sizeof line, row->kind == K_SWITCH ? "--%s" : "--%s %s", name, v);
        int m = snprintf(buf + pos, nbytes - pos, "%s\n", line);
        if (m < 0 || (size_t)m >= nbytes - pos)
            return SH_FAIL(SHOAL_ERR_INTERNAL, "train options: %zu bytes are too few for what the ranks compare",
                           nbytes);
        pos += (size_t)m;
    }
    return SHOAL_OK;
}
