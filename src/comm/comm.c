/* comm.c — the public communicator API: creation from the environment, argument checks,
 * the mismatch check, the collective engine (non-blocking operations run in start order
 * on the communicator's thread; blocking ones run inline when nothing is queued), split,
 * destroy.
 * Not here: bytes and algorithms (algo.c), links (transport_*.c), tagged messages (p2p.c).
 * Proved by tests/comm/test_comm.c and tests/comm/test_comm_faults.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/algo.h"
#include "comm/boot.h"
#include "comm/comm_internal.h"
#include "comm/p2p.h"
#include "comm/reduce.h"
#include "comm/store.h"
#include "comm/transport_mpi.h"
#include "comm/transport_shm.h"
#include "comm/transport_tcp.h"

static const char *const coll_names[SH_COLL_COUNT] = {
    "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall", "barrier"};

/* ---- requests and the engine ---- */

struct shoal_request {
    shoal_comm *c;
    int is_p2p;
    sh_p2p_op *p2p;
    sh_coll op;
    int finished;
    shoal_result rc;
    char msg[768];
    struct shoal_request *next;
};

typedef struct sh_engine {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t thread;
    int running, stopping, busy;
    shoal_request *head, *tail;
} sh_engine;

static shoal_result run_coll(shoal_comm *c, const sh_coll *op);

_Thread_local const shoal_comm *sh_engine_comm;

static void *engine_main(void *arg)
{
    shoal_comm *c = arg;
    sh_engine *e = c->engine;
    sh_engine_comm = c;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stopping) pthread_cond_wait(&e->work, &e->mu);
        if (!e->head) break;
        shoal_request *r = e->head;
        e->busy = 1;
        pthread_mutex_unlock(&e->mu);
        sh_err_clear();
        shoal_result rc = e->stopping ? SH_FAIL(SHOAL_ERR_BROKEN, "communicator destroyed") : run_coll(c, &r->op);
        pthread_mutex_lock(&e->mu);
        r->rc = rc;
        if (rc != SHOAL_OK) snprintf(r->msg, sizeof r->msg, "%s", shoal_last_error_message());
        r->finished = 1;
        e->head = r->next;
        if (!e->head) e->tail = NULL;
        e->busy = 0;
        pthread_cond_broadcast(&e->done);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static shoal_result engine(shoal_comm *c, sh_engine **out)
{
    if (!c->engine) {
        sh_engine *e = calloc(1, sizeof *e);
        if (!e) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        pthread_mutex_init(&e->mu, NULL);
        pthread_cond_init(&e->work, NULL);
        pthread_cond_init(&e->done, NULL);
        c->engine = e;
        if (pthread_create(&e->thread, NULL, engine_main, c) != 0) {
            c->engine = NULL;
            free(e);
            return SH_FAIL(SHOAL_ERR_IO, "cannot start the communicator's thread");
        }
        e->running = 1;
    }
    *out = c->engine;
    return SHOAL_OK;
}

static void engine_stop(shoal_comm *c)
{
    sh_engine *e = c->engine;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->done);
    free(e);
    c->engine = NULL;
}

/* ---- the mismatch check ----
 * Every collective first swaps a descriptor with both ring neighbours; the ring of all ranks
 * is connected, so if each neighbour pair agrees, all agree. A rank that sees a difference
 * aborts its links, so the others fail at once too. */
typedef struct {
    uint64_t seq;
    uint64_t count;
    uint32_t kind, dtype, op;
    int32_t root;
} desc;

enum { DESC_APPLY = 0x10000 }; /* in desc.op: shoal_allreduce_apply_start */

