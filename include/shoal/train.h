/* train.h — a training job, the one `shoal train` runs: a model from a .cfg trained on an
 * IDX or CIFAR-10 dataset directory or on a text file, alone or as one rank of a job its
 * launcher started (shoal launch, mpirun, srun: ranks come from the environment), in any
 * layout (data parallel, parameter servers, pipeline, tensor, hybrid), with every option of
 * `shoal train` (also by name, for bindings); its report and the JSON `--json` prints; and
 * `shoal test`: trained weights measured on a test set.
 * Not here: the network on its own (net.h), collectives (comm.h), starting ranks (shoal
 * launch, or shoal train -n N).
 * Proved by tests/train/test_api.c and examples/train_lenet.c (built and run by it). */
#ifndef SHOAL_TRAIN_H
#define SHOAL_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "shoal/result.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the ranks of a launched job divide the work (ignored by a process run alone, which
 * refuses the layouts that need ranks). */
typedef enum {
    SHOAL_TRAIN_DATA_PARALLEL = 0, /* every rank a replica; gradients averaged by allreduce.
                                      The default: when pipeline_stages, tensor_ranks (> 1) or
                                      hybrid is set, that layout is taken, as the flags of
                                      shoal train choose it */
    SHOAL_TRAIN_PARAM_SERVER,      /* the first nservers ranks serve, the others train */
    SHOAL_TRAIN_PIPELINE,          /* the layers in pipeline_stages stages, one rank each (each
                                      stage split across tensor_ranks when > 1); replicas of the
                                      pipeline when the ranks are a multiple */
    SHOAL_TRAIN_TENSOR,            /* pairs of layers split across tensor_ranks ranks
                                      (Megatron-LM); replicas when the ranks are a multiple */
    SHOAL_TRAIN_HYBRID,            /* layers before the first [connected] data-parallel, the
                                      connected ones split by outputs across the ranks */
} shoal_train_layout;

/* The options. Each field's comment names the option shoal_train_opts_set takes for it (the
 * long flag of shoal train without its dashes); `shoal train --help` says the same at
 * length. Errors about options name them by their flags ("--micro-batches"). */
