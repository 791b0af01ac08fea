/* net_internal.h — what the net's files share (net.c, net_cut.c, net_part.c, net_tensor.c,
 * net_query.c): the network record (struct sh_net) and the one builder every sh_net_create*
 * calls.
 * Not here: the public net API (net.h), the layer record (layer.h).
 * Proved by tests/nn/test_net.c, tests/train/test_pipeline.c and tests/train/test_tensor.c. */
#ifndef SH_NET_INTERNAL_H
#define SH_NET_INTERNAL_H

#include "nn/layer.h"
#include "nn/net.h"

struct sh_net {
    sh_cfg *cfg;
    int own_cfg;
    sh_net_config config;
    int batch;
    sh_shape input;
    int steps;                /* [net] time_steps: rows of a batch are (T, streams) */
    int nlayers;
    int layer_capacity;       /* entries of layers (one per section after [net]) */
    sh_layer *layers;
    int softmax;              /* index of the layer whose output is the network's */
    int cost_layer;           /* a regression's [cost] (the last layer, after another than
                                 [softmax]); -1: none (net_unlabelled.c) */
    const float *target;      /* its targets (nimg, K), borrowed; NULL: the input itself */
    int has_target;           /* sh_net_set_target was called */
    int pretrain;             /* the [rbm] layer this net pretrains (the part's last); -1: none */
    int has_softmax;          /* ... and it is a [softmax]: cross-entropy can train it */
    int nclasses;
    /* The part this net runs (a pipeline stage): layers [lo, hi). Layers outside it are
     * parsed (shapes, costs) but hold no parameters, buffers or time. The whole net: 0,
     * nlayers. */
    int lo, hi;
    size_t part_in_count;     /* C*H*W the part takes: the input, or layer lo-1's output */
    int part_in_consumers;    /* layers of the part that read that input */
    int part_in_sent;         /* that input also crosses the part's end: its gradient comes
                                 filled, and the part's layers add to it */
    size_t scratch_params, scratch_stats; /* largest outside layer: its weights are drawn
                                             there and dropped, keeping the seed's order */
    /* Tensor parallelism: this rank's share of the split layers (sh_net_create_tensor). */
    int tp_rank, tp_ranks;
    const unsigned char *tp_roles; /* [nsections - 1] while parsing; NULL: none */
    shoal_result (*sum)(void *ctx, float *buf, size_t count);
    void *sum_ctx;
    void (*update)(void *ctx, size_t offset, const float *g, size_t count); /* sh_net_set_update */
    void *update_ctx;

    size_t nparams, nstats;
    float *params, *grads, *stats;
    int foreign_blocks;       /* params and grads belong to the caller (sh_net_use_blocks) */
    int foreign_stats;        /* stats belong to the caller (sh_net_use_stats) */
    sh_param_range *ranges;
    int nranges;

    float *arena;             /* outputs, deltas, kept values of every layer */
    float *state;             /* recurrent layers' state carried between batches */
    size_t nstate;
    float *input_delta;       /* (N, input) */
    int want_input_delta;
    /* sh_net_set_before_forward: called before each layer with parameters runs forward */
    shoal_result (*before_forward)(void *ctx, int layer);
    void *before_forward_ctx;
    int grad_rows;            /* sh_net_set_grad_rows: rows a block, 0: whole layers */
    int *zero_before_backward; /* [nlayers]: 1 when several layers add into its delta */
    int *zero_at;             /* [nlayers]: a pooled delta several layers add into is zeroed
                                 before this layer's backward; -1: not */
    size_t arena_count;       /* floats of the arena */

    int nthreads;
    sh_pool *pool;
    size_t ws_count;          /* per thread */
    float *work_block;        /* nthreads * ws_count */
    float *partial_block;     /* (nslots - 1) * partial_count */
    size_t partial_count;     /* floats a slot: the largest layer's reduce_count */
    int nslots;               /* partial-gradient slots: 1, or 2 per thread */
    float **grad_ptrs, **work_ptrs;

    float *packed;            /* owned: packed weights of the part's whole [connected] layers
                                 (sh_net_keep_packed); NULL: none or lent (sh_net_share_packed) */
    sh_rng rng;               /* dropout */
    sh_exec exec;
    const float *x;
    int nimg, training;
    int have_loss;
};
/* 1 (default): deltas share buffers by liveness; 0: one delta per layer (tests compare). */
extern int sh_net_pool_deltas;

/* Build a net (net.c): the whole of it (lo = 0, hi = -1) or layers [lo, hi) (a pipeline
 * stage), and with tp_roles (NULL: none) this rank's share of the tensor-parallel pairs;
 * time_steps > 0 overrides [net] time_steps. Every sh_net_create* is one call of this. */
shoal_result sh_net_build(sh_cfg *cfg, int batch, int time_steps, uint64_t seed, int lo, int hi,
                          int tp_rank, int tp_ranks, const unsigned char *tp_roles, sh_net **out);

/* The unlabelled losses (net_unlabelled.c): a regression's against its targets, or the
 * pretrained [rbm]'s; backward of a pretraining net (only its [rbm]'s CD gradient). */
float sh_net_loss_unlabelled(sh_net *n);
shoal_result sh_net_backward_pretrain(sh_net *n, sh_grad_ready_fn ready, void *ctx);

/* Point the exec record at the net's blocks, pool and last pass (net.c). */
void sh_net_fill_exec(sh_net *n);

/* Set the part [lo, hi) (hi < 0: to the end) once the layers are parsed (net_cut.c):
 * SHOAL_ERR_INVALID naming the layer when the net cannot be cut before lo. */
shoal_result sh_net_check_part(sh_net *n, int lo, int hi);

#endif
