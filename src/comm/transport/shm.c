/* shm.c — shared-memory links: SPSC byte rings in one segment per host, made when the
 * communicator connects, as large as /dev/shm allows (smaller rings when it is short, TCP
 * between the host's ranks when not even the least fit: never SIGBUS).
 * Not here: making and handing over segments (shm_seg.c), the slots (shm_slots.c),
 * windows (window.c), the CMA allreduce (coll/cma.c), the tests' fork-harness hooks
 * (shm_test.c), what the bytes mean (coll/, p2p.c), waiting policy (xfer.c).
 * Proved by tests/comm/test_transport_shm.c, test_shm_limits.c and tests/comm/test_comm.c. */
#include "comm/transport/shm.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/store.h"
#include "comm/transport/shm_seg.h"
#include "comm/transport/transport.h"
#include "comm/transport/xfer.h"

shoal_result sh_shm_link_gone(shm_link *s, const char *dir)
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
        if (nbytes && sh_shm_link_gone(s, "sending") != SHOAL_OK) return -1;
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
        if (nbytes && sh_shm_link_gone(s, "receiving") != SHOAL_OK) return -1;
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
        if (sh_shm_link_gone(s, "receiving") != SHOAL_OK) return NULL; /* next recv_some reports it */
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
    return sh_shm_link_gone(s, "waiting") == SHOAL_OK ? 0 : -1;
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

static int shm_peer_waits_on(sh_link *l)
{
    shm_link *s = l->impl;
    return s->peer_bell ? atomic_load_explicit(&s->peer_bell->waits_on, memory_order_relaxed) - 1 : -1;
}

static const sh_link_ops shm_ops = {
    .name = "shm",
    .send_some = shm_send_some,
    .recv_some = shm_recv_some,
    .recv_peek = shm_recv_peek,
    .recv_consume = shm_recv_consume,
    .abort = shm_abort,
    .check = shm_check,
    .peer_waits_on = shm_peer_waits_on,
    .close = shm_close,
};


/* Map a ring's pages now: touched first in the middle of a collective, each page would cost
 * both processes a fault on the first pass of small messages through the ring. Asks the
 * kernel to map the pages without writing them (peers may already be using them); where it
 * cannot, reads them in. */
static void prefault(const void *p, size_t n)
{
    uintptr_t page = 4096, a = (uintptr_t)p & ~(page - 1), b = (uintptr_t)p + n;
#ifdef MADV_POPULATE_WRITE
    if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0) return;
#endif
    for (uintptr_t q = a; q < b; q += page) (void)*(volatile const unsigned char *)q;
}

