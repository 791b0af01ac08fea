/* mp/hybrid.h — hybrid parallelism (Krizhevsky 2014, "One weird trick"): the layers before
 * the first [connected] data-parallel, the connected ones split by outputs across the ranks,
 * one of three schemes moving the activities between them (see mp/hybrid.c).
 * Not here: the cut and the split layers (src/nn/net_tensor.c, dense_share.c), the layout (job.c).
 * Proved by tests/train/test_hybrid.c. */
#ifndef SH_STRATEGY_HYBRID_H
#define SH_STRATEGY_HYBRID_H

#include <stdio.h>

#include "nn/net.h"
#include "shoal/comm.h"
#include "train/strategy.h"

typedef enum {
    SH_HYBRID_BROADCAST = 1, /* all activities to all (allgather), then the whole batch at once */
    SH_HYBRID_VERTICAL,      /* one rank's activities to all per chunk, the next one's in flight */
    SH_HYBRID_HORIZONTAL,    /* a 1/N share of every rank's activities per chunk, the next in flight */
} sh_hybrid_scheme;

/* "broadcast", "vertical", "horizontal" -> the scheme; SHOAL_ERR_INVALID naming the choices. */
shoal_result sh_hybrid_scheme_parse(const char *s, sh_hybrid_scheme *out);
const char *sh_hybrid_scheme_name(sh_hybrid_scheme scheme);

typedef struct {
    const char *cfg_path;
    sh_hybrid_scheme scheme;
    int batch;          /* the global batch (0: the cfg's); the ranks' shares must be equal */
    uint64_t seed;
} sh_hybrid_opts;

/* Per step, averaged over the training steps so far (--profile, --json). */
typedef struct {
    double sent_nbytes;  /* bytes this rank sent: activities, their gradients, the connected
                            layers' outputs and input gradients, the convolutional gradients
                            (bandwidth-optimal algorithms' counts) */
    double act_nbytes;   /* of which the activities and their gradients */
    double comm_s;       /* seconds in blocking communication and waits */
    double fused_update_s; /* --hybrid broadcast: the shares' optimizer steps inside backward (the
                              kernel threads' summed time over their count) */
    double rest_update_s;  /* and the other parameters' step after the convolutional gradients' sum */
} sh_hybrid_profile;

/* Plans the cut, builds this rank's parts and the net the trainer holds (*net_out: its
 * blocks are this rank's parameters: the convolutional layers whole, its shares of the
 * connected ones) and the strategy. Collective over c (splits it twice). Errors: no
 * [connected] layer, a [connected] with fewer outputs than ranks, a batch the ranks cannot
 * share equally (horizontal: N x N must divide it), naming the cfg and what to do. */
shoal_result sh_strategy_hybrid_create(shoal_comm *c, const sh_hybrid_opts *o, sh_strategy **out, sh_net **net_out);
void sh_strategy_hybrid_profile(const sh_strategy *s, sh_hybrid_profile *out);
/* "hybrid (broadcast): layers 0-3 data-parallel on 4 ranks x 8 images; connected 4 (1024
 * outputs, 256 per rank) ..." */
void sh_strategy_hybrid_describe(const sh_strategy *s, FILE *out);

#endif
