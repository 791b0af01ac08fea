/* strategy.h — how a training step shares its work with other ranks: a small table of
 * hooks (attach, begin, grad_ready, finish) that the step calls in a fixed order.
 * Not here: the step itself (step.c); the single-process strategy is strategy_local.c,
 * data-parallel and parameter-server strategies plug into the same table.
 * Proved by tests/train/test_trainer.c (local); other strategies by their own tests. */
#ifndef SH_STRATEGY_H
#define SH_STRATEGY_H

#include <stddef.h>
#include <stdint.h>
#include "nn/net.h"
#include "nn/optim.h"
#include "shoal/comm.h"
#include "shoal/result.h"

typedef struct sh_strategy sh_strategy;

/* The communication of the last step, for TensorBoard (trainer.c). */
typedef struct {
    double comm_s;        /* the communicator busy with this step's messages (data parallel:
                             each bucket's allreduce from started to finished, summed) */
    double nbytes;        /* payload: gradient bytes reduced (or pushed plus pulled) */
    double sent_nbytes;   /* bytes this rank sent: 2(n-1)/n x payload for a bandwidth-optimal
                             allreduce; the pushed gradients for a parameter-server worker */
    double busbw_gb_s;    /* nccl-tests' bus bandwidth, payload x 2(n-1)/n / comm_s; 0: none */
} sh_step_comm;

typedef struct {
    const char *name; /* "local", "allreduce", ... for logs */
    /* Once, after the network is built or restored from a checkpoint: e.g. make every rank
     * start from rank 0's parameters. */
    shoal_result (*attach)(sh_strategy *s, sh_net *net);
    /* Before step `step` (0-based, counted over the whole training) reads its batch and
     * runs forward: a parameter-server worker pulls fresh weights here. */
    shoal_result (*begin)(sh_strategy *s, int64_t step);
    /* Backward's sh_grad_ready_fn: ctx is the sh_strategy. Layer `layer`'s gradients, slice
     * [offset, offset + count) of the gradient block, are final. Cannot fail here: a
     * strategy records its error and returns it from finish. */
    void (*grad_ready)(void *ctx, int layer, size_t offset, size_t count);
    /* After backward: returns when the gradient block holds the gradients the optimizer
     * must apply (averaged over ranks for data parallelism). */
    shoal_result (*finish)(sh_strategy *s);
    void (*destroy)(sh_strategy *s); /* NULL strategy is never passed */
    /* Optional (NULL: evaluation is not split): v[i] = sum of v[i] over the ranks, so each
     * rank evaluates its shard of the test set and the counts are combined. */
    shoal_result (*sum)(sh_strategy *s, double *v, int n);
    /* Optional (NULL: the step runs the net itself): forward, loss and (training = 1)
     * backward of this rank's batch x (n, C, H, W) with labels y (n) through the strategy,
     * leaving the gradients for finish: a pipeline runs its stage of every micro-batch.
     * *loss: the batch's mean loss; *correct: its argmax hits. Evaluation uses it too. */
    shoal_result (*pass)(sh_strategy *s, const float *x, const int32_t *y, int n, int training,
                         float *loss, int *correct);
} sh_strategy_ops;

