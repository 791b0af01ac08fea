/* atomic_file.h — files written whole or not at all: a temporary beside the destination with
 * a random name, created O_EXCL (never through a planted link), renamed over it once complete.
 * Not here: what goes in the file (checkpoint.c, darknet_weights.c, ...).
 * Proved by tests/base/test_atomic_file.c. */
#ifndef SH_ATOMIC_FILE_H
#define SH_ATOMIC_FILE_H

#include <limits.h>
#include <stddef.h>
#include "shoal/result.h"

typedef struct {
    int fd;                 /* open for writing; -1 once committed or aborted */
    int slot;               /* in the table of pending temporaries (for signal handlers) */
    char tmp[PATH_MAX];     /* PATH.tmp.XXXXXX */
    char path[PATH_MAX];    /* the destination */
} sh_atomic_file;

/* Create PATH.tmp.XXXXXX (random, O_EXCL: an existing file or link there is never written
 * through) with mode 0666 less the umask. `what` names the file in errors ("checkpoint").
 * Errors: SHOAL_ERR_INVALID (path too long), SHOAL_ERR_IO (the directory is missing or not
 * writable: the message says which). */
shoal_result sh_atomic_open(sh_atomic_file *f, const char *path, const char *what);
/* Write all of data; SHOAL_ERR_IO naming the temporary on failure (a full disk, a file-size
 * limit: SIGXFSZ must be ignored by the program for the latter to come back as EFBIG). */
shoal_result sh_atomic_write(sh_atomic_file *f, const void *data, size_t nbytes);
/* fsync, close, rename over the destination (a link at the destination is replaced, not
 * followed), fsync the directory. On failure the temporary is removed. */
shoal_result sh_atomic_commit(sh_atomic_file *f);
/* Close and remove the temporary; safe to call after commit or twice. */
void sh_atomic_abort(sh_atomic_file *f);
/* Async-signal-safe: remove every temporary still pending in this process (for a signal
 * handler about to _exit, so that an interrupted save leaves nothing behind). */
void sh_atomic_unlink_pending(void);

/* Whether a file could be written at path now, checked before a long run starts: path is
 * not a directory and a temporary can be created beside it (made and removed at once). */
shoal_result sh_atomic_check_writable(const char *path, const char *what);

#endif