static void describe(const desc *d, char *out, size_t cap)
{
    const char *k = d->kind < SH_COLL_COUNT ? coll_names[d->kind] : "?";
    if (d->kind == SH_COLL_BARRIER) snprintf(out, cap, "barrier()");
    else if (d->kind == SH_COLL_BROADCAST)
        snprintf(out, cap, "%s(count=%llu, %s, root=%d)", k, (unsigned long long)d->count,
                 shoal_dtype_name((shoal_dtype)d->dtype), d->root);
    else if (d->kind == SH_COLL_REDUCE)
        snprintf(out, cap, "%s(count=%llu, %s, %s, root=%d)", k, (unsigned long long)d->count,
                 shoal_dtype_name((shoal_dtype)d->dtype), shoal_op_name((shoal_op)d->op), d->root);
    else if (d->kind == SH_COLL_ALLGATHER || d->kind == SH_COLL_ALLTOALL)
        snprintf(out, cap, "%s(count=%llu, %s)", k, (unsigned long long)d->count,
                 shoal_dtype_name((shoal_dtype)d->dtype));
    else
        snprintf(out, cap, "%s%s(count=%llu, %s, %s)", k, d->op & DESC_APPLY ? "_apply" : "",
                 (unsigned long long)d->count, shoal_dtype_name((shoal_dtype)d->dtype),
                 shoal_op_name((shoal_op)(d->op & ~(uint32_t)DESC_APPLY)));
}

static void break_comm(shoal_comm *c, const char *why)
{
    if (c->broken) return;
    c->broken = 1;
    snprintf(c->broken_msg, sizeof c->broken_msg, "%s", why);
    for (int p = 0; p < c->world; p++)
        if (c->coll[p]) c->coll[p]->ops->abort(c->coll[p], why);
}

static desc make_desc(const shoal_comm *c, const sh_coll *op)
{
    desc me = {c->coll_seq, op->count, (uint32_t)op->kind, (uint32_t)op->dt,
               (uint32_t)op->op | (op->apply ? DESC_APPLY : 0u), op->root};
    if (op->kind == SH_COLL_BARRIER) me.count = 0, me.dtype = 0, me.op = 0, me.root = 0;
    if (op->kind == SH_COLL_ALLGATHER || op->kind == SH_COLL_ALLTOALL || op->kind == SH_COLL_BROADCAST) me.op = 0;
    if (op->kind != SH_COLL_BROADCAST && op->kind != SH_COLL_REDUCE) me.root = 0;
    return me;
}

static shoal_result compare_desc(shoal_comm *c, const desc *me, const desc *theirs, int peer)
{
    if (!memcmp(theirs, me, sizeof *me)) return SHOAL_OK;
    char a[160], b[160], pb[128];
    describe(me, a, sizeof a);
    describe(theirs, b, sizeof b);
    sh_comm_peer_name(c, peer, pb, sizeof pb);
    if (theirs->seq != me->seq)
        return SH_FAIL(SHOAL_ERR_MISMATCH,
                       "collective mismatch: rank %d is at collective #%llu, %s at #%llu "
                       "(rank %d called %s, %s called %s)",
                       c->rank, (unsigned long long)me->seq, pb, (unsigned long long)theirs->seq, c->rank, a,
                       pb, b);
    return SH_FAIL(SHOAL_ERR_MISMATCH, "collective mismatch: rank %d called %s, %s called %s", c->rank, a, pb, b);
}

/* A small allreduce on a power-of-two world: recursive doubling whose first round also
 * does the mismatch check. Round 1 pairs rank i with i ^ 1, always a ring neighbour: the
 * descriptor travels in front of the data to it, and alone to the other neighbour (world
 * 4 and up), so on the wire the first round is check_match's exchange followed by the
 * first exchange of recursive doubling; the later rounds carry data only. A rank that made
 * another call runs check_match and reads the descriptors from both neighbours, so every
 * neighbouring pair still compares, and one difference anywhere stops the job. Two ranks
 * pay one message each way for an 8-byte allreduce; four ranks two rounds, not three. */
enum { EAGER_NBYTES = 4096 };

