/* train_api.h — what the other public entry points share with shoal_train_run (train_api.c):
 * the public options turned into a job's, checked, and the stop and save requests forgotten.
 * Not here: the public API itself (shoal/train.h).
 * Proved by tests/train/test_api.c and tests/cli/test_pretrain.c (through pretrain_api.c). */
#ifndef SH_TRAIN_API_H
#define SH_TRAIN_API_H

#include "shoal/train.h"
#include "train/job.h"

/* shoal_train_opts_check's checks, and on success the job's options (their strings borrowed
 * from o; the stop and save requests wired to shoal_train_request_stop / _save). */
shoal_result sh_train_api_job(const shoal_train_opts *o, sh_job_opts *j);
/* Forget the requests, as a run's end does. */
void sh_train_api_forget_requests(void);

#endif
