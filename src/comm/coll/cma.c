/* cma.c — large allreduces with every rank on this host, through each other's memory
 * (process_vm_readv/writev, or in place where buffers lie in shared windows), with an
 * optional update folded in (shoal_allreduce_apply_start).
 * Not here: when it is taken (select.c), the windows and the segment (transport/window.c,
 * transport/shm.c), kernels (reduce.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_transport_shm.c. */
#include "comm/coll/cma.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "comm/reduce.h"
#include "comm/transport/shm.h"
#include "comm/transport/window.h"
#include "comm/transport/xfer.h"

/* ---- large allreduce inside a host through the peers' memory (CMA) ----
 * Rank r owns block r of the message. For each piece of its block it reads every rank's
 * piece straight from that rank's memory (process_vm_readv: one copy, no staging through
 * the rings) in rank order 0, 1, ..., n-1, so every element is reduced by one rank in one
 * fixed order; finishes an average on the piece; and writes the finished piece, still in
 * cache, into every peer's result (process_vm_writev). Two small exchanges over the links
 * fence it: the addresses before, and "all written" after, so no rank returns while another
 * still reads or writes its memory. Memory traffic per rank is about 2 message sizes
 * against 4.5 for the ring through the rings. */

enum { CMA_MIN_NBYTES = 32 * 1024, CMA_PIECE_NBYTES = 256 * 1024 };
/* From this size an out-of-place result is streamed past the cache: it no longer fits, and
 * streaming wins; below, the cache keeps it for the reader. */
enum { STREAM_MIN_NBYTES = 4 * 1024 * 1024 };

/* A rank's buffers for one call: send, recv, params as addresses in its own process, and,
 * for each that lies in a shared window, the window (id + 1, else 0) and the offset there,
 * which every rank can turn into an address of its own. */
enum { BUF_SEND, BUF_RECV, BUF_PARAMS, NBUF };
typedef struct {
    uint64_t addr[NBUF];
    uint64_t woff[NBUF];
    int32_t win[NBUF];
    int32_t pid;
} cma_addr;

static void describe(const struct sh_shm *s, cma_addr *a, const void *const buf[NBUF], size_t nbytes)
{
    memset(a, 0, sizeof *a);
    a->pid = (int32_t)getpid();
    for (int b = 0; b < NBUF; b++) {
        a->addr[b] = (uint64_t)(uintptr_t)buf[b];
        const shoal_window *w = buf[b] && nbytes ? sh_window_of(s, buf[b], nbytes) : NULL;
        if (!w) continue;
        a->win[b] = w->id + 1;
        a->woff[b] = (uint64_t)((const unsigned char *)buf[b] - w->base);
    }
}

/* Where a rank's buffer b, plus off bytes, is in this process, when it lies in a window;
 * NULL when only CMA reaches it. */
static unsigned char *peer_ptr(const struct sh_shm *s, const cma_addr *a, int b, size_t off)
{
    const shoal_window *w = a->win[b] ? sh_window_by_id(s, a->win[b] - 1) : NULL;
    return w ? w->base + a->woff[b] + off : NULL;
}

/* "All written": every rank tells every other whether its part worked (1) or not (0), so
 * no rank returns while another still writes into its buffers, and all agree on failure.
 * *bad gets the lowest rank that failed, or -1. */
static shoal_result fence(shoal_comm *c, const char *what, int ok, int *bad)
{
    unsigned char out = ok ? 1 : 0, in[64];
    sh_xfer_op ops[128];
    int k = 0;
    for (int p = 0; p < c->world && k < 126; p++) {
        if (p == c->rank) continue;
        in[p] = 1;
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_SEND, &out, 1, 0, NULL, 0, 0, NULL};
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_RECV, &in[p], 1, 0, NULL, 0, 0, NULL};
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, what, &x);
    SH_TRY(sh_xfer(&x, ops, k));
    *bad = -1;
    for (int p = 0; p < c->world && *bad < 0; p++)
        if (p == c->rank ? !ok : !in[p]) *bad = p;
    return SHOAL_OK;
}

/* SHOAL_TEST_CMA_FAIL=RANK makes that rank's reads of its peers' memory fail, as a kernel
 * that forbids them would (tests only: the suite cannot change ptrace rules). */
