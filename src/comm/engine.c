/* engine.c — requests and the communicator's own thread: non-blocking collectives run
 * there in start order (a blocking call made while some are queued runs after them), and
 * shoal_wait / shoal_test for collective and point-to-point requests. Across hosts the
 * thread asks for real-time priority 1 (SHOAL_COMM_RT), so compute threads do not delay it.
 * Not here: running one collective (coll/select.c's sh_select_run), tagged
 * messages (p2p.c), argument checks (comm.c).
 * Proved by tests/comm/test_comm.c (non-blocking cases) and tests/comm/test_comm_faults.c. */
#include "comm/engine.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/coll/select.h"

/* ---- requests and the engine ---- */

struct shoal_request {
    shoal_comm *c;
    int is_p2p;
    sh_p2p_op *p2p;
    sh_coll op;
    int finished;
    uint64_t queued_ns, started_ns, finished_ns; /* for shoal_wait_trace */
    const char *path;                            /* the selector's path */
    int apply_lead;                              /* shoal_request_trace's apply_lead */
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

_Thread_local const shoal_comm *sh_engine_comm;

/* Across hosts the ranks' compute threads may fill every core while a message arrives: the
 * communicator's thread then waits for a time slice (milliseconds) with the wire idle. It
 * asks for the lowest real-time priority where the process may (root, CAP_SYS_NICE,
 * RLIMIT_RTPRIO), so it runs as soon as it wakes; it sleeps whenever it waits for a socket.
 * Not on one host: shared-memory waits spin and yield, which must not starve the ranks. */
static void engine_priority(const shoal_comm *c)
{
    long rt = 1;
    if (c->nhosts < 2 || sh_env_long("SHOAL_COMM_RT", &rt) != SHOAL_OK || !rt) return;
    struct sched_param sp = {.sched_priority = 1};
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) != 0)
        SH_LOG_I("comm", "the communicator's thread keeps the normal priority "
                 "(no permission for SCHED_FIFO)");
}

static void *engine_main(void *arg)
{
    shoal_comm *c = arg;
    sh_engine *e = c->engine;
    sh_engine_comm = c;
    engine_priority(c);
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stopping) pthread_cond_wait(&e->work, &e->mu);
        if (!e->head) break;
        shoal_request *r = e->head;
        e->busy = 1;
        pthread_mutex_unlock(&e->mu);
        sh_err_clear();
        r->started_ns = sh_now_ns();
        c->last_path = NULL;
        c->last_apply_lead = 1;
        shoal_result rc = e->stopping ? SH_FAIL(SHOAL_ERR_BROKEN, "communicator destroyed") : sh_select_run(c, &r->op);
        uint64_t end_ns = sh_now_ns();
        pthread_mutex_lock(&e->mu);
        r->finished_ns = end_ns;
        r->path = c->last_path ? c->last_path : "local";
        r->apply_lead = c->last_apply_lead;
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

void sh_engine_stop(shoal_comm *c)
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

int sh_engine_idle(shoal_comm *c)
{
    sh_engine *e = c->engine;
    if (!e) return 1;
    pthread_mutex_lock(&e->mu);
    int idle = !e->head && !e->busy;
    pthread_mutex_unlock(&e->mu);
    return idle;
}

shoal_result sh_engine_start(shoal_comm *c, const sh_coll *op, shoal_request **req)
{
    sh_engine *e = NULL;
    SH_TRY(engine(c, &e));
    shoal_request *r = calloc(1, sizeof *r);
    if (!r) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    r->c = c;
    r->op = *op;
    r->queued_ns = sh_now_ns();
    pthread_mutex_lock(&e->mu);
    if (e->tail) e->tail->next = r;
    else e->head = r;
    e->tail = r;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    *req = r;
    return SHOAL_OK;
}

shoal_result sh_engine_p2p_request(shoal_comm *c, sh_p2p_op *op, shoal_request **req)
{
    shoal_request *r = calloc(1, sizeof *r);
    if (!r) {
        sh_p2p_wait(op, NULL, NULL);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    r->c = c;
    r->is_p2p = 1;
    r->p2p = op;
    r->queued_ns = sh_now_ns();
    r->path = "p2p";
    *req = r;
    return SHOAL_OK;
}

/* ---- waiting ---- */

static const char *transport_name(const shoal_comm *c)
{
    switch (c->transport) {
    case SH_TRANSPORT_SHM: return "shm";
    case SH_TRANSPORT_TCP: return "tcp";
    case SH_TRANSPORT_MPI: return "mpi";
    case SH_TRANSPORT_AUTO: break;
    }
    if (c->world == 1) return "none";
    if (c->nhosts == 1) return "shm";
    return c->nhosts == c->world ? "tcp" : "shm+tcp";
}

shoal_result shoal_wait(shoal_request *r) { return shoal_wait_trace(r, NULL); }

shoal_result shoal_wait_trace(shoal_request *r, shoal_request_trace *trace)
{
    if (!r) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_wait: request is NULL");
    shoal_comm *c = r->c;
    if (trace) {
        trace->queued_ns = r->queued_ns;
        trace->transport = transport_name(c);
    }
    if (r->is_p2p) {
        shoal_result rc = sh_p2p_wait(r->p2p, NULL, NULL);
        if (trace) {
            trace->started_ns = r->queued_ns;
            trace->finished_ns = sh_now_ns();
            trace->algorithm = r->path;
            trace->apply_lead = 1;
        }
        free(r);
        return rc;
    }
    sh_engine *e = c->engine;
    atomic_fetch_add(&c->app_waiting, 1); /* the engine may spin for us now */
    pthread_mutex_lock(&e->mu);
    while (!r->finished) pthread_cond_wait(&e->done, &e->mu);
    pthread_mutex_unlock(&e->mu);
    atomic_fetch_sub(&c->app_waiting, 1);
    shoal_result rc = r->rc;
    if (rc != SHOAL_OK) SH_FAIL(rc, "%s", r->msg);
    if (trace) {
        trace->started_ns = r->started_ns;
        trace->finished_ns = r->finished_ns;
        trace->algorithm = r->path;
        trace->apply_lead = r->apply_lead;
    }
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
