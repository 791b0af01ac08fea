/* dp/allreduce.h — synchronous data parallelism (Horovod, Baidu's ring-allreduce,
 * OSU-Caffe): see dp/allreduce.c.
 * Not here: the communicator (shoal/comm.h). Proved by tests/train/test_dp.c. */
#ifndef SH_STRATEGY_ALLREDUCE_H
#define SH_STRATEGY_ALLREDUCE_H

#include "shoal/comm.h"
#include "train/dp/compress.h"
#include "train/strategy.h"

typedef struct {
    double bucket_mb;  /* gradient bucket size; 0: 1 MiB (bench/dp/buckets.sh) */
    int batch;         /* this rank's batch, checked equal on every rank at attach */
} sh_dp_opts;

/* Time spent per step, summed since the start (for --profile). */
typedef struct {
    double wait_s;     /* finish() waiting for allreduces still running after backward */
    double comm_s;     /* wall time the allreduces were in flight (start to completion seen) */
    int64_t steps;
    double bytes;      /* gradient bytes reduced */
    double updated;    /* parameters this rank's optimizer stepped (with the update split
                          across ranks, about 1/ranks of them) */
    int shared_weights; /* 1: one copy of the weights in a shared window (SHOAL_DP_WINDOW) */
    /* with compression (--compress, --sfb); the byte counts are per step */
    int compressed;
    double wire_nbytes;   /* bytes this rank sent per step by the algorithms' count */
    double dense_nbytes;  /* what the float32 ring allreduce would have sent */
    double residual_norm; /* error-feedback residuals after the last step */
    int sfb_layers;
    /* steps whose exchange was still on the wire when the next forward began (its first
     * layer with parameters checked: the overlap with the next forward happened) */
    int64_t overlapped_steps;
    /* chunks whose exchange started before backward had finished their layers (a connected
     * layer's rows offered in blocks, SHOAL_DP_GRAD_ROWS) */
    int64_t early_chunks;
} sh_dp_profile;

/* Every rank of c trains the same model (cfg hash, parameter count) with the same batch:
 * SHOAL_ERR_MISMATCH naming the first rank that differs and in what. Collective. */
shoal_result sh_dp_check_same(shoal_comm *c, sh_net *net, int batch);

/* A data-parallel strategy over c: every rank starts from rank 0's weights; gradients are
 * averaged in buckets (last layers first) whose non-blocking allreduces start as soon as
 * backward has produced them. c is borrowed. */
shoal_result sh_strategy_allreduce_create(shoal_comm *c, const sh_dp_opts *o, sh_strategy **out);
void sh_strategy_allreduce_profile(const sh_strategy *s, sh_dp_profile *out);
/* Before attach: compressed gradients (dp/compress.h). A codec other than none, or sfb,
 * replaces the bucketed float32 allreduce by sh_gradx_reduce after backward, and the
 * optimizer then runs on every rank over every parameter. model (the .cfg, for messages)
 * is borrowed. */
void sh_strategy_allreduce_compress(sh_strategy *s, const shoal_codec_opts *codec, int sfb, const char *model);
/* Before attach, for an elastic job (src/train/elastic.c): every rank keeps the whole model
 * and optimizer state and updates all of it (no split update, no shared window, no exchange
 * left in flight), so that any rank that remains holds all of it. */
void sh_strategy_allreduce_elastic(sh_strategy *s);

#endif
