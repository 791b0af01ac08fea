/* atomic_file.c — files written whole or not at all: random O_EXCL temporaries beside the
 * destination, renamed over it when complete; a table of pending ones for signal handlers.
 * Not here: file formats (checkpoint.c, darknet_weights.c). Proved by tests/base/test_atomic_file.c. */
#include "base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/err.h"

/* Temporaries being written, for sh_atomic_unlink_pending: a slot is claimed before the
 * name is filled and released after the file is renamed or removed. */
#define PENDING_MAX 16
static char pending_name[PENDING_MAX][PATH_MAX];
static volatile sig_atomic_t pending_used[PENDING_MAX];

static int claim_slot(void)
{
    for (int i = 0; i < PENDING_MAX; i++)
        if (__sync_bool_compare_and_swap(&pending_used[i], 0, 1)) return i;
    return -1;
}

static void release_slot(int slot)
{
    if (slot < 0) return;
    __sync_synchronize();
    pending_used[slot] = 0;
}

void sh_atomic_unlink_pending(void)
{
    for (int i = 0; i < PENDING_MAX; i++)
        if (pending_used[i] == 2) unlink(pending_name[i]);
}

shoal_result sh_atomic_open(sh_atomic_file *f, const char *path, const char *what)
{
    f->fd = -1;
    f->slot = -1;
    f->tmp[0] = 0;
    if (!path || !*path) return SH_FAIL(SHOAL_ERR_INVALID, "%s: empty path", what);
    if ((size_t)snprintf(f->path, sizeof f->path, "%s", path) >= sizeof f->path ||
        (size_t)snprintf(f->tmp, sizeof f->tmp, "%s.tmp.XXXXXX", path) >= sizeof f->tmp)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: path %s is too long", what, path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: %s is a directory; give a file name", what, path);
    f->slot = claim_slot();
    if (f->slot >= 0) memcpy(pending_name[f->slot], f->tmp, strlen(f->tmp) + 1);
    mode_t mask = umask(0);
    umask(mask);
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        int err = errno;
        release_slot(f->slot);
        f->slot = -1;
        return SH_FAIL(SHOAL_ERR_IO, "%s: cannot create %s: %s; does the directory exist and is "
                       "it writable?", what, path, strerror(err));
    }
    if (f->slot >= 0) {
        memcpy(pending_name[f->slot], f->tmp, strlen(f->tmp) + 1);
        __sync_synchronize();
        pending_used[f->slot] = 2;
    }
    if (fchmod(f->fd, 0666 & ~mask) != 0) { /* mkostemp makes 0600 */ }
    return SHOAL_OK;
}

shoal_result sh_atomic_write(sh_atomic_file *f, const void *data, size_t nbytes)
{
    const char *p = data;
    while (nbytes > 0) {
        ssize_t w = write(f->fd, p, nbytes > (1u << 30) ? (1u << 30) : nbytes);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int err = w < 0 ? errno : ENOSPC;
            return SH_FAIL(SHOAL_ERR_IO, "cannot write %s: %s (disk full?)", f->tmp, strerror(err));
        }
        p += w;
        nbytes -= (size_t)w;
    }
    return SHOAL_OK;
}

/* fsync the directory holding path, so that the rename itself survives a power cut. */
static shoal_result sync_dir(const char *path)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return SH_FAIL(SHOAL_ERR_IO, "%s: cannot open directory %s to sync it: %s", path, dir,
                       strerror(errno));
    int ok = fsync(fd) == 0 || errno == EINVAL; /* some filesystems cannot sync directories */
    int err = errno;
    close(fd);
    if (!ok)
        return SH_FAIL(SHOAL_ERR_IO, "%s: fsync of directory %s failed: %s", path, dir,
                       strerror(err));
    return SHOAL_OK;
}

shoal_result sh_atomic_commit(sh_atomic_file *f)
{
    shoal_result rc = SHOAL_OK;
    if (fsync(f->fd) != 0)
        rc = SH_FAIL(SHOAL_ERR_IO, "fsync of %s failed: %s", f->tmp, strerror(errno));
    int cerr = close(f->fd);
    f->fd = -1;
    if (rc == SHOAL_OK && cerr != 0)
        rc = SH_FAIL(SHOAL_ERR_IO, "closing %s failed: %s", f->tmp, strerror(errno));
    if (rc == SHOAL_OK && rename(f->tmp, f->path) != 0)
        rc = SH_FAIL(SHOAL_ERR_IO, "rename %s -> %s failed: %s", f->tmp, f->path, strerror(errno));
    if (rc != SHOAL_OK) {
        sh_atomic_abort(f);
        return rc;
    }
    release_slot(f->slot);
    f->slot = -1;
    f->tmp[0] = 0;
    return sync_dir(f->path);
}

void sh_atomic_abort(sh_atomic_file *f)
{
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->tmp[0]) unlink(f->tmp);
    f->tmp[0] = 0;
    release_slot(f->slot);
    f->slot = -1;
}

shoal_result sh_atomic_check_writable(const char *path, const char *what)
{
    sh_atomic_file f;
    SH_TRY(sh_atomic_open(&f, path, what));
    sh_atomic_abort(&f);
    return SHOAL_OK;
}
