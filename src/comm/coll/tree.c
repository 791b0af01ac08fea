/* tree.c — rooted collectives: binomial-tree broadcast and reduce, pipelined in chunks, and a
 * pipelined chain broadcast for large messages.
 * Not here: the choice of algorithm (select.c).
 * Proved by tests/comm/test_algo.c. */
#include <string.h>

#include "base/err.h"
#include "comm/coll/algo.h"

/* Vocabulary: members are renumbered from the root (v = (i - root) mod n). In the binomial tree
 * v's parent is v minus its lowest set bit and its children are v + mask for every mask below
 * that bit. The message goes in chunks (sh_algo_chunk_nbytes): one sh_xfer receives chunk k from
 * the parent while sending chunk k-1 on, so a tree of depth log2(n) costs about
 * S + depth * chunk rather than depth * S. The tree has no cycle, so this never waits on link
 * buffering.
 * Cost: broadcast log2(n) rounds of latency, but the root sends the message once per child
 * (log2(n) times); the chain (v sends to v+1) sends it once per rank, costing S + (n-1) * chunk:
 * large broadcasts take the chain. Reduce: each node reduces its children's chunks into its own
 * in a fixed order (increasing subtree), so the root's result does not depend on timing.
 * Reference: Thakur, Rabenseifner and Gropp (2005); NCCL's pipelined chains. */

static int mod(int a, int n) { return ((a % n) + n) % n; }
static sh_link *vmember(shoal_comm *c, const sh_group *g, int root, int v)
{
    return c->coll[g->ranks[mod(v + root, g->n)]];
}
static int lowbit(int v) { return v & -v; }

shoal_result sh_tree_broadcast(shoal_comm *c, const sh_group *g, void *buf, size_t count,
                               shoal_dtype dt, int root)
{
    int n = g->n, v = mod(g->me - root, n);
    size_t es = shoal_dtype_nbytes(dt), nbytes = count * es;
    size_t chunk = sh_algo_chunk_nbytes(c, nbytes, dt);
    unsigned char *b = buf;
    sh_xfer_op ops[33];
    int top = v ? lowbit(v) : 1;
    if (!v)
        while (top < n) top <<= 1;
    size_t nchunks = (nbytes + chunk - 1) / chunk;
    /* Tick k: receive chunk k (k < nchunks), forward chunk k-1 (k >= 1); larger subtrees
     * first, so the deepest path starts earliest. */
    for (size_t k = 0; k <= nchunks; k++) {
        int nops = 0;
        if (v && k < nchunks) {
            size_t off = k * chunk, len = nbytes - off < chunk ? nbytes - off : chunk;
            ops[nops++] = (sh_xfer_op){vmember(c, g, root, v - lowbit(v)), SH_XFER_RECV, b + off, len, 0, NULL, 0, 0, NULL};
        }
        size_t sk = v ? k - 1 : k; /* the root has every chunk already */
        if ((v ? k >= 1 : k < nchunks))
            for (int mask = top >> 1; mask > 0; mask >>= 1)
                if (v + mask < n) {
                    size_t off = sk * chunk, len = nbytes - off < chunk ? nbytes - off : chunk;
                    ops[nops++] = (sh_xfer_op){vmember(c, g, root, v + mask), SH_XFER_SEND, b + off, len, 0, NULL, 0, 0, NULL};
                }
        if (nops) SH_TRY(sh_algo_xfer(c, "broadcast (tree)", ops, nops, dt, SHOAL_SUM));
    }
    return SHOAL_OK;
}

