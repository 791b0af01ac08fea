/* select.c — the one place that decides how a collective runs (and counts it, and breaks the
 * communicator when it fails on a peer): shared-window updates, shared-memory slots, eager
 * recursive doubling, then after the mismatch check CMA, MPI, a forced SHOAL_ALGO or the table
 * below, with a fallback; world 1, count 0, in place and SHOAL_AVG's division for the groups.
 * Not here: the algorithms (ring.c, rd.c, rhd.c, tree.c, hier.c, misc.c, eager.c, slots.c,
 * cma.c, common.c), argument checks and queueing (comm.c, engine.c), kernels (reduce.c).
 * Proved by tests/comm/test_algo.c (the table and fallbacks) and tests/comm/test_comm.c. */
#include "comm/coll/select.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "comm/coll/algo.h"
#include "comm/coll/cma.h"
#include "comm/coll/eager.h"
#include "comm/coll/match.h"
#include "comm/coll/slots.h"
#include "comm/reduce.h"
#include "comm/transport/mpi.h"

/* ---- the table ----
 * Each threshold below is where one algorithm overtakes the next in bench/comm/algo_sweep.c
 * (every algorithm side by side per size in one run, socketpair and shared-memory links).
 * With more ranks than cores every algorithm waits for the scheduler, which flatters the
 * binomial tree; the tree is not chosen for allreduce, since with a core per rank its root
 * handles log2(n) whole messages.
 * Hierarchical allreduce (hier.c) takes over above RD_MAX_NBYTES when hosts hold several
 * ranks: it sends the links between hosts 1/m of what the flat ring does. */

/* Recursive doubling up to here: log2(n) rounds against ring's 2(n-1), so it leads while
 * latency dominates; above, the whole message resent every round loses. */
#define RD_MAX_NBYTES (16u * 1024)
/* Above that: halving-doubling on power-of-two worlds of 4 or more ranks (ring's bandwidth in
 * log rounds), ring otherwise: at 2 ranks the two are one exchange each, at 3 the fold of the
 * extra rank costs a whole message, and ring keeps non-powers of two to neighbour-only traffic. */
#define RHD_MIN_RANKS 4
/* Binomial-tree broadcast up to here, then the pipelined chain: the chain sends each byte once
 * per rank where the tree's root sends it log2(n) times, which counts on a network. */
#define TREE_BCAST_MAX_NBYTES (64u * 1024)
/* Recursive-doubling allgather (power-of-two groups) up to this many bytes per rank (the
 * largest size measured); ring above (neighbour-only traffic). */
#define RD_ALLGATHER_MAX_NBYTES (4u * 1024 * 1024)
/* Reduce-scatter by recursive halving (power-of-two worlds of 4 or more) up to this many
 * bytes per rank, where its log rounds lead; ring above. */
#define RHD_RS_MAX_NBYTES (4u * 1024)

static int is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

/* Several hosts, several ranks on at least one: the hierarchy has something to save. */
static int has_hierarchy(const shoal_comm *c) { return c->nhosts > 1 && c->nhosts < c->world; }

/* Two ranks on two hosts, above 64 KiB up to 1 MiB, where no update rides on it: recursive
 * doubling, the whole message each way in one exchange, where the ring sends the same bytes
 * in two exchanges of half, and a TCP stack's bursts of fast retransmits cost the ring more
 * (bench/net/run.sh, SHOAL_ALGO). With an update the ring stays: each rank steps only the
 * block it holds (ring_allreduce). */
#define PAIR_RD_MIN_NBYTES (64u * 1024)
#define PAIR_RD_MAX_NBYTES (1u << 20)

/* The flat allreduce table applied to a group (the hierarchical one uses it across hosts).
 * Across hosts large messages take the ring even where halving-doubling leads inside one:
 * halving-doubling talks to a different peer at every step, and a TCP connection left idle
 * restarts from slow start (net.ipv4.tcp_slow_start_after_idle); the ring keeps its two
 * neighbours busy. */
static sh_algo_kind flat_allreduce_choice(int n, size_t count, size_t nbytes, int across_hosts, int pair_rd)
{
    if (nbytes <= RD_MAX_NBYTES || count < (size_t)n) return SH_ALGO_RD;
    if (n == 2 && across_hosts && pair_rd && nbytes > PAIR_RD_MIN_NBYTES && nbytes <= PAIR_RD_MAX_NBYTES)
        return SH_ALGO_RD;
    return n >= RHD_MIN_RANKS && is_pow2(n) && !across_hosts ? SH_ALGO_RHD : SH_ALGO_RING;
}

