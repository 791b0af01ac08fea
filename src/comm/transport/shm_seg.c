/* shm_seg.c — making a host's shared segments (the links' and the windows'): the leader
 * creates one of the largest size /dev/shm can hold, reserves it up front and unlinks its
 * name at once; the host's other ranks open it through the leader's descriptor
 * (/proc/<pid>/fd/<fd>); then all agree that all of them mapped it. Nothing ever stays in
 * /dev/shm, whichever rank dies when, and no rank meets SIGBUS on a full /dev/shm.
 * Not here: what lies in the segments (shm.c, window.c), choosing the sizes to try.
 * Proved by tests/comm/test_shm_limits.c and tests/comm/test_transport_shm.c. */
#include "comm/transport/shm_seg.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/err.h"
#include "comm/boot/store.h"

size_t sh_shm_free_nbytes(void)
{
    struct statvfs v;
    if (statvfs("/dev/shm", &v) != 0) return 0;
    return (size_t)v.f_bavail * (size_t)v.f_frsize;
}

void sh_shm_size_text(char *out, size_t cap)
{
    struct statvfs v;
    if (statvfs("/dev/shm", &v) != 0) {
        snprintf(out, cap, "of unknown size");
        return;
    }
    snprintf(out, cap, "%.1f MiB (%.1f MiB free)", (double)v.f_blocks * (double)v.f_frsize / (1024.0 * 1024.0),
             (double)v.f_bavail * (double)v.f_frsize / (1024.0 * 1024.0));
}

static void mib(size_t nbytes, char *out, size_t cap)
{
    snprintf(out, cap, "%.1f MiB", (double)nbytes / (1024.0 * 1024.0));
}

/* The leader: a fresh unnamed segment of the first size that fits; *chosen its index. */
static shoal_result make_segment(const shoal_comm *c, const size_t *nbytes, int ncand, int *chosen, int *fd)
{
    unsigned char rnd[8] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) memset(rnd, 0x5a, sizeof rnd); /* a name, not a secret */
    char name[96];
    snprintf(name, sizeof name, "/shoal-%d-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1], rnd[2],
             rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    *fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (*fd < 0) return SH_FAIL(SHOAL_ERR_IO, "cannot create shared memory %s: %s", name, strerror(errno));
    shm_unlink(name); /* the descriptor keeps it; no name is left behind, even after SIGKILL */
    size_t avail = sh_shm_free_nbytes();
    for (int i = 0; i < ncand; i++) {
        if (avail && nbytes[i] > avail && i < ncand - 1) continue; /* plainly too big: the next */
        int e = ftruncate(*fd, (off_t)nbytes[i]) == 0 ? posix_fallocate(*fd, 0, (off_t)nbytes[i]) : errno;
        if (e == 0) {
            *chosen = i;
            return SHOAL_OK;
        }
        if (ftruncate(*fd, 0) != 0) { /* gives back what a failed reservation took */
        }
        if (e != ENOSPC && e != EFBIG && e != ENOMEM) {
            close(*fd);
            *fd = -1;
            return SH_FAIL(SHOAL_ERR_IO, "cannot reserve %zu bytes of shared memory: %s", nbytes[i], strerror(e));
        }
    }
    close(*fd);
    *fd = -1;
    char have[64], need[32];
    sh_shm_size_text(have, sizeof have);
    mib(nbytes[ncand - 1], need, sizeof need);
    return SH_FAIL(SHOAL_ERR_NOMEM, "/dev/shm on %s is %s, the shared memory needs at least %s: give it room "
                   "(docker run --shm-size=1g, or a larger tmpfs on /dev/shm)", c->hostname[c->rank], have, need);
}

