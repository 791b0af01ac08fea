/* plan/plan.h — the layout planner behind `shoal plan` and `shoal train --parallel auto`: a
 * model of one training step (each layer's measured forward and backward time, the links'
 * latency and bandwidth, the collectives as coll/select.c runs them) that predicts the
 * images/s of every layout shoal can run on the given hosts and ranks, and picks the best.
 * Not here: running the chosen layout (job.c and the strategies).
 * Proved by tests/train/test_plan.c and tests/cli/test_plan_cli.c. */
#ifndef SH_PLAN_H
#define SH_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "nn/net.h"
#include "shoal/comm.h"
#include "shoal/result.h"

#define SH_PLAN_NSIZES 4 /* batch sizes the layers are timed at: b, b/2, b/4, b/8 */

/* One layer as the model sees it: seconds of forward and backward at the sizes it was timed
 * at (between two of them, the line through both), and a + b m beyond them (fit to b and b/8),
 * its parameters, and its values per image in and out. */
typedef struct {
    double fwd_t[SH_PLAN_NSIZES], bwd_t[SH_PLAN_NSIZES], wgt_t[SH_PLAN_NSIZES]; /* at sizes[] */
    double fwd_a, fwd_b, bwd_a, bwd_b;
    double wgt_a, wgt_b;         /* the part of backward that is dW = dY^T X (a layer that
                                    defers it in a pipeline: sh_net_layer_defers); else 0 */
    size_t nparams;
    size_t inputs, outputs;      /* floats per image */
    int connected;               /* [connected]: sufficient factors are inputs + outputs */
} sh_plan_layer;

/* The codecs the planner weighs for data parallelism. */
enum { SH_PLAN_FP16, SH_PLAN_1BIT, SH_PLAN_TOPK, SH_PLAN_NCODECS };

typedef struct {
    const char *cfg_path;
    int nlayers;
    int batch;                   /* b: images (rows: streams x time steps for a recurrent net) a
                                    replica takes per step (--batch or the cfg's) */
    int time_steps;              /* rows a stream takes per step (1: feed-forward) */
    int threads;                 /* kernel threads a rank ran the measurements with */
    int nsizes;                  /* batch sizes timed (0: the lines a + b m alone) */
    int sizes[SH_PLAN_NSIZES];   /* rows, largest first */
    sh_plan_layer *layer;        /* [nlayers] */
    size_t nparams;
    double optim_s;              /* the optimizer's step over all parameters, seconds */
    double enc_s[SH_PLAN_NCODECS];   /* encoding one value, seconds */
    double dec_s[SH_PLAN_NCODECS];   /* decoding (and summing) one value of one rank's payload */
    sh_net *net;                 /* the net at batch b (owned): shoal's own cuts and pairs */
} sh_plan_model;

/* The cluster: hosts alike, ranks_per_host ranks each on cores cores; shared memory within a
 * host, one link per host across (seconds = alpha + bytes x s_per_byte each way). */
typedef struct {
    int hosts, ranks_per_host, cores;
    int machine_hosts;           /* hosts sharing one machine's cores (an emulated cluster; 0, 1: none) */
    double shm_alpha_s, shm_s_per_byte;
    double net_alpha_s, net_s_per_byte;
    double net_cpu_s_per_byte;   /* CPU a byte costs to send and receive over TCP (measured) */
    char link[48];               /* how the link was given ("1gbit", "probed") */
    char shm[48];                /* how shared memory was found ("measured memcpy", "probed") */
} sh_plan_cluster;

typedef enum { SH_PLAN_DP = 0, SH_PLAN_PIPE, SH_PLAN_HYBRID } sh_plan_kind;

/* A candidate layout and its prediction. */
typedef struct {
    sh_plan_kind kind;
    int S, M, T;                 /* pipeline stages, micro-batches, tensor ranks (1: none) */
    int scheme;                  /* hybrid: sh_hybrid_scheme */
    int codec;                   /* data parallel: -1 none, else SH_PLAN_FP16 ... */
    int sfb;
    char flags[96];              /* as shoal train takes them: "--pipeline 2 --micro-batches 4" */
    char name[64];               /* "pipeline 2 x 4 micro-batches" */
    int ok;                      /* 0: cannot run; why says so */
    char why[96];
    double step_s, compute_s, comm_s, bubble_s; /* exposed communication; the bubble's idle */
    double images_per_step, images_per_s;
} sh_plan_layout;

