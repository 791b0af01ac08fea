/* mp/mp.h — what the model-parallel strategies (pipeline, tensor, hybrid) share: their frame
 * (create, leads, destroy), the whole model's sums for checkpoints, their data-parallel group's
 * compressed exchange with its per-rank state, and the shares stepping themselves in backward.
 * Not here: each layout (mp/pipeline.c, tensor.c, hybrid.c); the exchange (dp/compress.c).
 * Proved by tests/train/test_pipeline.c, test_tensor.c, test_hybrid.c, tests/cli/test_train_compress.c. */
#ifndef SH_MP_H
#define SH_MP_H

#include "shoal/comm.h"
#include "train/dp/compress.h"
#include "train/ps/layout.h"
#include "train/ps/ps.h"
#include "train/strategy.h"

/* --ps over model-parallel replicas: the servers hold this rank's part (mp/mp.c). */
typedef struct sh_mp_servers sh_mp_servers;

/* The first member of every model-parallel strategy's impl, where the helpers find it. */
typedef struct {
    shoal_comm *c;            /* the job's (borrowed) */
    void (*fini)(void *impl); /* the layout's own teardown (sh_mp_destroy calls it) */
    shoal_codec_opts codec;   /* the data-parallel group's exchange; SHOAL_CODEC_NONE: float32 */
    sh_gradx *gx;             /* that exchange, compressed, once attached; else NULL */
    float gx_lr;              /* the step's rate where the exchange applies the update */
    int fuse;                 /* the shares step themselves in backward (sh_mp_fuse) */
    sh_net *fuse_owner;       /* whose parameter block they step, from fuse_base on */
    size_t fuse_base;
    sh_model_part part;       /* checkpoints: the whole model from the parts */
    sh_mp_servers *srv;       /* --ps: the servers hold the parts; NULL: the replicas average them */
} sh_mp;

/* The strategy and its impl (impl_nbytes zeroed bytes, an sh_mp first) over the job's
 * communicator c: job_rank and job_world are c's, the part is summed over c, and rank 0 of c
 * contributes and carries the scalars (a layout sets what differs). fini(impl) frees what
 * the layout adds (NULL pointers in it included). */
shoal_result sh_mp_create(shoal_comm *c, const sh_strategy_ops *ops, size_t impl_nbytes, void (*fini)(void *impl),
                          sh_strategy **out);
sh_mp *sh_mp_of(const sh_strategy *s);

/* Hooks for the layouts' ops tables. */
void sh_mp_destroy(sh_strategy *s);                     /* the exchange first (its thread uses the
                                                           group), then fini, then both */
int sh_mp_leads(const sh_strategy *s);                  /* rank 0 of the job */
shoal_result sh_mp_begin(sh_strategy *s, int64_t step); /* the step's rate where it updates */
size_t sh_mp_rank_state_count(const sh_strategy *s);    /* the exchange's residuals: 0 without */
void sh_mp_rank_state_get(sh_strategy *s, float *out);
void sh_mp_rank_state_set(sh_strategy *s, const float *in);
int sh_mp_comm_stats(const sh_strategy *s, double *wire_nbytes, double *dense_nbytes, double *residual_norm);

/* Before attach (job.c): the codec of the data-parallel group's exchange. */
void sh_mp_compress(sh_strategy *s, const shoal_codec_opts *codec);
/* In attach: the compressed exchange of net's gradients (every layer of net) over group,
 * summed (sum = 1) or averaged; nothing when the codec is none or group is NULL. With
 * momentum correction the strategy applies the update. Collective over group. */
shoal_result sh_mp_attach_group(sh_strategy *s, shoal_comm *group, sh_net *net, int sum);
/* In finish, after sh_mp_attach_group made an exchange: net's gradient block exchanged (its
 * first parameters are those of attach's net), and the update where the exchange applies it. */
shoal_result sh_mp_finish_group(sh_strategy *s, sh_net *net);
/* In attach: where the layout allows it (one pass over the batch, no replicas' sum first)
 * and nothing else reads the whole gradient (no exchange, no logged norm), the shares of net
 * step themselves as backward makes each block of their gradients (sh_net_set_update), in
 * owner's parameter block from base on; the strategy then applies the update, finish steps
 * the rest (sh_net_step_unfused). */
void sh_mp_fuse(sh_strategy *s, int allowed, sh_net *net, sh_net *owner, size_t base);

/* --ps over replicas of this layout (DistBelief): before attach (job.c), the servers that
 * hold this rank's part, its place in their vector l (moved in: l is left empty) and whether
 * it gives the part's first weights (replica 0's rank). The layout runs on the workers'
 * communicator `workers`, which it now owns; job is the job's (servers first), borrowed.
 * From then on each step pulls the part before it (sh_mp_begin) and pushes its gradients
 * instead of the replicas' average (sh_mp_servers_push); the servers apply the optimizer. */
shoal_result sh_mp_servers_create(sh_strategy *s, shoal_comm *job, shoal_comm *workers, const sh_ps_config *cfg,
                                  sh_ps_layout *l, int contributes);
/* In attach: the servers' first weights (collective over the job), then this part's pull. */
shoal_result sh_mp_servers_attach(sh_strategy *s, sh_net *net);
/* In finish: this part's gradients to the servers. */
shoal_result sh_mp_servers_push(sh_strategy *s);
/* After the last step (the ops' end): the servers' last weights, for the final evaluation
 * and checkpoint. Nothing without servers. */
shoal_result sh_mp_end(sh_strategy *s);
/* After training: goodbye to the servers, waiting for their answer. */
shoal_result sh_mp_servers_close(sh_strategy *s);

#endif
