/* link.h — a reliable, ordered byte stream to one peer (TCP socket, shared-memory ring, MPI),
 * and the engine that moves several transfers at once until all are done, one fails, or no
 * byte has moved for the communicator's timeout.
 * Not here: making links (transport_*.c), what the bytes mean (algo_*.c, p2p.c).
 * Proved by tests/comm/test_link.c. */
#ifndef SH_LINK_H
#define SH_LINK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shoal/result.h"

typedef struct sh_link sh_link;
struct sh_xfer_op;

/* A doorbell a waiting rank sleeps on (a futex word in memory shared by the host's ranks):
 * whoever moves bytes on a link whose other side may be asleep rings that side's bell.
 * The sleeper counts itself in sleepers before its last look, the ringer fences after
 * moving bytes before it reads sleepers, so one of them always sees the other. */
typedef struct {
    _Alignas(64) _Atomic uint32_t seq;
    _Atomic uint32_t sleepers;
} sh_bell;
void sh_bell_ring(sh_bell *b);

typedef struct {
    const char *name; /* "tcp", "shm", "mpi" */
    /* Never block. Return the bytes moved (0: nothing possible now), or -1 after sh_fail()
     * with SHOAL_ERR_PEER when the peer is gone (EOF, reset, aborted ring). */
    ssize_t (*send_some)(sh_link *l, const void *buf, size_t nbytes);
    ssize_t (*recv_some)(sh_link *l, void *buf, size_t nbytes);
    /* Optional (NULL when the transport has no in-place view): the readable bytes in place
     * (*nbytes of them, 0 when none) so a reduction can read them without a copy; then
     * recv_consume(n) releases n <= *nbytes of them. Returns NULL after sh_fail() when the
     * peer is gone. */
    const void *(*recv_peek)(sh_link *l, size_t *nbytes);
    void (*recv_consume)(sh_link *l, size_t nbytes);
    /* Tell the peer this side gives up (best effort, never blocks); reason may be NULL. */
    void (*abort)(sh_link *l, const char *reason);
    /* Optional: -1 after sh_fail() when the peer is known to be gone (asked after a
     * sleep on the bell ran out, since a dead peer rings nothing). */
    int (*check)(sh_link *l);
    /* Optional (shared memory), for SH_XFER_SLOT_RECV and SH_XFER_SLOT_FREE; never blocks.
     * SLOT_RECV: when the peer's slot holds its message of collective op->seq
     * (sh_shm_slot_publish), copy its header (op->nbytes bytes) into op->buf and return
     * op->nbytes. When the peer talks on the ring instead (it made a call that does not use
     * the slots), copy its first op->nbytes ring bytes, set op->from_ring and return
     * op->nbytes. SLOT_FREE: return op->nbytes once the peer has finished collective
     * op->seq (sh_shm_slot_done). Otherwise 0, or -1 after sh_fail() when the peer is gone. */
    ssize_t (*slot_wait)(sh_link *l, struct sh_xfer_op *op);
    void (*close)(sh_link *l); /* frees l */
} sh_link_ops;

struct sh_link {
    const sh_link_ops *ops;
    int peer;  /* rank of the other end in the owning communicator */
    int fd;    /* pollable descriptor for sleeping on, or -1 (shared memory: spin, yield) */
    sh_bell *bell; /* or a doorbell to sleep on (shared memory), or NULL */
    void *impl;
};

/* A link over a connected stream socket (TCP or a socketpair); takes ownership of fd and
 * makes it non-blocking. */
shoal_result sh_link_fd_create(int fd, int peer, sh_link **out);
void sh_link_close(sh_link *l); /* NULL is fine */

/* One transfer for the engine. For SH_XFER_RECV_REDUCE the bytes received are reduced into
 * buf (buf = buf OP incoming) with the reduction given to sh_xfer, element by element; the
 * engine keeps partial elements itself, so the link may deliver any split. */
typedef enum { SH_XFER_SEND, SH_XFER_RECV, SH_XFER_RECV_REDUCE, SH_XFER_SLOT_RECV, SH_XFER_SLOT_FREE } sh_xfer_kind;
typedef struct sh_xfer_op {
    sh_link *link;
    sh_xfer_kind kind;
    void *buf;      /* const for SEND */
    size_t nbytes;
    size_t done;    /* engine-owned progress; set to 0 */
    const void *src; /* RECV_REDUCE only, optional: buf = src OP incoming (saves a copy) */
    uint64_t seq;    /* SLOT_RECV / SLOT_FREE: the collective awaited */
    int from_ring;   /* SLOT_RECV only, set by the link: the header came from the ring */
} sh_xfer_op;

typedef struct {
    const char *what;   /* "allreduce", "send", ...: names the operation in errors */
    int timeout_ms;     /* give up when no byte moved on any op for this long */
    int spin_us;        /* spin this long before yielding / sleeping */
    /* Non-NULL on a thread that works for others (the communicator's engine): the number of
     * threads waiting for its results. While none waits, the engine does not spin or yield
     * (that only takes the core from the application's computing thread) but sleeps on the
     * links' bell at once. */
    const _Atomic int *waiters;
    int dtype, op;      /* shoal_dtype / shoal_op for SH_XFER_RECV_REDUCE */
    /* Names a peer in error messages ("rank 3 (hostb)"); NULL: "rank N". */
    const char *(*peer_name)(void *ctx, int peer, char *buf, size_t cap);
    void *ctx;
} sh_xfer_ctx;

/* Run all ops to completion, interleaved (so a ring step's send and receive never
 * deadlock). Errors: SHOAL_ERR_PEER (a link failed: names peer and operation),
 * SHOAL_ERR_TIMEOUT (no progress for timeout_ms: names the peers still pending). */
shoal_result sh_xfer(const sh_xfer_ctx *x, sh_xfer_op *ops, int nops);

#endif
