/* train_dist.h — `shoal train` across ranks: -n N starts the ranks itself (through the
 * launcher), and a rank of a launched job (shoal launch, mpirun, srun) trains its part:
 * a parameter-server job (--ps) runs servers and workers.
 * Not here: flags (cmd_train.c), the strategies (src/train).
 * Proved by tests/cli/test_train_ps.c. */
#ifndef SH_TRAIN_DIST_H
#define SH_TRAIN_DIST_H

#include "train/ps.h"
#include "train/strategy_allreduce.h"
#include "train/strategy_ps.h"
#include "train/trainer.h"

typedef struct {
    int enabled;        /* --ps */
    int nservers;       /* --servers S (default 1) */
    sh_ps_consistency consistency;
    int staleness;      /* --staleness s (ssp; default 3) */
    sh_ps_worker_opts worker;
    int delay_rank;     /* --debug-delay-rank R: that worker (worker index) sleeps */
    int delay_ms;
    int die_rank;       /* --debug-die-rank R --debug-die-step S: server R dies after S rounds */
    int64_t die_after;
} sh_train_ps_opts;

typedef struct {
    int strong;         /* --scaling strong: the cfg's batch is the global batch */
    int lr_linear;      /* --lr-scaling linear: learning rate x ranks (weak scaling) */
    double bucket_mb;   /* --bucket-mb */
    int die_rank;       /* --debug-die-rank R --debug-die-step S: rank R kills itself */
    int64_t die_step;   /* at step S (fault tests); < 0: never */
} sh_train_dp_opts;

/* Run this rank's part of a data-parallel job; fills r on rank 0 and sets *reporter. */
shoal_result sh_train_dp_rank(const sh_train_opts *o, const sh_train_dp_opts *d, sh_train_report *r,
                              int *reporter);

/* 1 when the environment says this process is one rank of a multi-rank job. */
int sh_train_in_job(void);
/* Run this rank's part of a parameter-server job; fills r on worker 0 and sets *reporter. */
shoal_result sh_train_ps_rank(const sh_train_opts *o, const sh_train_ps_opts *p, sh_train_report *r,
                              int *reporter);

#endif
