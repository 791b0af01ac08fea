/* pretrain.h — greedy layer-wise pretraining of a net's [rbm] layers (a deep belief net):
 * each [rbm] in turn, bottom up, trained by CD-k on the hidden activations of the layers below
 * it (src/nn's pretraining net), without labels, alone or data parallel over the job's ranks
 * (the trainer and the allreduce strategy of ordinary training: CD's gradients averaged in
 * buckets), with checkpoints and resume; at the end the whole net's weights, which `shoal
 * train --weights` fine-tunes.
 * Not here: CD-k itself (src/nn/layer_rbm.c), flags (src/cli/cmd_pretrain.c).
 * Proved by tests/cli/test_pretrain.c. */
#ifndef SH_PRETRAIN_H
#define SH_PRETRAIN_H

#include <stdio.h>

#include "train/trainer.h"

#define SH_PRETRAIN_MAX_RBMS 64

typedef struct {
    /* cfg_path, data_dir, epochs (per [rbm]), max_steps (per [rbm]), batch, threads, seed,
     * quiet, out, log_every_steps, save_every_steps, logdir: as for training. save_path:
     * the training checkpoint of the [rbm] being pretrained, every save_every_steps and at
     * each [rbm]'s end (its own cfg hash says which [rbm]), then, at the very end, the whole
     * net's weights (sh_snapshot_save_weights). resume_path: continue the [rbm] whose
     * checkpoint it is, the ones below it already done. */
    sh_train_opts train;
    double bucket_mb;           /* data parallel: gradient buckets; 0: 1 MB */
    /* Called before each [rbm]'s training with train.hook_ctx, its stage (0-based) and layer:
     * with train.before_step, fault drills that name a stage's step. NULL: none. */
    void (*before_stage)(void *hook_ctx, int stage, int layer);
} sh_pretrain_opts;

void sh_pretrain_opts_default(sh_pretrain_opts *o);

typedef struct {
    int layer;                  /* the [rbm]'s index in the net */
    int resumed;                /* 1: continued from resume_path */
    sh_train_report train;      /* its run: losses are minus the pseudo-likelihood (Bernoulli
                                   visible units) or the reconstruction error (Gaussian) */
} sh_pretrain_stage;

typedef struct {
    int rank, world;
    int nstages;                /* [rbm] layers in the net */
    int first;                  /* the first stage this run trained (resume skips those done) */
    int last;                   /* the last stage it ran */
    int stopped;                /* 1: a stop request ended the run in stage `last` (its
                                   checkpoint saved; no weights written) */
    sh_pretrain_stage stages[SH_PRETRAIN_MAX_RBMS];
    double seconds;
    char saved_path[1024];      /* the weights written, "" when none */
} sh_pretrain_report;

/* Pretrain every [rbm] of o->train.cfg_path in order. Alone, or a rank of a launched job
 * (communicator from the launcher's environment, as sh_job_run). Errors name the file, the
 * layer and what to do (a net without [rbm], a checkpoint of another model). Blocks. */
shoal_result sh_pretrain_run(const sh_pretrain_opts *o, sh_pretrain_report *r);

#endif
