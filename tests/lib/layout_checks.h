/* layout_checks.h — the checks the parallel-layout tests (pipeline, tensor, hybrid) make
 * alike, as static functions over check.h's counters, as check.h's own are: each test
 * binary counts them as its own CHECKs, and a failure names the test that ran them.
 * Not here: what is compared and how (reference.h), the runs (each test's rank jobs).
 * Used by tests/train/test_pipeline.c, test_pipeline_links.c, test_pipeline_tp.c,
 * test_tensor.c and test_hybrid.c. */
#ifndef SH_TEST_LAYOUT_CHECKS_H
#define SH_TEST_LAYOUT_CHECKS_H

#include <math.h>
#include <signal.h>
#include <stdio.h>

#include "check.h"
#include "lib/layout.h"
#include "lib/ranks.h"
#include "lib/reference.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "train/trainer.h"

/* A rank's run of a split layout and its yardstick, one process's run. */
typedef struct {
    sh_test_layout_files files; /* the caller's */
    char ckpt[700];             /* with files.dn: the checkpoint's path */
    sh_trainer *t, *ref;        /* this rank's trainer, one process's (sh_test_rank_run_fini) */
    sh_train_report rep, rr;    /* their reports */
} sh_test_rank_run;

static inline void sh_test_rank_run_fini(sh_test_rank_run *run)
{
    sh_trainer_destroy(run->ref);
    sh_trainer_destroy(run->t);
}

/* A rank's run: o (its strategy set) pointed at run->files (sh_test_layout_files_apply),
 * trained on net into run->t and run->rep, then every rank waited for (the lead's files are
 * written). Returns 1 when the run is to be compared with one process's: it ran, and wrote
 * no checkpoint to resume (files.save: the first half of a checkpoint test, compared after
 * resuming). Two CHECKs. */
static inline int check_rank_trains(shoal_comm *c, sh_train_opts *o, sh_net *net, sh_test_rank_run *run)
{
    sh_test_layout_files_apply(o, &run->files, run->ckpt, sizeof run->ckpt);
    CHECK(sh_trainer_create_with_net(o, net, &run->t) == SHOAL_OK && sh_trainer_run(run->t, &run->rep) == SHOAL_OK,
          "rank %d: %s", shoal_comm_rank(c), shoal_last_error_message());
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
    return run->t && !run->files.save;
}

/* The yardstick: one process trained with ro into run->ref (NULL when it could not be
 * created) and run->rr. Returns run->ref. One CHECK. */
static inline sh_trainer *check_one_process_trains(const sh_train_opts *ro, sh_test_rank_run *run)
{
    CHECK(sh_test_train_one(ro, &run->ref, &run->rr) == SHOAL_OK, "%s", shoal_last_error_message());
    return run->ref;
}

/* A rank's report against one process's: the same test accuracy, and with one replica the
 * same train loss within 1e-4 (a replica's loss is its shard's, as in data parallelism).
 * Two CHECKs. */
static inline void check_reports_match(int rank, int replicas, const sh_train_report *rep, const sh_train_report *rr)
{
    CHECK(fabs(rep->test_accuracy - rr->test_accuracy) < 1e-9, "rank %d: test accuracy %.4f, one process %.4f", rank,
          rep->test_accuracy, rr->test_accuracy);
    CHECK(replicas > 1 || fabs(rep->train_loss - rr->train_loss) < 1e-4 * (1 + rr->train_loss),
          "rank %d: train loss %.6f, one process %.6f", rank, rep->train_loss, rr->train_loss);
}

/* A rank of a job one rank of which dies: the trainer of o (its strategy set) on net runs up
 * to `steps` steps, rank `dying` raising SIGKILL before step `at`; the others stop with
 * SHOAL_ERR_PEER or SHOAL_ERR_TIMEOUT instead of waiting. Returns the error line they stopped
 * with (a static buffer). Two CHECKs. */
static inline const char *check_stops_when_one_dies(shoal_comm *c, sh_train_opts *o, sh_net *net, int64_t steps,
                                                    int dying, int64_t at)
{
    int g = shoal_comm_rank(c);
    sh_trainer *t = NULL;
    CHECK(sh_trainer_create_with_net(o, net, &t) == SHOAL_OK, "%s", shoal_last_error_message());
    shoal_result rc = SHOAL_OK;
    for (int64_t s = 0; t && s < steps && rc == SHOAL_OK; s++) {
        float loss;
        if (g == dying && s == at) raise(SIGKILL);
        rc = sh_train_step(t, s, &loss);
    }
    CHECK(rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT, "rank %d went on: rc %d", g, rc);
    static char msg[1024]; /* the line the step stopped with, not what tearing down may say */
    snprintf(msg, sizeof msg, "%s", shoal_last_error_message());
    sh_trainer_destroy(t);
    return msg;
}

