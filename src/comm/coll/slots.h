/* slots.h — small collectives (a contribution of at most SH_SHM_SLOT_NBYTES per rank) in
 * one step through the shared-memory slots when every rank is on this host (slots.c).
 * Not here: the slots (transport/shm_slots.c), when this path is taken (select.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_transport_shm.c. */
#ifndef SH_COMM_SLOTS_H
#define SH_COMM_SLOTS_H

#include "comm/comm_internal.h"

/* 1 when every rank of c shares this host's slots (64 ranks at most) and op's
 * contribution fits one slot. */
int sh_slots_fits(const shoal_comm *c, const sh_coll *op);
/* Any collective, the mismatch check included (all pairs); applies op->apply on the
 * whole result. */
shoal_result sh_slots_coll(shoal_comm *c, const sh_coll *op);

#endif