typedef struct {
    const char *cfg_path;       /* the model (required) */
    const char *data_dir;       /* "data": a dataset directory (IDX or CIFAR-10), or a text file
                                   (character-level); NULL: SHOAL_DATA_DIR */
    const char *target;         /* "target": a regression's targets (a net ending in [cost]
                                   type=sse, L1 or smooth): "input" (the input itself: an
                                   autoencoder) or a dataset directory whose images are, item
                                   for item, the data's targets; NULL for nets with labels */
    int epochs;                 /* "epochs"; 0: the cfg's max_batches steps, or 1 epoch */
    int64_t max_steps;          /* "max-steps": > 0 stops once this many steps are done in total */
    int batch;                  /* "batch": images per step; 0: the cfg's */
    int threads;                /* "threads": kernel threads per rank; 0: SHOAL_THREADS, else the
                                   CPUs this process may run on shared by the ranks on its host */
    uint64_t seed;              /* "seed": weights, shuffling and dropout */
    const char *save_path;      /* "save": checkpoint at the end (and every save_every_steps) */
    int64_t save_every_steps;   /* "save-every"; 0: only at the end */
    const char *resume_path;    /* "resume": continue exactly where that checkpoint stopped */
    const char *logdir;         /* "logdir": the folder TensorBoard reads; the run writes its
                                   events in a folder of its own there, logdir/run_name; NULL: none */
    int quiet;                  /* "quiet": 1: no progress lines (shoal train still prints the
                                   result's one line) */
    shoal_train_layout layout;  /* "ps" (a switch) sets SHOAL_TRAIN_PARAM_SERVER */
    int strong_scaling;         /* "scaling" strong|weak: 1 splits the batch across the ranks */
    int elastic_min;            /* "elastic" MIN[:MAX]: data parallelism goes on while at least
                                   MIN ranks remain, and takes in ranks started later up to
                                   elastic_max (0: the job's ranks); 0: not elastic */
    int elastic_max;
    int lr_linear;              /* "lr-scaling" none|linear: weak scaling, learning rate x ranks */
    double bucket_mb;           /* "bucket-mb": data parallel, gradient buckets in MB; 0: 1 */
    int nservers;               /* "servers": parameter servers (default 1) */
    const char *consistency;    /* "consistency": "sync" (default), "async" or "ssp" */
    int staleness;              /* "staleness": ssp, clocks a worker may run ahead (default 3) */
    int push_every, pull_every; /* "push-every", "pull-every": async, steps per push and pull */
    int json;                   /* "json": 1: progress lines go to stderr, leaving stdout to the
                                   caller's JSON (shoal_train_report_json) */
    int profile;                /* "profile": time each part of the step (report.profile, ...) */
    double time_limit_s;        /* "time-limit": > 0 ends after the step that passes this many
                                   seconds (evaluated and saved as at the planned end) */
    const char *weights_path;   /* "weights": start from these weights (a checkpoint, or
                                   Darknet's .weights, told by content); NULL: the seed's */
    const char *save_darknet_path; /* "save-darknet": Darknet's .weights of the whole model at
                                   the end */
    int64_t histogram_every_steps; /* "log-histograms": with logdir, histograms every N steps */
    const char *timeline_path;  /* "timeline": a Chrome trace of the run; NULL: none */
    const char *timeline_steps; /* "timeline-steps": "A:B" records steps A..B-1, "A:" from A on;
                                   NULL: every step */
    int pipeline_stages;        /* "pipeline": S stages (SHOAL_TRAIN_PIPELINE); 0: none */
    int micro_batches;          /* "micro-batches": with a pipeline, M per batch; 0: S */
    int tensor_ranks;           /* "tensor-parallel": T ranks share each split layer; 0: none */
    const char *hybrid;         /* "hybrid": "broadcast", "vertical" or "horizontal": how the
                                   activities move (SHOAL_TRAIN_HYBRID); NULL: none */
    const char *compress;       /* "compress": "none" (NULL), "fp16", "bf16", "1bit", "topk:F"
                                   or "lowrank:R": the gradients the ranks exchange */
    int sfb;                    /* "sfb": connected layers send sufficient factors */
    int parallel_auto;          /* "parallel auto": the layout (data parallel with or without a
                                   codec or --sfb, pipeline, tensor, both, hybrid) chosen at
                                   start-up from predictions on the probed links and this
                                   machine's layer times; none of the layout options is set */
    int hogwild;                /* "hogwild": one host; the ranks update one shared copy of the
                                   weights, each its own gradient, without locks or waiting */
    double quorum;              /* "quorum": F in (0, 1]: a synchronous step (data parallel, or
                                   --ps sync) goes on once ceil(F ranks) gradients are in, the
                                   late ones added to the next; 0: every rank's */
    const char *solver_path;    /* "solver": with a Caffe MODEL.prototxt, its solver.prototxt;
                                   NULL: none (docs/caffe.md). The value "lbfgs" sets lbfgs
                                   instead (a file of that name: "./lbfgs") */
    int lbfgs;                  /* "solver lbfgs": full-batch L-BFGS with a strong-Wolfe line
                                   search instead of the cfg's optimizer; across ranks rank 0
                                   coordinates (DistBelief's Sandblaster) */
    int lbfgs_history;          /* "history": with lbfgs, the (s, y) pairs kept; 0: 10 */
    const char *save_caffe_path; /* "save-caffe": Caffe's .caffemodel at the end (Caffe models) */
    const char *run_name;       /* "run-name": with logdir, this run's folder there; an existing
                                   one is continued; NULL: CFGNAME-YYYYmmdd-HHMMSS, a new one */
    const char *test_data;      /* "test-data": the held-out pictures (a folder of class
                                   folders or a list file); NULL: DIR/val (docs/data.md) */
    int strict_data;            /* "strict-data": a picture that cannot be read stops the run
                                   (default: skipped with one warning, counted) */
    int data_threads;           /* "data-threads": picture decoders per rank; 0: one per two
                                   kernel threads */
    int data_prefetch;          /* "data-prefetch": steps decoded ahead; 0: 2 */
    /* Called on every training rank before each step (counted from 0 over the whole run) with
     * hook_ctx and the rank among the trainers; and on every parameter server after each
     * round of updates. From the training thread; NULL: none. Fault drills and progress. */
    void (*before_step)(void *hook_ctx, int rank, int64_t step);
    void (*after_server_round)(void *hook_ctx, int server, int64_t rounds);
    void *hook_ctx;
    void *copies;               /* private: the strings shoal_train_opts_set copied */
} shoal_train_opts;

