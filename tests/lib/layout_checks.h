/* layout_checks.h — the checks the parallel-layout tests (pipeline, tensor, hybrid) make
 * alike, as static functions over check.h's counters, as check.h's own are: each test
 * binary counts them as its own CHECKs, and a failure names the test that ran them.
 * Not here: what is compared and how (reference.h), the runs (each test's rank jobs).
 * Used by tests/train/test_pipeline.c, test_tensor.c and test_hybrid.c. */
#ifndef SH_TEST_LAYOUT_CHECKS_H
#define SH_TEST_LAYOUT_CHECKS_H

#include "check.h"
#include "lib/reference.h"
#include "nn/net.h"

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

#endif
