/* strategy.h — the contract between a training run and the ways it shares work with other
 * ranks: local (strategy.c), allreduce, hogwild and quorum (dp/), the parameter-server worker
 * (ps/), pipeline, tensor and hybrid (mp/), L-BFGS's ranks (solver/). One table of hooks, NULL where absent.
 * Not here: the step (step.c), the run loop and its save/stop agreement (trainer.c, agree.c).
 * Proved by tests/train/test_trainer.c (local) and each strategy's own test. */
#ifndef SH_STRATEGY_H
#define SH_STRATEGY_H

#include <stddef.h>
#include <stdint.h>
#include "data/data.h"
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

/* One figure of a strategy's own for TensorBoard ("hogwild/staleness"). */
typedef struct {
    const char *tag;
    double value;
} sh_figure;

typedef struct {
    const char *name;      /* "local", "allreduce", ... for logs */
    const char *rank_noun; /* what messages call one of its ranks ("worker"); NULL: "rank" */

    /* ---- Required: the step (step.c) calls them in this order ---- */
    /* Once, after the network is built or restored from a checkpoint: e.g. make every rank
     * start from rank 0's parameters. */
    shoal_result (*attach)(sh_strategy *s, sh_net *net);
    /* Before step `step` (0-based, over the whole training) reads its batch: a
     * parameter-server worker pulls fresh weights here. */
    shoal_result (*begin)(sh_strategy *s, int64_t step);
    /* After backward: returns when the gradient block holds the gradients the optimizer
     * must apply (averaged over ranks for data parallelism), or the update is applied. */
    shoal_result (*finish)(sh_strategy *s);
    void (*destroy)(sh_strategy *s); /* NULL strategy is never passed */

    /* ---- Optional: NULL says what absence means ---- */
    /* Backward's sh_grad_ready_fn (ctx: the strategy): layer `layer`'s gradients, slice
     * [offset, offset + count) of the gradient block, are final. Cannot fail: a strategy
     * records its error and returns it from finish. NULL: nothing starts during backward. */
    void (*grad_ready)(void *ctx, int layer, size_t offset, size_t count);
    /* Forward, loss and (training = 1) backward of this rank's batch x (n, C, H, W), labels
     * y (n), leaving the gradients for finish; *loss the batch's mean, *correct its argmax
     * hits. Evaluation calls it for every test batch on every rank, n = 0 included (the test
     * set left this rank nothing: a pass collective over ranks reading different shards
     * still takes part). NULL: the step runs the net itself. */
    shoal_result (*pass)(sh_strategy *s, const float *x, const int32_t *y, int n, int training,
                         float *loss, int *correct);
    /* v[i] = sum of v[i] over the ranks (collective): each rank evaluates its shard of the
     * test set, and the ranks agree on saving and stopping (agree.c). NULL: neither. */
    shoal_result (*sum)(sh_strategy *s, double *v, int n);
    /* 1 while this rank prints progress and reports. NULL: rank 0 leads. Set by a strategy
     * that decides it (a parameter-server worker leads once the servers dropped every lower
     * one); every rank then keeps a progress line, the lead's shows. */
    int (*leads)(const sh_strategy *s);
    /* Before a checkpoint, on every rank (collective): make the state the checkpoint writes
     * whole (a split update keeps each block's optimizer state on the rank that steps it).
     * NULL: nothing to do. */
    shoal_result (*sync_state)(sh_strategy *s);

    /* Deferred exchange (agree.c). can_defer: 1 when finish may leave the step's last
     * exchanges in flight once the run loop sets may_defer, each completed (its update
     * applied) by the next forward before the layer it holds (sh_net_set_before_forward).
     * drain completes them all; the run loop calls it before anything else reads weights or
     * gradients. sum_start is sum without waiting, queued behind those exchanges; the caller
     * shoal_waits *req before reading v. NULL can_defer: finish always ends the exchange. */
    int (*can_defer)(const sh_strategy *s);
    shoal_result (*drain)(sh_strategy *s);
    shoal_result (*sum_start)(sh_strategy *s, double *v, int n, shoal_request **req);

    /* Per-rank state a checkpoint keeps (error-feedback residuals): each rank writes its own
     * to a file beside the checkpoint, with no communication (snapshot.c), so ranks that
     * never meet (parameter-server workers) keep it too. count: floats this rank keeps (0:
     * none this run). get copies them out; set, after attach on resume, copies them in as
     * saved, or starts them from zero when in is NULL. NULL count: none ever. */
    size_t (*rank_state_count)(const sh_strategy *s);
    void (*rank_state_get)(sh_strategy *s, float *out);
    void (*rank_state_set)(sh_strategy *s, const float *in);

    /* Figures after a step, for TensorBoard and the report. NULL: none of that kind.
     * step_comm: what the last step's communication did. comm_stats: 1 when compressed
     * this run, with the bytes this rank sent per step by the algorithms' count, what
     * float32 would have sent and the error-feedback residuals' norm; 0 otherwise.
     * grad_sq_part: this rank's share of the averaged gradient's squared norm, the shares
     * summing to the whole over the ranks, kept while grad_sq_wanted (NULL: rank 0's
     * gradient block holds the whole averaged gradient). */
    void (*step_comm)(const sh_strategy *s, sh_step_comm *out);
    int (*comm_stats)(const sh_strategy *s, double *wire_nbytes, double *dense_nbytes, double *residual_norm);
    double (*grad_sq_part)(const sh_strategy *s);

    /* A batch method (L-BFGS, solver/): the whole step instead of step.c's. It evaluates the
     * loss and gradient over its own part of train_set as often as it needs and moves the
     * parameters; *loss and *correct (argmax hits) are at the new parameters over *nimages
     * images. Collective. NULL: step.c's forward, backward, finish and optimizer. */
    shoal_result (*step)(sh_strategy *s, int64_t step, float *loss, int *correct, int *nimages);
    /* State a checkpoint keeps in a "solver" section of its own (the L-BFGS iterate and
     * history). nbytes and get on the rank that writes (0: nothing to keep); set on every
     * rank after attach on resume, in NULL when the checkpoint has no such section (then the
     * state starts afresh). NULL nbytes: none ever. */
    size_t (*ckpt_nbytes)(const sh_strategy *s);
    void (*ckpt_get)(sh_strategy *s, void *out);
    shoal_result (*ckpt_set)(sh_strategy *s, const void *in, size_t nbytes);
    /* Up to max figures of the strategy's own after a step, for TensorBoard (the lead's);
     * returns how many. NULL: none. */
    int (*figures)(const sh_strategy *s, sh_figure *out, int max);
    /* After the last step, before the final evaluation and checkpoint, on every rank: where
     * ranks never wait for each other while training (hogwild, a quorum), every rank's
     * updates have landed when it returns (collective). NULL: the steps left nothing behind. */
    shoal_result (*end)(sh_strategy *s);
} sh_strategy_ops;

