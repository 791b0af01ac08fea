/* common.c — what every algorithm file shares: blocks of a message, chunk and piece sizes,
 * one sh_xfer with the operation's reduction, and the names of collectives and algorithms.
 * Not here: any algorithm (ring.c, rd.c, ...), the choice between them (select.c).
 * Proved by tests/comm/test_algo.c. */
#include "comm/coll/algo.h"

/* Pipeline chunk of the tree and chain (message / CHUNK_DIV, clamped to [CHUNK_MIN,
 * CHUNK_MAX]): pipelining pays, and 32-128 KiB chunks lead whole-message ones
 * (bench/comm/algo_sweep broadcast_chunks / reduce_chunks). */
#define CHUNK_DIV 8
#define CHUNK_MIN_NBYTES (32u * 1024)
#define CHUNK_MAX_NBYTES (128u * 1024)
/* Pieces of the staged algorithms (recursive doubling, ring and halving reduce-scatter,
 * alltoall): every piece costs a full set of rounds, so they are larger. With 16 KiB pieces
 * recursive doubling of 1-16 MiB ran 4-5x behind ring; with 256 KiB-1 MiB 1.3-1.5x
 * (allreduce sweep, 4 ranks shm). Staging stays at most 2 x PIECE_MAX per collective. */
#define PIECE_MAX_NBYTES (512u * 1024)

void sh_algo_block(size_t count, int n, int b, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n;
    *off = (size_t)b * base + ((size_t)b < extra ? (size_t)b : extra);
    *len = base + ((size_t)b < extra ? 1 : 0);
}

static size_t whole_elements(size_t nbytes, shoal_dtype dt)
{
    size_t es = shoal_dtype_nbytes(dt);
    nbytes -= nbytes % es;
    return nbytes ? nbytes : es;
}

size_t sh_algo_chunk_nbytes(const shoal_comm *c, size_t msg_nbytes, shoal_dtype dt)
{
    size_t chunk = c->chunk_nbytes;
    if (!chunk) {
        chunk = msg_nbytes / CHUNK_DIV;
        if (chunk < CHUNK_MIN_NBYTES) chunk = CHUNK_MIN_NBYTES;
        if (chunk > CHUNK_MAX_NBYTES) chunk = CHUNK_MAX_NBYTES;
    }
    return whole_elements(chunk, dt);
}

size_t sh_algo_piece_nbytes(const shoal_comm *c, size_t msg_nbytes, shoal_dtype dt)
{
    size_t piece = c->chunk_nbytes;
    if (!piece) piece = msg_nbytes < PIECE_MAX_NBYTES ? msg_nbytes : PIECE_MAX_NBYTES;
    return whole_elements(piece, dt);
}

shoal_result sh_algo_xfer(shoal_comm *c, const char *what, sh_xfer_op *ops, int nops,
                          shoal_dtype dt, shoal_op op)
{
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, what, &x);
    x.dtype = (int)dt;
    x.op = (int)op;
    return sh_xfer(&x, ops, nops);
}

const char *sh_algo_name(sh_algo_kind a)
{
    static const char *names[] = {"auto", "ring", "rd", "rhd", "tree", "hier", "mpi"};
    return (unsigned)a < SH_ALGO_COUNT ? names[a] : "?";
}

const char *sh_coll_name(sh_coll_kind k)
{
    static const char *names[] = {"allreduce", "broadcast", "reduce", "allgather",
                                  "reduce_scatter", "alltoall", "barrier"};
    return (unsigned)k < SH_COLL_COUNT ? names[k] : "?";
}