/* Defaults: 1 epoch, seed 1, data parallel, weak scaling, 1 MB buckets, 1 server, "sync",
 * staleness 3, push and pull every step, everything else 0 / NULL. */
void shoal_train_opts_default(shoal_train_opts *o);

/* Set the option `name` (shoal train's long flag without "--": "epochs", "micro-batches";
 * "_" may stand for "-", a leading "--" is allowed) from its text value, parsed and checked
 * as the flag's: "12", "strong", "topk:0.01". A switch ("quiet", "json", "profile", "ps",
 * "sfb") takes NULL or "true"/"1" to turn it on, "false"/"0" to turn it off. A string is
 * copied into o (shoal_train_opts_fini frees the copies); value is borrowed for the call.
 * Does not block (it reads no file); not thread-safe for one o. Errors: SHOAL_ERR_INVALID, with one line naming the option and
 * the value: an unknown name (and the nearest option), a missing or bad value (and what it
 * takes); o is then unchanged. */
shoal_result shoal_train_opts_set(shoal_train_opts *o, const char *name, const char *value);

/* Free the strings shoal_train_opts_set copied and reset o to the defaults. NULL is fine;
 * not thread-safe for one o. */
void shoal_train_opts_fini(shoal_train_opts *o);

/* Whether the options fit together (what shoal_train_run checks before anything runs; it
 * reads no file but the cfg, for "sfb"). SHOAL_ERR_INVALID with one line naming the options
 * in conflict. Does not block. */
shoal_result shoal_train_opts_check(const shoal_train_opts *o);

/* The options opts_set takes, for help texts and bindings: name, argument ("N", "FILE";
 * NULL for a switch), heading, and one paragraph of help. */
typedef struct {
    const char *name, *arg, *group, *help;
} shoal_train_option;

/* The i-th option (from 0), NULL past the last. The strings are static; thread-safe. */
const shoal_train_option *shoal_train_option_at(size_t i);

/* One evaluation during the run (each epoch's end, and the end). */
typedef struct {
    int64_t step;               /* steps done */
    double epoch;               /* steps / steps per epoch */
    double seconds;             /* since the run started */
    double train_loss;          /* mean over the epoch's steps so far */
    double test_accuracy, test_loss;
} shoal_train_eval;

/* Per step of a pipeline stage (milliseconds, with profile): computing, idle waiting for a
 * neighbour (the bubble), sending and averaging gradients, the whole pass, and the bubble's
 * share of it. */
typedef struct {
    int first_layer, last_layer;
    double forward_ms, backward_ms, bubble_ms, comm_ms, pass_ms;
    double bubble_share;
} shoal_train_stage;

#define SHOAL_TRAIN_HISTORY_MAX 256 /* evaluations kept in a report */
#define SHOAL_TRAIN_STAGES_MAX 64   /* pipeline stages profiled in a report */
#define SHOAL_TRAIN_CHANGES_MAX 64  /* changes of an elastic job's ranks kept in a report */
#define SHOAL_TRAIN_CHANGE_RANKS 8  /* job ranks listed per change (the counts say how many) */

