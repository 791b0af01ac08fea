/* transport_shm.c — shared-memory links: SPSC byte rings in one segment per host.
 * Not here: what the bytes mean (algo.c, p2p.c), waiting policy (link.c's engine).
 * Proved by tests/comm/test_transport_shm.c and tests/comm/test_comm.c. */
#include "comm/transport_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/reduce.h"
#include "comm/boot/store.h"

enum { COLL_RING_NBYTES = 1 << 20, P2P_RING_NBYTES = 256 << 10, LINE = 64 };

typedef struct {
    _Alignas(LINE) _Atomic uint64_t head; /* bytes ever written */
    _Alignas(LINE) _Atomic uint64_t tail; /* bytes ever read */
    _Alignas(LINE) _Atomic int aborted;
    int32_t writer_pid, reader_pid;
    char reason[256];
    _Alignas(LINE) unsigned char data[];
} ring;

/* Each local rank's slots for small collectives (sh_shm_slot_*): one message per collective,
 * read in place by every other rank, in two sets used by alternate collectives. The first
 * line holds seq, the header and the first bytes of data, so an 8-byte allreduce is one
 * cache line. */
typedef struct {
    _Alignas(LINE) _Atomic uint64_t seq; /* the collective whose message this is, plus 1 */
    unsigned char hdr[SH_SHM_SLOT_HDR_NBYTES];
    unsigned char data[SH_SHM_SLOT_NBYTES];
} slot;

typedef struct {
    _Alignas(LINE) _Atomic uint64_t done; /* the last slot collective this rank finished, plus 1 */
    slot s[2];
} slot_area;

struct sh_shm {
    void *base;
    size_t nbytes;
    int nlocal;
    int *pid_of;      /* [world]: process of each rank on this host, 0 elsewhere */
    int cma;          /* 1: process_vm_readv works between our ranks, -1: it does not, 0: untried */
    struct shoal_window *windows; /* newest first */
    int nwindows;
};

struct shoal_window {
    shoal_comm *c;
    unsigned char *base;  /* this process's mapping, 2 MiB aligned */
    size_t nbytes;
    size_t common_nbytes, each_nbytes; /* as asked */
    size_t common_span, each_span;     /* rounded up to 2 MiB: the layout */
    int id;               /* the same on every rank: windows are made in the same order */
    struct shoal_window *next;
};

typedef struct {
    ring *out, *in;
    size_t out_size, in_size;
    slot_area *peer_slots;
    int peer_pid;
    unsigned idle_polls;
    sh_bell *peer_bell; /* rung after moving bytes, in case the peer sleeps on them */
} shm_link;

static size_t ring_stride(size_t data_nbytes) { return (sizeof(ring) + data_nbytes + LINE - 1) / LINE * LINE; }

/* Layout: for each ordered pair (from, to) of local indices and each plane, one ring; then
 * one doorbell per local rank. */
static size_t rings_nbytes(int nlocal)
{
    size_t pairs = (size_t)nlocal * (size_t)nlocal;
    return pairs * (ring_stride(COLL_RING_NBYTES) + ring_stride(P2P_RING_NBYTES));
}

static size_t bells_nbytes(int nlocal) { return ((size_t)nlocal * sizeof(sh_bell) + LINE - 1) / LINE * LINE; }

static size_t segment_nbytes(int nlocal)
{
    return rings_nbytes(nlocal) + bells_nbytes(nlocal) + (size_t)nlocal * sizeof(slot_area);
}

static slot_area *slots_at(void *base, int nlocal, int i)
{
    return (slot_area *)((unsigned char *)base + rings_nbytes(nlocal) + bells_nbytes(nlocal)) + i;
}

static sh_bell *bell_at(void *base, int nlocal, int i)
{
    return (sh_bell *)((unsigned char *)base + rings_nbytes(nlocal)) + i;
}

static ring *ring_at(void *base, int nlocal, int from, int to, int plane)
{
    size_t pair = (size_t)from * (size_t)nlocal + (size_t)to;
    size_t off = pair * (ring_stride(COLL_RING_NBYTES) + ring_stride(P2P_RING_NBYTES));
    if (plane) off += ring_stride(COLL_RING_NBYTES);
    return (ring *)((unsigned char *)base + off);
}

