/* mpi.c — links over MPI point-to-point, and collectives handed to MPI: pieces of at most PIECE
 * bytes received whole into a bounce buffer, every MPI call under one lock, a give-up reason
 * sent on the plane's abort tag (idle links probe for one).
 * Not here: algorithms (coll/), rank discovery (boot/boot.c); which peers it serves is its row
 * of transport.h's table, at the end.
 * Proved by tests/comm/test_mpi_transport.c. */
#include "comm/transport/mpi.h"

#include "base/err.h"

#if SHOAL_HAVE_MPI

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "comm/reduce.h"

enum { PIECE = 256 * 1024, DATA_TAG = 100, ABORT_TAG = 200, REASON_NBYTES = 256, PROBE_EVERY = 64 };

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int we_initialised, live_comms;

typedef struct {
    MPI_Comm comm;
    int peer, tag;
    /* send: one piece in flight */
    int sending;
    MPI_Request sreq;
    size_t snbytes;
    /* receive: one piece posted or held */
    int posted;
    MPI_Request rreq;
    unsigned char *bounce;
    size_t have, used;
    /* giving up: ours sent (abort_sent), or the peer's received (dead, with its reason) */
    int abort_tag;
    int abort_sent;
    MPI_Request areq;
    char abort_out[REASON_NBYTES];
    int dead;
    char reason[REASON_NBYTES];
    unsigned idle;
} mpi_link;

/* Every PROBE_EVERY idle calls (and always once dead): has the peer given up on this
 * plane? Called with the lock held; -1 after sh_fail() when it has. */
static int peer_gave_up(mpi_link *m)
{
    if (!m->dead && ++m->idle % PROBE_EVERY == 0) {
        int flag = 0;
        MPI_Status st;
        MPI_Iprobe(m->peer, m->abort_tag, m->comm, &flag, &st);
        if (flag) {
            MPI_Recv(m->reason, REASON_NBYTES, MPI_BYTE, m->peer, m->abort_tag, m->comm, MPI_STATUS_IGNORE);
            m->reason[REASON_NBYTES - 1] = 0;
            m->dead = 1;
        }
    }
    if (!m->dead) return 0;
    SH_FAIL(SHOAL_ERR_PEER, "the peer gave up: %s", m->reason[0] ? m->reason : "(no reason)");
    return -1;
}

typedef struct {
    MPI_Comm comm;
} mpi_state;

static ssize_t m_send_some(sh_link *l, const void *buf, size_t nbytes)
{
    mpi_link *m = l->impl;
    ssize_t out = 0;
    pthread_mutex_lock(&mpi_lock);
    if (!m->sending && nbytes) {
        m->snbytes = nbytes < PIECE ? nbytes : PIECE;
        MPI_Isend(buf, (int)m->snbytes, MPI_BYTE, m->peer, m->tag, m->comm, &m->sreq);
        m->sending = 1;
    }
    if (m->sending) {
        int done = 0;
        MPI_Test(&m->sreq, &done, MPI_STATUS_IGNORE);
        if (done) {
            m->sending = 0;
            out = (ssize_t)m->snbytes;
        }
    }
    if (out) m->idle = 0;
    else if (nbytes && peer_gave_up(m) < 0) out = -1;
    pthread_mutex_unlock(&mpi_lock);
    return out;
}

/* Make sure a piece is held (posting a receive if none); returns bytes available. */
static size_t fill(mpi_link *m)
{
    if (m->used < m->have) return m->have - m->used;
    if (!m->posted) {
        MPI_Irecv(m->bounce, PIECE, MPI_BYTE, m->peer, m->tag, m->comm, &m->rreq);
        m->posted = 1;
    }
    int done = 0;
    MPI_Status st;
    MPI_Test(&m->rreq, &done, &st);
    if (!done) return 0;
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    m->posted = 0;
    m->have = (size_t)n;
    m->used = 0;
    return m->have;
}

static ssize_t m_recv_some(sh_link *l, void *buf, size_t nbytes)
{
    mpi_link *m = l->impl;
    pthread_mutex_lock(&mpi_lock);
    size_t avail = nbytes ? fill(m) : 0;
    size_t n = avail < nbytes ? avail : nbytes;
    ssize_t out = (ssize_t)n;
    if (n) {
        memcpy(buf, m->bounce + m->used, n);
        m->used += n;
        m->idle = 0;
    } else if (nbytes && peer_gave_up(m) < 0) {
        out = -1;
    }
    pthread_mutex_unlock(&mpi_lock);
    return out;
}

static const void *m_recv_peek(sh_link *l, size_t *nbytes)
{
    mpi_link *m = l->impl;
    pthread_mutex_lock(&mpi_lock);
    *nbytes = fill(m);
    const void *p = m->bounce + m->used;
    if (*nbytes) m->idle = 0;
    else if (peer_gave_up(m) < 0) p = NULL;
    pthread_mutex_unlock(&mpi_lock);
    return p;
}

static void m_recv_consume(sh_link *l, size_t nbytes)
{
    mpi_link *m = l->impl;
    m->used += nbytes;
}

