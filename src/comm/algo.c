/* algo.c — the collective algorithms and the choice between them.
 * Not here: checks and queueing (comm.c), links (transport_*.c), kernels (reduce.c).
 * Proved by tests/comm/test_algo.c. */
#include "comm/algo.h"

#include <stdint.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "comm/reduce.h"

/* Pieces that bound staging memory: reduce, reduce_scatter and alltoall work through the
 * message in pieces of at most this many bytes per block. */
enum { PIECE_NBYTES = 1 << 20 };

static size_t esize(shoal_dtype dt) { return shoal_dtype_nbytes(dt); }

static shoal_result xfer(shoal_comm *c, const char *what, sh_xfer_op *ops, int n, shoal_dtype dt,
                         shoal_op op)
{
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, what, &x);
    x.dtype = (int)dt;
    x.op = (int)op;
    return sh_xfer(&x, ops, n);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Block b of count elements split into n blocks: [off, off + len). */
static void block_of(size_t count, int n, int b, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n;
    *off = (size_t)b * base + ((size_t)b < extra ? (size_t)b : extra);
    *len = base + ((size_t)b < extra ? 1 : 0);
}

/* ---- ring allreduce: reduce-scatter then allgather, in place on buf ----
 * Every block is reduced once, at one rank, in ring order, then copied everywhere: all
 * ranks end with bitwise identical results. The engine streams each step's send and
 * receive-reduce together, so a step pipelines at the links' granularity. */
shoal_result sh_ring_allreduce(shoal_comm *c, const void *send, void *buf, size_t count,
                               shoal_dtype dt, shoal_op op)
{
    int n = c->world, r = c->rank;
    size_t es = esize(dt);
    unsigned char *b = buf;
    const unsigned char *in = send;
    sh_link *right = c->coll[mod(r + 1, n)], *left = c->coll[mod(r - 1, n)];
    /* Out of place, blocks are read from send until reduced into buf: no upfront copy. The
     * one block the reduce-scatter never writes here (r) arrives whole in the allgather. */
    for (int s = 0; s < n - 1; s++) {
        size_t so, sl, ro, rl;
        block_of(count, n, mod(r - s, n), &so, &sl);
        block_of(count, n, mod(r - s - 1, n), &ro, &rl);
        sh_xfer_op ops[2] = {{right, SH_XFER_SEND, (s == 0 ? (unsigned char *)in : b) + so * es, sl * es, 0, NULL},
                             {left, SH_XFER_RECV_REDUCE, b + ro * es, rl * es, 0, in != b ? in + ro * es : NULL}};
        SH_TRY(xfer(c, "allreduce", ops, 2, dt, op));
    }
    for (int s = 0; s < n - 1; s++) {
        size_t so, sl, ro, rl;
        block_of(count, n, mod(r + 1 - s, n), &so, &sl);
        block_of(count, n, mod(r - s, n), &ro, &rl);
        sh_xfer_op ops[2] = {{right, SH_XFER_SEND, b + so * es, sl * es, 0, NULL},
                             {left, SH_XFER_RECV, b + ro * es, rl * es, 0, NULL}};
        SH_TRY(xfer(c, "allreduce", ops, 2, dt, op));
    }
    return SHOAL_OK;
}

/* ---- recursive doubling allreduce (small messages), any world size ----
 * Ranks beyond the largest power of two p2 first fold into rank - p2 and get the result
 * back at the end. Partners combine as lower OP higher, so every rank computes the same
 * expression tree: bitwise identical results. */
