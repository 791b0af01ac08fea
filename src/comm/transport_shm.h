/* transport_shm.h — links between ranks of one host through one shared segment per host:
 * a single-producer single-consumer ring per ordered pair and plane; and shared windows
 * (shoal_window_create), one segment each. Segments are mode 0600 and unlinked as soon as
 * every local rank has mapped them, so nothing is left in /dev/shm, even when ranks are
 * killed.
 * Not here: the algorithms (algo.c), the engine that waits on links (link.c).
 * Proved by tests/comm/test_transport_shm.c and tests/comm/test_comm.c. */
#ifndef SH_TRANSPORT_SHM_H
#define SH_TRANSPORT_SHM_H

#include "comm/comm_internal.h"

/* Collective over c's ranks: make c->coll[p] and c->p2p[p] for every p with want[p] (all
 * on this host). Rendezvous through c->store under c->prefix. */
shoal_result sh_shm_connect(shoal_comm *c, const unsigned char *want);
void sh_shm_destroy(struct sh_shm *s); /* NULL is fine */

/* Allreduces from 32 KiB with every rank on this host: each rank reduces its block reading
 * the others' buffers directly (process_vm_readv) and writes the finished pieces into
 * their results (process_vm_writev). */
int sh_shm_coll_supported(const shoal_comm *c, const sh_coll *op);
shoal_result sh_shm_coll_run(shoal_comm *c, const sh_coll *op);
/* Buffers in shared windows (shoal_window_create) are read and written in place instead
 * of by CMA. An allreduce_apply with params in a window's common block must take
 * sh_shm_coll_run whatever its size (sh_shm_window_apply says so): every other path
 * updates everything on every rank, which on one shared copy would apply each step
 * world times. */
int sh_shm_window_apply(const shoal_comm *c, const sh_coll *op);
int sh_shm_window_common(const shoal_comm *c, const void *p, size_t nbytes);

/* Slots: small collectives in one step when every rank is on this host. Each rank writes
 * its header and data into its own slot for the collective (sh_shm_slot_publish, ringing
 * the others' doorbells), waits for every other rank's (an SH_XFER_SLOT_RECV op on the
 * link to it, which also notices a peer that talks through the ring instead: a mismatch),
 * reads their data in place (sh_shm_slot_data) and marks the collective done. A slot is
 * written again two collectives later; when the collective just before was not a slot
 * one, the writer first waits (SH_XFER_SLOT_FREE ops) until every rank has finished the
 * last slot collective that used the same slot. */
enum { SH_SHM_SLOT_HDR_NBYTES = 32, SH_SHM_SLOT_NBYTES = 4096 };
int sh_shm_slots_usable(const shoal_comm *c);
void sh_shm_slot_publish(shoal_comm *c, uint64_t seq, const void *hdr, const void *data, size_t nbytes);
const void *sh_shm_slot_data(const shoal_comm *c, int rank, uint64_t seq);
void sh_shm_slot_done(shoal_comm *c, uint64_t seq);

/* For the tests' fork harness: a segment for `world` ranks made before fork (anonymous
 * shared memory), and rank c->rank's links attached to it after. */
int sh_shm_test_prepare(int world, void **state);
int sh_shm_test_attach(void *state, shoal_comm *c);
void sh_shm_test_release(void *state);

#endif
