/* mp/tensor.h — tensor parallelism: pairs of [connected] or [convolutional] layers split across
 * T ranks as Megatron-LM (see mp/tensor.c); replicas when there are more ranks than T.
 * Checkpoints hold the whole model (sh_strategy.part): they resume under any layout.
 * Not here: the split layers (src/nn/dense_share.c, layer_conv.c, net_tensor.c), the layout (job.c).
 * Proved by tests/train/test_tensor.c. */
#ifndef SH_STRATEGY_TENSOR_H
#define SH_STRATEGY_TENSOR_H

#include <stdio.h>

#include "nn/net.h"
#include "shoal/comm.h"
#include "train/strategy.h"

typedef struct {
    const char *cfg_path;
    int ranks;          /* T: divides the communicator's world (replicas x T) */
    int batch;          /* images per replica per step (0: the cfg's) */
    uint64_t seed;
} sh_tp_opts;

/* Plans the pairs, builds this rank's share of the net (*net_out, for the trainer; the
 * strategy keeps a borrowed pointer to it for checkpoints) and the strategy. Rank g is
 * share g % T of replica g / T. Collective (splits c when there are replicas). Errors: T
 * does not divide the world, no pair to split (naming the cfg and what to do). */
shoal_result sh_strategy_tensor_create(shoal_comm *c, const sh_tp_opts *o, sh_strategy **out, sh_net **net_out);
/* "tensor parallel: 2 ranks; connected 0 (1024 outputs, 512 per rank) by output columns +
 * connected 1 by input rows; ..." */
void sh_strategy_tensor_describe(const sh_strategy *s, FILE *out);

#endif