shoal_result sh_select_allreduce_flat(shoal_comm *c, const sh_group *g, const void *send, void *buf,
                                      size_t count, shoal_dtype dt, shoal_op op)
{
    switch (flat_allreduce_choice(g->n, count, count * shoal_dtype_nbytes(dt), 1, 1)) { /* one rank per host */
    case SH_ALGO_RD: return sh_rd_allreduce(c, g, send, buf, count, dt, op);
    case SH_ALGO_RHD: return sh_rhd_allreduce(c, g, send, buf, count, dt, op);
    default: return sh_ring_allreduce(c, g, send, buf, count, dt, op);
    }
}

static sh_algo_kind auto_choice(const shoal_comm *c, const sh_coll *op)
{
    size_t nbytes = op->count * shoal_dtype_nbytes(op->dt);
    switch (op->kind) {
    case SH_COLL_ALLREDUCE:
        if (nbytes > RD_MAX_NBYTES && has_hierarchy(c)) return SH_ALGO_HIER;
        return flat_allreduce_choice(c->world, op->count, nbytes, c->nhosts > 1, !op->apply);
    case SH_COLL_BROADCAST:
        return nbytes <= TREE_BCAST_MAX_NBYTES || c->world <= 2 ? SH_ALGO_TREE : SH_ALGO_RING;
    case SH_COLL_REDUCE:
        return SH_ALGO_TREE;
    case SH_COLL_ALLGATHER:
        return nbytes <= RD_ALLGATHER_MAX_NBYTES && is_pow2(c->world) ? SH_ALGO_RD : SH_ALGO_RING;
    case SH_COLL_REDUCE_SCATTER:
        return nbytes <= RHD_RS_MAX_NBYTES && c->world >= RHD_MIN_RANKS && is_pow2(c->world) ? SH_ALGO_RHD
                                                                                           : SH_ALGO_RING;
    default:
        return SH_ALGO_AUTO; /* alltoall and barrier have one algorithm each */
    }
}

/* Whether algorithm a can run this collective on c. */
static int can_run(const shoal_comm *c, const sh_coll *op, sh_algo_kind a)
{
    switch (op->kind) {
    case SH_COLL_ALLREDUCE:
        return a == SH_ALGO_RING || a == SH_ALGO_RD || a == SH_ALGO_RHD || a == SH_ALGO_TREE ||
               (a == SH_ALGO_HIER && has_hierarchy(c));
    case SH_COLL_BROADCAST:
        return a == SH_ALGO_TREE || a == SH_ALGO_RING;
    case SH_COLL_REDUCE:
        return a == SH_ALGO_TREE;
    case SH_COLL_ALLGATHER:
        return a == SH_ALGO_RING || (a == SH_ALGO_RD && is_pow2(c->world));
    case SH_COLL_REDUCE_SCATTER:
        return a == SH_ALGO_RING || (a == SH_ALGO_RHD && is_pow2(c->world));
    default:
        return 0;
    }
}

sh_algo_kind sh_select_choose(const shoal_comm *c, const sh_coll *op)
{
    sh_algo_kind a = c->algo;
    if (a == SH_ALGO_AUTO || a == SH_ALGO_MPI) return auto_choice(c, op);
    if (can_run(c, op, a)) return a;
    sh_algo_kind d = auto_choice(c, op);
    if (sh_log_enabled(SH_LOG_DEBUG, "comm"))
        SH_LOG_D("comm", "SHOAL_ALGO=%s cannot do %s on %d ranks (%d hosts); using %s", sh_algo_name(a),
                 sh_coll_name(op->kind), c->world, c->nhosts, sh_algo_name(d));
    return d;
}

/* The ring in its two phases, with the work between them done once: after the reduce-scatter
 * each member averages (SHOAL_AVG) only the block it holds, and with an update
 * (shoal_allreduce_apply_start) steps the optimizer on that block alone and the allgather
 * spreads the updated params instead of the gradients (ZeRO stage 1, as cma.c in a host): on
 * n ranks 1/n of the averaging and of the optimizer's passes, the same bytes on the wire, the
 * same bits everywhere (each block's average and step computed once, then copied). *applied
 * says the update was made. */
static shoal_result ring_allreduce(shoal_comm *c, const sh_group *g, const sh_coll *op, int *applied)
{
    SH_TRY(sh_ring_rs_phase(c, g, op->send, op->recv, op->count, op->dt, op->op));
    size_t off, len;
    sh_algo_block(op->count, g->n, (g->me + 1) % g->n, &off, &len);
    unsigned char *own = (unsigned char *)op->recv + off * shoal_dtype_nbytes(op->dt);
    if (op->op == SHOAL_AVG && len) sh_reduce_avg_finish(own, len, op->dt, c->world);
    if (!op->apply) return sh_ring_ag_phase(c, g, op->recv, op->count, op->dt);
    if (len) op->apply(op->apply_ctx, off, len, (const float *)own);
    *applied = 1;
    return sh_ring_ag_phase(c, g, op->params, op->count, op->dt);
}

