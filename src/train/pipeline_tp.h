/* pipeline_tp.h — a pipeline stage split across T tensor-parallel ranks (--pipeline S
 * --tensor-parallel T): the Megatron-LM pairs of [connected] layers planned inside each
 * stage (never across a cut), and each rank's shares of its stage placed in the whole
 * model's blocks (checkpoints, --weights, --save-darknet stay layout-independent).
 * Not here: the schedule and the links (strategy_pipeline.c), the split layers' math
 * (src/nn/layer_dense.c), tensor parallelism alone (strategy_tensor.c).
 * Proved by tests/train/test_pipeline_tp.c. */
#ifndef SH_PIPELINE_TP_H
#define SH_PIPELINE_TP_H

#include <stddef.h>

#include "nn/net.h"

/* roles[0..nlayers): SH_TP_COLUMN / SH_TP_ROW for the pairs sh_net_tp_pair_ok accepts for T
 * ranks, taken greedily from each stage's first layer, both layers of a pair inside stage k's
 * [cuts[k], cuts[k+1]); pairs[k]: stage k's pair count (0: its layers run whole on each of its
 * T ranks). plan: any part of the net (every layer's shape is known). SHOAL_ERR_INVALID with
 * one line naming the cfg and what to do when no stage has a pair. */
shoal_result sh_pipetp_plan(const sh_net *plan, const int *cuts, int S, int T, unsigned char *roles, int *pairs);

/* Layers [lo, hi) of net (rank t of T's share of a stage) between a block laid out as its
 * parameters (`mine`) and one laid out as the whole model's (`whole`; layer i at whole_off[i]).
 * to_whole: write this rank's shares there (values every rank of the stage holds, from t = 0
 * only), else read them back. */
void sh_pipetp_move(const sh_net *net, const unsigned char *roles, const size_t *whole_off, int t, int T,
                    float *mine, float *whole, int to_whole);

/* The squared norm of the values of g (laid out as net's parameters) that this rank alone
 * holds among the stage's T: its shares, and with t = 0 the values every rank holds. */
double sh_pipetp_sum_squares(const sh_net *net, const unsigned char *roles, int t, const float *g);

#endif
