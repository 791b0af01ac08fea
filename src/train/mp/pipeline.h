/* mp/pipeline.h — pipeline parallelism: the layers cut into S stages, each batch into M
 * micro-batches run 1F1B; replicas when there are more ranks than stages; with
 * --tensor-parallel T each stage split across T ranks (see mp/pipeline.c).
 * Not here: the step (step.c), a net's parts (src/nn/net_part.c), the layout (job.c).
 * Proved by tests/train/test_pipeline.c and tests/cli/test_train_pipeline.c. */
#ifndef SH_STRATEGY_PIPELINE_H
#define SH_STRATEGY_PIPELINE_H

#include <stdio.h>

#include "nn/net.h"
#include "shoal/comm.h"
#include "train/strategy.h"

typedef struct {
    const char *cfg_path;
    int stages;         /* S >= 1; the communicator's world must be a multiple */
    int micro_batches;  /* M >= 1; divides batch */
    int batch;          /* images per replica per step (0: the cfg's) */
    uint64_t seed;      /* the weights: each stage keeps its part of the one-process draw */
} sh_pipe_opts;

/* Seconds per step on this rank, averaged over the steps since the start (--profile):
 * computing forward and backward, idle waiting for a neighbour's activations or gradients
 * (the bubble, including their transfer, and at the pass's end the wait for its last sends
 * and the loss while a neighbour still computes), sending and averaging gradients across
 * replicas. */
typedef struct {
    int stage, replica;
    int lo, hi;         /* its layers [lo, hi) */
    double forward, backward, bubble, comm;
    double step;        /* the whole pass, for the bubble's share */
    int deferred_layers; /* whose weight gradients wait for the last backward (SHOAL_PIPE_DEFER) */
} sh_pipe_profile;

/* Cut the net (any part of it; every layer's cost and stage= key are known) into `stages`
 * stages: by the cfg's stage= keys when any layer has one (a key holds until the next),
 * else balancing the estimated cost (forward and backward multiply-adds, and the values
 * crossing each cut) with cuts where sh_net_can_cut allows (routes may cross them). cuts[0..stages] (cuts[0] = 0, cuts[stages] = nlayers).
 * Errors name the cfg and what to do (more stages than places to cut, keys out of order). */
shoal_result sh_pipe_plan(const sh_net *n, int stages, int *cuts);

/* This rank's stage: plans the cut, builds its part at batch/M images (the part's parameters
 * only; *net_out, which the caller hands to the trainer) and the strategy. Collective over c
 * (splits it into the stage groups of the replicas). */
shoal_result sh_strategy_pipeline_create(shoal_comm *c, const sh_pipe_opts *o, sh_strategy **out,
                                         sh_net **net_out);
/* The same with each stage split across T tensor-parallel ranks (T = 1: the above): the
 * world is a multiple of S x T; rank g is tensor rank g % T of stage g / T % S of replica
 * g / (S T). Each stage's pairs are chosen inside it by tensor parallelism's rule (mp/tensor_plan.h)
 * and split among its T ranks; *net_out holds this rank's shares of its stage. */
shoal_result sh_strategy_pipeline_tp_create(shoal_comm *c, const sh_pipe_opts *o, int T, sh_strategy **out,
                                            sh_net **net_out);
void sh_strategy_pipeline_profile(const sh_strategy *s, sh_pipe_profile *out);
/* "pipeline: 2 stages x 2 replicas, 4 micro-batches of 8; stage 0 layers 0-2 ranks 0,2; ...";
 * with T > 1 "pipeline x tensor parallel: 2 replicas x 2 stages x 2 tensor ranks ...", each
 * stage's ranks, split pairs and candidates left whole with why (mp/tensor_plan.h's lines). */
void sh_strategy_pipeline_describe(const sh_strategy *s, FILE *out);

#endif
