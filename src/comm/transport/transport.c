/* transport.c — the table of transports and the walk over it that links a communicator's
 * rank to every peer.
 * Not here: each transport's policy and links (shm.c, tcp.c, mpi.c), the rendezvous that
 * tells every rank every other rank's host (boot/boot.c).
 * Proved by tests/comm/test_comm.c (SHOAL_TRANSPORT=shm/tcp/auto) and
 * tests/comm/test_mpi_transport.c. */
#include "comm/transport/transport.h"

#include <stdlib.h>

#include "base/err.h"
#include "comm/transport/window.h"

static const sh_transport_ops *const table[] = {&sh_mpi_transport, &sh_shm_transport, &sh_tcp_transport};
enum { NTRANSPORTS = sizeof table / sizeof table[0], TCP = NTRANSPORTS - 1 };

shoal_result sh_transport_connect_all(shoal_comm *c)
{
    unsigned char *want = calloc((size_t)NTRANSPORTS * (size_t)c->world, 1);
    if (!want) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    shoal_result rc = SHOAL_OK;
    int any[NTRANSPORTS] = {0};
    for (int p = 0; p < c->world && rc == SHOAL_OK; p++) {
        if (p == c->rank) continue;
        int t = 0;
        while (t < NTRANSPORTS && !table[t]->can_reach(c, p)) t++;
        if (t == NTRANSPORTS) {
            char pb[128];
            rc = SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_TRANSPORT=shm but %s is on another host; use "
                         "auto or tcp", sh_comm_peer_name(c, p, pb, sizeof pb));
            break;
        }
        want[(size_t)t * (size_t)c->world + (size_t)p] = 1;
        any[t] = 1;
    }
    for (int t = 0; t < NTRANSPORTS && rc == SHOAL_OK; t++) {
        if (!any[t]) continue;
        unsigned char *mine = want + (size_t)t * (size_t)c->world, *tcp = want + (size_t)TCP * (size_t)c->world;
        rc = table[t]->connect(c, mine);
        if (rc == SHOAL_ERR_UNSUPPORTED && t < TCP) { /* e.g. /dev/shm too small: TCP takes these peers */
            for (int p = 0; p < c->world; p++)
                if (mine[p] && !c->coll[p]) tcp[p] = any[TCP] = 1;
            rc = SHOAL_OK;
        }
    }
    free(want);
    return rc;
}

void sh_transport_destroy_all(shoal_comm *c)
{
    if (c->shm) sh_window_free_all(c->shm); /* windows live in the host's shared memory */
    for (int t = NTRANSPORTS - 1; t >= 0; t--)
        if (table[t]->destroy) table[t]->destroy(c);
}