/* An elastic job's change of ranks: after step `step` (the last one every rank that remained
 * had completed; the job went on from it) nleft ranks left and njoined joined, leaving world
 * ranks; training paused pause_s seconds (from this rank's last step before the change to
 * the first after) and steps_redone of this rank's steps were done again. */
typedef struct {
    int64_t step;
    int world, nleft, njoined, steps_redone;
    int left[SHOAL_TRAIN_CHANGE_RANKS], joined[SHOAL_TRAIN_CHANGE_RANKS];
    double pause_s;
} shoal_train_change;
/* Bytes that always hold shoal_train_report_json's document of a report with finite numbers. */
#define SHOAL_TRAIN_REPORT_JSON_NBYTES 131072

typedef struct {
    int rank, world;            /* this process in the job (0 of 1 alone) */
    const char *role;           /* "alone", "data-parallel rank", "server", "worker", "pipeline
                                   stage", "tensor-parallel rank", "hybrid rank" */
    int is_result;              /* 1: the fields below are the job's result (alone, rank 0,
                                   worker 0); other ranks fill what they saw */
    double test_accuracy;       /* fraction in [0, 1] after the last step; < 0: not measured */
    double test_loss, train_loss;
    double images_per_s;        /* steady state, over all ranks (characters/s on text) */
    double seconds;
    double epochs;
    int64_t steps;              /* done in total, counting those before a resume */
    int threads;                /* kernel threads this rank used */
    char saved_path[1024];      /* the last checkpoint written; "" when none */
    const char *layout;         /* "data-parallel", "parameter-server", "pipeline",
                                   "tensor-parallel", "hybrid" */
    int stopped;                /* 1: shoal_train_request_stop ended the run (saved) */
    double peak_rss_mb;
    int text;                   /* 1: character-level text, losses also in bits per character */
    double train_bpc, test_bpc;
    /* With profile: milliseconds per step by part, and their sum. */
    int has_profile;
    struct {
        double data_ms, forward_ms, backward_ms, comm_wait_ms, optimizer_ms, step_ms;
    } profile;
    /* With profile on a data-parallel rank: the allreduces in flight per step, their MB, and
     * the share of that time hidden behind backward. */
    int has_allreduce;
    struct {
        double ms, mb, hidden_share;
    } allreduce;
    /* Compressed gradients ("compress", "sfb"): bytes this rank sent per step, what float32
     * would have sent, their ratio, the error-feedback residual's norm. */
    int has_compression;
    struct {
        char spec[48];          /* "topk:0.01" */
        int sfb, sfb_layers;
        double bytes_sent_per_step, dense_bytes_per_step, ratio, residual_norm;
    } compression;
    /* Hybrid, on rank 0: per step, bytes sent (activities too), of which activities and
     * their gradients, milliseconds communicating, and the optimizer's split parts. */
    int has_hybrid;
    struct {
        char scheme[16];
        double bytes_sent_per_step, activity_bytes_per_step, comm_ms, fused_update_ms, rest_update_ms;
    } hybrid;
    /* Pipeline with profile, on the reporter: replica 0's stages. */
    int has_stages;
    int nstages;
    shoal_train_stage stages[SHOAL_TRAIN_STAGES_MAX];
    /* On a parameter server: what it served (also when the job failed). */
    int has_server;
    struct {
        const char *consistency;
        int64_t pushes, pulls, deferred_pulls, refused, max_spread;
        int dropped_workers;
        double pushed_mb, cpu_s;
        int64_t late_pushes;    /* --quorum: pushes that came after their round closed */
    } server;
    /* "elastic": every change of the job's ranks (one line each on the lead's output too) */
    int elastic;                /* 1: the job was elastic */
    int nchanges;               /* changes in all; changes[] keeps the first of them */
    int ranks_left, ranks_joined;
    double keep_ms;             /* per step: copying the state a change restores (memory) */
    shoal_train_change changes[SHOAL_TRAIN_CHANGES_MAX];
    /* --hogwild, on rank 0: the updates every rank applied to the shared weights, and how
     * many other ranks' updates landed between a rank reading the weights (its forward) and
     * writing its own (mean over updates, largest). */
    int has_hogwild;
    struct {
        int64_t updates;
        double staleness_mean;
        int64_t staleness_max;
    } hogwild;
    /* --quorum (data parallel), on rank 0: the steps taken, the gradients in time for their
     * step and those added to a later one, and the images every rank computed per second. */
    int has_quorum;
    struct {
        double fraction;
        int ranks;              /* ceil(F N): gradients a step waits for */
        int64_t updates, fresh, late;
    } quorum;
    int nhistory;               /* evaluations in history[]; later ones are not kept */
    shoal_train_eval history[SHOAL_TRAIN_HISTORY_MAX];
    /* Pictures decoded while training (image folders, list files, synthetic data): */
    int streamed;               /* 1: the data was decoded by the streaming loader */
    double data_wait_s;         /* seconds the trainer waited for decoded pictures */
    int64_t bad_files;          /* picture files skipped (unreadable, damaged, not pictures) */
} shoal_train_report;