/* MPI has no per-peer abort: the reason goes to the peer as a message of its own. */
static void m_abort(sh_link *l, const char *reason)
{
    mpi_link *m = l->impl;
    pthread_mutex_lock(&mpi_lock);
    if (!m->abort_sent && !m->dead) {
        snprintf(m->abort_out, sizeof m->abort_out, "%s", reason ? reason : "");
        MPI_Isend(m->abort_out, (int)strlen(m->abort_out) + 1, MPI_BYTE, m->peer, m->abort_tag, m->comm, &m->areq);
        m->abort_sent = 1;
    }
    pthread_mutex_unlock(&mpi_lock);
}

static int m_check(sh_link *l)
{
    mpi_link *m = l->impl;
    pthread_mutex_lock(&mpi_lock);
    m->idle = PROBE_EVERY - 1; /* probe now */
    int rc = peer_gave_up(m);
    pthread_mutex_unlock(&mpi_lock);
    return rc;
}

static void m_close(sh_link *l)
{
    mpi_link *m = l->impl;
    pthread_mutex_lock(&mpi_lock);
    if (m->posted) {
        MPI_Cancel(&m->rreq);
        MPI_Request_free(&m->rreq);
    }
    if (m->sending) {
        MPI_Cancel(&m->sreq);
        MPI_Request_free(&m->sreq);
    }
    if (m->abort_sent) MPI_Request_free(&m->areq); /* small: it went out eagerly, or the peer is gone */
    pthread_mutex_unlock(&mpi_lock);
    free(m->bounce);
    free(m);
    free(l);
}

static const sh_link_ops mpi_ops = {
    .name = "mpi",
    .send_some = m_send_some,
    .recv_some = m_recv_some,
    .recv_peek = m_recv_peek,
    .recv_consume = m_recv_consume,
    .abort = m_abort,
    .check = m_check,
    .close = m_close,
};

static shoal_result init_mpi(void)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return SH_FAIL(SHOAL_ERR_IO, "MPI_Init_thread failed: is this process started by mpirun/mpiexec?");
        if (provided < MPI_THREAD_SERIALIZED)
            SH_LOG_W("comm", "the MPI library offers thread level %d; shoal serialises its calls", provided);
        we_initialised = 1;
    }
    return SHOAL_OK;
}

shoal_result sh_mpi_connect(shoal_comm *c, const unsigned char *want)
{
    if (c->parent)
        return SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_TRANSPORT=mpi serves the whole job, not a split communicator");
    pthread_mutex_lock(&mpi_lock);
    shoal_result rc = init_mpi();
    int size = 0, rank = 0;
    if (rc == SHOAL_OK) {
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (size != c->world || rank != c->rank)
            rc = SH_FAIL(SHOAL_ERR_INVALID,
                         "SHOAL_TRANSPORT=mpi: MPI says rank %d of %d, shoal's environment rank %d of %d; "
                         "start the job with mpirun/mpiexec", rank, size, c->rank, c->world);
    }
    mpi_state *s = NULL;
    if (rc == SHOAL_OK) {
        s = calloc(1, sizeof *s);
        if (!s) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        else MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    }
    if (rc == SHOAL_OK) {
        c->mpi = s;
        live_comms++;
    }
    pthread_mutex_unlock(&mpi_lock);
    if (rc != SHOAL_OK) return rc;
    for (int p = 0; p < c->world; p++) {
        if (p == c->rank || !want[p]) continue;
        for (int plane = 0; plane < 2; plane++) {
            sh_link *l = calloc(1, sizeof *l);
            mpi_link *m = calloc(1, sizeof *m);
            unsigned char *b = malloc(PIECE);
            if (!l || !m || !b) {
                free(l);
                free(m);
                free(b);
                return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
            }
            m->comm = s->comm;
            m->peer = p;
            m->tag = DATA_TAG + plane;
            m->abort_tag = ABORT_TAG + plane;
            m->bounce = b;
            l->ops = &mpi_ops;
            l->peer = p;
            l->fd = -1;
            l->impl = m;
            if (plane) c->p2p[p] = l;
            else c->coll[p] = l;
        }
    }
    return SHOAL_OK;
}