static int eager_allreduce_fits(const shoal_comm *c, const sh_coll *op)
{
    return c->world >= 2 && (c->world & (c->world - 1)) == 0 && op->kind == SH_COLL_ALLREDUCE &&
           c->algo == SH_ALGO_AUTO && op->count * shoal_dtype_nbytes(op->dt) <= EAGER_NBYTES;
}

static shoal_result eager_allreduce(shoal_comm *c, const sh_coll *op)
{
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    _Alignas(64) unsigned char out[sizeof(desc) + EAGER_NBYTES], in[sizeof(desc) + EAGER_NBYTES];
    desc me = make_desc(c, op), from_other;
    unsigned char *acc = out + sizeof me;
    memcpy(out, &me, sizeof me);
    if (nb) memcpy(acc, op->send, nb);
    int partner = c->rank ^ 1, right = (c->rank + 1) % c->world, left = (c->rank + c->world - 1) % c->world;
    int other = partner == right ? left : right;
    /* Expect the partner's descriptor and data in one go: if its call differs, its message
     * may be shorter, but it compares our descriptor, finds the mismatch and aborts the
     * link, which ends this wait with its reason. */
    sh_xfer_op ops[4] = {{c->coll[partner], SH_XFER_SEND, out, sizeof me + nb, 0, NULL, 0, 0},
                         {c->coll[partner], SH_XFER_RECV, in, sizeof me + nb, 0, NULL, 0, 0},
                         {c->coll[other], SH_XFER_SEND, &me, sizeof me, 0, NULL, 0, 0},
                         {c->coll[other], SH_XFER_RECV, &from_other, sizeof from_other, 0, NULL, 0, 0}};
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "allreduce", &x);
    shoal_result xrc = sh_xfer(&x, ops, c->world > 2 ? 4 : 2);
    desc theirs;
    memcpy(&theirs, in, sizeof theirs);
    if (ops[1].done >= sizeof theirs) SH_TRY(compare_desc(c, &me, &theirs, partner));
    if (c->world > 2 && ops[3].done == sizeof from_other) SH_TRY(compare_desc(c, &me, &from_other, other));
    SH_TRY(xrc);
    if (nb) {
        /* lower rank's value first on both partners: the same expression everywhere */
        const unsigned char *peer_data = in + sizeof me;
        if (partner < c->rank) sh_reduce3(acc, peer_data, acc, op->count, op->dt, op->op);
        else sh_reduce(acc, peer_data, op->count, op->dt, op->op);
        for (int mask = 2; mask < c->world; mask <<= 1) {
            int peer = c->rank ^ mask;
            sh_xfer_op r[2] = {{c->coll[peer], SH_XFER_SEND, acc, nb, 0, NULL, 0, 0},
                               {c->coll[peer], SH_XFER_RECV, in, nb, 0, NULL, 0, 0}};
            SH_TRY(sh_xfer(&x, r, 2));
            if (peer < c->rank) sh_reduce3(acc, in, acc, op->count, op->dt, op->op);
            else sh_reduce(acc, in, op->count, op->dt, op->op);
        }
        memcpy(op->recv, acc, nb);
        if (op->op == SHOAL_AVG) sh_reduce_avg_finish(op->recv, op->count, op->dt, c->world);
    }
    if (op->apply) op->apply(op->apply_ctx, 0, op->count, (const float *)op->recv);
    return SHOAL_OK;
}

/* Small collectives with every rank on this host: one step through the shared slots.
 * Every rank publishes its descriptor and what it contributes, waits for everyone else's,
 * compares every descriptor (all pairs, not only neighbours) and reads what it needs from
 * the others' slots in place; reductions run in rank order, so every rank computes the same
 * expression and holds the same bits. 4 ranks on 2 cores: one wait for the others instead
 * of two or more rounds of messages. */
/* The bytes a rank's slot holds for op: its whole contribution (the same on every rank
 * whose call matches). */
