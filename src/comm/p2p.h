/* p2p.h — tagged point-to-point messages over the c->p2p links: framed messages, posted
 * receives matched in order by (peer, tag) or (any, tag), unexpected messages kept until
 * asked for, sends that drain incoming traffic while they wait (so two ranks sending to
 * each other never deadlock), and a progress thread for the non-blocking forms.
 * Not here: collectives (coll/), the public argument checks (comm.c).
 * Proved by tests/comm/test_comm.c (p2p cases). */
#ifndef SH_P2P_H
#define SH_P2P_H

#include "comm/comm_internal.h"

typedef struct sh_p2p_op sh_p2p_op;

/* Start a send (payload copied: the caller's buffer is free at return) or a receive
 * (buf borrowed until the op completes). peer < 0 on a receive: any rank. */
shoal_result sh_p2p_send_start(shoal_comm *c, const void *buf, size_t nbytes, shoal_dtype dt,
                               int peer, int tag, sh_p2p_op **out);
shoal_result sh_p2p_recv_start(shoal_comm *c, void *buf, size_t nbytes, shoal_dtype dt, int peer,
                               int tag, int timeout_ms, sh_p2p_op **out);
/* Wait (blocking) / test; both free the op when they report it done. *peer and *nbytes
 * (may be NULL) tell a receive who sent how much. */
shoal_result sh_p2p_wait(sh_p2p_op *op, int *peer, size_t *nbytes);
shoal_result sh_p2p_test(sh_p2p_op *op, int *done);
void sh_p2p_destroy(shoal_comm *c);
/* SHOAL_ERR_PEER (naming the peer and what ended its link) once this plane saw the link to
 * peer end; else SHOAL_OK. Never blocks; any thread. */
shoal_result sh_p2p_peer_lost(shoal_comm *c, int peer);

#endif
