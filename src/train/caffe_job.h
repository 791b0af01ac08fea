/* caffe_job.h — a training job's set-up for a Caffe model (caffe_job.c).
 * Not here: Caffe's files (src/nn/caffe/). Proved by tests/cli/test_caffe_cli.c. */
#ifndef SH_CAFFE_JOB_H
#define SH_CAFFE_JOB_H

#include "shoal/result.h"
#include "train/trainer.h"

/* --solver and --save-caffe fit the model: SHOAL_ERR_INVALID with one line when not. */
shoal_result sh_caffe_job_check(const char *model, const char *solver, const char *save_caffe);
/* Before the job: the solver and the Data layer's shape for the .prototxt reader (process-wide),
 * and the solver's snapshot as t's checkpoints when none were asked for. Nothing for a .cfg. */
void sh_caffe_job_setup(const char *model, const char *solver, const char *data_dir, sh_train_opts *t);

#endif