static shoal_result gone(shm_link *s, const char *dir)
{
    ring *r = s->in;
    if (atomic_load_explicit(&s->in->aborted, memory_order_acquire) ||
        atomic_load_explicit(&s->out->aborted, memory_order_acquire)) {
        r = atomic_load_explicit(&s->in->aborted, memory_order_acquire) ? s->in : s->out;
        return SH_FAIL(SHOAL_ERR_PEER, "the peer gave up: %s", r->reason[0] ? r->reason : "(no reason)");
    }
    if (++s->idle_polls % 4096 == 0 && s->peer_pid > 0 && kill(s->peer_pid, 0) < 0 && errno == ESRCH)
        return SH_FAIL(SHOAL_ERR_PEER, "the peer process (pid %d) exited while %s", s->peer_pid, dir);
    return SHOAL_OK;
}

static ssize_t shm_send_some(sh_link *l, const void *buf, size_t nbytes)
{
    shm_link *s = l->impl;
    ring *r = s->out;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    size_t free_n = s->out_size - (size_t)(head - tail);
    if (free_n == 0 || nbytes == 0) {
        if (nbytes && gone(s, "sending") != SHOAL_OK) return -1;
        return 0;
    }
    size_t n = nbytes < free_n ? nbytes : free_n;
    size_t pos = (size_t)(head % s->out_size), first = s->out_size - pos;
    if (first > n) first = n;
    memcpy(r->data + pos, buf, first);
    if (n > first) memcpy(r->data, (const unsigned char *)buf + first, n - first);
    atomic_store_explicit(&r->head, head + n, memory_order_release);
    s->idle_polls = 0;
    if (s->peer_bell) sh_bell_ring(s->peer_bell);
    return (ssize_t)n;
}

static ssize_t shm_recv_some(sh_link *l, void *buf, size_t nbytes)
{
    shm_link *s = l->impl;
    ring *r = s->in;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    size_t avail = (size_t)(head - tail);
    if (avail == 0 || nbytes == 0) {
        if (nbytes && gone(s, "receiving") != SHOAL_OK) return -1;
        return 0;
    }
    size_t n = nbytes < avail ? nbytes : avail;
    size_t pos = (size_t)(tail % s->in_size), first = s->in_size - pos;
    if (first > n) first = n;
    memcpy(buf, r->data + pos, first);
    if (n > first) memcpy((unsigned char *)buf + first, r->data, n - first);
    atomic_store_explicit(&r->tail, tail + n, memory_order_release);
    s->idle_polls = 0;
    if (s->peer_bell) sh_bell_ring(s->peer_bell);
    return (ssize_t)n;
}

static const void *shm_recv_peek(sh_link *l, size_t *nbytes)
{
    shm_link *s = l->impl;
    ring *r = s->in;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    size_t avail = (size_t)(head - tail);
    if (avail == 0) {
        *nbytes = 0;
        if (gone(s, "receiving") != SHOAL_OK) return NULL; /* next recv_some reports it */
        return r->data;
    }
    size_t pos = (size_t)(tail % s->in_size), first = s->in_size - pos;
    *nbytes = avail < first ? avail : first;
    s->idle_polls = 0;
    return r->data + pos;
}

static void shm_recv_consume(sh_link *l, size_t nbytes)
{
    shm_link *s = l->impl;
    uint64_t tail = atomic_load_explicit(&s->in->tail, memory_order_relaxed);
    atomic_store_explicit(&s->in->tail, tail + nbytes, memory_order_release);
    if (s->peer_bell) sh_bell_ring(s->peer_bell);
}

static int shm_check(sh_link *l)
{
    shm_link *s = l->impl;
    s->idle_polls = 4095; /* the next look asks whether the peer's process still lives */
    return gone(s, "waiting") == SHOAL_OK ? 0 : -1;
}

static ssize_t shm_slot_wait(sh_link *l, sh_xfer_op *op)
{
    shm_link *s = l->impl;
    if (op->kind == SH_XFER_SLOT_FREE) {
        if (atomic_load_explicit(&s->peer_slots->done, memory_order_acquire) >= op->seq + 1) return (ssize_t)op->nbytes;
        return gone(s, "waiting for it to finish the previous small collective") == SHOAL_OK ? 0 : -1;
    }
    /* The ring is read first, the slot after: a peer publishes its slot before it sends
     * anything for its next collective, so bytes seen on the ring with this slot still
     * unpublished are a call of another kind, not a peer that published and went on (the
     * other order took those for a mismatch). */
    ring *r = s->in;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    const slot *sl = &s->peer_slots->s[op->seq & 1];
    if (atomic_load_explicit(&sl->seq, memory_order_acquire) == op->seq + 1) {
        memcpy(op->buf, sl->hdr, op->nbytes);
        s->idle_polls = 0;
        return (ssize_t)op->nbytes;
    }
    /* Bytes on the ring: the peer made a call that talks through the rings; its first
     * bytes are its own header. */
    if (head - tail >= op->nbytes) {
        for (size_t i = 0; i < op->nbytes; i++)
            ((unsigned char *)op->buf)[i] = r->data[(size_t)((tail + i) % s->in_size)];
        op->from_ring = 1;
        return (ssize_t)op->nbytes;
    }
    return gone(s, "waiting for its message") == SHOAL_OK ? 0 : -1;
}

