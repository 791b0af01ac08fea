/* pipeline_job.h — a plain pipeline's rank job (--pipeline S: mp/pipeline.c) as the
 * pipeline tests run it, as a static function over check.h's counters (each test binary
 * counts its CHECKs as its own): every rank trains its stage with the real trainer, then
 * compares its parameters, the test accuracy and the loss with one process trained on the
 * whole batch.
 * Not here: the nets and layouts each test runs, the checks themselves (layout_checks.h).
 * Used by tests/train/test_pipeline.c and test_pipeline_links.c. */
#ifndef SH_TEST_PIPELINE_JOB_H
#define SH_TEST_PIPELINE_JOB_H

#include "check.h"
#include "lib/layout.h"
#include "lib/layout_checks.h"
#include "shoal/comm.h"
#include "train/mp/pipeline.h"

/* What the job trains: every run has a global batch of 16 images, seed 7, the data in
 * sh_test_pipe_data_dir (set by the test before it runs the job). */
enum { SH_TEST_PIPE_BATCH = 16 };
static const char *sh_test_pipe_data_dir;

typedef struct {
    const char *cfg;
    int stages, micro;
    int64_t steps;
    const char *resume, *save; /* NULL: none */
    const char *weights;       /* start from it (and so does the one process compared) */
    const char *dn;            /* write Darknet's file here and a checkpoint at DN.ckpt */
} sh_test_pipe_arg;

/* RUN_RANKS(n, &o, sh_test_pipe_exact_job, &arg): the replicas are n / stages, each with its
 * share of the batch. Every rank trains its stage (after a save: nothing more, the resume
 * compares), then holds its layers' parameters, fewer than the whole net's, within 1e-5 of
 * one process's and (micro-batches split) not bitwise, and reports one process's figures;
 * with dn, the Darknet file holds the whole model. */
static void sh_test_pipe_exact_job(shoal_comm *c, void *arg)
{
    const sh_test_pipe_arg *a = arg;
    int r = shoal_comm_rank(c), replicas = shoal_comm_world(c) / a->stages;
    sh_pipe_opts po = {a->cfg, a->stages, a->micro, SH_TEST_PIPE_BATCH / replicas, 7};
    sh_strategy *st = NULL;
    sh_net *net = NULL;
    CHECK(sh_strategy_pipeline_create(c, &po, &st, &net) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!st) return;
    sh_train_opts o, ro;
    sh_test_train_opts(&o, a->cfg, sh_test_pipe_data_dir, SH_TEST_PIPE_BATCH / replicas, a->steps, 7);
    o.strategy = st;
    sh_test_rank_run run = {.files = {a->resume, a->save, a->weights, a->dn}};
    if (!check_rank_trains(c, &o, net, &run)) goto done;
    sh_test_train_opts(&ro, a->cfg, sh_test_pipe_data_dir, SH_TEST_PIPE_BATCH, a->steps, 7);
    ro.weights_path = a->weights;
    check_one_process_trains(&ro, &run);
    if (!run.ref) goto done;
    sh_net *mine = sh_trainer_net(run.t), *whole = sh_trainer_net(run.ref);
    if (a->dn) check_darknet_file_is_whole(r, a->cfg, a->dn, run.ckpt, whole); /* the stages gathered */
    int lo, hi;
    sh_net_part(mine, &lo, &hi);
    double rel = check_stage_holds_its_layers(r, mine, whole);
    CHECK(sh_net_nparams(mine) < sh_net_nparams(whole), "rank %d holds all %zu parameters", r,
          sh_net_nparams(whole));
    CHECK(rel < 1e-5, "rank %d (stage %d, layers %d-%d of %s): %.3g relative to one process after %lld steps", r,
          r % a->stages, lo, hi - 1, a->cfg, rel, (long long)a->steps);
    CHECK(rel > 0 || a->micro == 1 || sh_net_nparams(mine) == 0,
          "rank %d: bitwise equal to one process: were the micro-batches split?", r);
    check_reports_match(r, replicas, &run.rep, &run.rr);
done:
    sh_test_rank_run_fini(&run);
    sh_strategy_destroy(st);
}

#endif
