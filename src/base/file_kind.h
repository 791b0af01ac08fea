/* file_kind.h — what a path names, before anything opens it: a FIFO, a directory or a device
 * given where a file is read is refused in one line instead of blocking in open() or failing
 * later with a misleading reason.
 * Not here: reading the files (their loaders). Proved by tests/base/test_file_kind.c. */
#ifndef SH_FILE_KIND_H
#define SH_FILE_KIND_H

#include "shoal/result.h"

/* "a directory", "a FIFO (named pipe)", "a character device", "a block device", "a socket";
 * NULL for a regular file or a path that names nothing (stat follows links). */
const char *sh_file_kind_words(const char *path);

/* SHOAL_OK when path is a regular file or names nothing (the opener then says it is missing);
 * else SHOAL_ERR_INVALID: "WHAT PATH is a directory, not a file; give HINT". Never opens
 * path, so a FIFO cannot block. */
shoal_result sh_file_check_regular(const char *path, const char *what, const char *hint);

/* The same for data, which may also be a directory: "WHAT PATH is a FIFO (named pipe), not a
 * dataset directory or a file; give ...". */
shoal_result sh_file_check_data(const char *path, const char *what);

#endif