static shoal_result allreduce(shoal_comm *c, const sh_group *g, const sh_coll *op, int *applied)
{
    size_t nbytes = op->count * shoal_dtype_nbytes(op->dt);
    if (c->world == 1 || op->count == 0) {
        if (op->send != op->recv && nbytes) memcpy(op->recv, op->send, nbytes);
    } else {
        switch (sh_select_choose(c, op)) {
        case SH_ALGO_RD: SH_TRY(sh_rd_allreduce(c, g, op->send, op->recv, op->count, op->dt, op->op)); break;
        case SH_ALGO_RHD: SH_TRY(sh_rhd_allreduce(c, g, op->send, op->recv, op->count, op->dt, op->op)); break;
        case SH_ALGO_HIER: {
            int own = 0; /* the split shape averages (and updates) each block once per host */
            SH_TRY(sh_hier_allreduce(c, op, sh_select_allreduce_flat, &own, applied));
            if (own) return SHOAL_OK;
            break;
        }
        case SH_ALGO_TREE:
            /* reduce to rank 0, then broadcast its bits: identical everywhere */
            SH_TRY(sh_tree_reduce(c, g, op->send, op->recv, op->count, op->dt, op->op, 0));
            SH_TRY(sh_tree_broadcast(c, g, op->recv, op->count, op->dt, 0));
            break;
        default: return ring_allreduce(c, g, op, applied); /* averages its own block */
        }
    }
    if (op->op == SHOAL_AVG) sh_reduce_avg_finish(op->recv, op->count, op->dt, c->world);
    return SHOAL_OK;
}

static shoal_result run(shoal_comm *c, const sh_group *g, const sh_coll *op, int *applied)
{
    size_t es = shoal_dtype_nbytes(op->dt), nbytes = op->count * es;
    int n = c->world;
    switch (op->kind) {
    case SH_COLL_ALLREDUCE:
        return allreduce(c, g, op, applied);
    case SH_COLL_BROADCAST:
        if (c->rank == op->root && op->send != op->recv && nbytes) memcpy(op->recv, op->send, nbytes);
        if (n == 1 || nbytes == 0) return SHOAL_OK;
        if (sh_select_choose(c, op) == SH_ALGO_RING)
            return sh_tree_chain_broadcast(c, g, op->recv, op->count, op->dt, op->root);
        return sh_tree_broadcast(c, g, op->recv, op->count, op->dt, op->root);
    case SH_COLL_REDUCE:
        if (nbytes) SH_TRY(sh_tree_reduce(c, g, op->send, op->recv, op->count, op->dt, op->op, op->root));
        if (op->op == SHOAL_AVG && c->rank == op->root) sh_reduce_avg_finish(op->recv, op->count, op->dt, n);
        return SHOAL_OK;
    case SH_COLL_ALLGATHER: {
        unsigned char *mine = (unsigned char *)op->recv + (size_t)c->rank * nbytes;
        if ((const unsigned char *)op->send != mine && nbytes) memcpy(mine, op->send, nbytes);
        if (n == 1 || nbytes == 0) return SHOAL_OK;
        if (sh_select_choose(c, op) == SH_ALGO_RD) return sh_rd_allgather(c, g, op->recv, op->count, op->dt);
        return sh_ring_allgather(c, g, op->recv, op->count, op->dt);
    }
    case SH_COLL_REDUCE_SCATTER:
        if (n == 1) {
            if (op->send != op->recv && nbytes) memmove(op->recv, op->send, nbytes);
        } else if (nbytes) {
            if (sh_select_choose(c, op) == SH_ALGO_RHD)
                SH_TRY(sh_rhd_reduce_scatter(c, g, op->send, op->recv, op->count, op->dt, op->op));
            else
                SH_TRY(sh_ring_reduce_scatter(c, g, op->send, op->recv, op->count, op->dt, op->op));
        }
        if (op->op == SHOAL_AVG) sh_reduce_avg_finish(op->recv, op->count, op->dt, n);
        return SHOAL_OK;
    case SH_COLL_ALLTOALL:
        if (nbytes == 0) return SHOAL_OK;
        if (n == 1) {
            if (op->send != op->recv) memcpy(op->recv, op->send, nbytes);
            return SHOAL_OK;
        }
        return sh_misc_alltoall(c, g, op->send, op->recv, op->count, op->dt);
    case SH_COLL_BARRIER:
        return n == 1 ? SHOAL_OK : sh_misc_barrier(c, g);
    default:
        return SH_FAIL(SHOAL_ERR_INTERNAL, "unknown collective %d", (int)op->kind);
    }
}

