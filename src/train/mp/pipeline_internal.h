/* mp/pipeline_internal.h — a pipeline stage's state (struct pipe_state), shared by the
 * schedule (mp/pipeline_pass.c), the strategy hooks (mp/pipeline.c) and the plan and
 * the reports (mp/pipeline_plan.c).
 * Not here: the public strategy API (mp/pipeline.h).
 * Proved by tests/train/test_pipeline.c, test_pipeline_links.c and test_pipeline_tp.c. */
#ifndef SH_PIPELINE_INTERNAL_H
#define SH_PIPELINE_INTERNAL_H

#include "train/mp/mp.h"
#include "train/mp/pipeline.h"
#include "train/mp/tensor_plan.h"

typedef struct {
    sh_mp mp;                /* first: the job's communicator, the part, the exchange */
    shoal_comm *group;       /* this stage's ranks in every replica (owned); NULL: R = 1 */
    int S, M, R, stage, replica, mb, batch;
    int T, t;                /* tensor ranks per stage, and this rank's (T = 1: none) */
    shoal_comm *tp;          /* the stage's T ranks in this replica (owned; NULL: T = 1) */
    sh_tp_plan plan;         /* T > 1: every stage's split pairs, each layer's place in the
                                whole model */
    int *pairs;              /* [S] pairs per stage */
    /* Each pair of neighbouring stages has two communicators of its own (two ranks; the
     * earlier stage is rank 0), split from the job's: one carries activations forward, one
     * gradients (and at the end the loss) back, each as a broadcast from the sender, so the
     * order of messages on each is the same on both sides whatever the schedule
     * interleaves. [0]: with the stage before, [1]: with the stage after (owned; NULL at the
     * ends). */
    shoal_comm *act[2], *grad[2];
    int *cuts;               /* [S + 1]: stage k runs layers [cuts[k], cuts[k+1]) */
    size_t *stage_nparams;   /* [S] */
    sh_cfg *cfg;             /* owned: every instance reads it */
    int K;                   /* instances: micro-batches this stage holds at once */
    sh_net **inst;           /* [K]; inst[0] is the trainer's (borrowed), the others owned */
    float **in_buf;          /* [K] (mb, input count): received activations (stage > 0) */
    shoal_request **act_req, **grad_req; /* [K] sends in flight from each instance */
    /* Links: outputs of layers before the stage's input that a later stage reads ([route],
     * [shortcut] across a cut; sh_net_cut_links), each one message of its own after the
     * activations (forward) or their gradient (backward), in ascending layer order, stage to
     * stage until their reader's; gradients back the same way, each stage adding its own. */
    int nlink_in, *link_in;       /* received at the stage's start (held by its instances) */
    int nlink_out, *link_out;     /* sent at its end: own layers', its input's or passed on */
    shoal_request **link_act_req; /* [K * nlink_out] */
    shoal_request **link_grad_req; /* [K * nlink_in] */
    float *acc;              /* (nparams) gradient sum over micro-batches */
    int nsums;               /* slices of the gradient block summed in acc: layers not deferred */
    size_t *sum_off, *sum_count; /* [nsums], in floats */
    /* Deferred weight gradients: layer defer_layer[d]'s factors of the whole pass, micro-batch m
     * at row m * mb: its input X (batch, inputs) (NULL: the first layer of stage 0, whose X is
     * the pass's input) and dY / M (batch, outputs). */
    int defer;               /* SHOAL_PIPE_DEFER: 0 computes every weight gradient in its backward */
    int ndefer, *defer_layer;
    float **defer_x, **defer_dy;
    size_t nparams, in_count, out_count;
    uint64_t rng[4];         /* dropout's stream, carried from instance to instance */
    uint64_t rng0[4];        /* the stream at attach: a stage whose stream moved draws */
    double ns[5];            /* forward, backward, bubble, comm, pass: training passes only */
    double eval_ns[5];       /* the same during evaluation (not reported) */
    double *acc_ns;          /* ns while training, else eval_ns */
    int packs;               /* SH_PACK_* bits: the packed copies it keeps (sh_net_keep_packed) */
    int updates;             /* applies the optimizer step itself, packing as it updates */
    int64_t step;            /* the step begun (its learning rate) */
    int stale;               /* SH_PACK_* bits: packed copies that predate the weights */
    int pulled_packs;        /* --ps: a training pass ran, so every copy can be packed from pulled weights
                                (before it the layers' gradient buffers are not all in place) */
    int pack_forward, pack_backward; /* the copies still to be packed in this pass */
    int64_t passes;
} pipe_state;

/* One pass of the stage (mp/pipeline_pass.c): the strategy's `pass` hook. */
shoal_result sh_pipe_pass(sh_strategy *s, const float *x, const int32_t *y, int n, int training,
                          float *loss, int *correct);
/* Waits for a send in flight (NULL: none) and clears it; the wait's result. */
shoal_result sh_pipe_wait_req(shoal_request **req);
/* The same for count of them. */
shoal_result sh_pipe_wait_links(shoal_request **req, int count);

#endif
