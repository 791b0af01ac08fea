/* shm_seg.h — the layout of a host's shared segment, for the files of the shared-memory
 * transport only: the rings (one per ordered pair of local ranks and plane), one doorbell
 * per local rank, each rank's slot area; a link's view of it; and the helpers that make and
 * attach named segments (shared with the windows).
 * Not here: the API the rest of comm sees (shm.h, window.h).
 * Proved by tests/comm/test_transport_shm.c and tests/comm/test_comm.c. */
#ifndef SH_COMM_SHM_SEG_H
#define SH_COMM_SHM_SEG_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/transport/shm.h"
#include "comm/transport/xfer.h"

enum { COLL_RING_NBYTES = 1 << 20, P2P_RING_NBYTES = 256 << 10, LINE = 64 };

typedef struct {
    _Alignas(LINE) _Atomic uint64_t head; /* bytes ever written */
    _Alignas(LINE) _Atomic uint64_t tail; /* bytes ever read */
    _Alignas(LINE) _Atomic int aborted;
    int32_t writer_pid, reader_pid;
    char reason[256];
    _Alignas(LINE) unsigned char data[];
} ring;

/* Each local rank's slots for small collectives (sh_shm_slot_*): one message per collective,
 * read in place by every other rank, in two sets used by alternate collectives. The first
 * line holds seq, the header and the first bytes of data, so an 8-byte allreduce is one
 * cache line. */
typedef struct {
    _Alignas(LINE) _Atomic uint64_t seq; /* the collective whose message this is, plus 1 */
    unsigned char hdr[SH_SHM_SLOT_HDR_NBYTES];
    unsigned char data[SH_SHM_SLOT_NBYTES];
} slot;

typedef struct {
    _Alignas(LINE) _Atomic uint64_t done; /* the last slot collective this rank finished, plus 1 */
    slot s[2];
} slot_area;

typedef struct {
    ring *out, *in;
    size_t out_size, in_size;
    slot_area *peer_slots;
    int peer_pid;
    unsigned idle_polls;
    sh_bell *peer_bell; /* rung after moving bytes, in case the peer sleeps on them */
} shm_link;

static inline size_t ring_stride(size_t data_nbytes) { return (sizeof(ring) + data_nbytes + LINE - 1) / LINE * LINE; }

/* Layout: for each ordered pair (from, to) of local indices and each plane, one ring; then
 * one doorbell per local rank. */
static inline size_t rings_nbytes(int nlocal)
{
    size_t pairs = (size_t)nlocal * (size_t)nlocal;
    return pairs * (ring_stride(COLL_RING_NBYTES) + ring_stride(P2P_RING_NBYTES));
}

static inline size_t bells_nbytes(int nlocal) { return ((size_t)nlocal * sizeof(sh_bell) + LINE - 1) / LINE * LINE; }

static inline size_t segment_nbytes(int nlocal)
{
    return rings_nbytes(nlocal) + bells_nbytes(nlocal) + (size_t)nlocal * sizeof(slot_area);
}

static inline slot_area *slots_at(void *base, int nlocal, int i)
{
    return (slot_area *)((unsigned char *)base + rings_nbytes(nlocal) + bells_nbytes(nlocal)) + i;
}

static inline sh_bell *bell_at(void *base, int nlocal, int i)
{
    return (sh_bell *)((unsigned char *)base + rings_nbytes(nlocal)) + i;
}

static inline ring *ring_at(void *base, int nlocal, int from, int to, int plane)
{
    size_t pair = (size_t)from * (size_t)nlocal + (size_t)to;
    size_t off = pair * (ring_stride(COLL_RING_NBYTES) + ring_stride(P2P_RING_NBYTES));
    if (plane) off += ring_stride(COLL_RING_NBYTES);
    return (ring *)((unsigned char *)base + off);
}

/* SHOAL_OK, or SHOAL_ERR_PEER after sh_fail() when the peer aborted the ring or its process
 * is gone (asked every 4096th idle look); dir says what we were doing ("receiving"). */
shoal_result sh_shm_link_gone(shm_link *s, const char *dir);
/* c->coll[p] and c->p2p[p] for each local rank p with want[p], over the segment at base
 * (local_ranks[i] is local index i; pids may be NULL: a dead peer is then not noticed). */
shoal_result sh_shm_make_links(shoal_comm *c, void *base, int nlocal, const int *local_ranks,
                               const int *pids, const unsigned char *want);
/* A named segment of nbytes for the local ranks under key: the leader creates it (mode
 * 0600) and posts its name, or "!" and why it could not, so the others fail at once instead
 * of at the deadline; the others open it. With reserve the memory is allocated now: a
 * /dev/shm too small for it fails here, not with SIGBUS at first touch. name (cap >= 96)
 * gets the name for segment_attached. */
shoal_result sh_shm_segment_open(shoal_comm *c, const char *key, size_t nbytes, int leader, int reserve,
                                 char *name, size_t cap, int *fd);
/* Every local rank has mapped the segment or given up (rc is this rank's result so far):
 * all arrive either way, so none waits out the deadline for one that gave up, and all fail
 * if any did. The leader then unlinks it, so nothing outlives the job. */
shoal_result sh_shm_segment_attached(shoal_comm *c, const char *key, int nlocal, int leader, const char *name,
                                     shoal_result rc);

#endif
