/* window.c — shared windows (shoal_window_create): memory every rank of a one-host
 * communicator maps, a common block and one block per rank, on huge pages; and finding the
 * window a buffer lies in (the CMA allreduce reads and writes windows in place).
 * Not here: the host's link segment (shm.c), the allreduce that uses windows (coll/cma.c).
 * Proved by tests/comm/test_transport_shm.c and tests/comm/test_comm.c. */
#include "comm/transport/window.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "comm/transport/shm_seg.h"

/* ---- windows: memory every rank of a one-host communicator maps ----
 * One segment per window: the common block, then each rank's block, every part on a
 * 2 MiB boundary so it can live on huge pages (on 4 KiB pages where /dev/shm is too small
 * for that). The leader reserves the memory when it makes the segment (shm_seg.c); each rank then asks for huge pages on its own block (the leader on
 * the common one too): MADV_COLLAPSE, which works on shared memory even where the
 * system's shmem_enabled says never. 4 KiB pages would cost the GEMMs reading weights
 * there TLB misses. */

enum { HUGE_NBYTES = 2 << 20, PAGE_NBYTES = 4096 };

static size_t round_up(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

static void *map_aligned(int fd, size_t nbytes)
{
    size_t span = nbytes + HUGE_NBYTES;
    unsigned char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) return MAP_FAILED;
    unsigned char *a = (unsigned char *)(((uintptr_t)res + HUGE_NBYTES - 1) & ~(uintptr_t)(HUGE_NBYTES - 1));
    if (mmap(a, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(res, span);
        return MAP_FAILED;
    }
    if (a > res) munmap(res, (size_t)(a - res));
    size_t tail = (size_t)(res + span - (a + nbytes));
    if (tail) munmap(a + nbytes, tail);
    return a;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1; older kernels answer EINVAL and the window keeps 4 KiB pages */
#endif

static void want_huge_pages(void *p, size_t n)
{
    if (!n) return;
    if (madvise(p, n, MADV_COLLAPSE) < 0) SH_LOG_D("comm", "window: no huge pages (%s)", strerror(errno));
}

shoal_result shoal_window_create(shoal_comm *c, size_t common_nbytes, size_t each_nbytes, shoal_window **out)
{
    if (!out) return SH_FAIL(SHOAL_ERR_INVALID, "window_create: out is NULL");
    *out = NULL;
    if (!c || c->magic != SH_COMM_MAGIC) return SH_FAIL(SHOAL_ERR_INVALID, "window_create: not a live communicator");
    struct sh_shm *s = c->shm;
    if (c->world < 2 || !s || s->nlocal != c->world || !c->store)
        return SH_FAIL(SHOAL_ERR_UNSUPPORTED, "window_create: the %d ranks are not all on one host joined by "
                       "shared memory", c->world);
    if (c->world > 64) /* sh_shm_coll_run's bound: an update of a common block needs it */
        return SH_FAIL(SHOAL_ERR_UNSUPPORTED, "window_create: %d ranks; windows serve up to 64", c->world);
    shoal_window *w = calloc(1, sizeof *w);
    if (!w) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    w->c = c;
    w->id = s->nwindows++;
    w->common_nbytes = common_nbytes;
    w->each_nbytes = each_nbytes;
    /* Two layouts: every part on its own 2 MiB (huge pages), or, where /dev/shm cannot
     * hold that, on 4 KiB pages. */
    size_t cand[2];
    for (int k = 0; k < 2; k++) {
        size_t unit = k ? PAGE_NBYTES : HUGE_NBYTES;
        cand[k] = round_up(common_nbytes, unit) + (size_t)c->world * round_up(each_nbytes, unit);
        if (cand[k] == 0) cand[k] = unit;
    }
    int leader = c->rank == 0, chosen = -1;
    char key[160];
    snprintf(key, sizeof key, "%s/window/%d", c->prefix, w->id);
    int fd = -1;
    shoal_result rc = sh_shm_segment_open(c, key, cand, 2, leader, &chosen, &fd);
    void *base = MAP_FAILED;
    if (rc == SHOAL_OK) {
        size_t unit = chosen ? PAGE_NBYTES : HUGE_NBYTES;
        w->common_span = round_up(common_nbytes, unit);
        w->each_span = round_up(each_nbytes, unit);
        w->nbytes = cand[chosen];
        base = map_aligned(fd, w->nbytes);
        if (base == MAP_FAILED) rc = SH_FAIL(SHOAL_ERR_IO, "cannot map %zu bytes of shared memory: %s", w->nbytes,
                                             strerror(errno));
    }
    if (rc == SHOAL_OK) {
        w->base = base;
        if (chosen == 0 && leader) want_huge_pages(w->base, w->common_span);
        if (chosen == 0) want_huge_pages(w->base + w->common_span + (size_t)c->rank * w->each_span, w->each_span);
    }
    rc = sh_shm_segment_attached(c, key, c->world, rc);
    if (fd >= 0) close(fd); /* the leader's stayed open until every rank had it */
    if (rc != SHOAL_OK) {
        sh_err_prefix("shared window of %zu bytes: ", cand[1]);
        if (base != MAP_FAILED) munmap(base, w->nbytes);
        free(w);
        /* the memory is what failed: the caller may go on without a window */
        return rc == SHOAL_ERR_IO ? SHOAL_ERR_NOMEM : rc;
    }
    w->next = s->windows;
    s->windows = w;
    *out = w;
    return SHOAL_OK;
}

void *shoal_window_common(const shoal_window *w) { return w && w->common_nbytes ? w->base : NULL; }

void *shoal_window_block(const shoal_window *w, int rank)
{
    if (!w || rank < 0 || rank >= w->c->world || !w->each_nbytes) return NULL;
    return w->base + w->common_span + (size_t)rank * w->each_span;
}

/* The window holding [p, p + n), or NULL (compared as addresses: p may be any buffer). */
const shoal_window *sh_window_of(const struct sh_shm *s, const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    for (const shoal_window *w = s ? s->windows : NULL; w; w = w->next) {
        uintptr_t lo = (uintptr_t)w->base;
        if (a >= lo && a - lo <= w->nbytes && n <= w->nbytes - (a - lo)) return w;
    }
    return NULL;
}

const shoal_window *sh_window_by_id(const struct sh_shm *s, int id)
{
    for (const shoal_window *w = s->windows; w; w = w->next)
        if (w->id == id) return w;
    return NULL;
}

int sh_window_common(const shoal_comm *c, const void *p, size_t nbytes)
{
    const shoal_window *w = sh_window_of(c->shm, p, nbytes);
    return w && (uintptr_t)p - (uintptr_t)w->base + nbytes <= w->common_span;
}

void sh_window_free_all(struct sh_shm *s)
{
    for (shoal_window *w = s->windows, *next; w; w = next) {
        next = w->next;
        munmap(w->base, w->nbytes);
        free(w);
    }
    s->windows = NULL;
}