static void shm_abort(sh_link *l, const char *reason)
{
    shm_link *s = l->impl;
    ring *rs[2] = {s->out, s->in};
    for (int i = 0; i < 2; i++) {
        if (!atomic_load(&rs[i]->aborted)) snprintf(rs[i]->reason, sizeof rs[i]->reason, "%s", reason ? reason : "");
        atomic_store_explicit(&rs[i]->aborted, 1, memory_order_release);
    }
}

static void shm_close(sh_link *l)
{
    free(l->impl);
    free(l);
}

static const sh_link_ops shm_ops = {
    .name = "shm",
    .send_some = shm_send_some,
    .recv_some = shm_recv_some,
    .recv_peek = shm_recv_peek,
    .recv_consume = shm_recv_consume,
    .abort = shm_abort,
    .check = shm_check,
    .slot_wait = shm_slot_wait,
    .close = shm_close,
};


/* Map a ring's pages now: touched first in the middle of a collective, each 4 KiB page
 * cost both processes a fault, which added about a millisecond to the first pass of small
 * messages through a 1 MiB ring (2 ranks, 2 KiB allreduce over 300 iterations: 4.6 us a
 * call, against 0.7 once the ring had wrapped). Asks the kernel to map the pages without
 * writing them (peers may already be using them); where it cannot, reads them in. */
static void prefault(const void *p, size_t n)
{
    uintptr_t page = 4096, a = (uintptr_t)p & ~(page - 1), b = (uintptr_t)p + n;
#ifdef MADV_POPULATE_WRITE
    if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0) return;
#endif
    for (uintptr_t q = a; q < b; q += page) (void)*(volatile const unsigned char *)q;
}

static shoal_result make_links(shoal_comm *c, void *base, int nlocal, const int *local_ranks,
                               const int *pids, const unsigned char *want)
{
    int me = -1;
    for (int i = 0; i < nlocal; i++)
        if (local_ranks[i] == c->rank) me = i;
    SH_ASSERT(me >= 0);
    for (int i = 0; i < nlocal; i++) {
        int p = local_ranks[i];
        if (p == c->rank || !want[p]) continue;
        for (int plane = 0; plane < 2; plane++) {
            sh_link *l = calloc(1, sizeof *l);
            shm_link *s = calloc(1, sizeof *s);
            if (!l || !s) {
                free(l);
                free(s);
                return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
            }
            s->out = ring_at(base, nlocal, me, i, plane);
            s->in = ring_at(base, nlocal, i, me, plane);
            s->out_size = s->in_size = plane ? P2P_RING_NBYTES : COLL_RING_NBYTES;
            prefault(s->out, ring_stride(s->out_size));
            prefault(s->in, ring_stride(s->in_size));
            s->peer_pid = pids ? pids[i] : 0;
            s->peer_bell = bell_at(base, nlocal, i);
            s->peer_slots = slots_at(base, nlocal, i);
            l->ops = &shm_ops;
            l->peer = p;
            l->fd = -1;
            l->bell = bell_at(base, nlocal, me);
            l->impl = s;
            if (plane) c->p2p[p] = l;
            else c->coll[p] = l;
        }
    }
    return SHOAL_OK;
}

/* A named segment of nbytes for the local ranks under key: the leader creates it (mode
 * 0600) and posts its name, or "!" and why it could not, so the others fail at once instead
 * of at the deadline; the others open it. With reserve the memory is allocated now: a
 * /dev/shm too small for it fails here, not with SIGBUS at first touch. name (cap >= 96)
 * gets the name for segment_attached. */
