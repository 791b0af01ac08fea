/* link.h — a reliable, ordered byte stream to one peer (TCP socket, shared-memory ring, MPI):
 * the operations every transport's link provides, and the link over a stream socket.
 * Not here: making links (transport.c and each transport), moving bytes on several links
 * at once (xfer.c), what the bytes mean (coll/, p2p.c).
 * Proved by tests/comm/test_link.c. */
#ifndef SH_COMM_LINK_H
#define SH_COMM_LINK_H

#include <stddef.h>
#include <sys/types.h>

#include "shoal/result.h"

typedef struct sh_link sh_link;
typedef struct sh_bell sh_bell; /* xfer.h */

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
    /* Optional: the rank the peer itself has been waiting on for a while (its engine
     * publishes it), or -1: lets a timeout name the rank a chain of waits ends at. */
    int (*peer_waits_on)(sh_link *l);
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

#endif
