/* run_files.h — where a run's files go: the output paths a rank writes checked before step 1,
 * the name a checkpoint nobody named takes (never a file that exists), the folder of the run
 * under --logdir (TensorBoard's logdir/<run-name>), and a second place for a final file whose
 * own path fails.
 * Not here: what the files hold (snapshot.c, tb_events.c), when they are written (trainer.c).
 * Proved by tests/cli/test_train_files.c and tests/train/test_trainer.c. */
#ifndef SH_RUN_FILES_H
#define SH_RUN_FILES_H

#include <stddef.h>

#include "shoal/result.h"
#include "train/trainer.h"

/* Every file this rank will write at the end or on the way (--save and its PATH.worker<k>,
 * --save-darknet, --save-caffe) can be created now: SHOAL_ERR_IO or SHOAL_ERR_INVALID naming
 * the flag and the path otherwise. Creates and removes one temporary per path. */
shoal_result sh_run_files_check(sh_trainer *t);

/* The checkpoint path of a save nobody named (a stop or SIGHUP without --save): CFGNAME.ckpt
 * in the current directory, or the first of CFGNAME-1.ckpt, CFGNAME-2.ckpt, ... that does not
 * exist, chosen once per run by the rank that writes and shared with the others where the
 * strategy agrees (collective then: every rank calls it at the same step). */
shoal_result sh_run_files_unnamed(sh_trainer *t, const char **path);

/* Which file a final save writes (sh_run_files_save). */
typedef enum { SH_RUN_FILE_CKPT, SH_RUN_FILE_DARKNET, SH_RUN_FILE_CAFFE } sh_run_file_kind;

/* Write the final file of this kind to path (every rank calls it: the saves are collective
 * where the strategy's are); where it cannot be written (a full disk, a directory gone, a
 * file-size limit), the same file goes under a free name of its own into the current
 * directory, else /tmp, said in a warning and in *fallback (the message the run ends with,
 * "" when path was written; nbytes of it). Errors: only those that are not about the file
 * (a peer lost, out of memory). */
shoal_result sh_run_files_save(sh_trainer *t, sh_run_file_kind kind, const char *path, char *written,
                               size_t written_nbytes, char *fallback, size_t fallback_nbytes);

/* The folder of this run under a TensorBoard log directory: logdir/run_name, made if missing,
 * else (run_name NULL or "") logdir/CFGNAME-YYYYmmdd-HHMMSS from the local time, with -2, -3,
 * ... after it when that folder exists. An existing run_name is continued (its events
 * appended); warned when resumed is 0. Errors: SHOAL_ERR_IO (the folder cannot be made),
 * SHOAL_ERR_INVALID (a run_name with "/" or "..", a path too long). */
shoal_result sh_run_files_run_dir(const char *logdir, const char *run_name, const char *cfg_path, int resumed,
                                  char *out, size_t out_nbytes);

#endif