/* The others: the leader's segment through its descriptor, checked to be that very file. */
static shoal_result reach_segment(const char *post, const size_t *nbytes, int ncand, int *chosen, int *fd)
{
    int pid = 0, lfd = -1, idx = -1;
    unsigned long long ino = 0;
    if (sscanf(post, "%d %d %llu %d", &pid, &lfd, &ino, &idx) != 4 || idx < 0 || idx >= ncand)
        return SH_FAIL(SHOAL_ERR_IO, "the host's first rank posted \"%.60s\", not a shared segment", post);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, lfd);
    *fd = open(path, O_RDWR | O_CLOEXEC);
    if (*fd < 0)
        return SH_FAIL(SHOAL_ERR_IO, "cannot open the host's shared segment through %s (its maker, pid %d): %s",
                       path, pid, strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || (unsigned long long)st.st_ino != ino || (size_t)st.st_size != nbytes[idx]) {
        close(*fd);
        *fd = -1;
        return SH_FAIL(SHOAL_ERR_IO, "%s is not the host's shared segment (ranks in different pid "
                       "namespaces share a host id? see SHOAL_HOST_ID)", path);
    }
    *chosen = idx;
    return SHOAL_OK;
}

shoal_result sh_shm_segment_open(shoal_comm *c, const char *key, const size_t *nbytes, int ncand, int leader,
                                 int *chosen, int *fd)
{
    *fd = -1;
    *chosen = -1;
    char post[400];
    if (!leader) {
        size_t n = 0;
        SH_TRY(sh_store_get(c->store, key, post, sizeof post - 1, &n, c->timeout_ms));
        post[n < sizeof post ? n : sizeof post - 1] = 0;
        if (post[0] == '!') /* "!M why" (no memory) or "!I why" */
            return SH_FAIL(post[1] == 'M' ? SHOAL_ERR_NOMEM : SHOAL_ERR_IO, "%s (on the host's first rank)", post + 3);
        return reach_segment(post, nbytes, ncand, chosen, fd);
    }
    shoal_result rc = make_segment(c, nbytes, ncand, chosen, fd);
    struct stat st;
    if (rc == SHOAL_OK && fstat(*fd, &st) != 0) rc = SH_FAIL(SHOAL_ERR_IO, "fstat of shared memory: %s", strerror(errno));
    if (rc == SHOAL_OK) {
        snprintf(post, sizeof post, "%d %d %llu %d", (int)getpid(), *fd, (unsigned long long)st.st_ino, *chosen);
        return sh_store_set(c->store, key, post, strlen(post) + 1);
    }
    if (*fd >= 0) close(*fd);
    *fd = -1;
    snprintf(post, sizeof post, "!%c %s", rc == SHOAL_ERR_NOMEM ? 'M' : 'I', shoal_last_error_message());
    shoal_result prc = sh_store_set(c->store, key, post, strlen(post) + 1);
    return prc == SHOAL_OK ? SH_FAIL(rc, "%s", post + 3) : prc;
}

shoal_result sh_shm_segment_attached(shoal_comm *c, const char *key, int nlocal, shoal_result rc)
{
    char bkey[200], fkey[200], mkey[200];
    snprintf(bkey, sizeof bkey, "%s/attached", key);
    snprintf(fkey, sizeof fkey, "%s/failed", key);
    snprintf(mkey, sizeof mkey, "%s/nomem", key);
    int64_t failed = 0, nomem = 0;
    if (rc != SHOAL_OK) { /* this rank's message stays the error */
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", shoal_last_error_message());
        (void)sh_store_add(c->store, fkey, 1, &failed);
        if (rc == SHOAL_ERR_NOMEM) (void)sh_store_add(c->store, mkey, 1, &nomem);
        (void)sh_store_barrier(c->store, bkey, nlocal, c->timeout_ms);
        return SH_FAIL(rc, "%s", keep);
    }
    SH_TRY(sh_store_barrier(c->store, bkey, nlocal, c->timeout_ms));
    SH_TRY(sh_store_add(c->store, fkey, 0, &failed));
    SH_TRY(sh_store_add(c->store, mkey, 0, &nomem));
    if (failed)
        return SH_FAIL(nomem ? SHOAL_ERR_NOMEM : SHOAL_ERR_IO, "%lld other local rank(s) could not map the "
                       "shared memory (see their messages)", (long long)failed);
    return SHOAL_OK;
}
