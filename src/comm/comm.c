/* comm.c — the public communicator API: creation from the environment, argument checks,
 * blocking calls (inline when nothing is queued), point-to-point glue, split, destroy.
 * Not here: how a collective runs, is counted and breaks the communicator (coll/select.c
 * and the algorithms in coll/), the thread and requests of non-blocking calls (engine.c),
 * links (transport/), tagged messages (p2p.c), the environment (boot/).
 * Proved by tests/comm/test_comm.c and tests/comm/test_comm_faults.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/boot.h"
#include "comm/boot/elastic.h"
#include "comm/boot/interrupt.h"
#include "comm/boot/store.h"
#include "comm/coll/algo.h"
#include "comm/coll/select.h"
#include "comm/comm_internal.h"
#include "comm/engine.h"
#include "comm/p2p.h"
#include "comm/reduce.h"
#include "comm/transport/transport.h"

/* ---- argument checks ---- */

static shoal_result check_comm(const shoal_comm *c)
{
    if (!c) return SH_FAIL(SHOAL_ERR_INVALID, "communicator is NULL");
    if (c->magic != SH_COMM_MAGIC)
        return SH_FAIL(SHOAL_ERR_INVALID, "not a live communicator (used after shoal_comm_destroy?)");
    return SHOAL_OK;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = a, *y = b;
    return an && bn && x < y + bn && y < x + an;
}

static shoal_result check_coll(shoal_comm *c, const sh_coll *op)
{
    SH_TRY(check_comm(c));
    const char *name = sh_coll_name(op->kind);
    if (op->kind == SH_COLL_BARRIER) return SHOAL_OK;
    if ((unsigned)op->dt >= SHOAL_DTYPE_COUNT)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: invalid data type %d", name, (int)op->dt);
    if ((unsigned)op->op >= SHOAL_OP_COUNT)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: invalid reduction %d", name, (int)op->op);
    if ((op->kind == SH_COLL_BROADCAST || op->kind == SH_COLL_REDUCE) &&
        (op->root < 0 || op->root >= c->world))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: root %d is not a rank of this communicator (0..%d)",
                       name, op->root, c->world - 1);
    size_t es = shoal_dtype_nbytes(op->dt);
    size_t mult = 1;
    if (op->kind == SH_COLL_ALLGATHER || op->kind == SH_COLL_REDUCE_SCATTER || op->kind == SH_COLL_ALLTOALL)
        mult = (size_t)c->world;
    if (op->count > SIZE_MAX / es / mult / 2)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: count %zu is too large (negative?)", name, op->count);
    if (op->count == 0) return SHOAL_OK;
    size_t send_n = op->count * es, recv_n = op->count * es;
    if (op->kind == SH_COLL_ALLGATHER) recv_n *= mult;
    if (op->kind == SH_COLL_REDUCE_SCATTER) send_n *= mult;
    if (op->kind == SH_COLL_ALLTOALL) send_n *= mult, recv_n *= mult;
    int needs_send = op->kind != SH_COLL_BROADCAST || c->rank == op->root;
    int needs_recv = op->kind != SH_COLL_REDUCE || c->rank == op->root;
    if (needs_send && !op->send) return SH_FAIL(SHOAL_ERR_INVALID, "%s: send buffer is NULL", name);
    if (needs_recv && !op->recv) return SH_FAIL(SHOAL_ERR_INVALID, "%s: recv buffer is NULL", name);
    if (needs_send && needs_recv && op->send != op->recv && overlaps(op->send, send_n, op->recv, recv_n)) {
        /* allgather's natural in-place form: send is this rank's block of recv */
        int allgather_inplace = op->kind == SH_COLL_ALLGATHER &&
                                (const char *)op->send == (const char *)op->recv + (size_t)c->rank * send_n;
        if (!allgather_inplace)
            return SH_FAIL(SHOAL_ERR_INVALID,
                           "%s: send and recv buffers overlap partially; use the same pointer for "
                           "in-place", name);
    }
    return SHOAL_OK;
}

/* Blocking: run inline when nothing is queued, else after what is queued. */
static shoal_result coll_blocking(shoal_comm *c, const sh_coll *op);
static shoal_result coll_start(shoal_comm *c, const sh_coll *op, shoal_request **req);

