/* mp/tensor_plan.h — which layer pairs tensor parallelism over T ranks splits (for
 * --tensor-parallel and each stage of --pipeline S --tensor-parallel T), the layout lines that
 * explain the choice, and each rank's shares placed in the whole model's blocks.
 * Not here: the split math (src/nn/dense_share.c, layer_conv.c), the traffic (mp/tensor.c, pipeline.c).
 * Proved by tests/train/test_tensor.c and test_pipeline_tp.c. */
#ifndef SH_TP_PLAN_H
#define SH_TP_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "nn/net.h"

/* A candidate pair: layers col .. row (pooling between), its multiply-adds and allreduced
 * bytes per image; split, or why not. */
enum { SH_TP_CAND_SPLIT, SH_TP_CAND_COSTLY, SH_TP_CAND_OVERLAP };
typedef struct {
    int col, row;
    int col_conv, row_conv;  /* [convolutional] (else [connected]) */
    double macs, nbytes;
    int why, other;          /* SH_TP_CAND_OVERLAP: the split candidate it overlaps */
} sh_tp_cand;

typedef struct {
    int T, nlayers;
    unsigned char *roles;    /* [nlayers] SH_TP_COLUMN / SH_TP_ROW of the split pairs, else 0 */
    int *outputs;            /* [nlayers] the whole layers' outputs (C*H*W) */
    int *units;              /* [nlayers] their outputs (connected) or filters (conv): the rows
                                of their weights, and of a split layer, what is split */
    size_t *whole_off, *whole_count; /* [nlayers] each layer's slice of the whole model */
    size_t nparams_whole;
    sh_tp_cand *cands;       /* [ncands] the candidate pairs, in layer order */
    int ncands;
} sh_tp_plan;

/* Every layer's figures from plan (any part of the net: every layer's shape is known); no
 * pair chosen yet (hybrid parallelism fills roles its own way: mp/hybrid.c).
 * sh_tp_plan_fini frees it (also after a failed init). */
shoal_result sh_tp_plan_init(sh_tp_plan *pl, const sh_net *plan, int T);
void sh_tp_plan_fini(sh_tp_plan *pl);

/* Choose the pairs of layers [lo, hi) (a pipeline stage; the whole net: 0, nlayers): every
 * pair sh_net_tp_pair_end accepts inside [lo, hi) is a candidate; per image it does F
 * multiply-adds and allreduces B bytes (the row layer's output, and the column layer's input
 * gradient unless it is layer 0 of the net: a stage's first layer's input gradient is summed
 * too, it goes back to the stage before). It is worth splitting when F > 8 B (a core's
 * multiply-adds per byte of allreduce); among the worth ones a dynamic programme over the
 * chain takes the non-overlapping set of the largest total F - 8 B (ties: fewer bytes, then
 * the pair starting later). *npairs: how many were split. Fails only for memory. */
shoal_result sh_tp_plan_choose(sh_tp_plan *pl, const sh_net *plan, int lo, int hi, int *npairs);

/* SHOAL_ERR_INVALID with one line (layout: the flags, e.g. "--tensor-parallel 2"; stages: 1
 * for one net, else "no stage of") when no pair was split: none could be, or none is worth
 * its bytes; else SHOAL_OK. */
shoal_result sh_tp_plan_refuse(const sh_tp_plan *pl, const sh_net *plan, const char *layout, int stages);

/* The pairs of layers [lo, hi): one line each, split ("<indent>layers 0 (32 outputs, 16 per
 * rank, by output columns) + 1 (...): ...") or why not. */
void sh_tp_plan_describe(const sh_tp_plan *pl, int lo, int hi, const char *indent, FILE *out);

/* net's layers (sh_net_part's [lo, hi); rank t of T's shares) between a block laid out as its
 * parameters (`mine`) and one laid out as the whole model's (`whole`). A column share is rows
 * [t k, (t+1) k) of W (K, I) and those biases; a row share columns [t i, (t+1) i) of W (its
 * channels of every filter, or a connected layer's inputs from those channels), its biases
 * whole. to_whole: write this rank's shares there (values every rank holds whole, from t = 0
 * only), else read them back. */
void sh_tp_plan_move(const sh_tp_plan *pl, const sh_net *net, int t, float *mine, float *whole, int to_whole);

/* The squared norm of the values of g (laid out as net's parameters) that rank t alone holds
 * among the T: its shares, and with t = 0 the values every rank holds. */
double sh_tp_plan_sum_squares(const sh_tp_plan *pl, const sh_net *net, int t, const float *g);

#endif