static shoal_result segment_open(shoal_comm *c, const char *key, size_t nbytes, int leader, int reserve,
                                 char *name, size_t cap, int *fd)
{
    *fd = -1;
    shoal_result rc = SHOAL_OK;
    char post[320];
    if (!leader) {
        size_t n = 0;
        SH_TRY(sh_store_get(c->store, key, post, sizeof post, &n, c->timeout_ms));
        post[sizeof post - 1] = 0;
        if (post[0] == '!') return SH_FAIL(SHOAL_ERR_IO, "%s (on the rank that made it)", post + 1);
        snprintf(name, cap, "%s", post);
        *fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
        if (*fd < 0) return SH_FAIL(SHOAL_ERR_IO, "cannot open shared memory %s: %s", name, strerror(errno));
        return SHOAL_OK;
    }
    unsigned char rnd[8] = {0};
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) memset(rnd, 0x5a, sizeof rnd);
    snprintf(name, cap, "/shoal-%d-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0], rnd[1], rnd[2],
             rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    *fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int e = 0;
    if (*fd < 0) {
        rc = SH_FAIL(SHOAL_ERR_IO, "cannot create shared memory %s: %s", name, strerror(errno));
    } else if (ftruncate(*fd, (off_t)nbytes) < 0) {
        rc = SH_FAIL(SHOAL_ERR_IO, "cannot size shared memory to %zu bytes: %s (is /dev/shm full?)", nbytes,
                     strerror(errno));
    } else if (reserve && (e = posix_fallocate(*fd, 0, (off_t)nbytes)) != 0) {
        rc = SH_FAIL(SHOAL_ERR_IO, "cannot reserve %zu bytes of shared memory: %s (/dev/shm is full or "
                     "smaller than that; `df -h /dev/shm` shows it)", nbytes, strerror(e));
    }
    if (rc == SHOAL_OK) return sh_store_set(c->store, key, name, strlen(name) + 1);
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
        shm_unlink(name);
    }
    snprintf(post, sizeof post, "!%s", shoal_last_error_message());
    (void)sh_store_set(c->store, key, post, strlen(post) + 1);
    return rc;
}

/* Every local rank has mapped the segment or given up (rc is this rank's result so far):
 * all arrive either way, so none waits out the deadline for one that gave up, and all fail
 * if any did. The leader then unlinks it, so nothing outlives the job. */
static shoal_result segment_attached(shoal_comm *c, const char *key, int nlocal, int leader, const char *name,
                                     shoal_result rc)
{
    char bkey[200], fkey[200];
    snprintf(bkey, sizeof bkey, "%s/attached", key);
    snprintf(fkey, sizeof fkey, "%s/failed", key);
    int64_t failed = 0;
    if (rc != SHOAL_OK) (void)sh_store_add(c->store, fkey, 1, &failed); /* keeps this rank's message */
    shoal_result brc = sh_store_barrier(c->store, bkey, nlocal, c->timeout_ms);
    if (leader) shm_unlink(name);
    if (rc != SHOAL_OK) return rc;
    SH_TRY(brc);
    SH_TRY(sh_store_add(c->store, fkey, 0, &failed));
    if (failed)
        return SH_FAIL(SHOAL_ERR_IO, "%lld other local rank(s) could not map the shared memory (see their "
                       "messages)", (long long)failed);
    return SHOAL_OK;
}

shoal_result sh_shm_connect(shoal_comm *c, const unsigned char *want)
{
    /* The local group: this host's ranks that want shared memory (and us). */
    int *local = malloc(sizeof(int) * (size_t)c->world);
    if (!local) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    int nlocal = 0;
    for (int p = 0; p < c->world; p++)
        if (p == c->rank || (want[p] && c->host_of[p] == c->host_of[c->rank])) local[nlocal++] = p;
    if (nlocal < 2) {
        free(local);
        return SHOAL_OK;
    }
    int leader = local[0] == c->rank;
    size_t nbytes = segment_nbytes(nlocal);
    char key[160], name[96], pkey[180];
    snprintf(key, sizeof key, "%s/shm/%d", c->prefix, c->host_of[c->rank]);
    int fd = -1;
    shoal_result rc = segment_open(c, key, nbytes, leader, 0, name, sizeof name, &fd);
    void *base = MAP_FAILED;
    if (rc == SHOAL_OK) {
        base = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) rc = SH_FAIL(SHOAL_ERR_IO, "cannot map shared memory: %s", strerror(errno));
    }
    if (fd >= 0) close(fd);
    rc = segment_attached(c, key, nlocal, leader, name, rc);
    /* Learn the local ranks' pids (to notice a dead peer). */
    int *pids = calloc((size_t)nlocal, sizeof *pids);
    if (rc == SHOAL_OK && !pids) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    if (rc == SHOAL_OK) {
        int32_t me = (int32_t)getpid();
        snprintf(pkey, sizeof pkey, "%s/pid/%d", c->prefix, c->rank);
        rc = sh_store_set(c->store, pkey, &me, sizeof me);
        for (int i = 0; i < nlocal && rc == SHOAL_OK; i++) {
            int32_t v = 0;
            size_t n = 0;
            snprintf(pkey, sizeof pkey, "%s/pid/%d", c->prefix, local[i]);
            rc = sh_store_get(c->store, pkey, &v, sizeof v, &n, c->timeout_ms);
            pids[i] = v;
        }
    }
    if (rc == SHOAL_OK) {
        struct sh_shm *s = calloc(1, sizeof *s);
        if (!s) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        else {
            *s = (struct sh_shm){base, nbytes, nlocal, calloc((size_t)c->world, sizeof(int)), 0, NULL, 0};
            for (int i = 0; s->pid_of && i < nlocal; i++) s->pid_of[local[i]] = pids[i];
            c->shm = s;
            rc = make_links(c, base, nlocal, local, pids, want);
        }
    } else if (base != MAP_FAILED) {
        munmap(base, nbytes);
    }
    free(pids);
    free(local);
    if (rc != SHOAL_OK) sh_err_prefix("shared memory between the ranks of %s: ", c->hostname[c->rank]);
    return rc;
}