/* Run this process's part of the training job to the end: alone, or (under a launcher)
 * join the job's communicator and take this rank's role. Blocks for the whole training;
 * every rank of a job must call it with the same options. r may be NULL; it is filled as
 * far as the run got, also on error. Strings in o are borrowed for the call. Not thread-safe
 * (one job per process at a time).
 * Errors: SHOAL_ERR_INVALID (NULL o, no cfg_path, options that do not fit:
 * shoal_train_opts_check; a dataset that does not fit the model; a layout that needs ranks
 * run alone), SHOAL_ERR_IO (an output file that cannot be written is found before the first
 * step; one that fails at the end is written to the current directory or /tmp instead, the
 * message says where, and r holds the run's result: is_result, test_accuracy),
 * SHOAL_ERR_FORMAT (cfg, dataset or checkpoint), SHOAL_ERR_PEER
 * and SHOAL_ERR_TIMEOUT (another rank died or hung; the message names it). */
shoal_result shoal_train_run(const shoal_train_opts *o, shoal_train_report *r);

/* Ask the running job to stop after its current step, save a checkpoint (to save_path, or
 * else CFGNAME.ckpt in the current directory, or CFGNAME-K.ckpt when that exists: a file
 * nobody named is never replaced; report.saved_path names it) and return with
 * report.stopped = 1; or to save and go on. Async-signal-safe (a SIGINT handler calls it); a request made before the run
 * starts is seen after its first step; shoal_train_run forgets both when it returns. */
void shoal_train_request_stop(void);
void shoal_train_request_save(void);

/* The report as one JSON object, the line `shoal train --json` prints (without its
 * newline): accuracy, loss, test_loss, images_per_s, epochs, steps, seconds, peak_rss_mb,
 * stopped, threads; on text train_bpc, test_bpc, chars_per_s; compressed: compress, sfb,
 * sfb_layers, bytes_sent_per_step, dense_bytes_per_step, compression_ratio, residual_norm;
 * hybrid: hybrid, bytes_sent_per_step, activity_bytes_per_step, comm_ms, fused_update_ms,
 * rest_update_ms; a profiled pipeline: pipeline (per stage); elastic: elastic (changes,
 * ranks_left, ranks_joined, world, keep_ms, and each change in log); --hogwild: hogwild
 * (updates, staleness_mean, staleness_max); --quorum: quorum (fraction, ranks, updates, fresh,
 * late); history (every evaluation).
 * Writes at most nbytes bytes with the NUL into buf; does not block; thread-safe.
 * Errors: SHOAL_ERR_INVALID (NULL r or buf; buf too small: the message says how many bytes
 * the document needs, never more than SHOAL_TRAIN_REPORT_JSON_NBYTES). */