struct sh_strategy {
    const sh_strategy_ops *ops;
    void *impl;                 /* the strategy's own state */
    /* Set by its create. */
    int rank, world;            /* this rank's part of every global batch; rank 0 saves */
    int job_rank, job_world;    /* how the job names this rank: fault drills (before_step)
                                   and its own checkpoint file; a layout whose `rank` is a
                                   replica gives the job's, a parameter-server worker its
                                   index among the workers */
    int batch;                  /* > 0: images per step this rank takes (a pipeline's net is
                                   built for a micro-batch); 0: the net's batch */
    int full_batch;             /* 1: a step reads the whole training set (the step hook's
                                   batch method): the global batch is the set's size */
    /* Where ranks each hold a part of the model (model parallelism); NULL: every rank holds
     * the whole. Checkpoints hold the whole model whatever the layout (snapshot.c): the parts
     * are summed into it (sum_floats) and the lead writes it; on resume every rank reads the
     * file and keeps its part. Such a strategy always has other ranks, whatever world says. */
    const struct sh_model_part *part;
    /* Set by attach: 1 when the strategy updates the parameters itself (servers, an update
     * riding on the exchange, shares stepping in backward); the step then skips its own. */
    int applies_update;
    /* Set by the trainer before attach: its optimizer and schedule (borrowed), whether this
     * job logs the gradient norm (grad_sq_part), and the training set. */
    sh_optim *opt;
    const sh_lr_policy *lr;
    int grad_sq_wanted;
    const sh_dataset *train_set; /* the training set (borrowed), for a step hook's own passes */
    /* Set by the run loop only (agree.c; direct sh_train_step callers keep it 0): finish
     * may leave exchanges in flight (can_defer). */
    int may_defer;
    /* A strategy that steps inside backward (update hooks on the kernel threads: their
     * summed ns) and in finish adds its time here; --profile counts it as the optimizer's. */
    uint64_t update_in_backward_ns, update_in_finish_ns;
    /* Set by finish where a rank's steps are the job's updates and it may fall behind them
     * (a quorum: a late rank skips to the step the others reached): the steps the job has
     * done after this one, at least this rank's count; 0: this rank's count. */
    int64_t job_steps;
    /* Set by the trainer before the first step: the steps the run plans in all, past which a
     * rank that skips ahead makes no update. */
    int64_t steps_planned;
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

/* ---- What the trainer asks (strategy.c) ---- */
/* 1 while this rank prints and reports (leads, or rank 0). */
int sh_strategy_leads(const sh_strategy *s);
/* 1 on the rank that writes the checkpoint file: the lead where ranks hold parts of the
 * model, else rank 0. */
int sh_strategy_writes(const sh_strategy *s);
/* 1 when each rank evaluates its shard of the test set and the ranks sum the figures. */
int sh_strategy_splits_eval(const sh_strategy *s);
/* 1 when other ranks run this training and can sum: they agree on saving and stopping. */
int sh_strategy_agrees(const sh_strategy *s);
/* Floats of per-rank state this rank keeps for checkpoints (0: none). */
size_t sh_strategy_rank_state_count(const sh_strategy *s);
/* "rank", or the strategy's rank_noun. */
const char *sh_strategy_rank_noun(const sh_strategy *s);

/* The single-process strategy: every hook does nothing. */
shoal_result sh_strategy_local_create(sh_strategy **out);
/* Calls s->ops->destroy; NULL does nothing. */
void sh_strategy_destroy(sh_strategy *s);

#endif
