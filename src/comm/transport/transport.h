/* transport.h — the transports a communicator's links can go over, as one table: shared
 * memory inside a host, TCP between hosts (or forced), MPI point-to-point (make MPI=1).
 * Each row says which peers it serves under c->transport, makes their links, and frees
 * what it keeps; connecting a communicator walks the table.
 * Not here: the links themselves (link.h, shm.c, tcp.c, mpi.c), moving bytes (xfer.c).
 * Proved by tests/comm/test_comm.c, test_transport_shm.c, test_transport_tcp.c and
 * test_mpi_transport.c. */
#ifndef SH_COMM_TRANSPORT_H
#define SH_COMM_TRANSPORT_H

#include "comm/comm_internal.h"

typedef struct {
    const char *name; /* "mpi", "shm", "tcp" */
    /* 1 when this transport links c's rank to peer under c->transport (SHOAL_TRANSPORT);
     * at most one row says so for a peer. */
    int (*can_reach)(const shoal_comm *c, int peer);
    /* Collective over c's ranks: make c->coll[p] and c->p2p[p] for every p with want[p]
     * (symmetric: if p wants us, we want p). Called only when some peer is wanted.
     * SHOAL_ERR_UNSUPPORTED (on every rank concerned alike): none made, TCP takes them. */
    shoal_result (*connect)(shoal_comm *c, const unsigned char *want);
    /* Free what the transport keeps in c beyond its links (NULL: nothing). */
    void (*destroy)(shoal_comm *c);
} sh_transport_ops;

extern const sh_transport_ops sh_shm_transport; /* shm.c */
extern const sh_transport_ops sh_tcp_transport; /* tcp.c */
extern const sh_transport_ops sh_mpi_transport; /* mpi.c */

/* Links for every peer by the first row that can reach it; a peer none reaches is
 * SHOAL_ERR_INVALID (SHOAL_TRANSPORT=shm with a peer on another host). Rows connect in
 * table order: mpi, shm, tcp; the peers of a row that cannot serve them (shared memory
 * without room) go to tcp. */
shoal_result sh_transport_connect_all(shoal_comm *c);
/* What the transports keep: the shared windows, then segments and MPI state in reverse
 * table order; links are closed by sh_comm_free. */
void sh_transport_destroy_all(shoal_comm *c);

#endif