/* ---- the model's parts (plan/cost.c): pure functions of the cluster and the model ---- */

/* Seconds of an allreduce of nbytes over h hosts x r ranks as coll/select.c runs it: recursive
 * doubling up to 16 KiB, one host's shared memory (cma), the ring across hosts (recursive
 * doubling for 2 ranks at 64 KiB - 1 MiB), the hierarchical one with several ranks a host. */
double sh_plan_allreduce_s(const sh_plan_cluster *c, double nbytes, int h, int r);
/* Seconds for every rank of h x r to send per_rank bytes spread evenly over the others (an
 * allgather, alltoall or reduce-scatter's traffic): a host's link carries its r ranks' share
 * bound for other hosts. steps: the messages in sequence (their latencies add). */
double sh_plan_exchange_s(const sh_plan_cluster *c, double per_rank, int h, int r, int steps);
/* One message of nbytes between two ranks, same host or not. */
double sh_plan_p2p_s(const sh_plan_cluster *c, double nbytes, int same_host);
/* CPU seconds a rank's network stack takes for bytes it sends across hosts (and as many it
 * receives), on cores its compute already fills (0 when the host has cores to spare). */
double sh_plan_net_cpu_s(const sh_plan_cluster *c, int threads, double bytes);
/* Compute is slowed when a host's ranks want more threads than it has cores (its share of
 * the machine's when machine_hosts share one). */
double sh_plan_cpu_share(const sh_plan_cluster *c, int threads);

/* Part of layer l at m images, seconds on a rank of its own: 0 forward, 1 backward, 2 the dW
 * within backward a pipeline defers. */
double sh_plan_part_s(const sh_plan_model *m, int l, int part, double images);
/* Layer l's forward + backward seconds at m images on one rank (the cpu share applied). */
double sh_plan_layer_s(const sh_plan_model *m, const sh_plan_cluster *c, int l, double images);

/* The prediction of layout L (kind, S, M, T, scheme, codec, sfb set) into L: ok, step,
 * parts, images/s. Uses shoal's own planners on m->net for cuts and split pairs. */
void sh_plan_predict(const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_layout *L);

/* ---- measuring (plan/measure.c) ---- */

/* Build the model of cfg_path at batch (0: the cfg's) with threads kernel threads (0: a rank's
 * share of this host's CPUs for ranks_per_host ranks): every layer timed at two batch sizes,
 * the optimizer and codecs timed. Errors: the cfg's. */
shoal_result sh_plan_model_measure(const char *cfg_path, int batch, int threads, int ranks_per_host,
                                   sh_plan_model *out);
void sh_plan_model_fini(sh_plan_model *m);

/* The cluster of `shoal plan`: link "1gbit", "10gbit", or a rate "2.5gbit", "800mbit",
 * "300MB/s" (SHOAL_ERR_INVALID naming the value otherwise), latency_us (< 0: 50), shared
 * memory from a memcpy measurement (or SHOAL_PLAN_SHM_MBS). */
shoal_result sh_plan_cluster_for_link(int hosts, int ranks_per_host, const char *link, double latency_us,
                                      sh_plan_cluster *out);
/* The cluster the job's communicator runs on, probed: allreduces of two sizes within a host
 * and across hosts (collective; SHOAL_PLAN_NET_MBS / SHOAL_PLAN_SHM_MBS override). */
shoal_result sh_plan_cluster_probe(shoal_comm *comm, sh_plan_cluster *out);

/* ---- choosing (plan/choose.c) ---- */

#define SH_PLAN_MAX_LAYOUTS 96

typedef struct {
    int n;
    sh_plan_layout l[SH_PLAN_MAX_LAYOUTS]; /* the runnable ones first, best first */
    int best;                               /* index of the choice; -1: none runs */
} sh_plan_list;

/* Every layout for the cluster's ranks, predicted and sorted. */
void sh_plan_enumerate(const sh_plan_model *m, const sh_plan_cluster *c, sh_plan_list *out);
/* The table: what was measured, one line per layout, the choice. */
void sh_plan_print(const sh_plan_model *m, const sh_plan_cluster *c, const sh_plan_list *list, FILE *out);
/* The same as one JSON object. */
void sh_plan_print_json(const sh_plan_model *m, const sh_plan_cluster *c, const sh_plan_list *list, FILE *out);

#endif
