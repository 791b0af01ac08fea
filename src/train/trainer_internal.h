/* trainer_internal.h — the trainer's state, shared by trainer.c, step.c and snapshot.c.
 * Not here: the public surface (trainer.h), a run's loop state (trainer.c).
 * Proved by tests/train/test_trainer.c. */
#ifndef SH_TRAINER_INTERNAL_H
#define SH_TRAINER_INTERNAL_H

#include "io/tb_events.h"
#include "train/snapshot.h"
#include "train/trainer.h"

struct sh_trainer {
    sh_train_opts opts;         /* strings borrowed from the caller */
    sh_net *net;
    const sh_net_config *cfg;
    sh_optim *opt;
    sh_strategy *strategy;
    int owns_strategy;
    sh_dataset *train_set, *test_set;
    sh_loader *loader;          /* training order: shuffled per epoch from the seed */
    sh_loader *test_loader;     /* dataset order, keeps the last partial batch */
    float *x;                   /* (N, C, H, W) the current batch */
    size_t x_cap;               /* its floats: a streamed loader trades buffers of this size */
    int32_t *y;                 /* (N) its labels */
    float *params, *grads;      /* the net's blocks, (nparams) each */
    size_t nparams;
    int batch;                  /* N: this rank's images per step (buffer size) */
    int last_n;                 /* images in the last step's batch (<= batch) */
    int last_correct;           /* its argmax hits, from a strategy's pass */
    int global_batch;           /* images per step over all ranks */
    int64_t steps_done;         /* completed steps, including those before a resume */
    int64_t steps_planned;
    sh_tb *tb;                  /* TensorBoard scalars when --logdir; else NULL */
    sh_lr_policy lr;            /* the cfg's schedule times opts.lr_scale */
    double prof_ns[5];          /* with opts.profile: data, forward, backward, wait, optimizer */
    double last_ns[5];          /* the same for the last step (TensorBoard) */
    uint64_t run_start_ns;      /* sh_trainer_run's start (the report's history) */
    int threads;                /* kernel threads of the net */
    sh_snapshot_meta resume_meta; /* with opts.resume_path: the checkpoint's meta, read once */
    int text;                   /* character-level text: losses in bits per character too */
    size_t nstate;              /* floats of the net's recurrent state (0: feed-forward) */
    float *state_keep;          /* (nstate) the training state while evaluation runs */
    float *state_all;           /* (world, nstate) every rank's state, for checkpoints */
    double *state_sum;          /* (world, nstate) the gather's buffer (a sum of zeros and one
                                   rank's values is exact) */
    size_t rank_file_count;     /* floats of per-rank state this rank wrote to its own file
                                   at the last save (snapshot.c) */
    char default_save_path[1024]; /* CFGNAME.ckpt: the stem of a save nobody named */
    char unnamed_path[1024];    /* where this run's unnamed saves go, once chosen (run_files.c) */
    /* A regression's targets (targets.c): a second data set's, read row for row with x into
     * target (N, K); NULL when the input itself is the target, or there is none. */
    sh_dataset *train_target, *test_target;
    float *target;
    int labelled;               /* the net learns from labels: accuracy is measured */
};

/* The targets of a net without labels, from opts.target (targets.c): before the loaders. */
shoal_result sh_trainer_open_targets(sh_trainer *t);

#endif