/* The collective by MPI or by shoal's own algorithms over the whole communicator. */
static shoal_result run_whole(shoal_comm *c, const sh_coll *op, int *applied)
{
    if (c->algo == SH_ALGO_MPI) {
        /* MPI has no 16-bit float types: those collectives take shoal's own algorithms */
        if (op->dt != SHOAL_FLOAT16 && op->dt != SHOAL_BFLOAT16) return sh_mpi_coll_run(c, op);
        SH_LOG_D("comm", "SHOAL_ALGO=mpi cannot do %s on %s; using shoal's own", sh_coll_name(op->kind),
                 shoal_dtype_name(op->dt));
    }
    /* The whole communicator as a group; small worlds need no allocation. */
    enum { STACK_RANKS = 64 };
    int stack[STACK_RANKS], *ranks = stack;
    if (c->world > STACK_RANKS) {
        ranks = malloc(sizeof(int) * (size_t)c->world);
        if (!ranks) return SH_FAIL(SHOAL_ERR_NOMEM, "%s: out of memory for %d ranks", sh_coll_name(op->kind), c->world);
    }
    for (int r = 0; r < c->world; r++) ranks[r] = r;
    sh_group g = {c->world, c->rank, ranks};
    shoal_result rc = run(c, &g, op, applied);
    if (ranks != stack) free(ranks);
    return rc;
}

/* The name shoal_wait_trace reports for a collective run_whole runs. */
static const char *whole_path(const shoal_comm *c, const sh_coll *op)
{
    if (c->world == 1) return "local";
    if (c->algo == SH_ALGO_MPI && op->dt != SHOAL_FLOAT16 && op->dt != SHOAL_BFLOAT16) return "mpi";
    sh_algo_kind a = sh_select_choose(c, op);
    if (a == SH_ALGO_AUTO) return sh_coll_name(op->kind); /* alltoall, barrier: one algorithm */
    if (op->kind == SH_COLL_REDUCE) return "tree";
    return sh_algo_name(a);
}

shoal_result sh_select_algo_run(shoal_comm *c, const sh_coll *op)
{
    /* through the peers' memory: each rank updates its own block as it goes */
    if (c->algo == SH_ALGO_AUTO && c->shm && c->nhosts == 1 && c->world > 1 && sh_cma_fits(c, op)) {
        c->last_path = "cma";
        return sh_cma_allreduce(c, op);
    }
    c->last_path = whole_path(c, op);
    int applied = 0; /* the ring updates each block once, its holder's (ring_allreduce) */
    SH_TRY(run_whole(c, op, &applied));
    if (op->apply && !applied) { /* every rank updates everything */
        op->apply(op->apply_ctx, 0, op->count, (const float *)op->recv);
        c->last_apply_lead = c->rank == 0;
    }
    return SHOAL_OK;
}

/* The path for one collective, the mismatch check included. */
static shoal_result route(shoal_comm *c, const sh_coll *op)
{
    shoal_result rc;
    if (sh_cma_window_apply(c, op)) { /* the only path that updates a shared copy once */
        c->last_path = "cma";
        rc = sh_match_check(c, op);
        return rc == SHOAL_OK ? sh_cma_allreduce(c, op) : rc;
    }
    /* the fast paths serve the automatic choice only: SHOAL_ALGO forces the algorithm */
    if (c->algo == SH_ALGO_AUTO && sh_slots_fits(c, op)) {
        c->last_path = "slots";
        return sh_slots_coll(c, op);
    }
    if (c->algo == SH_ALGO_AUTO && sh_eager_fits(c, op)) {
        c->last_path = "eager";
        return sh_eager_allreduce(c, op);
    }
    rc = sh_match_check(c, op);
    return rc == SHOAL_OK ? sh_select_algo_run(c, op) : rc;
}

shoal_result sh_select_run(shoal_comm *c, const sh_coll *op)
{
    if (c->broken) return SH_FAIL(SHOAL_ERR_BROKEN, "communicator is broken: %s", c->broken_msg);
    SH_TRY(sh_comm_check_stopped(c));
    shoal_result rc = route(c, op);
    c->coll_seq++;
    if (rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT || rc == SHOAL_ERR_MISMATCH) {
        /* the links are in an unknown state: tell the peers at once */
        sh_comm_break(c, shoal_last_error_message(), 0); /* "communicator is broken: " + this, then the rank */
        sh_err_prefix_rank(c->rank);
    }
    return rc;
}