static size_t slot_nbytes(const shoal_comm *c, const sh_coll *op)
{
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    return op->kind == SH_COLL_REDUCE_SCATTER || op->kind == SH_COLL_ALLTOALL ? nb * (size_t)c->world : nb;
}

static int slot_coll_fits(const shoal_comm *c, const sh_coll *op)
{
    return c->algo == SH_ALGO_AUTO && c->world <= 64 && sh_shm_slots_usable(c) &&
           slot_nbytes(c, op) <= SH_SHM_SLOT_NBYTES;
}

/* dst = slot 0 OP slot 1 OP ... at byte offset off of every rank's slot. */
static void reduce_slots(const shoal_comm *c, uint64_t seq, void *dst, size_t off, size_t count, shoal_dtype dt,
                         shoal_op op)
{
    const unsigned char *s0 = sh_shm_slot_data(c, 0, seq), *s1 = sh_shm_slot_data(c, 1, seq);
    sh_reduce3(dst, s0 + off, s1 + off, count, dt, op);
    for (int p = 2; p < c->world; p++)
        sh_reduce(dst, (const unsigned char *)sh_shm_slot_data(c, p, seq) + off, count, dt, op);
    if (op == SHOAL_AVG) sh_reduce_avg_finish(dst, count, dt, c->world);
}

static shoal_result slot_coll(shoal_comm *c, const sh_coll *op)
{
    size_t nb = op->count * shoal_dtype_nbytes(op->dt);
    const char *what = coll_names[op->kind];
    uint64_t seq = c->coll_seq;
    _Static_assert(sizeof(desc) == SH_SHM_SLOT_HDR_NBYTES, "a descriptor fills a slot header");
    /* The slot was last used two collectives ago or earlier: unless the collective just
     * before went through the slots too (then every rank finished the older one before
     * publishing it), wait until everyone has read what that slot holds. */
    sh_xfer_op ops[64];
    int k = 0;
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, what, &x);
    if (c->slot_prev[seq & 1] && c->slot_last != seq) {
        for (int p = 0; p < c->world; p++)
            if (p != c->rank)
                ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_SLOT_FREE, NULL, 1, 0, NULL, c->slot_prev[seq & 1] - 1, 0};
        SH_TRY(sh_xfer(&x, ops, k));
        k = 0;
    }
    desc me = make_desc(c, op), theirs[64];
    /* a broadcast's data comes from the root alone */
    int contributes = op->kind != SH_COLL_BROADCAST || c->rank == op->root;
    sh_shm_slot_publish(c, seq, &me, op->send, contributes ? slot_nbytes(c, op) : 0);
    for (int p = 0; p < c->world; p++)
        if (p != c->rank)
            ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_SLOT_RECV, &theirs[p], sizeof(desc), 0, NULL, seq, 0};
    shoal_result xrc = sh_xfer(&x, ops, k);
    for (int i = 0; i < k; i++) {
        if (ops[i].done != ops[i].nbytes) continue;
        int p = ops[i].link->peer;
        SH_TRY(compare_desc(c, &me, &theirs[p], p));
        if (ops[i].from_ring) {
            char pb[128];
            sh_comm_peer_name(c, p, pb, sizeof pb);
            return SH_FAIL(SHOAL_ERR_MISMATCH, "collective mismatch: rank %d and %s made the same call "
                           "but took different paths (shared slots against links): set SHOAL_ALGO and "
                           "SHOAL_TRANSPORT alike on every rank", c->rank, pb);
        }
    }
    SH_TRY(xrc);
    unsigned char *recv = op->recv;
    switch (op->kind) {
    case SH_COLL_ALLREDUCE:
        if (nb) reduce_slots(c, seq, recv, 0, op->count, op->dt, op->op);
        break;
    case SH_COLL_REDUCE:
        if (nb && c->rank == op->root) reduce_slots(c, seq, recv, 0, op->count, op->dt, op->op);
        break;
    case SH_COLL_REDUCE_SCATTER:
        if (nb) reduce_slots(c, seq, recv, (size_t)c->rank * nb, op->count, op->dt, op->op);
        break;
    case SH_COLL_BROADCAST:
        if (nb) memmove(recv, c->rank == op->root ? op->send : sh_shm_slot_data(c, op->root, seq), nb);
        break;
    case SH_COLL_ALLGATHER:
        for (int p = 0; p < c->world && nb; p++)
            memmove(recv + (size_t)p * nb, p == c->rank ? op->send : sh_shm_slot_data(c, p, seq), nb);
        break;
    case SH_COLL_ALLTOALL:
        for (int p = 0; p < c->world && nb; p++)
            memcpy(recv + (size_t)p * nb, (const unsigned char *)sh_shm_slot_data(c, p, seq) + (size_t)c->rank * nb,
                   nb);
        break;
    default: /* barrier: everyone has arrived */
        break;
    }
    sh_shm_slot_done(c, seq);
    c->slot_last = c->slot_prev[seq & 1] = seq + 1;
    if (op->apply) op->apply(op->apply_ctx, 0, op->count, (const float *)op->recv);
    return SHOAL_OK;
}