static shoal_result coll_blocking(shoal_comm *c, const sh_coll *op)
{
    SH_TRY(check_coll(c, op));
    if (!sh_engine_idle(c)) {
        shoal_request *r = NULL;
        SH_TRY(coll_start(c, op, &r));
        return shoal_wait(r);
    }
    return sh_select_run(c, op);
}

static shoal_result coll_start(shoal_comm *c, const sh_coll *op, shoal_request **req)
{
    if (!req) return SH_FAIL(SHOAL_ERR_INVALID, "request pointer is NULL");
    *req = NULL;
    SH_TRY(check_coll(c, op));
    return sh_engine_start(c, op, req);
}

#define COLL(kind_, send_, recv_, count_, dt_, op_, root_) \
    (&(sh_coll){(kind_), (send_), (recv_), (count_), (dt_), (op_), (root_), NULL, NULL, NULL})

shoal_result shoal_allreduce(shoal_comm *c, const void *send, void *recv, size_t count,
                             shoal_dtype dt, shoal_op op)
{
    return coll_blocking(c, COLL(SH_COLL_ALLREDUCE, send, recv, count, dt, op, 0));
}
shoal_result shoal_broadcast(shoal_comm *c, const void *send, void *recv, size_t count,
                             shoal_dtype dt, int root)
{
    return coll_blocking(c, COLL(SH_COLL_BROADCAST, send, recv, count, dt, SHOAL_SUM, root));
}
shoal_result shoal_reduce(shoal_comm *c, const void *send, void *recv, size_t count,
                          shoal_dtype dt, shoal_op op, int root)
{
    return coll_blocking(c, COLL(SH_COLL_REDUCE, send, recv, count, dt, op, root));
}
shoal_result shoal_allgather(shoal_comm *c, const void *send, void *recv, size_t count,
                             shoal_dtype dt)
{
    return coll_blocking(c, COLL(SH_COLL_ALLGATHER, send, recv, count, dt, SHOAL_SUM, 0));
}
shoal_result shoal_reduce_scatter(shoal_comm *c, const void *send, void *recv,
                                  size_t recv_count, shoal_dtype dt, shoal_op op)
{
    return coll_blocking(c, COLL(SH_COLL_REDUCE_SCATTER, send, recv, recv_count, dt, op, 0));
}
shoal_result shoal_alltoall(shoal_comm *c, const void *send, void *recv, size_t count,
                            shoal_dtype dt)
{
    return coll_blocking(c, COLL(SH_COLL_ALLTOALL, send, recv, count, dt, SHOAL_SUM, 0));
}
shoal_result shoal_barrier(shoal_comm *c)
{
    return coll_blocking(c, COLL(SH_COLL_BARRIER, NULL, NULL, 0, SHOAL_UINT8, SHOAL_SUM, 0));
}

shoal_result shoal_allreduce_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                   shoal_dtype dt, shoal_op op, shoal_request **req)
{
    return coll_start(c, COLL(SH_COLL_ALLREDUCE, send, recv, count, dt, op, 0), req);
}
shoal_result shoal_allreduce_apply_start(shoal_comm *c, float *grads, float *params, size_t count,
                                         shoal_op op, shoal_apply_fn apply, void *ctx,
                                         shoal_request **req)
{
    if (!apply || (count && (!grads || !params)))
        return SH_FAIL(SHOAL_ERR_INVALID, "allreduce_apply: apply, grads or params is NULL");
    sh_coll co = {SH_COLL_ALLREDUCE, grads, grads, count, SHOAL_FLOAT32, op, 0, params, apply, ctx};
    return coll_start(c, &co, req);
}
shoal_result shoal_broadcast_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                   shoal_dtype dt, int root, shoal_request **req)
{
    return coll_start(c, COLL(SH_COLL_BROADCAST, send, recv, count, dt, SHOAL_SUM, root), req);
}
shoal_result shoal_reduce_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                shoal_dtype dt, shoal_op op, int root, shoal_request **req)
{
    return coll_start(c, COLL(SH_COLL_REDUCE, send, recv, count, dt, op, root), req);
}
shoal_result shoal_allgather_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                   shoal_dtype dt, shoal_request **req)
{
    return coll_start(c, COLL(SH_COLL_ALLGATHER, send, recv, count, dt, SHOAL_SUM, 0), req);
}
shoal_result shoal_reduce_scatter_start(shoal_comm *c, const void *send, void *recv,
                                        size_t recv_count, shoal_dtype dt, shoal_op op,
                                        shoal_request **req)
{
    return coll_start(c, COLL(SH_COLL_REDUCE_SCATTER, send, recv, recv_count, dt, op, 0), req);
}
shoal_result shoal_alltoall_start(shoal_comm *c, const void *send, void *recv, size_t count,
                                  shoal_dtype dt, shoal_request **req)
{
    return coll_start(c, COLL(SH_COLL_ALLTOALL, send, recv, count, dt, SHOAL_SUM, 0), req);
}
shoal_result shoal_barrier_start(shoal_comm *c, shoal_request **req)
{
    return coll_start(c, COLL(SH_COLL_BARRIER, NULL, NULL, 0, SHOAL_UINT8, SHOAL_SUM, 0), req);
}

