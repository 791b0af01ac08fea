/* trainer.h — training from a .cfg: build the loaders, the optimizer and a strategy around
 * the net; run steps and epochs; evaluate; save and resume checkpoints; stop or save on request.
 * Not here: flags and exit codes (src/cli/cmd_train.c), one step (step.c), the agreement
 * (agree.c), evaluation (eval.c), the checkpoint layout (snapshot.c).
 * Proved by tests/train/test_trainer.c, test_snapshot.c and tests/cli/test_train_cli.c. */
#ifndef SH_TRAINER_H
#define SH_TRAINER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data/data.h"
#include "nn/net.h"
#include "nn/optim.h"
#include "shoal/result.h"
#include "train/strategy.h"

typedef struct sh_trainer sh_trainer;

typedef struct {
    const char *cfg_path;
    const char *data_dir;       /* NULL: SHOAL_DATA_DIR */
    /* pictures (src/data/open.c): the held-out set, bad files, the decoding threads */
    const char *test_data;      /* --test-data: a folder or list file; NULL: data_dir/val */
    int strict_data;            /* 1: a bad picture file stops the run; 0: skipped, counted */
    int data_threads;           /* decoding threads a rank; 0: one per two kernel threads */
    int data_prefetch;          /* steps decoded ahead; 0: 2 */
    int epochs;                 /* 0: the cfg's max_batches steps, or 1 epoch without it */
    int64_t max_steps;          /* > 0: stop once this many steps are done in total */
    int batch;                  /* images per step; 0: the cfg's batch */
    int threads;                /* kernel threads; 0: sh_cpus_threads_per_rank's rule */
    int local_ranks;            /* ranks on this host sharing its CPUs (for that rule); 0: 1 */
    uint64_t seed;              /* weights, shuffling and dropout all follow from it */
    const char *save_path;      /* written at the end and every save_every_steps; NULL: none */
    const char *resume_path;    /* continue exactly where that checkpoint stopped */
    const char *weights_path;   /* start from these weights (a checkpoint, or Darknet's
                                   FILE.weights) instead of the seed's; NULL: the seed's */
    const char *save_darknet_path; /* rank 0 writes Darknet's .weights here at the end */
    const char *target;         /* a regression's targets: "input" (the input itself) or a data
                                   set's directory (as data_dir); NULL for nets with labels */
    const char *save_caffe_path;   /* rank 0 writes Caffe's .caffemodel here at the end */
    int64_t save_every_steps;   /* 0: only at the end */
    const char *logdir;         /* TensorBoard event files; NULL: none */
    int job_logs;               /* some rank of this job writes logdir (rank 0): the others
                                   take part in its job-wide figures (the gradient norm) */
    int64_t histogram_every_steps; /* with logdir: weight and gradient histograms per layer
                                   every this many steps; 0: none */
    int eval_each_epoch;        /* 1: test accuracy after every epoch (and at the end) */
    int log_every_steps;        /* plain lines: one per this many steps; 0: epoch lines only */
    int quiet;                  /* 1: no lines at all, only the report */
    FILE *out;                  /* where lines go: stdout, or stderr when stdout is JSON */
    /* Set asynchronously (signal handlers); read after each step. stop: save and return;
     * save: save and continue. NULL: not watched. */
    volatile sig_atomic_t *stop_requested;
    volatile sig_atomic_t *save_requested;
    sh_strategy *strategy;      /* NULL: the single-process strategy; else borrowed */
    double lr_scale;            /* multiplies the cfg's learning rate (linear scaling for
                                   large batches); 0: 1 */
    int profile;                /* 1: time each part of the step (report.profile) */
    double time_limit_s;        /* > 0: end after the step that passes this many seconds
                                   (evaluated and saved as at the planned end) */
    /* Called before each step (0-based, counted over the whole training) with hook_ctx
     * and the strategy's rank (a data-parallel rank, a worker's index among the workers):
     * fault drills and debugging (a rank that dies or straggles) live there, not in the
     * strategies. NULL: none. */
    void (*before_step)(void *hook_ctx, int rank, int64_t step);
    void *hook_ctx;
    /* An elastic job (elastic.c) runs the trainer again after each change of its ranks:
     * after every step whose exchange, evaluation and checkpoint are done, keep_state copies
     * what a regroup restores; regroup_wanted is this rank's wish that the job regroup (ranks
     * wait to join), which the ranks' vote spreads: the run then ends early, report.regroup
     * = 1, with no final evaluation or checkpoint. NULL: neither. */
    void (*keep_state)(void *elastic_ctx, sh_trainer *t);
    int (*regroup_wanted)(void *elastic_ctx);
    void *elastic_ctx;
    /* The data sets, opened by the caller and kept across such runs (borrowed); NULL: the
     * trainer opens data_dir's. */
    sh_dataset *train_set, *test_set;
    int quiet_start;            /* 1: no first line (the same job, run again) */
} sh_train_opts;

