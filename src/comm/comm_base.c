/* comm_base.c — allocating a communicator's common fields, host indexing, peer names,
 * staging memory, breaking it (and a job its store stopped), whether a peer is gone.
 * Not here: creating one from the environment (comm.c), links (transport/).
 * Proved by tests/comm/test_link.c and every test that makes a communicator. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "comm/boot/sock.h"
#include "comm/boot/store.h"
#include "comm/comm_internal.h"
#include "comm/transport/shm.h"

shoal_result sh_comm_alloc(int rank, int world, shoal_comm **out)
{
    *out = NULL;
    SH_ASSERT(world >= 1 && rank >= 0 && rank < world);
    shoal_comm *c = calloc(1, sizeof *c);
    if (!c) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for a communicator");
    c->magic = SH_COMM_MAGIC;
    c->rank = rank;
    c->world = world;
    c->host_of = calloc((size_t)world, sizeof *c->host_of);
    c->hostname = calloc((size_t)world, sizeof *c->hostname);
    c->coll = calloc((size_t)world, sizeof *c->coll);
    c->p2p = calloc((size_t)world, sizeof *c->p2p);
    if (!c->host_of || !c->hostname || !c->coll || !c->p2p) {
        sh_comm_free(c);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for a communicator of %d ranks", world);
    }
    long t = 60000, spin = 50;
    shoal_result rc = sh_env_long("SHOAL_TIMEOUT", &t);
    if (rc == SHOAL_OK) rc = sh_env_long("SHOAL_SPIN_US", &spin);
    if (rc == SHOAL_OK) rc = sh_sock_check_congestion();
    if (rc != SHOAL_OK) {
        sh_comm_free(c);
        return rc;
    }
    c->timeout_ms = (int)t;
    c->spin_us = (int)spin;
    snprintf(c->prefix, sizeof c->prefix, "w");
    sh_comm_index_hosts(c);
    *out = c;
    return SHOAL_OK;
}

void sh_comm_free(shoal_comm *c)
{
    if (!c) return;
    for (int r = 0; r < c->world; r++) {
        if (c->coll) sh_link_close(c->coll[r]);
        if (c->p2p) sh_link_close(c->p2p[r]);
        if (c->hostname) free(c->hostname[r]);
    }
    free(c->coll);
    free(c->p2p);
    free(c->hostname);
    free(c->job_rank);
    free(c->host_of);
    sh_free_aligned(c->scratch);
    c->magic = 0;
    free(c);
}

void sh_comm_index_hosts(shoal_comm *c)
{
    int nh = 0;
    for (int r = 0; r < c->world; r++)
        if (c->host_of[r] + 1 > nh) nh = c->host_of[r] + 1;
    c->nhosts = nh;
    c->local_rank = c->local_world = 0;
    for (int r = 0; r < c->world; r++) {
        if (c->host_of[r] != c->host_of[c->rank]) continue;
        if (r < c->rank) c->local_rank++;
        c->local_world++;
    }
    /* More ranks here than cores: a spinning waiter only steals the core its peer needs, so
     * yield at once. SHOAL_SPIN_US, when set, wins. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (!sh_env_is_set("SHOAL_SPIN_US") && cpus > 0 && c->local_world > cpus) c->spin_us = 0;
}

const char *sh_comm_peer_name(void *comm, int peer, char *buf, size_t cap)
{
    const shoal_comm *c = comm;
    const char *h = c && peer >= 0 && peer < c->world && c->hostname[peer] ? c->hostname[peer] : NULL;
    int job = c && c->job_rank && peer >= 0 && peer < c->world ? c->job_rank[peer] : -1;
    if (h && job >= 0) snprintf(buf, cap, "rank %d (job rank %d, %s)", peer, job, h);
    else if (h) snprintf(buf, cap, "rank %d (%s)", peer, h);
    else snprintf(buf, cap, "rank %d", peer);
    return buf;
}

void sh_comm_xfer_ctx(shoal_comm *c, const char *what, sh_xfer_ctx *x)
{
    memset(x, 0, sizeof *x);
    x->what = what;
    x->timeout_ms = c->timeout_ms;
    x->spin_us = c->spin_us;
    x->waiters = sh_engine_comm == c ? &c->app_waiting : NULL;
    x->peer_name = sh_comm_peer_name;
    x->ctx = c;
    x->self = c->shm ? c->shm->my_bell : NULL;
}

shoal_result sh_comm_scratch(shoal_comm *c, size_t nbytes, void **out)
{
    if (c->scratch_nbytes < nbytes) {
        void *p = NULL;
        SH_TRY(sh_alloc_aligned(nbytes, &p));
        sh_free_aligned(c->scratch);
        c->scratch = p;
        c->scratch_nbytes = nbytes;
    }
    *out = c->scratch;
    return SHOAL_OK;
}

void sh_comm_break(shoal_comm *c, const char *why, int also_p2p)
{
    if (c->broken) return;
    c->broken = 1;
    snprintf(c->broken_msg, sizeof c->broken_msg, "%s", why);
    for (int p = 0; p < c->world; p++) {
        if (c->coll[p]) c->coll[p]->ops->abort(c->coll[p], why);
        if (also_p2p && c->p2p[p]) c->p2p[p]->ops->abort(c->p2p[p], why);
    }
}

shoal_result sh_comm_check_stopped(shoal_comm *c)
{
    const shoal_comm *root = c;
    while (root->parent) root = root->parent;
    const char *why = sh_store_server_stopped(root->store_server);
    if (!why) return SHOAL_OK;
    sh_comm_break(c, why, 1);
    return SH_FAIL(SHOAL_ERR_MISMATCH, "the job was stopped: %s", why);
}

shoal_result sh_comm_peer_lost(const shoal_comm *c, int peer)
{
    char pb[128];
    sh_comm_peer_name((void *)c, peer, pb, sizeof pb);
    if (c->shm && c->shm->pid_of && c->shm->pid_of[peer] > 0 && kill(c->shm->pid_of[peer], 0) < 0 && errno == ESRCH)
        return SH_FAIL(SHOAL_ERR_PEER, "%s is gone: its process (pid %d) has exited", pb, c->shm->pid_of[peer]);
    sh_link *links[2] = {c->coll[peer], c->p2p[peer]};
    for (int i = 0; i < 2; i++) {
        if (!links[i] || links[i]->fd < 0) continue;
        struct pollfd p = {links[i]->fd, POLLRDHUP, 0};
        if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return SH_FAIL(SHOAL_ERR_PEER, "%s is gone: it closed its connection to this rank (it exited, was killed "
                           "or destroyed its communicator)", pb);
    }
    return SHOAL_OK;
}
