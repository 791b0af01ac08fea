/* plan/auto.h — `shoal train --parallel auto`: the job's layout chosen at start-up from the
 * planner's predictions (plan/plan.h) on the links probed and the layers timed.
 * Not here: the model (plan/cost.c), the candidates (plan/choose.c), the job (job.c).
 * Proved by tests/cli/test_plan_cli.c. */
#ifndef SH_PLAN_AUTO_H
#define SH_PLAN_AUTO_H

#include "shoal/comm.h"
#include "train/job.h"

/* Collective over c: probe, time, and (rank 0) predict, print the table to o->layout_out and
 * broadcast the choice; every rank's o then holds the chosen layout (layout, stages,
 * micro_batches, tensor_ranks, hybrid, codec, sfb). Errors: a probe's or the cfg's; rank 0's
 * failure reaches the others as SHOAL_ERR_PEER. */
shoal_result sh_plan_auto(shoal_comm *c, sh_job_opts *o);

#endif
