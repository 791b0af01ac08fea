/* reference.h — the yardstick of the parallel-training tests: one process trained the plain
 * way on the whole batch, how far another run's parameters are from it, and a checkpoint of
 * another layout resumed in one process, and a Darknet file against a checkpoint and it.
 * Not here: the parallel runs (each test's rank jobs), the options (layout.h).
 * Used by tests/train/test_pipeline.c, test_tensor.c and test_hybrid.c. */
#ifndef SH_TEST_REFERENCE_H
#define SH_TEST_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "train/trainer.h"

/* Create a trainer from o and run it: *out is the trainer once created (the caller destroys
 * it, also when the run failed), *rep its report (rep may be NULL). The first error. */
shoal_result sh_test_train_one(const sh_train_opts *o, sh_trainer **out, sh_train_report *rep);

/* One process trained with o for the files it writes (o's save paths, Darknet's too), then
 * destroyed: the first half of a test that crosses layouts. The first error. */
shoal_result sh_test_write_one(const sh_train_opts *o);

/* sqrt(sum (p - q)^2 / sum q^2) over count values: p's distance from q relative to q's size
 * (q all zero: the plain distance). */
double sh_test_rel_diff(const float *p, const float *q, size_t count);

/* The checkpoint ckpt resumed in one process to o->max_steps, against one process trained
 * with o from the start that never stopped (o->resume_path unset): *rel = sh_test_rel_diff
 * of the resumed run's parameters from the other's, *steps_done = where the resumed run
 * ended. Both set only on SHOAL_OK. */
shoal_result sh_test_resume_one(const sh_train_opts *o, const char *ckpt, double *rel,
                                int64_t *steps_done);

/* The Darknet file `weights` and the checkpoint `ckpt` that one run wrote at its end, each
 * read into a one-process net built from cfg: *same = 1 when the file's parameters and
 * statistics are bitwise the checkpoint's (a split layout's checkpoint is its parts
 * gathered), *rel = sh_test_rel_diff of the file's parameters from q (count floats: one
 * process's). Both set only on SHOAL_OK. */
shoal_result sh_test_darknet_against(const char *cfg, const char *weights, const char *ckpt, const float *q,
                                     size_t count, int *same, double *rel);

#endif