shoal_result sh_rd_allreduce(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, shoal_op op)
{
    int n = c->world, r = c->rank;
    size_t nbytes = count * esize(dt);
    int p2 = 1;
    while (p2 * 2 <= n) p2 *= 2;
    void *tmp = NULL;
    SH_TRY(sh_comm_scratch(c, nbytes ? nbytes : 1, &tmp));
    if (r >= p2) {
        sh_xfer_op o[1] = {{c->coll[r - p2], SH_XFER_SEND, buf, nbytes, 0, NULL}};
        SH_TRY(xfer(c, "allreduce", o, 1, dt, op));
        sh_xfer_op i[1] = {{c->coll[r - p2], SH_XFER_RECV, buf, nbytes, 0, NULL}};
        return xfer(c, "allreduce", i, 1, dt, op);
    }
    if (r + p2 < n) {
        sh_xfer_op i[1] = {{c->coll[r + p2], SH_XFER_RECV_REDUCE, buf, nbytes, 0, NULL}};
        SH_TRY(xfer(c, "allreduce", i, 1, dt, op));
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
        int peer = r ^ mask;
        sh_xfer_op ops[2] = {{c->coll[peer], SH_XFER_SEND, buf, nbytes, 0, NULL},
                             {c->coll[peer], SH_XFER_RECV, tmp, nbytes, 0, NULL}};
        SH_TRY(xfer(c, "allreduce", ops, 2, dt, op));
        if (peer < r) sh_reduce3(buf, tmp, buf, count, dt, op);
        else sh_reduce(buf, tmp, count, dt, op);
    }
    if (r + p2 < n) {
        sh_xfer_op o[1] = {{c->coll[r + p2], SH_XFER_SEND, buf, nbytes, 0, NULL}};
        SH_TRY(xfer(c, "allreduce", o, 1, dt, op));
    }
    return SHOAL_OK;
}

/* ---- ring allgather: recv holds world blocks of count; ours is already in place ---- */
shoal_result sh_ring_allgather(shoal_comm *c, void *recv, size_t count, shoal_dtype dt)
{
    int n = c->world, r = c->rank;
    size_t nb = count * esize(dt);
    unsigned char *b = recv;
    for (int s = 0; s < n - 1; s++) {
        int sb = mod(r - s, n), rb = mod(r - s - 1, n);
        sh_xfer_op ops[2] = {{c->coll[mod(r + 1, n)], SH_XFER_SEND, b + (size_t)sb * nb, nb, 0, NULL},
                             {c->coll[mod(r - 1, n)], SH_XFER_RECV, b + (size_t)rb * nb, nb, 0, NULL}};
        SH_TRY(xfer(c, "allgather", ops, 2, dt, SHOAL_SUM));
    }
    return SHOAL_OK;
}

/* ---- ring reduce-scatter, in pieces: two piece buffers, never the whole message ----
 * Step s sends the partial of block r-s-1 and receives block r-s-2's, onto which our own
 * contribution was copied first: at the last step the block received is our own. */
shoal_result sh_ring_reduce_scatter(shoal_comm *c, const void *send, void *recv, size_t count,
                                    shoal_dtype dt, shoal_op op)
{
    int n = c->world, r = c->rank;
    size_t es = esize(dt);
    const unsigned char *in = send;
    unsigned char *out = recv;
    size_t piece = PIECE_NBYTES / es;
    if (piece == 0) piece = 1;
    unsigned char *bufs = NULL;
    SH_TRY(sh_comm_scratch(c, 2 * piece * es, (void **)&bufs));
    for (size_t off = 0; off < count; off += piece) {
        size_t m = count - off < piece ? count - off : piece;
        unsigned char *a = bufs, *bb = bufs + piece * es;
        /* A = our contribution to block r-1 */
        memcpy(a, in + ((size_t)mod(r - 1, n) * count + off) * es, m * es);
        for (int s = 0; s < n - 1; s++) {
            int rb = mod(r - s - 2, n);
            unsigned char *dst = s == n - 2 ? out + off * es : bb;
            if (dst != in + ((size_t)rb * count + off) * es)
                memmove(dst, in + ((size_t)rb * count + off) * es, m * es);
            sh_xfer_op ops[2] = {{c->coll[mod(r + 1, n)], SH_XFER_SEND, a, m * es, 0, NULL},
                                 {c->coll[mod(r - 1, n)], SH_XFER_RECV_REDUCE, dst, m * es, 0, NULL}};
            SH_TRY(xfer(c, "reduce_scatter", ops, 2, dt, op));
            unsigned char *t = a;
            a = bb;
            bb = t;
        }
    }
    return SHOAL_OK;
}