shoal_result shoal_train_report_json(const shoal_train_report *r, char *buf, size_t nbytes);

/* `shoal test`: trained weights measured on a test set. */
typedef struct {
    const char *cfg_path;       /* the model (required) */
    const char *weights_path;   /* a checkpoint of the same cfg, or Darknet's or Caffe's
                                   weights, told by content (required) */
    const char *data_dir;       /* a dataset directory (its test split), or a text file (its
                                   held-out tail, as training held it out); NULL: SHOAL_DATA_DIR */
    int batch;                  /* images per forward; 0: the cfg's batch */
    int threads;                /* kernel threads; 0: the rule of shoal_train_opts.threads */
    const char *test_data;      /* pictures: the held-out folder of class folders or list file;
                                   NULL: DIR/val of data_dir (docs/data.md) */
    const char *target;         /* a regression's targets, as shoal_train_opts.target */
} shoal_test_opts;

typedef struct {
    double accuracy;            /* fraction in [0, 1]; -1 for a regression (no labels) */
    double loss;                /* mean cross-entropy per image (nats) */
    int text;                   /* 1: a text file; images are characters */
    double bpc;                 /* text: loss / ln 2 */
    int64_t count;              /* images (characters) measured */
    char dataset[256];          /* the dataset's name */
    int threads;                /* kernel threads used */
} shoal_test_report;

/* Everything 0 / NULL. */
void shoal_test_opts_default(shoal_test_opts *o);

/* Load the cfg and the weights, forward every test image (inference) and fill r. Blocks for
 * the whole test; strings borrowed for the call; one process, no communicator; every call
 * builds its own net (tested one call at a time). Errors: SHOAL_ERR_INVALID
 * (NULL o or r, no cfg_path or weights_path, a dataset that does not fit the model),
 * SHOAL_ERR_IO, SHOAL_ERR_FORMAT (cfg, dataset, or weights of another model: the message
 * says which). */
shoal_result shoal_test_run(const shoal_test_opts *o, shoal_test_report *r);

/* `shoal pretrain`: a deep belief net's [rbm] layers pretrained greedily, bottom up, each by
 * contrastive divergence on the hidden activations of the layers below it, without labels.
 * One [rbm]'s run. Losses: minus the pseudo-likelihood (binary visible units), or the
 * squared reconstruction error (Gaussian ones). */
typedef struct {
    int layer;                  /* the [rbm]'s index in the net */
    int resumed;                /* 1: continued from resume_path */
    double train_loss, test_loss, images_per_s, seconds;
    int64_t steps;
} shoal_pretrain_stage;

#define SHOAL_PRETRAIN_MAX_RBMS 64

typedef struct {
    int rank, world;            /* this process in the job (0 of 1 alone) */
    int nstages;                /* [rbm] layers in the net */
    int first, last;            /* the stages this run trained (a resume starts later) */
    int stopped;                /* 1: shoal_train_request_stop ended it in stage `last` (its
                                   checkpoint saved; no weights written) */
    double seconds;
    char saved_path[1024];      /* the pretrained weights written, "" when none */
    shoal_pretrain_stage stages[SHOAL_PRETRAIN_MAX_RBMS];
} shoal_pretrain_report;

/* Pretrain every [rbm] of o->cfg_path in order, alone or data parallel under a launcher (CD's
 * gradients averaged by the training's allreduce). Of o it reads cfg_path, data_dir, epochs
 * and max_steps (per [rbm]), batch, threads, seed, save_path (the [rbm] being trained's
 * checkpoint every save_every_steps and at its end, then, at the very end, the whole net's
 * weights, which shoal_train_run's weights_path fine-tunes), resume_path (a checkpoint of
 * one [rbm]: that one and the ones above it run), logdir (a run directory per [rbm]), quiet,
 * json, bucket_mb, before_step and hook_ctx; before_stage (may be NULL) is called with
 * hook_ctx before each [rbm] (its stage, from 0, and layer). Only data parallelism: other
 * layouts, targets and weights are SHOAL_ERR_INVALID. Blocks; r may be NULL. Errors as
 * shoal_train_run's, and SHOAL_ERR_INVALID for a net without [rbm]. */