static shoal_result check_match(shoal_comm *c, const sh_coll *op)
{
    if (c->world == 1) return SHOAL_OK;
    desc me = make_desc(c, op);
    int right = (c->rank + 1) % c->world, left = (c->rank + c->world - 1) % c->world;
    desc from_left, from_right;
    sh_xfer_op ops[4];
    int n = 0;
    ops[n++] = (sh_xfer_op){c->coll[right], SH_XFER_SEND, &me, sizeof me, 0, NULL, 0, 0};
    ops[n++] = (sh_xfer_op){c->coll[left], SH_XFER_RECV, &from_left, sizeof from_left, 0, NULL, 0, 0};
    if (c->world > 2) {
        ops[n++] = (sh_xfer_op){c->coll[left], SH_XFER_SEND, &me, sizeof me, 0, NULL, 0, 0};
        ops[n++] = (sh_xfer_op){c->coll[right], SH_XFER_RECV, &from_right, sizeof from_right, 0, NULL, 0, 0};
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, coll_names[op->kind], &x);
    SH_TRY(sh_xfer(&x, ops, n));
    SH_TRY(compare_desc(c, &me, &from_left, left));
    if (c->world > 2) SH_TRY(compare_desc(c, &me, &from_right, right));
    return SHOAL_OK;
}

static shoal_result run_coll(shoal_comm *c, const sh_coll *op)
{
    if (c->broken) return SH_FAIL(SHOAL_ERR_BROKEN, "communicator is broken: %s", c->broken_msg);
    shoal_result rc;
    if (sh_shm_window_apply(c, op)) { /* the only path that updates a shared copy once */
        rc = check_match(c, op);
        if (rc == SHOAL_OK) rc = sh_shm_coll_run(c, op);
    } else if (slot_coll_fits(c, op)) {
        rc = slot_coll(c, op);
    } else if (eager_allreduce_fits(c, op)) {
        rc = eager_allreduce(c, op);
    } else {
        rc = check_match(c, op);
        if (rc == SHOAL_OK) rc = sh_algo_run(c, op);
    }
    c->coll_seq++;
    if (rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT || rc == SHOAL_ERR_MISMATCH) {
        break_comm(c, shoal_last_error_message()); /* "communicator is broken: " + this, then the rank */
        sh_err_prefix_rank(c->rank);
    }
    return rc;
}

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
    const char *name = coll_names[op->kind];
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
    sh_engine *e = c->engine;
    if (e) {
        pthread_mutex_lock(&e->mu);
        int idle = !e->head && !e->busy;
        pthread_mutex_unlock(&e->mu);
        if (!idle) {
            shoal_request *r = NULL;
            SH_TRY(coll_start(c, op, &r));
            return shoal_wait(r);
        }
    }
    return run_coll(c, op);
}