/* ---- binomial tree broadcast ---- */
shoal_result sh_tree_broadcast(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int root)
{
    int n = c->world, vr = mod(c->rank - root, n);
    size_t nbytes = count * esize(dt);
    int mask = 1;
    while (mask < n) {
        if (vr & mask) {
            int parent = mod(vr - mask + root, n);
            sh_xfer_op o = {c->coll[parent], SH_XFER_RECV, buf, nbytes, 0, NULL};
            SH_TRY(xfer(c, "broadcast", &o, 1, dt, SHOAL_SUM));
            break;
        }
        mask <<= 1;
    }
    sh_xfer_op ops[32];
    int k = 0;
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n) ops[k++] = (sh_xfer_op){c->coll[mod(vr + mask + root, n)], SH_XFER_SEND, buf, nbytes, 0, NULL};
    if (k) SH_TRY(xfer(c, "broadcast", ops, k, dt, SHOAL_SUM));
    return SHOAL_OK;
}

/* ---- binomial tree reduce, in pieces (bounded staging) ----
 * A node's accumulator is its own piece, onto which children are reduced in increasing
 * order of their subtree: a fixed expression for every element. */
shoal_result sh_tree_reduce(shoal_comm *c, const void *send, void *recv, size_t count,
                            shoal_dtype dt, shoal_op op, int root)
{
    int n = c->world, vr = mod(c->rank - root, n);
    size_t es = esize(dt), piece = PIECE_NBYTES / es;
    if (piece == 0) piece = 1;
    unsigned char *acc = NULL;
    if (c->rank != root) SH_TRY(sh_comm_scratch(c, piece * es, (void **)&acc));
    for (size_t off = 0; off < count; off += piece) {
        size_t m = count - off < piece ? count - off : piece;
        unsigned char *a = c->rank == root ? (unsigned char *)recv + off * es : acc;
        if (a != (const unsigned char *)send + off * es) memcpy(a, (const unsigned char *)send + off * es, m * es);
        int mask = 1;
        for (; mask < n; mask <<= 1) {
            if (vr & mask) {
                int parent = mod(vr - mask + root, n);
                sh_xfer_op o = {c->coll[parent], SH_XFER_SEND, a, m * es, 0, NULL};
                SH_TRY(xfer(c, "reduce", &o, 1, dt, op));
                break;
            }
            if (vr + mask < n) {
                sh_xfer_op o = {c->coll[mod(vr + mask + root, n)], SH_XFER_RECV_REDUCE, a, m * es, 0, NULL};
                SH_TRY(xfer(c, "reduce", &o, 1, dt, op));
            }
        }
    }
    return SHOAL_OK;
}

/* ---- pairwise alltoall: in round s, rank r pairs with (s - r) mod n, so one exchange per
 * pair and round; the outgoing piece is staged, which also makes in-place safe ---- */
shoal_result sh_pairwise_alltoall(shoal_comm *c, const void *send, void *recv, size_t count,
                                  shoal_dtype dt)
{
    int n = c->world, r = c->rank;
    size_t nb = count * esize(dt);
    const unsigned char *in = send;
    unsigned char *out = recv;
    if (in != out) memcpy(out + (size_t)r * nb, in + (size_t)r * nb, nb);
    size_t piece = nb < PIECE_NBYTES ? nb : PIECE_NBYTES;
    unsigned char *stage = NULL;
    SH_TRY(sh_comm_scratch(c, piece ? piece : 1, (void **)&stage));
    for (int s = 0; s < n; s++) {
        int p = mod(s - r, n);
        if (p == r) continue;
        for (size_t off = 0; off < nb; off += piece) {
            size_t m = nb - off < piece ? nb - off : piece;
            memcpy(stage, in + (size_t)p * nb + off, m);
            sh_xfer_op ops[2] = {{c->coll[p], SH_XFER_SEND, stage, m, 0, NULL},
                                 {c->coll[p], SH_XFER_RECV, out + (size_t)p * nb + off, m, 0, NULL}};
            SH_TRY(xfer(c, "alltoall", ops, 2, dt, SHOAL_SUM));
        }
    }
    return SHOAL_OK;
}

shoal_result sh_dissemination_barrier(shoal_comm *c)
{
    int n = c->world, r = c->rank;
    for (int k = 1; k < n; k <<= 1) {
        unsigned char out = 1, in = 0;
        sh_xfer_op ops[2] = {{c->coll[mod(r + k, n)], SH_XFER_SEND, &out, 1, 0, NULL},
                             {c->coll[mod(r - k, n)], SH_XFER_RECV, &in, 1, 0, NULL}};
        SH_TRY(xfer(c, "barrier", ops, 2, SHOAL_UINT8, SHOAL_SUM));
    }
    return SHOAL_OK;
}

