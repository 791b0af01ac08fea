/* transport_tcp.h — links between ranks over TCP: each rank listens on its interface,
 * publishes the address in the store, and every pair makes two authenticated connections
 * (collective and point-to-point planes).
 * Not here: the handshake and socket helpers (net.c), what flows (algo_*.c, p2p.c).
 * Proved by tests/comm/test_comm.c (SHOAL_TRANSPORT=tcp) and tests/comm/test_comm_faults.c. */
#ifndef SH_TRANSPORT_TCP_H
#define SH_TRANSPORT_TCP_H

#include "comm/comm_internal.h"

/* Collective over c's ranks: make c->coll[p] and c->p2p[p] for every p with want[p]
 * (want must be symmetric). Rendezvous through c->store under c->prefix. */
shoal_result sh_tcp_connect(shoal_comm *c, const unsigned char *want);

#endif