/* ---- point-to-point ---- */

static shoal_result check_p2p(shoal_comm *c, const void *buf, size_t count, shoal_dtype dt, int peer,
                              int tag, int any_peer_ok, const char *name)
{
    SH_TRY(check_comm(c));
    if (c->broken) return SH_FAIL(SHOAL_ERR_BROKEN, "communicator is broken: %s", c->broken_msg);
    SH_TRY(sh_comm_check_stopped(c));
    if ((unsigned)dt >= SHOAL_DTYPE_COUNT) return SH_FAIL(SHOAL_ERR_INVALID, "%s: invalid data type %d", name, (int)dt);
    if (!(any_peer_ok && peer < 0) && (peer < 0 || peer >= c->world || peer == c->rank))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: peer %d is not another rank of this communicator (0..%d, not %d)",
                       name, peer, c->world - 1, c->rank);
    if (tag < 0) return SH_FAIL(SHOAL_ERR_INVALID, "%s: tag %d is negative", name, tag);
    if (count > ((size_t)1 << 40) / shoal_dtype_nbytes(dt))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: count %zu is too large", name, count);
    if (count && !buf) return SH_FAIL(SHOAL_ERR_INVALID, "%s: buffer is NULL", name);
    return SHOAL_OK;
}


shoal_result shoal_send_start(shoal_comm *c, const void *buf, size_t count, shoal_dtype dt,
                              int peer, int tag, shoal_request **req)
{
    if (!req) return SH_FAIL(SHOAL_ERR_INVALID, "send: request pointer is NULL");
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "send"));
    sh_p2p_op *op;
    SH_TRY(sh_p2p_send_start(c, buf, count * shoal_dtype_nbytes(dt), dt, peer, tag, &op));
    return sh_engine_p2p_request(c, op, req);
}

shoal_result shoal_recv_start(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int peer,
                              int tag, shoal_request **req)
{
    if (!req) return SH_FAIL(SHOAL_ERR_INVALID, "recv: request pointer is NULL");
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "recv"));
    sh_p2p_op *op;
    SH_TRY(sh_p2p_recv_start(c, buf, count * shoal_dtype_nbytes(dt), dt, peer, tag, -1, &op));
    return sh_engine_p2p_request(c, op, req);
}

/* A point-to-point failure is about one peer: later messages to or from it fail at once
 * ("the peer is gone", p2p.c), but the communicator stays usable with the others, so a
 * parameter server can drop a dead worker and go on. Collectives still fail on a dead peer. */
shoal_result shoal_send(shoal_comm *c, const void *buf, size_t count, shoal_dtype dt, int peer,
                        int tag)
{
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "send"));
    sh_p2p_op *op;
    SH_TRY(sh_p2p_send_start(c, buf, count * shoal_dtype_nbytes(dt), dt, peer, tag, &op));
    return sh_p2p_wait(op, NULL, NULL);
}

shoal_result shoal_recv(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int peer, int tag)
{
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "recv"));
    sh_p2p_op *op;
    size_t want = count * shoal_dtype_nbytes(dt), got = 0;
    SH_TRY(sh_p2p_recv_start(c, buf, want, dt, peer, tag, -1, &op));
    shoal_result rc = sh_p2p_wait(op, NULL, &got);
    if (rc != SHOAL_OK) return rc;
    if (got != want)
        return SH_FAIL(SHOAL_ERR_MISMATCH, "recv from rank %d (tag %d): expected %zu bytes, it sent %zu",
                       peer, tag, want, got);
    return SHOAL_OK;
}