/* ---- slots: small collectives in one step ---- */

int sh_shm_slots_usable(const shoal_comm *c)
{
    return c->shm && c->world > 1 && c->shm->nlocal == c->world; /* every rank is in the segment */
}

/* Every rank here is on this host and in the segment, so local index = rank. */
static slot_area *my_slots(const shoal_comm *c) { return slots_at(c->shm->base, c->shm->nlocal, c->rank); }

const void *sh_shm_slot_data(const shoal_comm *c, int rank, uint64_t seq)
{
    return slots_at(c->shm->base, c->shm->nlocal, rank)->s[seq & 1].data;
}

/* Wake whoever sleeps on a slot of ours (cheap when nobody does). */
static void ring_others(const shoal_comm *c)
{
    for (int i = 0; i < c->shm->nlocal; i++)
        if (i != c->rank) sh_bell_ring(bell_at(c->shm->base, c->shm->nlocal, i));
}

void sh_shm_slot_publish(shoal_comm *c, uint64_t seq, const void *hdr, const void *data, size_t nbytes)
{
    slot *sl = &my_slots(c)->s[seq & 1];
    memcpy(sl->hdr, hdr, SH_SHM_SLOT_HDR_NBYTES);
    if (nbytes) memcpy(sl->data, data, nbytes);
    atomic_store_explicit(&sl->seq, seq + 1, memory_order_release);
    ring_others(c);
}

void sh_shm_slot_done(shoal_comm *c, uint64_t seq)
{
    atomic_store_explicit(&my_slots(c)->done, seq + 1, memory_order_release);
    ring_others(c);
}

/* ---- windows: memory every rank of a one-host communicator maps ----
 * One segment per window: the common block, then each rank's block, every part on a
 * 2 MiB boundary so it can live on huge pages. The leader reserves the memory when it
 * makes the segment; each rank then asks for huge pages on its own block (the leader on
 * the common one too): MADV_COLLAPSE, which works on shared memory even where the
 * system's shmem_enabled says never. 4 KiB pages would cost the GEMMs reading weights
 * there TLB misses. */

enum { HUGE_NBYTES = 2 << 20 };

