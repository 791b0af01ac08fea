/* xfer.c — the transfer engine every algorithm runs on: several sends and receives
 * progressed together, spin then yield then sleep (on sockets, or on a doorbell shared by
 * the host's ranks), a deadline measured from the last byte that moved; and the doorbells.
 * Not here: the links it drives (link.c, shm.c, mpi.c), what the bytes mean (coll/, p2p.c).
 * Proved by tests/comm/test_link.c. */
#include "comm/transport/xfer.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <limits.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "comm/reduce.h"

/* ---- doorbells ---- */

void sh_bell_ring(sh_bell *b)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleepers, memory_order_relaxed) == 0) return;
    atomic_fetch_add_explicit(&b->seq, 1, memory_order_seq_cst);
    syscall(SYS_futex, &b->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Sleep until the bell's seq leaves `seen` or `ns` pass; the bell is shared between
 * processes, so the futex is not a private one. Returns 1 when the time ran out. */
static int bell_sleep(sh_bell *b, uint32_t seen, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    long rc = syscall(SYS_futex, &b->seq, FUTEX_WAIT, seen, &ts, NULL, 0);
    return rc < 0 && errno == ETIMEDOUT;
}

/* ---- the engine ---- */

enum { STAGE_NBYTES = 64 * 1024 };
/* After this long without progress a wait is published (sh_bell.waits_on). */
#define WAIT_PUBLISH_NS 50000000ull

/* Per-op carry for RECV_REDUCE: bytes of a partial element, and where the next reduced
 * element goes. Kept in a side array so sh_xfer_op stays plain. */
typedef struct {
    unsigned char part[16];
    size_t part_nbytes;
} carry;

static const char *peer_str(const sh_xfer_ctx *x, int peer, char *buf, size_t cap)
{
    if (x->peer_name) return x->peer_name(x->ctx, peer, buf, cap);
    snprintf(buf, cap, "rank %d", peer);
    return buf;
}

/* Reduce whole elements at in (any address: incoming bytes sit wherever the link put
 * them, and the kernels need element alignment, so misaligned runs go through an aligned
 * bounce buffer) into op->buf at op->done. */
static void reduce_whole(const sh_xfer_ctx *x, sh_xfer_op *op, const unsigned char *in, size_t nbytes)
{
    size_t es = shoal_dtype_nbytes((shoal_dtype)x->dtype);
    unsigned char *dst = (unsigned char *)op->buf;
    _Alignas(64) unsigned char bounce[4096];
    while (nbytes > 0) {
        const unsigned char *src_in = in;
        size_t n = nbytes;
        if ((uintptr_t)in % es) {
            n = nbytes < sizeof bounce ? nbytes : sizeof bounce;
            memcpy(bounce, in, n);
            src_in = bounce;
        }
        if (op->src)
            sh_reduce3(dst + op->done, (const unsigned char *)op->src + op->done, src_in, n / es,
                       (shoal_dtype)x->dtype, (shoal_op)x->op);
        else
            sh_reduce(dst + op->done, src_in, n / es, (shoal_dtype)x->dtype, (shoal_op)x->op);
        op->done += n;
        in += n;
        nbytes -= n;
    }
}

/* Reduce nbytes of incoming bytes into op->buf at op->done, handling element splits. */
static void reduce_in(const sh_xfer_ctx *x, sh_xfer_op *op, carry *cy, const unsigned char *in,
                      size_t nbytes)
{
    size_t es = shoal_dtype_nbytes((shoal_dtype)x->dtype);
    unsigned char *dst = (unsigned char *)op->buf;
    while (nbytes > 0) {
        if (cy->part_nbytes > 0 || nbytes < es) {
            size_t take = es - cy->part_nbytes;
            if (take > nbytes) take = nbytes;
            memcpy(cy->part + cy->part_nbytes, in, take);
            cy->part_nbytes += take;
            in += take;
            nbytes -= take;
            if (cy->part_nbytes == es) {
                if (op->src)
                    sh_reduce3(dst + op->done, (const unsigned char *)op->src + op->done, cy->part, 1,
                               (shoal_dtype)x->dtype, (shoal_op)x->op);
                else
                    sh_reduce(dst + op->done, cy->part, 1, (shoal_dtype)x->dtype, (shoal_op)x->op);
                op->done += es;
                cy->part_nbytes = 0;
            }
            continue;
        }
        size_t whole = nbytes / es * es;
        reduce_whole(x, op, in, whole);
        in += whole;
        nbytes -= whole;
    }
}

/* Move what can move now on one op; returns bytes moved or -1. */
static ssize_t step(const sh_xfer_ctx *x, sh_xfer_op *op, carry *cy, unsigned char *stage)
{
    size_t left = op->nbytes - op->done - (op->kind == SH_XFER_RECV_REDUCE ? cy->part_nbytes : 0);
    sh_link *l = op->link;
    switch (op->kind) {
    case SH_XFER_SEND:
        return l->ops->send_some(l, (const unsigned char *)op->buf + op->done, left);
    case SH_XFER_RECV: {
        ssize_t n = l->ops->recv_some(l, (unsigned char *)op->buf + op->done, left);
        if (n > 0) op->done += (size_t)n;
        return n;
    }
    case SH_XFER_POLL: {
        ssize_t n = op->poll(l, op);
        if (n > 0) op->done = op->nbytes;
        return n;
    }
    case SH_XFER_RECV_REDUCE:
        if (l->ops->recv_peek) {
            size_t avail = 0;
            const void *p = l->ops->recv_peek(l, &avail);
            if (!p) return -1;
            if (avail == 0) return 0;
            if (avail > left) avail = left;
            reduce_in(x, op, cy, p, avail);
            l->ops->recv_consume(l, avail);
            return (ssize_t)avail;
        } else {
            size_t want = left < STAGE_NBYTES ? left : STAGE_NBYTES;
            ssize_t n = l->ops->recv_some(l, stage, want);
            if (n > 0) reduce_in(x, op, cy, stage, (size_t)n);
            return n;
        }
    }
    return -1;
}

static int op_done(const sh_xfer_op *op, const carry *cy)
{
    return op->done == op->nbytes && cy->part_nbytes == 0;
}

shoal_result sh_xfer(const sh_xfer_ctx *x, sh_xfer_op *ops, int nops)
{
    enum { MAX_OPS = 64 };
    SH_ASSERT(nops <= MAX_OPS);
    carry cys[MAX_OPS];
    memset(cys, 0, sizeof(carry) * (size_t)nops);
    static __thread unsigned char *stage;
    for (int i = 0; i < nops; i++)
        if (ops[i].kind == SH_XFER_RECV_REDUCE && !ops[i].link->ops->recv_peek && !stage) {
            stage = malloc(STAGE_NBYTES);
            if (!stage) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for staging");
        }

    uint64_t last_ns = 0; /* read lazily: a transfer that completes at once never asks */
    uint64_t spin_ns = (uint64_t)(x->spin_us > 0 ? x->spin_us : 0) * 1000;
    uint64_t timeout_ns = (uint64_t)(x->timeout_ms > 0 ? x->timeout_ms : 60000) * 1000000ull;
    unsigned idle_polls = 0;
    int published = 0; /* the peer we wait on is in x->self->waits_on */
    sh_bell *armed = NULL; /* counted among the bell's sleepers, taking a last look */
    uint32_t armed_seq = 0;
    shoal_result rc = SHOAL_OK;
    for (;;) {
        int pending = 0;
        size_t moved = 0;
        for (int i = 0; i < nops; i++) {
            if (op_done(&ops[i], &cys[i])) continue;
            ssize_t n = step(x, &ops[i], &cys[i], stage);
            if (n < 0) {
                char pb[128];
                sh_err_prefix("%s with %s: ", x->what, peer_str(x, ops[i].link->peer, pb, sizeof pb));
                rc = SHOAL_ERR_PEER;
                goto out;
            }
            if (ops[i].kind == SH_XFER_SEND) ops[i].done += (size_t)n;
            moved += (size_t)n;
            if (!op_done(&ops[i], &cys[i])) pending++;
        }
        if (!pending) goto out;
        /* The clock is read only every few idle polls (it costs as much as a poll), and a
         * poll that moved bytes restarts the idle period. */
        if (moved) {
            if (armed) atomic_fetch_sub_explicit(&armed->sleepers, 1, memory_order_relaxed);
            armed = NULL;
            idle_polls = 0;
            last_ns = 0;
            continue;
        }
        /* An engine nobody waits for sleeps at once: its spinning would only slow the
         * application thread that shares its core. */
        int gated = x->waiters && atomic_load_explicit(x->waiters, memory_order_relaxed) == 0;
        if (!armed && !gated && ++idle_polls < 16 && spin_ns > 0) continue;
        idle_polls = 0;
        uint64_t now = sh_now_ns();
        if (last_ns == 0) last_ns = now;
        uint64_t idle = now - last_ns;
        /* Waiting a while: say on whom, for the host's other ranks (peer_waits_on). */
        if (x->self && idle > WAIT_PUBLISH_NS && !published) {
            for (int i = 0; i < nops; i++)
                if (!op_done(&ops[i], &cys[i])) {
                    atomic_store_explicit(&x->self->waits_on, ops[i].link->peer + 1, memory_order_relaxed);
                    published = 1;
                    break;
                }
        }
        if (idle > timeout_ns) {
            char names[640] = "", pb[128];
            size_t len = 0;
            for (int i = 0; i < nops && len < sizeof names - 1; i++) {
                if (op_done(&ops[i], &cys[i])) continue;
                sh_link *l = ops[i].link;
                len += (size_t)snprintf(names + len, sizeof names - len, "%s%s (%s)",
                                        len ? ", " : "", peer_str(x, l->peer, pb, sizeof pb),
                                        ops[i].kind == SH_XFER_SEND ? "sending" : "receiving");
                /* a peer on this host that waits on someone else itself: name the end of the chain */
                int w = l->ops->peer_waits_on ? l->ops->peer_waits_on(l) : -1;
                if (w >= 0 && w != l->peer && len < sizeof names - 1)
                    len += (size_t)snprintf(names + len, sizeof names - len, ", which itself waits on %s",
                                            peer_str(x, w, pb, sizeof pb));
            }
            rc = SH_FAIL(SHOAL_ERR_TIMEOUT,
                         "%s: no progress for %d ms waiting on %s; the peer is dead, frozen or "
                         "unreachable (SHOAL_TIMEOUT sets the deadline)",
                         x->what, x->timeout_ms, names);
            goto out;
        }
        if (!gated && idle < spin_ns) continue;
        /* Past the spin: sleep on sockets when every pending op has one, or on the doorbell
         * when every pending op shares one; else yield, and after a millisecond of nothing,
         * nap so a slow peer is not starved of the core. */
        struct pollfd pf[MAX_OPS];
        int npf = 0, all_fd = 1;
        sh_bell *bell = NULL;
        int first = 1;
        for (int i = 0; i < nops; i++) {
            if (op_done(&ops[i], &cys[i])) continue;
            sh_link *l = ops[i].link;
            if (l->fd < 0) all_fd = 0;
            if (first) bell = l->bell;
            else if (l->bell != bell) bell = NULL;
            first = 0;
            if (all_fd) {
                pf[npf].fd = l->fd;
                pf[npf].events = ops[i].kind == SH_XFER_SEND ? POLLOUT : POLLIN;
                pf[npf].revents = 0;
                npf++;
            }
            if (!all_fd && !bell) break;
        }
        if (all_fd) {
            uint64_t left_ms = (timeout_ns - idle) / 1000000ull + 1;
            poll(pf, (nfds_t)npf, left_ms > 100 ? 100 : (int)left_ms);
        } else if (bell && (gated || idle >= 1000000ull)) {
            if (!armed) {
                /* Count ourselves asleep, then take one more look before sleeping. */
                armed_seq = atomic_load_explicit(&bell->seq, memory_order_seq_cst);
                atomic_fetch_add_explicit(&bell->sleepers, 1, memory_order_seq_cst);
                armed = bell;
                continue;
            }
            uint64_t left = timeout_ns - idle;
            int ran_out = bell_sleep(bell, armed_seq, left < 10000000ull ? left : 10000000ull);
            atomic_fetch_sub_explicit(&bell->sleepers, 1, memory_order_relaxed);
            armed = NULL;
            /* A dead peer rings nothing: after a quiet sleep, ask the links about theirs. */
            for (int i = 0; ran_out && i < nops; i++) {
                if (op_done(&ops[i], &cys[i]) || !ops[i].link->ops->check) continue;
                if (ops[i].link->ops->check(ops[i].link) < 0) {
                    char pb[128];
                    sh_err_prefix("%s with %s: ", x->what, peer_str(x, ops[i].link->peer, pb, sizeof pb));
                    rc = SHOAL_ERR_PEER;
                    goto out;
                }
            }
        } else if (idle < 1000000ull) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
out:
    if (armed) atomic_fetch_sub_explicit(&armed->sleepers, 1, memory_order_relaxed);
    if (published && rc == SHOAL_OK) atomic_store_explicit(&x->self->waits_on, 0, memory_order_relaxed);
    return rc;
}