/* Defaults: 1 epoch, seed 1, evaluate each epoch, a line every 100 steps, stdout. */
void sh_train_opts_default(sh_train_opts *o);

/* Seconds per step by part (--profile). comm_wait is the time the step waited for the
 * strategy (allreduce or servers) after backward. */
typedef struct {
    double data, forward, backward, comm_wait, optimizer;
} sh_step_profile;

/* One evaluation during the run (each epoch's end, and the end), for --json's history and
 * `shoal plot RUN.json`. */
typedef struct {
    int64_t step;               /* steps done */
    double epoch;               /* steps / steps per epoch */
    double seconds;             /* since the run started */
    double train_loss;          /* mean over the epoch's steps so far */
    double test_accuracy, test_loss;
} sh_epoch_point;

/* Evaluations kept in the report; later ones are not recorded there (TensorBoard has all). */
#define SH_HISTORY_MAX 256

typedef struct {
    double test_accuracy;       /* fraction in [0, 1] after the last step; < 0: not measured */
    double test_loss;
    double train_loss;          /* mean over the steps of the last (possibly partial) epoch */
    double images_per_s;        /* steady state: steps after the first warm-up ones */
    double seconds;             /* wall time of training and evaluation */
    int64_t steps;              /* steps done in total (including those before a resume) */
    int64_t steps_this_run;
    double epochs;              /* steps / steps per epoch (the last partial batch is dropped) */
    size_t peak_rss_nbytes;
    /* With opts.profile: averaged over the run's steps. */
    sh_step_profile profile;
    int stopped;                /* 1: stop_requested ended the run early */
    int regroup;                /* 1: the ranks agreed to regroup (regroup_wanted) */
    int threads;                /* kernel threads this rank used */
    int text;                   /* 1: character-level text; images are characters, and the
                                   losses (nats) are also given in bits per character: */
    double train_bpc, test_bpc; /* loss / ln 2 */
    char saved_path[1024];      /* the last checkpoint written, "" when none */
    char save_error[2048];      /* a final file that could not be written where asked, and
                                   where it went instead (run_files.c); "" when none */
    int streamed;               /* pictures or synthetic data, decoded while training: */
    double data_wait_s;         /* time the steps waited for decoded images */
    int64_t bad_files;          /* picture files skipped as unreadable (this rank's finds) */
    int nhistory;               /* evaluations in history[] */
    sh_epoch_point history[SH_HISTORY_MAX];
} sh_train_report;

/* Load the cfg and data, build everything a step needs, restore resume_path when given.
 * Errors name the file and what to do (bad cfg, missing dataset, dataset shape that does
 * not fit the net, a checkpoint from another model). */
shoal_result sh_trainer_create(const sh_train_opts *o, sh_trainer **out);
/* The same, training net (built by the caller from o->cfg_path with o->batch and o->seed,
 * e.g. the job, which needed it first to read the model): takes ownership of net, also on
 * error. */
shoal_result sh_trainer_create_with_net(const sh_train_opts *o, sh_net *net, sh_trainer **out);
void sh_trainer_destroy(sh_trainer *t);

/* Train until the planned steps are done or stop is requested. Fills r (may be NULL). */
shoal_result sh_trainer_run(sh_trainer *t, sh_train_report *r);

/* One step (step.c): next batch, forward, loss, backward through the strategy, optimizer
 * update at the step's learning rate. Allocates nothing. *loss is the batch's mean loss. */
shoal_result sh_train_step(sh_trainer *t, int64_t step, float *loss);

/* What --data (and --test-data) name, shaped as net's input: the cfg's [net] says how
 * pictures are cut (sh_net_pictures into sh_image_opts). */
void sh_train_data_opts(const sh_net *net, const char *path, const char *test_path, uint64_t seed, int strict,
                        sh_data_opts *d);

/* Write a checkpoint of the current state (rank 0 only; others return SHOAL_OK). */
shoal_result sh_trainer_save(sh_trainer *t, const char *path);

/* The net being trained and its parameters (for tests and the CLI). */
sh_net *sh_trainer_net(sh_trainer *t);
int64_t sh_trainer_steps_done(const sh_trainer *t);
int64_t sh_trainer_steps_planned(const sh_trainer *t);
/* The stem of the path a stop without --save writes to: "<cfg basename without .cfg>.ckpt"
 * in cwd, or a numbered form of it when that file exists (run_files.c). */
const char *sh_trainer_default_save_path(const sh_trainer *t);

#endif