/* ---- the choice ----
 * Recursive doubling moves the whole message log2(n) times but in few rounds: it wins
 * while latency dominates. The threshold is measured by bench/comm (see bench/README.md). */
size_t sh_algo_rd_max_nbytes(const shoal_comm *c)
{
    (void)c;
    return 32 * 1024;
}

static shoal_result allreduce(shoal_comm *c, const sh_coll *op)
{
    size_t nbytes = op->count * esize(op->dt);
    sh_algo_kind a = c->algo;
    if (a == SH_ALGO_AUTO || a == SH_ALGO_TREE || a == SH_ALGO_HIER || a == SH_ALGO_MPI || a == SH_ALGO_RHD)
        a = nbytes <= sh_algo_rd_max_nbytes(c) || op->count < (size_t)c->world ? SH_ALGO_RD : SH_ALGO_RING;
    if (c->world == 1 || op->count == 0 || a != SH_ALGO_RING)
        if (op->send != op->recv && nbytes) memcpy(op->recv, op->send, nbytes);
    if (c->world == 1 || op->count == 0) goto finish;
    if (a == SH_ALGO_RD) SH_TRY(sh_rd_allreduce(c, op->recv, op->count, op->dt, op->op));
    else SH_TRY(sh_ring_allreduce(c, op->send, op->recv, op->count, op->dt, op->op));
finish:
    if (op->op == SHOAL_AVG) sh_reduce_avg_finish(op->recv, op->count, op->dt, c->world);
    return SHOAL_OK;
}

shoal_result sh_algo_run(shoal_comm *c, const sh_coll *op)
{
    size_t es = esize(op->dt);
    switch (op->kind) {
    case SH_COLL_ALLREDUCE:
        return allreduce(c, op);
    case SH_COLL_BROADCAST:
        if (c->rank == op->root && op->send != op->recv && op->count)
            memcpy(op->recv, op->send, op->count * es);
        if (c->world == 1 || op->count == 0) return SHOAL_OK;
        return sh_tree_broadcast(c, op->recv, op->count, op->dt, op->root);
    case SH_COLL_REDUCE:
        if (c->world == 1) {
            if (op->send != op->recv && op->count) memcpy(op->recv, op->send, op->count * es);
        } else if (op->count) {
            SH_TRY(sh_tree_reduce(c, op->send, op->recv, op->count, op->dt, op->op, op->root));
        }
        if (op->op == SHOAL_AVG && c->rank == op->root)
            sh_reduce_avg_finish(op->recv, op->count, op->dt, c->world);
        return SHOAL_OK;
    case SH_COLL_ALLGATHER: {
        unsigned char *mine = (unsigned char *)op->recv + (size_t)c->rank * op->count * es;
        if ((const unsigned char *)op->send != mine && op->count) memcpy(mine, op->send, op->count * es);
        if (c->world == 1 || op->count == 0) return SHOAL_OK;
        return sh_ring_allgather(c, op->recv, op->count, op->dt);
    }
    case SH_COLL_REDUCE_SCATTER:
        if (c->world == 1) {
            if (op->send != op->recv && op->count) memmove(op->recv, op->send, op->count * es);
        } else if (op->count) {
            SH_TRY(sh_ring_reduce_scatter(c, op->send, op->recv, op->count, op->dt, op->op));
        }
        if (op->op == SHOAL_AVG) sh_reduce_avg_finish(op->recv, op->count, op->dt, c->world);
        return SHOAL_OK;
    case SH_COLL_ALLTOALL:
        if (op->count == 0) return SHOAL_OK;
        if (c->world == 1) {
            if (op->send != op->recv) memcpy(op->recv, op->send, op->count * es);
            return SHOAL_OK;
        }
        return sh_pairwise_alltoall(c, op->send, op->recv, op->count, op->dt);
    case SH_COLL_BARRIER:
        return c->world == 1 ? SHOAL_OK : sh_dissemination_barrier(c);
    default:
        return SH_FAIL(SHOAL_ERR_INTERNAL, "unknown collective %d", (int)op->kind);
    }
}
