/* job.h — a training job as a library: where this process stands (alone, or one rank of a
 * job its launcher started), the layout that gives each rank its role, the batch and
 * learning-rate scaling, and the report.
 * Not here: flags, signals and printing (src/cli/cmd_train.c), the roles (job.c, dp/job_dp.c), the strategies.
 * Proved by tests/cli/test_train_dp.c, test_train_ps.c and tests/train/test_api.c. */
#ifndef SH_JOB_H
#define SH_JOB_H

#include <stdio.h>

#include "train/ps/ps.h"
#include "train/dp/allreduce.h"
#include "train/dp/hogwild.h"
#include "train/dp/quorum.h"
#include "train/mp/hybrid.h"
#include "train/mp/pipeline.h"
#include "train/mp/tensor.h"
#include "train/ps/worker.h"
#include "train/trainer.h"
#include "shoal/train.h"

/* How the ranks divide the work. A new layout is one more value here, one more role below,
 * its case in job.c's plan_role and its row in job.c's trainer_roles. */
typedef enum {
    SH_LAYOUT_DATA_PARALLEL = 0, /* every rank a replica; gradients averaged (allreduce) */
    SH_LAYOUT_PARAM_SERVER,      /* the first nservers ranks serve, the others are workers */
    SH_LAYOUT_PIPELINE,          /* stages of the layers, replicas when ranks > stages */
    SH_LAYOUT_TENSOR,            /* pairs of connected layers split across all ranks */
    SH_LAYOUT_HYBRID,            /* convolutional layers data-, connected model-parallel */
} sh_job_layout;

typedef enum {
    SH_ROLE_ALONE = 0,   /* one process, no communicator */
    SH_ROLE_DP_RANK,     /* a replica of a data-parallel job */
    SH_ROLE_PS_SERVER,   /* holds a shard of the parameters and applies the optimizer */
    SH_ROLE_PS_WORKER,   /* trains on its shard of the data, pulls and pushes */
    SH_ROLE_PIPE_STAGE,  /* one stage of a pipeline replica */
    SH_ROLE_TP_RANK,     /* one share of the split layers */
    SH_ROLE_HYBRID_RANK, /* a share of the batch and of every connected layer */
} sh_job_role;

/* An elastic job's changes of ranks, as the public report has them (shoal/train.h). */
#define SH_ELASTIC_CHANGES_MAX SHOAL_TRAIN_CHANGES_MAX
typedef struct {
    int on;
    int nchanges, ranks_left, ranks_joined;
    double keep_ms;             /* per step, copying the state a change restores */
    shoal_train_change changes[SH_ELASTIC_CHANGES_MAX];
} sh_elastic_report;

typedef struct {
    sh_train_opts train;        /* model, data, steps, checkpoints, hooks; train.strategy
                                   must be NULL (the job chooses it) */
    sh_job_layout layout;
    /* data parallel */
    int strong_scaling;         /* 1: train.batch (or the cfg's) is the global batch, split
                                   across the ranks; 0: every rank trains on it (weak) */
    int lr_linear;              /* weak scaling: learning rate x ranks */
    int elastic_min, elastic_max; /* data parallel: goes on with at least min ranks, takes in
                                   up to max (0: the job's); 0: not elastic (elastic.h) */
    double bucket_mb;           /* gradient buckets; 0: 1 MB */
    /* gradient compression (data parallel; parameter-server workers' pushes): codec NONE
     * and sfb 0 is the float32 exchange */
    shoal_codec_opts codec;
    int sfb;
    /* --hogwild: data-parallel ranks of one host update one shared copy without waiting */
    int hogwild;
    /* --quorum F in (0, 1] (0: off): data parallel or parameter-server sync steps go on with
     * ceil(F ranks) gradients, the late added to the next step */
    double quorum;
    /* parameter servers */
    int nservers;               /* >= 1, fewer than the ranks */
    sh_ps_consistency consistency;
    int staleness;              /* ssp: clocks */
    sh_ps_worker_opts worker;   /* async: push and pull periods */
    FILE *server_log;           /* servers' clock lines; NULL: none */
    /* --timeline: a Chrome trace of steps [timeline_lo, timeline_hi) (hi < 0: to the end),
     * written by rank 0 (timeline.h). NULL: none. */
    const char *timeline_path;
    int64_t timeline_lo, timeline_hi;
    /* pipeline */
    int stages;                 /* S (--pipeline) */
    int micro_batches;          /* M (--micro-batches); 0: S */
    FILE *layout_out;           /* rank 0 prints the layout there at start-up; NULL: not */
    /* tensor parallel */
    int tensor_ranks;           /* T (--tensor-parallel): the job's ranks */
    /* hybrid (--hybrid): how the activities move; train.batch (or the cfg's) is the global
     * batch, shared by the ranks */
    sh_hybrid_scheme hybrid;
    /* The options every rank must share, one line each (train_opts.h: sh_train_opts_agreed):
     * ranks that differ stop at start-up naming the option and both ranks, and a parameter
     * server compares each worker's at its first contact. NULL: only the layout is compared. */
    const char *agreed;
    /* --parallel auto: the layout above is chosen at start-up (plan/auto.c) */
    int parallel_auto;
    /* --solver lbfgs: the batch solver (solver/sandblaster.h) instead of the cfg's optimizer,
     * data-parallel ranks only; lbfgs_history pairs (0: 10) */
    int lbfgs;
    int lbfgs_history;
    /* --logdir: train.logdir is the folder TensorBoard reads, and the run writes its own
     * folder in it, run_name or CFGNAME-YYYYmmdd-HHMMSS (chosen by rank 0; run_files.c). */
    const char *run_name;
    /* Servers' round hook (sh_ps_config.after_round) with train.hook_ctx: fault drills. */
    void (*after_server_round)(void *hook_ctx, int server, int64_t rounds);
} sh_job_opts;