struct sh_strategy {
    const sh_strategy_ops *ops;
    int rank, world; /* this rank's part of every global batch; rank 0 logs and saves */
    int applies_update; /* 1: the strategy updates the parameters itself (parameter servers
                           apply the optimizer); the step then skips the local optimizer */
    void *impl;      /* the strategy's own state */
    int batch;       /* > 0: images per step this rank takes (a pipeline's net is built for a
                        micro-batch); 0: the net's batch */
    /* Set by the trainer before attach, for a strategy that applies the update itself:
     * the trainer's optimizer and schedule (borrowed). */
    sh_optim *opt;
    const sh_lr_policy *lr;
    /* A strategy that steps inside backward (update hooks on the kernel threads: their
     * summed ns) and in finish adds its time here; --profile counts it as the optimizer's,
     * not backward's or the wait's (trainer.c). */
    uint64_t update_in_backward_ns, update_in_finish_ns;
    /* Optional (NULL: nothing to do), called on every rank before a checkpoint is written:
     * make rank 0's optimizer state whole (a strategy that splits the update keeps each
     * block's state current only on the rank that updates it). */
    shoal_result (*sync_state)(sh_strategy *s);
    /* Optional (NULL: rank 0 leads): 1 while this rank is the one that prints progress and
     * reports; a parameter-server worker leads once the servers dropped every lower one. */
    int (*leads)(const sh_strategy *s);
    /* Optional (NULL: no communication): what the last step's communication did. */
    void (*step_comm)(const sh_strategy *s, sh_step_comm *out);
    /* Optional (NULL: none): state each rank keeps for itself that a checkpoint must hold
     * per rank (error-feedback residuals). rank_state_gather is called on every rank before
     * a checkpoint (collective): rank 0 gets *all, world x *count floats (malloc'd, the
     * caller frees), the others NULL. rank_state_restore after attach, on resume: all holds
     * saved_world x count floats as saved (count 0: the checkpoint has none); a rank takes
     * its own when world and count match, else starts from zero and says so once. */
    shoal_result (*rank_state_gather)(sh_strategy *s, float **all, size_t *count);
    void (*rank_state_restore)(sh_strategy *s, const float *all, size_t count, int saved_world);
    /* Optional, instead of the two above (set these or those): per-rank state for a strategy
     * whose ranks need not meet at a checkpoint (parameter-server workers run at their own
     * pace, and the servers may drop one, so a gather could wait on a rank that never comes).
     * Each rank writes its own state to a file beside the checkpoint, PATH.worker<rank>, with
     * no communication (snapshot.c). rank_state_count: floats this rank keeps (0: none).
     * rank_state_get copies them into out; rank_state_set, after attach on resume, copies
     * them from in as this rank saved them, or starts them from zero when in is NULL (the
     * caller says why). */
    size_t (*rank_state_count)(const sh_strategy *s);
    void (*rank_state_get)(sh_strategy *s, float *out);
    void (*rank_state_set)(sh_strategy *s, const float *in);
    /* Optional (NULL: nothing to report): after a step, the bytes this rank sent by the
     * algorithms' count, what float32 would have sent, the error-feedback residuals' norm. */
    void (*comm_stats)(const sh_strategy *s, double *wire_nbytes, double *dense_nbytes, double *residual_norm);
    /* Optional (NULL: rank 0's gradient block holds the whole averaged gradient after a
     * step): this rank's share of the averaged gradient's squared norm, the shares summing
     * to the whole over the ranks (a strategy that updates in blocks leaves each rank only
     * its block reduced). Kept only while grad_sq_wanted, which the trainer sets on every
     * rank of a job that logs to TensorBoard. */
    double (*grad_sq_part)(const sh_strategy *s);
    int grad_sq_wanted;
    /* Set by a strategy whose ranks each hold a part of the model (pipeline stages); NULL:
     * every rank holds the whole. Checkpoints hold the whole model whatever the layout
     * (snapshot.c): the parts are summed into it (sum_floats) and the lead writes it; on
     * resume every rank reads the file and keeps its part. */
    const struct sh_model_part *part;
    /* The rank the trainer's before_step hook is told (fault drills name it): the job's
     * rank where it differs from `rank` (a pipeline stage's, whose `rank` is its replica);
     * valid when has_drill_rank. */
    int has_drill_rank, drill_rank;
    /* Optional (NULL: finish always ends the step's communication). Set by the trainer's
     * run loop only (direct sh_train_step callers keep finish complete): may_defer lets
     * finish return with the step's last gradient exchanges still in flight, each completed
     * (update applied) by the next forward before the layer whose parameters it holds
     * (sh_net_set_before_forward), so that forward overlaps the tail of the exchange.
     * drain completes them all: the trainer calls it before anything else reads the weights
     * or gradients (evaluation, checkpoints, TensorBoard, the divergence scan, the end).
     * sum_start is ops->sum without waiting, for the stop/save agreement after such a step
     * (queued behind the exchanges; the caller shoal_waits *req before reading v). */
    int may_defer;
    shoal_result (*drain)(sh_strategy *s);
    shoal_result (*sum_start)(sh_strategy *s, double *v, int n, shoal_request **req);
    int many_ranks; /* 1: other ranks run this same training although world is 1 (pipeline
                       stages, tensor shares): stop and save requests are agreed (sum) */
    int pass_takes_empty; /* 1: evaluation calls pass on every rank for every test batch, also
                             with n = 0 (the test set's last batch left this rank nothing):
                             a pass that is collective over ranks holding shares (hybrid) */
    /* Model-parallel layouts: codec (job.c sets it before attach) compresses the gradients
     * their data-parallel group exchanges (pipeline and tensor replicas, a hybrid's
     * convolutional part). With it, gx is the exchange (dp/compress.h, owned), gx_lr the
     * step's rate when the exchange applies the update, and file_rank of file_world (the
     * job's rank and size) number the files that keep each rank's residuals. */
    shoal_codec_opts codec;
    struct sh_gradx *gx;
    float gx_lr;
    int file_rank, file_world;
};

typedef struct sh_model_part {
    size_t nparams_whole, params_off;   /* this rank's parameters: [off, off + nparams) */
    size_t nstats_whole, stats_off;
    int contributes;                    /* 1 on one rank per part (replica 0's stages) */
    int carries_scalars;                /* 1 on one rank of the job: the optimizer's step count */
    /* v[i] = sum over all ranks of v[i]; collective. */
    shoal_result (*sum_floats)(sh_strategy *s, float *v, size_t n);
    /* Optional (NULL: the part is [params_off, params_off + nparams), placed where
     * contributes): write this rank's share of a block laid out as the parameters (the
     * parameters, or one optimizer moment) into the whole model's (zeroed; shares that
     * several ranks hold are written by one), and read it back from the whole model's. */
    void (*put)(sh_strategy *s, const float *mine, float *whole);
    void (*take)(sh_strategy *s, const float *whole, float *mine);
} sh_model_part;

/* The single-process strategy: every hook does nothing. */
shoal_result sh_strategy_local_create(sh_strategy **out);
/* Calls s->ops->destroy; NULL does nothing. */
void sh_strategy_destroy(sh_strategy *s);

#endif