shoal_result sh_tree_chain_broadcast(shoal_comm *c, const sh_group *g, void *buf, size_t count,
                                     shoal_dtype dt, int root)
{
    int n = g->n, v = mod(g->me - root, n);
    size_t es = shoal_dtype_nbytes(dt), nbytes = count * es;
    unsigned char *b = buf;
    if (n == 1) return SHOAL_OK;
    if (v == 0 || v == n - 1) { /* the ends move the whole message as one stream */
        sh_xfer_op o = {vmember(c, g, root, v ? v - 1 : 1), v ? SH_XFER_RECV : SH_XFER_SEND, b, nbytes, 0, NULL, 0, 0, NULL};
        return sh_algo_xfer(c, "broadcast (chain)", &o, 1, dt, SHOAL_SUM);
    }
    size_t chunk = sh_algo_chunk_nbytes(c, nbytes, dt);
    size_t nchunks = (nbytes + chunk - 1) / chunk;
    for (size_t k = 0; k <= nchunks; k++) {
        sh_xfer_op ops[2];
        int nops = 0;
        if (k < nchunks) {
            size_t off = k * chunk, len = nbytes - off < chunk ? nbytes - off : chunk;
            ops[nops++] = (sh_xfer_op){vmember(c, g, root, v - 1), SH_XFER_RECV, b + off, len, 0, NULL, 0, 0, NULL};
        }
        if (k >= 1) {
            size_t off = (k - 1) * chunk, len = nbytes - off < chunk ? nbytes - off : chunk;
            ops[nops++] = (sh_xfer_op){vmember(c, g, root, v + 1), SH_XFER_SEND, b + off, len, 0, NULL, 0, 0, NULL};
        }
        SH_TRY(sh_algo_xfer(c, "broadcast (chain)", ops, nops, dt, SHOAL_SUM));
    }
    return SHOAL_OK;
}

/* Chunk k is accumulated (own data OP child 1 OP child 2 ...) while chunk k-1 goes to the
 * parent: two accumulator slots at inner nodes (staging 2 chunks), the root accumulates
 * in recv, and a leaf streams send as it is. */
shoal_result sh_tree_reduce(shoal_comm *c, const sh_group *g, const void *send, void *recv,
                            size_t count, shoal_dtype dt, shoal_op op, int root)
{
    int n = g->n, v = mod(g->me - root, n);
    size_t es = shoal_dtype_nbytes(dt), nbytes = count * es;
    const unsigned char *in = send;
    if (n == 1) {
        if (send != recv && nbytes) memcpy(recv, send, nbytes);
        return SHOAL_OK;
    }
    int top = v ? lowbit(v) : 1;
    if (!v)
        while (top < n) top <<= 1;
    int nchild = 0;
    for (int mask = 1; mask < top && v + mask < n; mask <<= 1) nchild++;
    if (v && nchild == 0) { /* a leaf */
        sh_xfer_op o = {vmember(c, g, root, v - lowbit(v)), SH_XFER_SEND, (void *)in, nbytes, 0, NULL, 0, 0, NULL};
        return sh_algo_xfer(c, "reduce (tree)", &o, 1, dt, op);
    }
    size_t chunk = sh_algo_chunk_nbytes(c, nbytes, dt);
    size_t nchunks = (nbytes + chunk - 1) / chunk;
    unsigned char *slots = NULL;
    if (v) SH_TRY(sh_comm_scratch(c, 2 * chunk, (void **)&slots));
    for (size_t k = 0; k <= nchunks; k++) {
        size_t off = k * chunk, len = k < nchunks ? (nbytes - off < chunk ? nbytes - off : chunk) : 0;
        size_t poff = (k - 1) * chunk, plen = nbytes - poff < chunk ? nbytes - poff : chunk;
        unsigned char *acc = v ? slots + (k % 2) * chunk : (unsigned char *)recv + off;
        unsigned char *prev = slots + ((k + 1) % 2) * chunk;
        int j = 0;
        for (int mask = 1; mask < top && v + mask < n; mask <<= 1, j++) {
            sh_xfer_op ops[2];
            int nops = 0;
            if (k < nchunks)
                ops[nops++] = (sh_xfer_op){vmember(c, g, root, v + mask), SH_XFER_RECV_REDUCE, acc, len, 0,
                                           j == 0 ? in + off : NULL, 0, 0, NULL};
            if (j == 0 && v && k >= 1)
                ops[nops++] = (sh_xfer_op){vmember(c, g, root, v - lowbit(v)), SH_XFER_SEND, prev, plen, 0, NULL, 0, 0, NULL};
            if (nops) SH_TRY(sh_algo_xfer(c, "reduce (tree)", ops, nops, dt, op));
        }
    }
    return SHOAL_OK;
}