/* Data parallel, weak scaling, 1 MB buckets; servers: 1, sync, staleness 3; the trainer's
 * defaults (sh_train_opts_default). */
void sh_job_opts_default(sh_job_opts *o);

#define SH_JOB_MAX_PROFILED_STAGES 64

typedef struct {
    sh_job_role role;
    int rank, world;            /* in the job (0 of 1 alone) */
    int reporter;               /* 1: train is the job's result (alone, rank 0 of data
                                   parallel, worker 0 of parameter servers) */
    sh_train_report train;      /* this rank's training report (workers and replicas) */
    int has_dp_profile;         /* with train.profile on a data-parallel rank */
    int has_comm_stats;         /* compressed (dp_profile's byte counts and residual) */
    sh_dp_profile dp_profile;
    int has_pipe_profile;       /* with train.profile, on the reporter of a pipeline */
    int pipe_nstages;           /* entries of pipe_profile: replica 0's stages */
    sh_pipe_profile pipe_profile[SH_JOB_MAX_PROFILED_STAGES];
    int has_hybrid_profile;     /* with train.profile or train's report, on hybrid's rank 0 */
    sh_hybrid_profile hybrid_profile;
    int has_server_stats;       /* on a server */
    sh_ps_stats server_stats;
    sh_elastic_report elastic;  /* an elastic job's changes of ranks */
    int has_hogwild;            /* --hogwild, every rank: the job's figures */
    sh_hogwild_stats hogwild;
    int has_quorum;             /* --quorum with data parallelism, every rank */
    sh_quorum_stats quorum;
} sh_job_report;

/* 1 when the launcher's environment says this process is one rank of a multi-rank job. */
int sh_job_is_launched(void);

/* Run this process's part of the job: alone when no launcher started it, else join the
 * communicator, take the layout's role and train (or serve) to the end. Blocks. Errors
 * name the rank ("rank 2: ...") and what to do; r is filled as far as the run got. */
shoal_result sh_job_run(const sh_job_opts *o, sh_job_report *r);

/* The data-parallel row (dp/job_dp.c), for job.c and the elastic run (elastic.c): the strategy
 * and the net at batch images a replica, compression set up (elastic when o->elastic_min > 0);
 * the figures after training; --solver lbfgs's strategy from the job's options (c NULL: alone).
 * The batch a replica gets of train.batch (or the cfg's) under --scaling; the whole net at
 * *batch images (0: the cfg's, written back) for a role that trains or serves all of it. */
shoal_result sh_job_dp_create(const sh_job_opts *o, shoal_comm *c, int batch, sh_strategy **st, sh_net **net);
shoal_result sh_job_dp_finish(const sh_job_opts *o, shoal_comm *c, sh_strategy *st, sh_job_report *r, int *reports);
shoal_result sh_job_dp_lbfgs_create(const sh_job_opts *o, shoal_comm *c, sh_strategy **st);
shoal_result sh_job_replica_batch(const sh_job_opts *o, int replicas, int *batch);
shoal_result sh_job_whole_net(const sh_job_opts *o, int *batch, sh_net **out);
/* An elastic data-parallel job (elastic.c): trains on *c, and after a lost rank or for ranks
 * waiting to join regroups (*c replaced) and goes on from the last step all kept. */
shoal_result sh_elastic_run(const sh_job_opts *o, shoal_comm **c, sh_job_report *r);

/* The compression options fit the layout: --sfb and lowrank need data parallelism.
 * SHOAL_ERR_INVALID with one line otherwise. */
shoal_result sh_job_check_compress(const sh_job_opts *o);

/* "alone", "data-parallel rank", "server", "worker", "pipeline stage", "tensor-parallel rank",
 * "hybrid rank" */
const char *sh_job_role_name(sh_job_role role);

#endif
