/* shm_slots.c — each local rank's slots in the shared segment: publishing a small
 * collective's header and data, reading the others' in place, marking it done, and the
 * polls a waiting rank hands to the transfer engine (SH_XFER_POLL).
 * Not here: the collectives run through the slots (coll/slots.c), the segment (shm.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_transport_shm.c. */
#include <stdatomic.h>
#include <string.h>

#include "comm/transport/shm.h"
#include "comm/transport/shm_seg.h"
#include "comm/transport/xfer.h"

int sh_shm_slots_usable(const shoal_comm *c)
{
    return c->shm && c->world > 1 && c->shm->nlocal == c->world; /* every rank is in the segment */
}

/* Every rank here is on this host and in the segment, so local index = rank. */
static slot_area *my_slots(const shoal_comm *c) { return slots_at(c->shm->base, c->shm->nlocal, c->rank); }

const void *sh_shm_slot_data(const shoal_comm *c, int rank, uint64_t seq)
{
    return slots_at(c->shm->base, c->shm->nlocal, rank)->s[seq & 1].data;
}

/* Wake whoever sleeps on a slot of ours (cheap when nobody does). */
static void ring_others(const shoal_comm *c)
{
    for (int i = 0; i < c->shm->nlocal; i++)
        if (i != c->rank) sh_bell_ring(bell_at(c->shm->base, c->shm->nlocal, i));
}

void sh_shm_slot_publish(shoal_comm *c, uint64_t seq, const void *hdr, const void *data, size_t nbytes)
{
    slot *sl = &my_slots(c)->s[seq & 1];
    memcpy(sl->hdr, hdr, SH_SHM_SLOT_HDR_NBYTES);
    if (nbytes) memcpy(sl->data, data, nbytes);
    atomic_store_explicit(&sl->seq, seq + 1, memory_order_release);
    ring_others(c);
}

void sh_shm_slot_done(shoal_comm *c, uint64_t seq)
{
    atomic_store_explicit(&my_slots(c)->done, seq + 1, memory_order_release);
    ring_others(c);
}

ssize_t sh_shm_slot_free_poll(sh_link *l, sh_xfer_op *op)
{
    shm_link *s = l->impl;
    if (atomic_load_explicit(&s->peer_slots->done, memory_order_acquire) >= op->arg + 1) return (ssize_t)op->nbytes;
    return sh_shm_link_gone(s, "waiting for it to finish the previous small collective") == SHOAL_OK ? 0 : -1;
}

ssize_t sh_shm_slot_recv_poll(sh_link *l, sh_xfer_op *op)
{
    shm_link *s = l->impl;
    /* The ring is read first, the slot after: a peer publishes its slot before it sends
     * anything for its next collective, so bytes seen on the ring with this slot still
     * unpublished are a call of another kind, not a peer that published and went on (the
     * other order took those for a mismatch). */
    ring *r = s->in;
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    const slot *sl = &s->peer_slots->s[op->arg & 1];
    if (atomic_load_explicit(&sl->seq, memory_order_acquire) == op->arg + 1) {
        memcpy(op->buf, sl->hdr, op->nbytes);
        s->idle_polls = 0;
        return (ssize_t)op->nbytes;
    }
    /* Bytes on the ring: the peer made a call that talks through the rings; its first
     * bytes are its own header. */
    if (head - tail >= op->nbytes) {
        for (size_t i = 0; i < op->nbytes; i++)
            ((unsigned char *)op->buf)[i] = r->data[(size_t)((tail + i) % s->in_size)];
        op->flag = 1;
        return (ssize_t)op->nbytes;
    }
    return sh_shm_link_gone(s, "waiting for its message") == SHOAL_OK ? 0 : -1;
}
