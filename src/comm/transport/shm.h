/* shm.h — the shared-memory transport as the rest of comm sees it: links between ranks of one
 * host through one segment per host (shm.c), each rank's slots for small collectives
 * (shm_slots.c), the tests' fork harness (shm_test.c). Segments are mode 0600 and never left
 * named in /dev/shm (shm_seg.c), even when ranks are killed.
 * Not here: the segment's layout (shm_seg.h), windows (window.h), the collectives that use the
 * slots and the peers' memory (coll/slots.c, coll/cma.c), waiting (xfer.c).
 * Proved by tests/comm/test_transport_shm.c and tests/comm/test_comm.c. */
#ifndef SH_COMM_SHM_H
#define SH_COMM_SHM_H

#include <sys/types.h>

#include "comm/comm_internal.h"

/* This host's segment as a communicator keeps it (c->shm). */
struct sh_shm {
    void *base;
    size_t nbytes;
    int nlocal;
    int *pid_of;      /* [world]: process of each rank on this host, 0 elsewhere */
    int cma;          /* 1: process_vm_readv works between our ranks, -1: it does not, 0: untried */
    struct shoal_window *windows; /* newest first (window.c) */
    int nwindows;
    sh_bell *my_bell; /* this rank's doorbell in the segment */
};

/* Collective over c's ranks: make c->coll[p] and c->p2p[p] for every p with want[p] (all
 * on this host). Rendezvous through c->store under c->prefix. */
shoal_result sh_shm_connect(shoal_comm *c, const unsigned char *want);
void sh_shm_destroy(struct sh_shm *s); /* NULL is fine; its windows are freed first (window.h) */

/* Slots: small collectives in one step when every rank is on this host. Each rank writes
 * its header and data into its own slot for the collective (sh_shm_slot_publish, ringing
 * the others' doorbells), waits for every other rank's (an SH_XFER_POLL op on the link to
 * it with sh_shm_slot_recv_poll, which also notices a peer that talks through the ring
 * instead: a mismatch), reads their data in place (sh_shm_slot_data) and marks the
 * collective done. A slot is written again two collectives later; when the collective just
 * before was not a slot one, the writer first waits (SH_XFER_POLL ops with
 * sh_shm_slot_free_poll) until every rank has finished the last slot collective that used
 * the same slot. */
enum { SH_SHM_SLOT_HDR_NBYTES = 32, SH_SHM_SLOT_NBYTES = 4096 };
int sh_shm_slots_usable(const shoal_comm *c);
void sh_shm_slot_publish(shoal_comm *c, uint64_t seq, const void *hdr, const void *data, size_t nbytes);
const void *sh_shm_slot_data(const shoal_comm *c, int rank, uint64_t seq);
void sh_shm_slot_done(shoal_comm *c, uint64_t seq);
/* Polls for SH_XFER_POLL ops on a shared-memory link to a peer (never block).
 * recv: when the peer's slot holds its message of collective op->arg, copy its header
 * (op->nbytes bytes) into op->buf and return op->nbytes. When the peer talks on the ring
 * instead (it made a call that does not use the slots), copy its first op->nbytes ring
 * bytes, set op->flag and return op->nbytes.
 * free: return op->nbytes once the peer has finished collective op->arg.
 * Otherwise 0, or -1 after sh_fail() when the peer is gone. */
ssize_t sh_shm_slot_recv_poll(sh_link *l, sh_xfer_op *op);
ssize_t sh_shm_slot_free_poll(sh_link *l, sh_xfer_op *op);

/* For the tests' fork harness: a segment for `world` ranks made before fork (anonymous
 * shared memory), and rank c->rank's links attached to it after. */
int sh_shm_test_prepare(int world, void **state);
int sh_shm_test_attach(void *state, shoal_comm *c);
void sh_shm_test_release(void *state);

#endif