static int cma_fails_here(void)
{
    static int cached = -2;
    if (cached == -2) {
        const char *v = sh_env_str("SHOAL_TEST_CMA_FAIL");
        const char *me = sh_env_str("SHOAL_RANK");
        cached = v && me && atoi(v) == atoi(me);
    }
    return cached;
}

static int cma_read(int pid, void *dst, uint64_t src, size_t nbytes)
{
    if (cma_fails_here()) {
        errno = EPERM;
        return -1;
    }
    while (nbytes > 0) {
        struct iovec l = {dst, nbytes}, r = {(void *)(uintptr_t)src, nbytes};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0) return -1;
        dst = (unsigned char *)dst + n;
        src += (uint64_t)n;
        nbytes -= (size_t)n;
    }
    return 0;
}

static int cma_write(int pid, uint64_t dst, const void *src, size_t nbytes)
{
    while (nbytes > 0) {
        struct iovec l = {(void *)src, nbytes}, r = {(void *)(uintptr_t)dst, nbytes};
        ssize_t n = process_vm_writev(pid, &l, 1, &r, 1, 0);
        if (n <= 0) return -1;
        src = (const unsigned char *)src + n;
        dst += (uint64_t)n;
        nbytes -= (size_t)n;
    }
    return 0;
}

int sh_cma_window_apply(const shoal_comm *c, const sh_coll *op)
{
    return op->kind == SH_COLL_ALLREDUCE && op->apply && op->send == op->recv && c->shm && c->shm->pid_of &&
           c->world <= 64 && op->count && sh_window_common(c, op->params, op->count * sizeof(float));
}

int sh_cma_fits(const shoal_comm *c, const sh_coll *op)
{
    const struct sh_shm *s = c->shm;
    if (!s || !s->pid_of || c->world > 64 || c->local_world != c->world) return 0;
    if (sh_cma_window_apply(c, op)) return 1;
    if (op->kind != SH_COLL_ALLREDUCE || (op->apply && op->send != op->recv)) return 0;
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    const void *out = op->apply ? (const void *)op->params : op->recv;
    if (s->cma < 0 && !(sh_window_of(s, op->send, nb) && sh_window_of(s, out, nb))) return 0; /* CMA refused */
    return nb >= CMA_MIN_NBYTES && op->count >= (size_t)c->world;
}