shoal_result shoal_recv_any(shoal_comm *c, void *buf, size_t max_count, shoal_dtype dt, int tag,
                            int timeout_ms, int *peer, size_t *count)
{
    SH_TRY(check_p2p(c, buf, max_count, dt, -1, tag, 1, "recv_any"));
    sh_p2p_op *op;
    size_t got = 0;
    int from = -1;
    SH_TRY(sh_p2p_recv_start(c, buf, max_count * shoal_dtype_nbytes(dt), dt, -1, tag,
                             timeout_ms < 0 ? c->timeout_ms : timeout_ms, &op));
    shoal_result rc = sh_p2p_wait(op, &from, &got);
    if (peer) *peer = from;
    if (count) *count = got / shoal_dtype_nbytes(dt);
    return rc;
}


shoal_result shoal_peer_check(shoal_comm *c, int peer)
{
    SH_TRY(check_comm(c));
    if (peer < 0 || peer >= c->world || peer == c->rank)
        return SH_FAIL(SHOAL_ERR_INVALID, "peer_check: %d is not another rank of this communicator (0..%d, not %d)",
                       peer, c->world - 1, c->rank);
    SH_TRY(sh_p2p_peer_lost(c, peer));
    return sh_comm_peer_lost(c, peer);
}

/* ---- creation ---- */

void shoal_comm_opts_default(shoal_comm_opts *o)
{
    memset(o, 0, sizeof *o);
    o->rank = -1;
    o->world = -1;
}