static size_t huge_round(size_t n) { return (n + HUGE_NBYTES - 1) / HUGE_NBYTES * HUGE_NBYTES; }

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
    w->common_span = huge_round(common_nbytes);
    w->each_span = huge_round(each_nbytes);
    w->nbytes = w->common_span + (size_t)c->world * w->each_span;
    if (w->nbytes == 0) w->nbytes = HUGE_NBYTES;
    int leader = c->rank == 0;
    char key[160], name[96];
    snprintf(key, sizeof key, "%s/window/%d", c->prefix, w->id);
    int fd = -1;
    shoal_result rc = segment_open(c, key, w->nbytes, leader, 1, name, sizeof name, &fd);
    void *base = MAP_FAILED;
    if (rc == SHOAL_OK) {
        base = map_aligned(fd, w->nbytes);
        if (base == MAP_FAILED) rc = SH_FAIL(SHOAL_ERR_IO, "cannot map %zu bytes of shared memory: %s", w->nbytes,
                                             strerror(errno));
    }
    if (fd >= 0) close(fd);
    if (rc == SHOAL_OK) {
        w->base = base;
        if (leader) want_huge_pages(w->base, w->common_span);
        want_huge_pages(w->base + w->common_span + (size_t)c->rank * w->each_span, w->each_span);
    }
    rc = segment_attached(c, key, c->world, leader, name, rc);
    if (rc != SHOAL_OK) {
        sh_err_prefix("shared window of %zu bytes: ", w->nbytes);
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
static const shoal_window *window_of(const struct sh_shm *s, const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    for (const shoal_window *w = s ? s->windows : NULL; w; w = w->next) {
        uintptr_t lo = (uintptr_t)w->base;
        if (a >= lo && a - lo <= w->nbytes && n <= w->nbytes - (a - lo)) return w;
    }
    return NULL;
}

static const shoal_window *window_by_id(const struct sh_shm *s, int id)
{
    for (const shoal_window *w = s->windows; w; w = w->next)
        if (w->id == id) return w;
    return NULL;
}

int sh_shm_window_common(const shoal_comm *c, const void *p, size_t nbytes)
{
    const shoal_window *w = window_of(c->shm, p, nbytes);
    return w && (uintptr_t)p - (uintptr_t)w->base + nbytes <= w->common_span;
}

void sh_shm_destroy(struct sh_shm *s)
{
    if (!s) return;
    for (shoal_window *w = s->windows, *next; w; w = next) {
        next = w->next;
        munmap(w->base, w->nbytes);
        free(w);
    }
    free(s->pid_of);
    munmap(s->base, s->nbytes);
    free(s);
}

/* ---- large allreduce inside a host through the peers' memory (CMA) ----
 * Rank r owns block r of the message. For each piece of its block it reads every rank's
 * piece straight from that rank's memory (process_vm_readv: one copy, no staging through
 * the rings) in rank order 0, 1, ..., n-1, so every element is reduced by one rank in one
 * fixed order; finishes an average on the piece; and writes the finished piece, still in
 * cache, into every peer's result (process_vm_writev). Two small exchanges over the links
 * fence it: the addresses before, and "all written" after, so no rank returns while another
 * still reads or writes its memory. Memory traffic per rank is about 2 message sizes
 * against 4.5 for the ring through the rings. */

enum { CMA_MIN_NBYTES = 32 * 1024, CMA_PIECE_NBYTES = 256 * 1024 };
/* From this size an out-of-place result is streamed past the cache (measured: faster from
 * 8 MiB, slower at 2 MiB and below, 2 ranks). */
enum { STREAM_MIN_NBYTES = 4 * 1024 * 1024 };

/* A rank's buffers for one call: send, recv, params as addresses in its own process, and,
 * for each that lies in a shared window, the window (id + 1, else 0) and the offset there,
 * which every rank can turn into an address of its own. */
enum { BUF_SEND, BUF_RECV, BUF_PARAMS, NBUF };
typedef struct {
    uint64_t addr[NBUF];
    uint64_t woff[NBUF];
    int32_t win[NBUF];
    int32_t pid;
} cma_addr;

static void describe(const struct sh_shm *s, cma_addr *a, const void *const buf[NBUF], size_t nbytes)
{
    memset(a, 0, sizeof *a);
    a->pid = (int32_t)getpid();
    for (int b = 0; b < NBUF; b++) {
        a->addr[b] = (uint64_t)(uintptr_t)buf[b];
        const shoal_window *w = buf[b] && nbytes ? window_of(s, buf[b], nbytes) : NULL;
        if (!w) continue;
        a->win[b] = w->id + 1;
        a->woff[b] = (uint64_t)((const unsigned char *)buf[b] - w->base);
    }
}

/* Where a rank's buffer b, plus off bytes, is in this process, when it lies in a window;
 * NULL when only CMA reaches it. */
static unsigned char *peer_ptr(const struct sh_shm *s, const cma_addr *a, int b, size_t off)
{
    const shoal_window *w = a->win[b] ? window_by_id(s, a->win[b] - 1) : NULL;
    return w ? w->base + a->woff[b] + off : NULL;
}

/* "All written": every rank tells every other whether its part worked (1) or not (0), so
 * no rank returns while another still writes into its buffers, and all agree on failure.
 * *bad gets the lowest rank that failed, or -1. */
static shoal_result fence(shoal_comm *c, const char *what, int ok, int *bad)
{
    unsigned char out = ok ? 1 : 0, in[64];
    sh_xfer_op ops[128];
    int k = 0;
    for (int p = 0; p < c->world && k < 126; p++) {
        if (p == c->rank) continue;
        in[p] = 1;
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_SEND, &out, 1, 0, NULL, 0, 0};
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_RECV, &in[p], 1, 0, NULL, 0, 0};
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, what, &x);
    SH_TRY(sh_xfer(&x, ops, k));
    *bad = -1;
    for (int p = 0; p < c->world && *bad < 0; p++)
        if (p == c->rank ? !ok : !in[p]) *bad = p;
    return SHOAL_OK;
}

/* SHOAL_TEST_CMA_FAIL=RANK makes that rank's reads of its peers' memory fail, as a kernel
 * that forbids them would (tests only: the suite cannot change ptrace rules). */
static int cma_fails_here(void)
{
    static int cached = -2;
    if (cached == -2) {
        const char *v = getenv("SHOAL_TEST_CMA_FAIL");
        const char *me = getenv("SHOAL_RANK");
        cached = v && me && atoi(v) == atoi(me);
    }
    return cached;
}