shoal_result sh_cma_allreduce(shoal_comm *c, const sh_coll *op)
{
    struct sh_shm *s = c->shm;
    int n = c->world, r = c->rank;
    size_t es = shoal_dtype_nbytes(op->dt);
    /* 1. addresses */
    cma_addr mine, all[64];
    const void *bufs[NBUF] = {op->send, op->recv, op->params};
    describe(s, &mine, bufs, op->count * es);
    sh_xfer_op ops[128];
    int k = 0;
    all[r] = mine;
    for (int p = 0; p < n; p++) {
        if (p == r) continue;
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_SEND, &mine, sizeof mine, 0, NULL, 0, 0, NULL};
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_RECV, &all[p], sizeof mine, 0, NULL, 0, 0, NULL};
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "allreduce", &x);
    SH_TRY(sh_xfer(&x, ops, k));
    /* 2. reduce-scatter: this rank's block, piece by piece, in rank order */
    size_t base = op->count / (size_t)n, extra = op->count % (size_t)n;
    size_t lo = (size_t)r * base + ((size_t)r < extra ? (size_t)r : extra), len = base + ((size_t)r < extra ? 1 : 0);
    size_t piece = CMA_PIECE_NBYTES / es;
    /* Pieces read from peers alternate between two buffers, so the first two contributions
     * meet in one three-operand pass (dst = x0 OP x1) and dst is written once per piece. */
    unsigned char *tmp = NULL, *own = NULL;
    SH_TRY(sh_comm_scratch(c, 3 * CMA_PIECE_NBYTES, (void **)&tmp));
    own = tmp + 2 * CMA_PIECE_NBYTES; /* in place: ours, kept; streamed: the reduced piece */
    int inplace = op->send == op->recv;
    int stream = op->count * es >= STREAM_MIN_NBYTES;
    int failed = 0, used_cma = 0;
    unsigned char *out = (unsigned char *)op->recv;
    for (size_t off = lo; off < lo + len && !failed; off += piece) {
        size_t m = lo + len - off < piece ? lo + len - off : piece;
        /* A large result out of place: the piece is reduced in cache and streamed into the
         * result after it went to the peers (reducing straight into the cold result made the
         * CPU read every line of it first: half the in-place speed). A smaller result is
         * better left in cache for the caller, which reads it next. With an update, the
         * reduced piece only feeds it: it stays in cache and the gradients are not written
         * back (they are unspecified after the call). */
        unsigned char *final = out + off * es, *dst = op->apply || (!inplace && stream) ? own : final;
        const unsigned char *mine_piece = (const unsigned char *)op->send + off * es;
        if (dst == final && inplace && r > 1) { /* dst takes ranks 0 and 1 before ours: keep ours */
            memcpy(own, mine_piece, m * es);
            mine_piece = own;
        }
        const void *first = NULL;
        for (int p = 0; p < n && !failed; p++) {
            const void *src;
            if (p == r) {
                src = mine_piece;
            } else {
                src = peer_ptr(s, &all[p], BUF_SEND, off * es); /* in a window: read in place */
                if (!src) {
                    unsigned char *buf = tmp + (size_t)(p & 1) * CMA_PIECE_NBYTES;
                    failed = cma_read(all[p].pid, buf, all[p].addr[BUF_SEND] + off * es, m * es) != 0;
                    used_cma = 1;
                    src = buf;
                }
            }
            if (failed) break;
            if (p == 0) first = src;
            else if (p == 1) sh_reduce3(dst, first, src, m, op->dt, op->op);
            else sh_reduce(dst, src, m, op->dt, op->op);
        }
        /* An average is finished here, on the piece while it is still in cache, so the
         * allgather copies finished values and no pass over the whole message follows. */
        if (!failed && op->op == SHOAL_AVG) sh_reduce_avg_finish(dst, m, op->dt, n);
        /* Allgather as we go: the finished piece, still in cache, into every peer's result
         * (only this rank ever touches block r of a peer's buffers, and it has read this
         * piece of them already). With an update, the piece's new parameters go instead:
         * each rank updates only its block, and the gradients elsewhere stay partial. */
        const unsigned char *piece_out = dst;
        uint64_t peer_off = off * es;
        if (!failed && op->apply) {
            op->apply(op->apply_ctx, off, m, (const float *)dst);
            piece_out = (const unsigned char *)op->params + off * es;
        }
        int into = op->apply ? BUF_PARAMS : BUF_RECV;
        for (int p = 0; p < n && !failed; p++) {
            if (p == r) continue;
            unsigned char *at = peer_ptr(s, &all[p], into, peer_off);
            if (at == piece_out) continue; /* the common block of a window: one copy for all */
            if (at) {
                memcpy(at, piece_out, m * es);
            } else {
                failed = cma_write(all[p].pid, all[p].addr[into] + peer_off, piece_out, m * es) != 0;
                used_cma = 1;
            }
        }
        if (!failed && dst != final && !op->apply) sh_copy_stream(final, dst, m * es);
    }
    int err = errno, bad = -1;
    /* CMA refused (ptrace rules, seccomp) on some rank: every rank learns it at the fence
     * and fails this call at once (the result is incomplete everywhere), and from then on
     * all take the rings. */
    SH_TRY(fence(c, "allreduce", !failed, &bad));
    if (bad < 0) {
        if (used_cma) s->cma = 1;
        return SHOAL_OK;
    }
    s->cma = -1;
    if (bad == r)
        return SH_FAIL(SHOAL_ERR_IO, "allreduce: reading or writing a peer's memory (process_vm_readv/writev) "
                       "failed: %s; the result is incomplete on every rank, later allreduces go through the "
                       "rings (SHOAL_ALGO=ring does that from the start)", strerror(err));
    char pb[128];
    sh_comm_peer_name(c, bad, pb, sizeof pb);
    return SH_FAIL(SHOAL_ERR_IO, "allreduce: %s could not read or write its peers' memory "
                   "(process_vm_readv/writev); the result is incomplete on every rank, later allreduces go "
                   "through the rings (SHOAL_ALGO=ring does that from the start)", pb);
}