shoal_result shoal_comm_create(const shoal_comm_opts *o, shoal_comm **out)
{
    if (!out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_comm_create: out is NULL");
    *out = NULL;
    shoal_comm *c = NULL;
    int elastic = o && o->elastic_min > 0, joining = 0;
    sh_interrupt_watch(1); /* SIGINT / SIGTERM end the wait (interrupt.h) */
    shoal_result rc = sh_boot_world_or_join(o, &c, &joining);
    if (rc == SHOAL_OK && joining) { /* an elastic job that runs: taken in at its next regroup */
        rc = sh_elastic_join(o, c, &c);
        sh_interrupt_watch(0);
        if (rc != SHOAL_OK) return rc;
        *out = c;
        return SHOAL_OK;
    }
    if (rc == SHOAL_OK && elastic) rc = sh_elastic_begin(c, o);
    if (rc == SHOAL_OK) rc = sh_transport_connect_all(c);
    if (rc == SHOAL_OK) rc = sh_store_barrier_named(c->store, "w/ready", c->rank, c->world, c->timeout_ms);
    if (rc == SHOAL_OK && elastic) rc = sh_elastic_started(c);
    if (rc != SHOAL_OK && c) {
        sh_err_prefix_rank(c->rank);
        shoal_comm_destroy(c);
    }
    sh_interrupt_watch(0);
    if (rc != SHOAL_OK) return rc;
    SH_LOG_I("comm", "rank %d of %d on %s: %d hosts, %d ranks here", c->rank, c->world,
             c->hostname[c->rank], c->nhosts, c->local_world);
    *out = c;
    return SHOAL_OK;
}

shoal_result shoal_comm_split(shoal_comm *c, int color, int key, shoal_comm **out)
{
    if (!out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_comm_split: out is NULL");
    *out = NULL;
    SH_TRY(check_comm(c));
    if (!c->store) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_comm_split: this communicator has no store");
    int mine[2] = {color, key};
    int *all = malloc(sizeof(int) * 2 * (size_t)c->world);
    if (!all) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    shoal_result rc = shoal_allgather(c, mine, all, 2, SHOAL_INT32);
    if (rc != SHOAL_OK || color < 0) {
        free(all);
        return rc;
    }
    /* Members: same colour, ordered by key then old rank. */
    int n = 0, newrank = 0;
    int *members = malloc(sizeof(int) * (size_t)c->world);
    for (int r = 0; members && r < c->world; r++)
        if (all[2 * r] == color) members[n++] = r;
    for (int i = 1; members && i < n; i++)
        for (int j = i; j > 0; j--) {
            int a = members[j - 1], b = members[j];
            if (all[2 * a + 1] > all[2 * b + 1] || (all[2 * a + 1] == all[2 * b + 1] && a > b)) {
                members[j - 1] = b;
                members[j] = a;
            }
        }
    for (int i = 0; members && i < n; i++)
        if (members[i] == c->rank) newrank = i;
    free(all);
    if (!members) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    shoal_comm *child = NULL;
    rc = sh_comm_alloc(newrank, n, &child);
    if (rc != SHOAL_OK) {
        free(members);
        return rc;
    }
    child->job_rank = malloc(sizeof *child->job_rank * (size_t)n); /* NULL: errors name split ranks only */
    for (int i = 0; i < n; i++) {
        if (child->job_rank) child->job_rank[i] = c->job_rank ? c->job_rank[members[i]] : members[i];
        child->host_of[i] = c->host_of[members[i]];
        child->hostname[i] = strdup(c->hostname[members[i]] ? c->hostname[members[i]] : "?");
    }
    free(members);
    /* renumber hosts densely in order of first appearance */
    {
        int *map = calloc((size_t)c->nhosts + 1, sizeof *map), next = 0;
        for (int i = 0; map && i <= c->nhosts; i++) map[i] = -1;
        for (int i = 0; map && i < n; i++) {
            int h = child->host_of[i];
            if (map[h] < 0) map[h] = next++;
            child->host_of[i] = map[h];
        }
        free(map);
    }
    sh_comm_index_hosts(child);
    child->transport = c->transport;
    child->algo = c->algo;
    child->timeout_ms = c->timeout_ms;
    child->spin_us = c->spin_us;
    child->secure = c->secure;
    child->chunk_nbytes = c->chunk_nbytes;
    child->store = c->store;
    child->parent = c;
    snprintf(child->prefix, sizeof child->prefix, "%.40s.s%llu.c%d", c->prefix,
             (unsigned long long)c->coll_seq, color);
    rc = sh_transport_connect_all(child);
    if (rc != SHOAL_OK) {
        child->store = NULL;
        shoal_comm_destroy(child);
        return rc;
    }
    *out = child;
    return SHOAL_OK;
}

void shoal_comm_destroy(shoal_comm *c)
{
    if (!c || c->magic != SH_COMM_MAGIC) return;
    sh_engine_stop(c);
    sh_p2p_destroy(c);
    sh_transport_destroy_all(c);
    if (!c->parent) {
        sh_store_close(c->store);
        sh_store_server_stop(c->store_server);
        sh_elastic_free(c->elastic);
    }
    c->elastic = NULL;
    c->store = NULL;
    c->store_server = NULL;
    sh_comm_free(c);
}

/* ---- accessors ---- */

int shoal_comm_rank(const shoal_comm *c) { return check_comm(c) == SHOAL_OK ? c->rank : -1; }
int shoal_comm_world(const shoal_comm *c) { return check_comm(c) == SHOAL_OK ? c->world : -1; }
int shoal_comm_local_rank(const shoal_comm *c) { return check_comm(c) == SHOAL_OK ? c->local_rank : -1; }
int shoal_comm_local_world(const shoal_comm *c) { return check_comm(c) == SHOAL_OK ? c->local_world : -1; }
int shoal_comm_nhosts(const shoal_comm *c) { return check_comm(c) == SHOAL_OK ? c->nhosts : -1; }
const char *shoal_comm_host(const shoal_comm *c, int rank)
{
    if (check_comm(c) != SHOAL_OK || rank < 0 || rank >= c->world) return NULL;
    return c->hostname[rank];
}
int shoal_comm_is_broken(const shoal_comm *c) { return check_comm(c) == SHOAL_OK ? c->broken : 1; }

/* Only the links: c->broken belongs to the calling thread, which sets it when the call in
 * progress fails on an aborted link (sh_comm_run_coll). */
shoal_result shoal_comm_abort(shoal_comm *c, const char *why)
{
    SH_TRY(check_comm(c));
    if (c->mpi || c->transport == SH_TRANSPORT_MPI)
        return SH_FAIL(SHOAL_ERR_UNSUPPORTED, "shoal_comm_abort: not with the MPI transport");
    if (!why) why = "aborted";
    for (int p = 0; p < c->world; p++) {
        if (c->coll[p]) c->coll[p]->ops->abort(c->coll[p], why);
        if (c->p2p && c->p2p[p]) c->p2p[p]->ops->abort(c->p2p[p], why);
    }
    return SHOAL_OK;
}