/* A plain pipeline stage (mine, whole layers [lo, hi)) against one process's net `whole`: it
 * holds its layers' parameters, no more, no fewer (one CHECK); returns their sh_test_rel_diff
 * from one process's. */
static inline double check_stage_holds_its_layers(int rank, sh_net *mine, sh_net *whole)
{
    int lo, hi;
    sh_net_part(mine, &lo, &hi);
    size_t off, count, total = 0;
    sh_net_layer_params(whole, lo, &off, &count);
    for (int i = lo; i < hi; i++) {
        size_t o2, c2;
        sh_net_layer_params(whole, i, &o2, &c2);
        total += c2;
    }
    CHECK(sh_net_nparams(mine) == total, "rank %d holds %zu parameters, its layers %d-%d have %zu", rank,
          sh_net_nparams(mine), lo, hi - 1, total);
    return sh_test_rel_diff(sh_net_params(mine), sh_net_params(whole) + off, sh_net_nparams(mine));
}

/* Darknet's file dn and the checkpoint ckpt that rank's run of cfg wrote at its end, against
 * one process's net `whole` trained alike: the file holds the checkpoint's parameters and
 * statistics bitwise (the ranks' parts gathered) and one process's within rounding.
 * Three CHECKs. */
static inline void check_darknet_file_is_whole(int rank, const char *cfg, const char *dn, const char *ckpt,
                                               sh_net *whole)
{
    int same = 0;
    double drel = 1;
    CHECK(sh_test_darknet_against(cfg, dn, ckpt, sh_net_params(whole), sh_net_nparams(whole), &same, &drel) ==
              SHOAL_OK,
          "%s", shoal_last_error_message());
    CHECK(same, "rank %d: %s differs from the checkpoint the same run wrote", rank, dn);
    CHECK(drel < 1e-5, "rank %d: %s is %.3g relative from one process", rank, dn, drel);
}

/* The checkpoint ckpt, written by a split layout halfway, resumed in one process with o to
 * o->max_steps, ends where one process trained with o that never stopped does: at that step,
 * within rounding, and (with sums_differ: the layout adds its sums in another order) not
 * bitwise, which would mean the first half did not run split. what names the layout.
 * Three CHECKs, four with sums_differ; after an error, one. */
static inline void check_resumes_in_one_process(const char *what, const sh_train_opts *o, const char *ckpt,
                                                int sums_differ)
{
    double rel = 0;
    int64_t done = 0;
    shoal_result rc = sh_test_resume_one(o, ckpt, &rel, &done);
    CHECK(rc == SHOAL_OK, "%s", shoal_last_error_message());
    if (rc != SHOAL_OK) return;
    CHECK(done == o->max_steps, "resumed run ended at %lld", (long long)done);
    CHECK(rel < 1e-5, "%s checkpoint resumed in one process: %.3g relative", what, rel);
    if (sums_differ) CHECK(rel > 0, "bitwise equal: did the first half run split?");
}

/* A checkpoint crossing a split layout both ways: one process trained with `half` (its
 * save_path set, max_steps halfway) writes one, which `job` on n_from ranks resumes (its
 * argument from_one); `job` on n_write ranks writes one halfway (its argument `write`) at
 * ckpt, which resumes in one process with ro (check_resumes_in_one_process with what and
 * sums_differ). The jobs' CHECKs, and four or five. */
static inline void check_checkpoints_cross(const char *what, const sh_train_opts *half, sh_test_rank_fn job, int n_from,
                                           void *from_one, int n_write, void *write, const sh_train_opts *ro,
                                           const char *ckpt, int sums_differ)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 120};
    CHECK(sh_test_write_one(half) == SHOAL_OK, "%s", shoal_last_error_message());
    RUN_RANKS(n_from, &o, job, from_one);
    RUN_RANKS(n_write, &o, job, write);
    check_resumes_in_one_process(what, ro, ckpt, sums_differ);
}

#endif