shoal_result sh_shm_make_links(shoal_comm *c, void *base, int nlocal, const int *local_ranks,
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
            const seg_head *h = base;
            SH_ASSERT(h->magic == SH_SHM_HEAD_MAGIC && (int)h->nlocal == nlocal);
            s->out = ring_at(base, me, i, plane);
            s->in = ring_at(base, i, me, plane);
            s->out_size = s->in_size = plane ? h->p2p_nbytes : h->coll_nbytes;
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


/* The host's segment, mapped: the largest rings that /dev/shm holds (halving from
 * COLL_RING_NBYTES to COLL_RING_MIN_NBYTES), one warning when they had to shrink. */
static shoal_result map_segment(shoal_comm *c, const char *key, int nlocal, int leader, void **base,
                                size_t *nbytes)
{
    size_t ring_nbytes[8], cand[8];
    int ncand = 0;
    for (size_t r = COLL_RING_NBYTES; r >= COLL_RING_MIN_NBYTES && ncand < 8; r /= 2) {
        ring_nbytes[ncand] = r;
        cand[ncand++] = segment_nbytes(nlocal, r);
    }
    int fd = -1, chosen = -1;
    *base = MAP_FAILED;
    shoal_result rc = sh_shm_segment_open(c, key, cand, ncand, leader, &chosen, &fd);
    if (rc == SHOAL_OK) {
        *nbytes = cand[chosen];
        *base = mmap(NULL, *nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (*base == MAP_FAILED) rc = SH_FAIL(SHOAL_ERR_IO, "cannot map shared memory: %s", strerror(errno));
        else if (leader) seg_head_init(*base, nlocal, ring_nbytes[chosen]); /* read by the others once all attached */
    }
    rc = sh_shm_segment_attached(c, key, nlocal, rc);
    if (fd >= 0) close(fd); /* the leader's stayed open until every rank had it */
    if (rc != SHOAL_OK) {
        if (*base != MAP_FAILED) munmap(*base, *nbytes);
        *base = MAP_FAILED;
        return rc;
    }
    if (leader && chosen > 0) {
        char have[64];
        sh_shm_size_text(have, sizeof have);
        SH_LOG_W("comm", "shared memory on %s: /dev/shm is %s, too small for full rings: the %d ranks here use "
                 "rings of %zu KiB instead of %d KiB (slower for large messages); give it room: docker run "
                 "--shm-size=1g, or a larger tmpfs on /dev/shm", c->hostname[c->rank], have, nlocal,
                 ring_nbytes[chosen] >> 10, COLL_RING_NBYTES >> 10);
    }
    return SHOAL_OK;
}

/* Each local rank's process id, to notice a dead peer. */
static shoal_result learn_pids(shoal_comm *c, const int *local, int nlocal, int *pids)
{
    char pkey[180];
    int32_t me = (int32_t)getpid();
    snprintf(pkey, sizeof pkey, "%s/pid/%d", c->prefix, c->rank);
    SH_TRY(sh_store_set(c->store, pkey, &me, sizeof me));
    for (int i = 0; i < nlocal; i++) {
        int32_t v = 0;
        size_t n = 0;
        snprintf(pkey, sizeof pkey, "%s/pid/%d", c->prefix, local[i]);
        SH_TRY(sh_store_get(c->store, pkey, &v, sizeof v, &n, c->timeout_ms));
        pids[i] = v;
    }
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
    char key[160];
    snprintf(key, sizeof key, "%s/shm/%d", c->prefix, c->host_of[c->rank]);
    void *base = MAP_FAILED;
    size_t nbytes = 0;
    shoal_result rc = map_segment(c, key, nlocal, leader, &base, &nbytes);
    if (rc == SHOAL_ERR_NOMEM || rc == SHOAL_ERR_IO) {
        /* Every local rank got the same answer (sh_shm_segment_attached): all of them take
         * TCP instead (transport.c), and the first says so once. */
        if (leader)
            SH_LOG_W("comm", "shared memory between the %d ranks of %s failed (%s); they talk over TCP instead "
                     "(slower)", nlocal, c->hostname[c->rank], shoal_last_error_message());
        free(local);
        return SHOAL_ERR_UNSUPPORTED; /* the message above is the reason */
    }
    int *pids = calloc((size_t)nlocal, sizeof *pids);
    if (rc == SHOAL_OK && !pids) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    if (rc == SHOAL_OK) rc = learn_pids(c, local, nlocal, pids);
    if (rc == SHOAL_OK) {
        struct sh_shm *s = calloc(1, sizeof *s);
        if (!s) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        else {
            *s = (struct sh_shm){base, nbytes, nlocal, calloc((size_t)c->world, sizeof(int)), 0, NULL, 0, NULL};
            for (int i = 0; i < nlocal; i++)
                if (local[i] == c->rank) s->my_bell = bell_at(base, nlocal, i);
            for (int i = 0; s->pid_of && i < nlocal; i++) s->pid_of[local[i]] = pids[i];
            c->shm = s;
            rc = sh_shm_make_links(c, base, nlocal, local, pids, want);
        }
    } else if (base != MAP_FAILED) {
        munmap(base, nbytes);
    }
    free(pids);
    free(local);
    if (rc != SHOAL_OK) sh_err_prefix("shared memory between the ranks of %s: ", c->hostname[c->rank]);
    return rc;
}

/* Peers on this host, unless SHOAL_TRANSPORT=tcp, or mpi for the whole job (a split
 * communicator under mpi joins its local ranks by shared memory). */
static int shm_can_reach(const shoal_comm *c, int peer)
{
    return c->host_of[peer] == c->host_of[c->rank] && c->transport != SH_TRANSPORT_TCP &&
           (c->transport != SH_TRANSPORT_MPI || c->parent);
}

static void shm_destroy(shoal_comm *c)
{
    sh_shm_destroy(c->shm);
    c->shm = NULL;
}

const sh_transport_ops sh_shm_transport = {"shm", shm_can_reach, sh_shm_connect, shm_destroy};

void sh_shm_destroy(struct sh_shm *s)
{
    if (!s) return;
    SH_ASSERT(!s->windows && "transport.c frees the windows first");
    free(s->pid_of);
    munmap(s->base, s->nbytes);
    free(s);
}