static int cma_read(int pid, void *dst, uint64_t src, size_t nbytes)
{
    if (cma_fails_here()) {
        errno = EPERM;
        return -1;
    }
    while (nbytes > 0) {
        struct iovec l = {dst, nbytes}, r = {(void *)(uintptr_t)src, nbytes};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0) return -1;
        dst = (unsigned char *)dst + n;
        src += (uint64_t)n;
        nbytes -= (size_t)n;
    }
    return 0;
}

static int cma_write(int pid, uint64_t dst, const void *src, size_t nbytes)
{
    while (nbytes > 0) {
        struct iovec l = {(void *)src, nbytes}, r = {(void *)(uintptr_t)dst, nbytes};
        ssize_t n = process_vm_writev(pid, &l, 1, &r, 1, 0);
        if (n <= 0) return -1;
        src = (const unsigned char *)src + n;
        dst += (uint64_t)n;
        nbytes -= (size_t)n;
    }
    return 0;
}

int sh_shm_window_apply(const shoal_comm *c, const sh_coll *op)
{
    return op->kind == SH_COLL_ALLREDUCE && op->apply && op->send == op->recv && c->shm && c->shm->pid_of &&
           c->world <= 64 && op->count && sh_shm_window_common(c, op->params, op->count * sizeof(float));
}

int sh_shm_coll_supported(const shoal_comm *c, const sh_coll *op)
{
    const struct sh_shm *s = c->shm;
    if (!s || !s->pid_of || c->world > 64 || c->local_world != c->world) return 0;
    if (sh_shm_window_apply(c, op)) return 1;
    if (op->kind != SH_COLL_ALLREDUCE || (op->apply && op->send != op->recv)) return 0;
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    const void *out = op->apply ? (const void *)op->params : op->recv;
    if (s->cma < 0 && !(window_of(s, op->send, nb) && window_of(s, out, nb))) return 0; /* CMA refused */
    return nb >= CMA_MIN_NBYTES && op->count >= (size_t)c->world;
}

