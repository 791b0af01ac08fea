/* xfer.h — the engine that moves several transfers on links at once until all are done,
 * one fails, or no byte has moved for the communicator's timeout; and the doorbells a
 * waiting rank sleeps on.
 * Not here: links and their transports (link.h, shm.c, tcp.c, mpi.c), what the bytes
 * mean (coll/, p2p.c).
 * Proved by tests/comm/test_link.c. */
#ifndef SH_COMM_XFER_H
#define SH_COMM_XFER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "comm/transport/link.h"

/* A doorbell a waiting rank sleeps on (a futex word in memory shared by the host's ranks):
 * whoever moves bytes on a link whose other side may be asleep rings that side's bell.
 * The sleeper counts itself in sleepers before its last look, the ringer fences after
 * moving bytes before it reads sleepers, so one of them always sees the other. */
struct sh_bell {
    _Alignas(64) _Atomic uint32_t seq;
    _Atomic uint32_t sleepers;
    /* The rank (plus 1; 0: none) this bell's owner has been waiting on for a while, so that
     * a host's ranks that time out behind it can name whom the whole host waits on. */
    _Atomic int32_t waits_on;
};
void sh_bell_ring(sh_bell *b);

/* One transfer for the engine. For SH_XFER_RECV_REDUCE the bytes received are reduced into
 * buf (buf = buf OP incoming) with the reduction given to sh_xfer, element by element; the
 * engine keeps partial elements itself, so the link may deliver any split.
 * SH_XFER_POLL waits for a condition the link's transport checks without blocking (the
 * shared-memory slots, transport/shm_slots.c): poll(link, op) returns op->nbytes once it
 * holds (having filled op->buf with op->nbytes bytes when it has something to hand over),
 * 0 while it does not, or -1 after sh_fail() when the peer is gone. arg is poll's input,
 * flag its extra output. The engine waits on a POLL op as on a receive. */
typedef enum { SH_XFER_SEND, SH_XFER_RECV, SH_XFER_RECV_REDUCE, SH_XFER_POLL } sh_xfer_kind;
typedef struct sh_xfer_op {
    sh_link *link;
    sh_xfer_kind kind;
    void *buf;      /* const for SEND */
    size_t nbytes;
    size_t done;    /* engine-owned progress; set to 0 */
    const void *src; /* RECV_REDUCE only, optional: buf = src OP incoming (saves a copy) */
    uint64_t arg;    /* POLL only: for poll (the slots: the collective awaited) */
    int flag;        /* POLL only: set by poll (the slots: the header came from the ring) */
    ssize_t (*poll)(sh_link *l, struct sh_xfer_op *op); /* POLL only */
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
    /* Optional: this rank's bell in its host's shared segment, where the engine publishes
     * the peer it has been waiting on (sh_bell.waits_on) for the links' peer_waits_on. */
    sh_bell *self;
} sh_xfer_ctx;

/* Run all ops to completion, interleaved (so a ring step's send and receive never
 * deadlock). Errors: SHOAL_ERR_PEER (a link failed: names peer and operation),
 * SHOAL_ERR_TIMEOUT (no progress for timeout_ms: names the peers still pending). */
shoal_result sh_xfer(const sh_xfer_ctx *x, sh_xfer_op *ops, int nops);

#endif
