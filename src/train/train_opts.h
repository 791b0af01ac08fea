/* train_opts.h — what train_opts.c tells the job about the options besides setting them:
 * which ones every rank of a job must share, in words the ranks compare.
 * Not here: setting options (include/shoal/train.h). Proved by tests/train/test_train_opts.c. */
#ifndef SH_TRAIN_OPTS_H
#define SH_TRAIN_OPTS_H

#include <stddef.h>

#include "shoal/train.h"

/* One line per option the ranks must share, in the table's order, each ending in '\n':
 * "--compress 1bit", "--consistency sync (the default)", "no --pipeline", "--save (given)"
 * (a path each machine may name its own way: only whether it is given is compared). Two
 * ranks started alike write the same text. SHOAL_ERR_INTERNAL when nbytes is too small
 * (SH_TRAIN_AGREED_NBYTES is enough). */
#define SH_TRAIN_AGREED_NBYTES 8192
shoal_result sh_train_opts_agreed(const shoal_train_opts *o, char *buf, size_t nbytes);

/* Row i's mark: 1 every rank the same value, 2 given on all or none, 3 a rank's own, 0 a
 * row that says nothing (compared, as 1); -1 past the last row. */
int sh_train_opts_agree_kind(size_t i);

#endif
