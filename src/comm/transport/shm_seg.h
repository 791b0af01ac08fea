/* shm_seg.h — the layout of a host's shared segment, for the files of the shared-memory
 * transport only: a head (the ring sizes, which shrink when /dev/shm is small), one doorbell
 * per local rank, each rank's slot area, the rings (one per ordered pair of local ranks and
 * plane); a link's view of it; and the helpers that make segments and hand them to the
 * host's other ranks (shm_seg.c, shared with the windows).
 * Not here: the API the rest of comm sees (shm.h, window.h).
 * Proved by tests/comm/test_transport_shm.c, test_shm_limits.c and test_comm.c. */
#ifndef SH_COMM_SHM_SEG_H
#define SH_COMM_SHM_SEG_H

#include <stdatomic.h>
#include <stdint.h>

#include "comm/transport/shm.h"
#include "comm/transport/xfer.h"

/* Ring sizes: the collective plane's at full size, each smaller size tried in turn (halving)
 * down to the least when /dev/shm cannot hold more; the point-to-point plane's a quarter. */
enum { COLL_RING_NBYTES = 1 << 20, COLL_RING_MIN_NBYTES = 32 << 10, LINE = 64 };
#define SH_SHM_HEAD_MAGIC 0x73686d7365673231ULL /* "shmseg21" */

typedef struct {
    _Alignas(LINE) uint64_t magic;
    uint64_t nlocal;
    uint64_t coll_nbytes, p2p_nbytes; /* each ring's data bytes */
} seg_head;

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

static inline size_t p2p_ring_nbytes(size_t coll_nbytes) { return coll_nbytes / 4; }
static inline size_t ring_stride(size_t data_nbytes) { return (sizeof(ring) + data_nbytes + LINE - 1) / LINE * LINE; }
static inline size_t bells_nbytes(int nlocal) { return ((size_t)nlocal * sizeof(sh_bell) + LINE - 1) / LINE * LINE; }

/* Layout: the head line, the bells, the slot areas, then for each ordered pair (from, to)
 * of different local indices both planes' rings. */
static inline size_t fixed_nbytes(int nlocal)
{
    return sizeof(seg_head) + bells_nbytes(nlocal) + (size_t)nlocal * sizeof(slot_area);
}

static inline size_t segment_nbytes(int nlocal, size_t coll_nbytes)
{
    size_t pairs = (size_t)nlocal * (size_t)(nlocal - 1);
    return fixed_nbytes(nlocal) + pairs * (ring_stride(coll_nbytes) + ring_stride(p2p_ring_nbytes(coll_nbytes)));
}

/* Write the head of a fresh (zeroed) segment. */
static inline void seg_head_init(void *base, int nlocal, size_t coll_nbytes)
{
    seg_head *h = base;
    h->magic = SH_SHM_HEAD_MAGIC;
    h->nlocal = (uint64_t)nlocal;
    h->coll_nbytes = coll_nbytes;
    h->p2p_nbytes = p2p_ring_nbytes(coll_nbytes);
}

static inline sh_bell *bell_at(void *base, int nlocal, int i)
{
    (void)nlocal;
    return (sh_bell *)((unsigned char *)base + sizeof(seg_head)) + i;
}

static inline slot_area *slots_at(void *base, int nlocal, int i)
{
    return (slot_area *)((unsigned char *)base + sizeof(seg_head) + bells_nbytes(nlocal)) + i;
}

static inline ring *ring_at(void *base, int from, int to, int plane)
{
    const seg_head *h = base;
    int nlocal = (int)h->nlocal;
    size_t pair = (size_t)from * (size_t)(nlocal - 1) + (size_t)(to < from ? to : to - 1);
    size_t off = fixed_nbytes(nlocal) + pair * (ring_stride(h->coll_nbytes) + ring_stride(h->p2p_nbytes));
    if (plane) off += ring_stride(h->coll_nbytes);
    return (ring *)((unsigned char *)base + off);
}

/* SHOAL_OK, or SHOAL_ERR_PEER after sh_fail() when the peer aborted the ring or its process
 * is gone (asked every 4096th idle look); dir says what we were doing ("receiving"). */
shoal_result sh_shm_link_gone(shm_link *s, const char *dir);
/* c->coll[p] and c->p2p[p] for each local rank p with want[p], over the segment at base
 * (its head written; local_ranks[i] is local index i; pids may be NULL: a dead peer is then
 * not noticed). */
shoal_result sh_shm_make_links(shoal_comm *c, void *base, int nlocal, const int *local_ranks,
                               const int *pids, const unsigned char *want);

/* A segment for the local ranks under key, of the first of the ncand sizes in nbytes
 * (largest first) that /dev/shm holds. The leader creates it (mode 0600), reserves its
 * memory now (posix_fallocate: a /dev/shm too small fails here, never with SIGBUS at first
 * touch), and unlinks its name at once, so nothing is left in /dev/shm whatever happens to
 * the ranks; it posts "pid fd inode size-index", or "!" and why it failed, so the others
 * fail at once instead of at the deadline. The others open it through
 * /proc/<leader>/fd/<fd> and check the inode. *chosen: the index of the size made. The
 * leader keeps *fd open until sh_shm_segment_attached returns (the others open it through
 * it); every rank closes *fd after that. Errors: SHOAL_ERR_NOMEM when not even the least
 * size fits (the message says how much /dev/shm has and what to do), SHOAL_ERR_IO. */
shoal_result sh_shm_segment_open(shoal_comm *c, const char *key, const size_t *nbytes, int ncand, int leader,
                                 int *chosen, int *fd);
/* Every local rank has mapped the segment or given up (rc is this rank's result so far):
 * all arrive either way, so none waits out the deadline for one that gave up, and all fail
 * if any did (SHOAL_ERR_NOMEM if any was short of memory, else the failure). */
shoal_result sh_shm_segment_attached(shoal_comm *c, const char *key, int nlocal, shoal_result rc);
/* What /dev/shm can still give, in bytes (statvfs); 0 when unknown. */
size_t sh_shm_free_nbytes(void);
/* "64.0 MiB (12.3 MiB free)": /dev/shm's size, for messages. */
void sh_shm_size_text(char *out, size_t cap);

#endif