shoal_result sh_shm_coll_run(shoal_comm *c, const sh_coll *op)
{
    struct sh_shm *s = c->shm;
    int n = c->world, r = c->rank;
    size_t es = shoal_dtype_nbytes(op->dt);
    /* 1. addresses */
    cma_addr mine, all[64];
    const void *bufs[NBUF] = {op->send, op->recv, op->params};
    describe(s, &mine, bufs, op->count * es);
    sh_xfer_op ops[128];
    int k = 0;
    all[r] = mine;
    for (int p = 0; p < n; p++) {
        if (p == r) continue;
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_SEND, &mine, sizeof mine, 0, NULL, 0, 0};
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_RECV, &all[p], sizeof mine, 0, NULL, 0, 0};
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "allreduce", &x);
    SH_TRY(sh_xfer(&x, ops, k));
    /* 2. reduce-scatter: this rank's block, piece by piece, in rank order */
    size_t base = op->count / (size_t)n, extra = op->count % (size_t)n;
    size_t lo = (size_t)r * base + ((size_t)r < extra ? (size_t)r : extra), len = base + ((size_t)r < extra ? 1 : 0);
    size_t piece = CMA_PIECE_NBYTES / es;
    /* Pieces read from peers alternate between two buffers, so the first two contributions
     * meet in one three-operand pass (dst = x0 OP x1) and dst is written once per piece. */
    unsigned char *tmp = NULL, *own = NULL;
    SH_TRY(sh_comm_scratch(c, 3 * CMA_PIECE_NBYTES, (void **)&tmp));
    own = tmp + 2 * CMA_PIECE_NBYTES; /* in place: ours, kept; streamed: the reduced piece */
    int inplace = op->send == op->recv;
    int stream = op->count * es >= STREAM_MIN_NBYTES;
    int failed = 0, used_cma = 0;
    unsigned char *out = (unsigned char *)op->recv;
    for (size_t off = lo; off < lo + len && !failed; off += piece) {
        size_t m = lo + len - off < piece ? lo + len - off : piece;
        /* A large result out of place: the piece is reduced in cache and streamed into the
         * result after it went to the peers (reducing straight into the cold result made the
         * CPU read every line of it first: half the in-place speed). A smaller result is
         * better left in cache for the caller, which reads it next. With an update, the
         * reduced piece only feeds it: it stays in cache and the gradients are not written
         * back (they are unspecified after the call). */
        unsigned char *final = out + off * es, *dst = op->apply || (!inplace && stream) ? own : final;
        const unsigned char *mine_piece = (const unsigned char *)op->send + off * es;
        if (dst == final && inplace && r > 1) { /* dst takes ranks 0 and 1 before ours: keep ours */
            memcpy(own, mine_piece, m * es);
            mine_piece = own;
        }
        const void *first = NULL;
        for (int p = 0; p < n && !failed; p++) {
            const void *src;
            if (p == r) {
                src = mine_piece;
            } else {
                src = peer_ptr(s, &all[p], BUF_SEND, off * es); /* in a window: read in place */
                if (!src) {
                    unsigned char *buf = tmp + (size_t)(p & 1) * CMA_PIECE_NBYTES;
                    failed = cma_read(all[p].pid, buf, all[p].addr[BUF_SEND] + off * es, m * es) != 0;
                    used_cma = 1;
                    src = buf;
                }
            }
            if (failed) break;
            if (p == 0) first = src;
            else if (p == 1) sh_reduce3(dst, first, src, m, op->dt, op->op);
            else sh_reduce(dst, src, m, op->dt, op->op);
        }
        /* An average is finished here, on the piece while it is still in cache, so the
         * allgather copies finished values and no pass over the whole message follows. */
        if (!failed && op->op == SHOAL_AVG) sh_reduce_avg_finish(dst, m, op->dt, n);
        /* Allgather as we go: the finished piece, still in cache, into every peer's result
         * (only this rank ever touches block r of a peer's buffers, and it has read this
         * piece of them already). With an update, the piece's new parameters go instead:
         * each rank updates only its block, and the gradients elsewhere stay partial. */
        const unsigned char *piece_out = dst;
        uint64_t peer_off = off * es;
        if (!failed && op->apply) {
            op->apply(op->apply_ctx, off, m, (const float *)dst);
            piece_out = (const unsigned char *)op->params + off * es;
        }
        int into = op->apply ? BUF_PARAMS : BUF_RECV;
        for (int p = 0; p < n && !failed; p++) {
            if (p == r) continue;
            unsigned char *at = peer_ptr(s, &all[p], into, peer_off);
            if (at == piece_out) continue; /* the common block of a window: one copy for all */
            if (at) {
                memcpy(at, piece_out, m * es);
            } else {
                failed = cma_write(all[p].pid, all[p].addr[into] + peer_off, piece_out, m * es) != 0;
                used_cma = 1;
            }
        }
        if (!failed && dst != final && !op->apply) sh_copy_stream(final, dst, m * es);
    }
    int err = errno, bad = -1;
    /* CMA refused (ptrace rules, seccomp) on some rank: every rank learns it at the fence
     * and fails this call at once (the result is incomplete everywhere), and from then on
     * all take the rings. */
    SH_TRY(fence(c, "allreduce", !failed, &bad));
    if (bad < 0) {
        if (used_cma) s->cma = 1;
        return SHOAL_OK;
    }
    s->cma = -1;
    if (bad == r)
        return SH_FAIL(SHOAL_ERR_IO, "allreduce: reading or writing a peer's memory (process_vm_readv/writev) "
                       "failed: %s; the result is incomplete on every rank, later allreduces go through the "
                       "rings (SHOAL_ALGO=ring does that from the start)", strerror(err));
    char pb[128];
    sh_comm_peer_name(c, bad, pb, sizeof pb);
    return SH_FAIL(SHOAL_ERR_IO, "allreduce: %s could not read or write its peers' memory "
                   "(process_vm_readv/writev); the result is incomplete on every rank, later allreduces go "
                   "through the rings (SHOAL_ALGO=ring does that from the start)", pb);
}

/* ---- test support ---- */

typedef struct {
    void *base;
    int world;
} test_state;

int sh_shm_test_prepare(int world, void **state)
{
    test_state *t = malloc(sizeof *t);
    if (!t) return -1;
    t->world = world;
    t->base = mmap(NULL, segment_nbytes(world), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (t->base == MAP_FAILED) {
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

int sh_shm_test_attach(void *state, shoal_comm *c)
{
    test_state *t = state;
    int *local = malloc(sizeof(int) * (size_t)t->world);
    unsigned char *want = malloc((size_t)t->world);
    if (!local || !want) return -1;
    for (int i = 0; i < t->world; i++) {
        local[i] = i;
        want[i] = 1;
        sh_link_close(c->coll[i]);
        sh_link_close(c->p2p[i]);
        c->coll[i] = c->p2p[i] = NULL;
    }
    int rc = make_links(c, t->base, t->world, local, NULL, want) == SHOAL_OK ? 0 : -1;
    free(local);
    free(want);
    return rc;
}

void sh_shm_test_release(void *state)
{
    test_state *t = state;
    munmap(t->base, segment_nbytes(t->world));
    free(t);
}