static MPI_Datatype mpi_type(shoal_dtype dt)
{
    switch (dt) {
    case SHOAL_INT8: return MPI_INT8_T;
    case SHOAL_UINT8: return MPI_UINT8_T;
    case SHOAL_INT32: return MPI_INT32_T;
    case SHOAL_INT64: return MPI_INT64_T;
    case SHOAL_FLOAT32: return MPI_FLOAT;
    case SHOAL_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

static MPI_Op mpi_op(shoal_op op)
{
    switch (op) {
    case SHOAL_PROD: return MPI_PROD;
    case SHOAL_MIN: return MPI_MIN;
    case SHOAL_MAX: return MPI_MAX;
    default: return MPI_SUM;
    }
}

shoal_result sh_mpi_coll_run(shoal_comm *c, const sh_coll *op)
{
    mpi_state *s = c->mpi;
    if (!s) {
        pthread_mutex_lock(&mpi_lock);
        shoal_result rc = init_mpi();
        if (rc == SHOAL_OK) {
            s = calloc(1, sizeof *s);
            if (s) {
                MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
                c->mpi = s;
                live_comms++;
            }
        }
        pthread_mutex_unlock(&mpi_lock);
        if (rc != SHOAL_OK) return rc;
        if (!s) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    MPI_Datatype t = mpi_type(op->dt);
    if (t == MPI_DATATYPE_NULL && op->kind != SH_COLL_BARRIER)
        return SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_ALGO=mpi: %s is not an MPI type; use shoal's algorithms "
                       "(SHOAL_ALGO=auto)", shoal_dtype_name(op->dt));
    int n = (int)op->count, rc = MPI_SUCCESS;
    const void *sp = op->send == op->recv ? MPI_IN_PLACE : op->send;
    size_t es = shoal_dtype_nbytes(op->dt);
    pthread_mutex_lock(&mpi_lock);
    switch (op->kind) {
    case SH_COLL_ALLREDUCE: rc = MPI_Allreduce(sp, op->recv, n, t, mpi_op(op->op), s->comm); break;
    case SH_COLL_BROADCAST:
        if (c->rank == op->root && op->send != op->recv && n) memcpy(op->recv, op->send, (size_t)n * es);
        rc = MPI_Bcast(op->recv, n, t, op->root, s->comm);
        break;
    case SH_COLL_REDUCE:
        if (op->send == op->recv && c->rank != op->root) sp = op->send;
        rc = MPI_Reduce(c->rank == op->root ? sp : op->send, op->recv, n, t, mpi_op(op->op), op->root, s->comm);
        break;
    case SH_COLL_ALLGATHER: {
        const unsigned char *mine = (const unsigned char *)op->recv + (size_t)c->rank * (size_t)n * es;
        rc = MPI_Allgather((const unsigned char *)op->send == mine ? MPI_IN_PLACE : op->send, n, t, op->recv, n, t,
                           s->comm);
        break;
    }
    case SH_COLL_REDUCE_SCATTER:
        rc = MPI_Reduce_scatter_block(op->send == op->recv ? MPI_IN_PLACE : op->send, op->recv, n, t,
                                      mpi_op(op->op), s->comm);
        break;
    case SH_COLL_ALLTOALL: rc = MPI_Alltoall(sp, n, t, op->recv, n, t, s->comm); break;
    case SH_COLL_BARRIER: rc = MPI_Barrier(s->comm); break;
    default: break;
    }
    pthread_mutex_unlock(&mpi_lock);
    if (rc != MPI_SUCCESS) return SH_FAIL(SHOAL_ERR_PEER, "the MPI library's collective failed (code %d)", rc);
    if (op->op == SHOAL_AVG && (op->kind == SH_COLL_ALLREDUCE || op->kind == SH_COLL_REDUCE_SCATTER ||
                                (op->kind == SH_COLL_REDUCE && c->rank == op->root)))
        sh_reduce_avg_finish(op->recv, op->count, op->dt, c->world);
    return SHOAL_OK;
}

void sh_mpi_destroy(shoal_comm *c)
{
    mpi_state *s = c->mpi;
    if (!s) return;
    /* MPI links go first: cancelling their requests needs MPI alive. */
    for (int p = 0; p < c->world; p++) {
        if (c->coll[p] && c->coll[p]->ops == &mpi_ops) {
            sh_link_close(c->coll[p]);
            c->coll[p] = NULL;
        }
        if (c->p2p[p] && c->p2p[p]->ops == &mpi_ops) {
            sh_link_close(c->p2p[p]);
            c->p2p[p] = NULL;
        }
    }
    pthread_mutex_lock(&mpi_lock);
    MPI_Comm_free(&s->comm);
    free(s);
    c->mpi = NULL;
    if (--live_comms == 0 && we_initialised) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
        we_initialised = 0;
    }
    pthread_mutex_unlock(&mpi_lock);
}

#else /* built without MPI */

static shoal_result no_mpi(void)
{
    return SH_FAIL(SHOAL_ERR_INVALID, "shoal was built without MPI; rebuild with `make MPI=1` "
                   "(needs libopenmpi-dev or libmpich-dev)");
}

shoal_result sh_mpi_connect(shoal_comm *c, const unsigned char *want)
{
    (void)c, (void)want;
    return no_mpi();
}

shoal_result sh_mpi_coll_run(shoal_comm *c, const sh_coll *op)
{
    (void)c, (void)op;
    return no_mpi();
}

void sh_mpi_destroy(shoal_comm *c) { (void)c; }

#endif

/* Every peer under SHOAL_TRANSPORT=mpi, for the whole job only (a split communicator's
 * ranks are not MPI_COMM_WORLD's: shm and tcp serve it). */
static int mpi_can_reach(const shoal_comm *c, int peer)
{
    (void)peer;
    return c->transport == SH_TRANSPORT_MPI && !c->parent;
}

const sh_transport_ops sh_mpi_transport = {"mpi", mpi_can_reach, sh_mpi_connect, sh_mpi_destroy};