static shoal_result coll_start(shoal_comm *c, const sh_coll *op, shoal_request **req)
{
    if (!req) return SH_FAIL(SHOAL_ERR_INVALID, "request pointer is NULL");
    *req = NULL;
    SH_TRY(check_coll(c, op));
    sh_engine *e = NULL;
    SH_TRY(engine(c, &e));
    shoal_request *r = calloc(1, sizeof *r);
    if (!r) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    r->c = c;
    r->op = *op;
    pthread_mutex_lock(&e->mu);
    if (e->tail) e->tail->next = r;
    else e->head = r;
    e->tail = r;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    *req = r;
    return SHOAL_OK;
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

static shoal_result p2p_request(shoal_comm *c, sh_p2p_op *op, shoal_request **req)
{
    shoal_request *r = calloc(1, sizeof *r);
    if (!r) {
        sh_p2p_wait(op, NULL, NULL);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    r->c = c;
    r->is_p2p = 1;
    r->p2p = op;
    *req = r;
    return SHOAL_OK;
}

shoal_result shoal_send_start(shoal_comm *c, const void *buf, size_t count, shoal_dtype dt,
                              int peer, int tag, shoal_request **req)
{
    if (!req) return SH_FAIL(SHOAL_ERR_INVALID, "send: request pointer is NULL");
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "send"));
    sh_p2p_op *op;
    SH_TRY(sh_p2p_send_start(c, buf, count * shoal_dtype_nbytes(dt), dt, peer, tag, &op));
    return p2p_request(c, op, req);
}

shoal_result shoal_recv_start(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int peer,
                              int tag, shoal_request **req)
{
    if (!req) return SH_FAIL(SHOAL_ERR_INVALID, "recv: request pointer is NULL");
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "recv"));
    sh_p2p_op *op;
    SH_TRY(sh_p2p_recv_start(c, buf, count * shoal_dtype_nbytes(dt), dt, peer, tag, -1, &op));
    return p2p_request(c, op, req);
}

/* A point-to-point failure is about one peer: later messages to or from it fail at once
 * ("the peer is gone"), but the communicator stays usable with the others, so a parameter
 * server can drop a dead worker and go on. Collectives still fail on a dead peer. */
static shoal_result p2p_fail(shoal_comm *c, shoal_result rc)
{
    (void)c;
    return rc;
}

shoal_result shoal_send(shoal_comm *c, const void *buf, size_t count, shoal_dtype dt, int peer,
                        int tag)
{
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "send"));
    sh_p2p_op *op;
    SH_TRY(sh_p2p_send_start(c, buf, count * shoal_dtype_nbytes(dt), dt, peer, tag, &op));
    shoal_result rc = sh_p2p_wait(op, NULL, NULL);
    return rc == SHOAL_OK ? rc : p2p_fail(c, rc);
}

