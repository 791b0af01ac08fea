/* tcp.h — links between ranks over TCP: each rank listens on its interface,
 * publishes the address in the store, and every pair makes two authenticated connections
 * (collective and point-to-point planes).
 * Not here: the handshake and socket helpers (boot/sock.c), what flows (coll/, p2p.c).
 * Proved by tests/comm/test_transport_tcp.c, test_comm.c (SHOAL_TRANSPORT=tcp), test_comm_faults.c. */
#ifndef SH_COMM_TCP_H
#define SH_COMM_TCP_H

#include "comm/comm_internal.h"
#include "comm/transport/transport.h"

/* Collective over c's ranks: make c->coll[p] and c->p2p[p] for every p with want[p]
 * (want must be symmetric). Rendezvous through c->store under c->prefix ("w/tcp/3"), with
 * the job key c->store connected with. Listens on SHOAL_SOCKET_IFNAME's address, else the
 * one that routes to the store's host; every address only with SHOAL_BIND_ALL=1. Blocks up
 * to c->timeout_ms. Errors: SHOAL_ERR_TIMEOUT naming the ranks that never came,
 * SHOAL_ERR_PEER naming a peer that refused us, SHOAL_ERR_INVALID for a bad interface. */
shoal_result sh_tcp_connect(shoal_comm *c, const unsigned char *want);

#endif