shoal_result shoal_pretrain_run(const shoal_train_opts *o, void (*before_stage)(void *hook_ctx, int stage, int layer),
                                shoal_pretrain_report *r);

/* `shoal sample`: what a trained model makes, as an image grid (PNG, or SVG by the name). */
typedef struct {
    const char *cfg_path;       /* the model (required) */
    const char *weights_path;   /* its weights (required) */
    const char *out_path;       /* the grid: a name ending in .png or .svg (required) */
    const char *data_dir;       /* test images: a DBN's chains start from them (NULL: random
                                   units); an autoencoder's inputs (NULL: SHOAL_DATA_DIR) */
    int samples;                /* images; 0: 64 */
    int gibbs_steps;            /* a DBN's Gibbs steps per chain; 0: 1000 */
    int layer;                  /* the [rbm] to draw from; < 0: the top one */
    uint64_t seed;              /* the draws and the test images picked */
    int threads;                /* kernel threads; 0: the rule of shoal_train_opts.threads */
} shoal_sample_opts;

typedef struct {
    int reconstructions;        /* 1: an autoencoder's test images and reconstructions (a row
                                   of each in turn), 0: a deep belief net's samples */
    int images;                 /* tiles written */
} shoal_sample_report;

/* samples 64, gibbs_steps 1000, layer -1, seed 1, the rest 0 / NULL. */
void shoal_sample_opts_default(shoal_sample_opts *o);

/* A net whose first layers are [rbm] (a deep belief net): Gibbs sampling in its top [rbm] (or
 * layer's), then one pass down through the [rbm]s below, each hidden layer turned into its
 * visible means (Hinton, Osindero & Teh 2006). A regression whose output has its input's
 * shape (an autoencoder): test images, each row of them followed by its reconstructions.
 * Blocks; one process. Errors: SHOAL_ERR_INVALID (missing paths, a net that is neither, a
 * grid name other than .png or .svg, images of other than 1 or 3 channels), SHOAL_ERR_IO,
 * SHOAL_ERR_FORMAT (cfg, weights, dataset). */
shoal_result shoal_sample_run(const shoal_sample_opts *o, shoal_sample_report *r);

/* `shoal plan`: the images/s every layout would reach on a cluster of `hosts` hosts like this
 * machine, ranks_per_host ranks each, joined by `link`, predicted from this machine's layer
 * times (measured now) and the link's rate (docs/plan.md); the layouts weighed are those
 * `shoal train --parallel auto` weighs. */
typedef struct {
    const char *cfg_path;       /* the model (required) */
    int hosts, ranks_per_host;  /* >= 1 */
    const char *link;           /* across hosts: "1gbit", "10gbit", or "2.5gbit", "800mbit",
                                   "300MB/s"; NULL: "10gbit" */
    double latency_us;          /* a message's latency across hosts; < 0: 50 */
    int batch;                  /* images a replica takes per step; 0: the cfg's */
    int threads;                /* kernel threads a rank; 0: this host's CPUs shared by its ranks */
    int cores;                  /* cores a host; 0: this machine's (SHOAL_PLAN_CORES) */
    int json;                   /* 1: one JSON object instead of the table */
} shoal_plan_opts;

/* hosts 1, ranks_per_host 1, link NULL, latency_us -1, the rest 0 / NULL. */
void shoal_plan_opts_default(shoal_plan_opts *o);
/* Measure, predict and print the table (or the JSON object) to out. Blocks while it times the
 * layers (seconds). Errors: SHOAL_ERR_INVALID (counts, the link), the cfg's. */
shoal_result shoal_plan_print(const shoal_plan_opts *o, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