shoal_result shoal_recv(shoal_comm *c, void *buf, size_t count, shoal_dtype dt, int peer, int tag)
{
    SH_TRY(check_p2p(c, buf, count, dt, peer, tag, 0, "recv"));
    sh_p2p_op *op;
    size_t want = count * shoal_dtype_nbytes(dt), got = 0;
    SH_TRY(sh_p2p_recv_start(c, buf, want, dt, peer, tag, -1, &op));
    shoal_result rc = sh_p2p_wait(op, NULL, &got);
    if (rc != SHOAL_OK) return p2p_fail(c, rc);
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

/* ---- waiting ---- */

shoal_result shoal_wait(shoal_request *r)
{
    if (!r) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_wait: request is NULL");
    shoal_comm *c = r->c;
    if (r->is_p2p) {
        shoal_result rc = sh_p2p_wait(r->p2p, NULL, NULL);
        free(r);
        return rc == SHOAL_OK ? rc : p2p_fail(c, rc);
    }
    sh_engine *e = c->engine;
    atomic_fetch_add(&c->app_waiting, 1); /* the engine may spin for us now */
    pthread_mutex_lock(&e->mu);
    while (!r->finished) pthread_cond_wait(&e->done, &e->mu);
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_sub(&c->app_waiting, 1);
    shoal_result rc = r->rc;
    if (rc != SHOAL_OK) SH_FAIL(rc, "%s", r->msg);
    free(r);
    return rc;
}

shoal_result shoal_test(shoal_request *r, int *done)
{
    if (!r || !done) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_test: NULL argument");
    if (r->is_p2p) return sh_p2p_test(r->p2p, done);
    sh_engine *e = r->c->engine;
    pthread_mutex_lock(&e->mu);
    *done = r->finished;
    pthread_mutex_unlock(&e->mu);
    return SHOAL_OK;
}

/* ---- creation ---- */

void shoal_comm_opts_default(shoal_comm_opts *o)
{
    memset(o, 0, sizeof *o);
    o->rank = -1;
    o->world = -1;
}

/* Links for every peer: shared memory inside a host, TCP between hosts, unless forced. */
static shoal_result connect_all(shoal_comm *c)
{
    unsigned char *shm = calloc((size_t)c->world, 1), *tcp = calloc((size_t)c->world, 1);
    if (!shm || !tcp) {
        free(shm);
        free(tcp);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    shoal_result rc = SHOAL_OK;
    int any_shm = 0, any_tcp = 0, any_mpi = 0;
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank) continue;
        int same_host = c->host_of[p] == c->host_of[c->rank];
        if (c->transport == SH_TRANSPORT_TCP || (c->transport == SH_TRANSPORT_AUTO && !same_host)) {
            tcp[p] = 1;
            any_tcp = 1;
        } else if (c->transport == SH_TRANSPORT_MPI && !c->parent) {
            shm[p] = 1; /* marks the peers MPI links go to */
            any_mpi = 1;
        } else if (c->transport == SH_TRANSPORT_MPI && !same_host) {
            tcp[p] = 1; /* a split communicator: MPI links serve the whole job only */
        } else if (!same_host) {
            char pb[128];
            rc = SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_TRANSPORT=shm but %s is on another host; use "
                         "auto or tcp", sh_comm_peer_name(c, p, pb, sizeof pb));
            break;
        } else {
            shm[p] = 1;
            any_shm = 1;
        }
    }
    (void)any_tcp;
    if (rc == SHOAL_OK && any_mpi) rc = sh_mpi_connect(c, shm);
    else if (rc == SHOAL_OK && any_shm) rc = sh_shm_connect(c, shm);
    if (rc == SHOAL_OK) rc = sh_tcp_connect(c, tcp);
    free(shm);
    free(tcp);
    return rc;
}

shoal_result shoal_comm_create(const shoal_comm_opts *o, shoal_comm **out)
{
    if (!out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_comm_create: out is NULL");
    *out = NULL;
    shoal_comm *c = NULL;
    SH_TRY(sh_boot_world(o, &c));
    shoal_result rc = connect_all(c);
    if (rc == SHOAL_OK) rc = sh_store_barrier(c->store, "w/ready", c->world, c->timeout_ms);
    if (rc != SHOAL_OK) {
        sh_err_prefix_rank(c->rank);
        shoal_comm_destroy(c);
        return rc;
    }
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
    for (int i = 0; i < n; i++) {
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
    child->chunk_nbytes = c->chunk_nbytes;
    child->store = c->store;
    child->parent = c;
    snprintf(child->prefix, sizeof child->prefix, "%.40s.s%llu.c%d", c->prefix,
             (unsigned long long)c->coll_seq, color);
    rc = connect_all(child);
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
    engine_stop(c);
    sh_p2p_destroy(c);
    sh_shm_destroy(c->shm);
    c->shm = NULL;
    sh_mpi_destroy(c);
    if (!c->parent) {
        sh_store_close(c->store);
        sh_store_server_stop(c->store_server);
    }
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
