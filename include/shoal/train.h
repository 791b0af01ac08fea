/* train.h — a training job, the one `shoal train` runs: a model from a .cfg trained on an
 * IDX or CIFAR-10 dataset directory, alone or as one rank of a job its launcher started
 * (shoal launch, mpirun, srun: ranks come from the environment), data parallel or with
 * parameter servers; checkpoints, resume, evaluation.
 * Not here: the network on its own (net.h), collectives (comm.h).
 * Proved by tests/train/test_api.c and examples/train_lenet.c (built and run by it). */
#ifndef SHOAL_TRAIN_H
#define SHOAL_TRAIN_H

#include <stdint.h>
#include "shoal/result.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the ranks of a launched job divide the work (ignored by a process run alone). */
typedef enum {
    SHOAL_TRAIN_DATA_PARALLEL = 0, /* every rank a replica; gradients averaged by allreduce */
    SHOAL_TRAIN_PARAM_SERVER,      /* the first nservers ranks serve, the others train */
} shoal_train_layout;

typedef struct {
    const char *cfg_path;       /* the model (required) */
    const char *data_dir;       /* NULL: SHOAL_DATA_DIR */
    int epochs;                 /* 0: the cfg's max_batches steps, or 1 epoch */
    int64_t max_steps;          /* > 0: stop once this many steps are done in total */
    int batch;                  /* images per step; 0: the cfg's */
    int threads;                /* kernel threads per rank; 0: SHOAL_THREADS, else the CPUs
                                   this process may run on shared by the ranks on its host */
    uint64_t seed;              /* weights, shuffling and dropout */
    const char *save_path;      /* checkpoint at the end (and every save_every_steps); NULL: none */
    int64_t save_every_steps;   /* 0: only at the end */
    const char *resume_path;    /* continue exactly where that checkpoint stopped; NULL: none */
    const char *logdir;         /* TensorBoard event files; NULL: none */
    int quiet;                  /* 1: no progress lines (on stdout, from rank 0) */
    shoal_train_layout layout;
    int strong_scaling;         /* data parallel: 1 splits the batch across the ranks */
    int lr_linear;              /* data parallel, weak scaling: learning rate x ranks */
    double bucket_mb;           /* data parallel: gradient buckets in MB; 0: 1 */
    int nservers;               /* parameter servers: how many (default 1) */
    const char *consistency;    /* parameter servers: "sync" (default), "async" or "ssp" */
    int staleness;              /* ssp: clocks a worker may run ahead (default 3) */
    int push_every, pull_every; /* async: steps per push and per pull (default 1) */
} shoal_train_opts;

typedef struct {
    int rank, world;            /* this process in the job (0 of 1 alone) */
    const char *role;           /* "alone", "data-parallel rank", "server", "worker" */
    int is_result;              /* 1: the fields below are the job's result (alone, rank 0,
                                   worker 0); other ranks fill what they saw */
    double test_accuracy;       /* fraction in [0, 1] after the last step; < 0: not measured */
    double test_loss, train_loss;
    double images_per_s;        /* steady state, over all ranks */
    double seconds;
    double epochs;
    int64_t steps;              /* done in total, counting those before a resume */
    int threads;                /* kernel threads this rank used */
    char saved_path[1024];      /* the last checkpoint written; "" when none */
} shoal_train_report;

/* Defaults: 1 epoch, seed 1, data parallel, weak scaling, everything else 0 / NULL. */
void shoal_train_opts_default(shoal_train_opts *o);

/* Run this process's part of the training job to the end: alone, or (under a launcher)
 * join the job's communicator and take this rank's role. Blocks for the whole training;
 * every rank of a job must call it with the same options. r may be NULL. Strings in o are
 * borrowed for the call. Not thread-safe (one job per process at a time).
 * Errors: SHOAL_ERR_INVALID (NULL o, no cfg_path, bad options; a dataset that does not fit
 * the model), SHOAL_ERR_IO, SHOAL_ERR_FORMAT (cfg, dataset or checkpoint), SHOAL_ERR_PEER
 * and SHOAL_ERR_TIMEOUT (another rank died or hung; the message names it). */
shoal_result shoal_train_run(const shoal_train_opts *o, shoal_train_report *r);

#ifdef __cplusplus
}
#endif
#endif
