/* tcp.c — the TCP mesh: each rank listens on one interface, publishes addr:port in the store,
 * connects to lower ranks (a collective and a point-to-point plane) and accepts higher ones;
 * every connection proves the job key, strangers and stalled handshakes are dropped while the
 * real ranks are served; under SHOAL_SECURE=1 each link is sealed (seal.c).
 * Not here: the handshake's cryptography and socket helpers (boot/sock.c), byte moving (link.c,
 * seal.c, xfer.c); which peers it serves is its row of transport.h's table, at the end.
 * Proved by tests/comm/test_transport_tcp.c, tests/comm/test_comm.c, test_comm_faults.c. */
#include "comm/transport/tcp.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/interrupt.h"
#include "comm/boot/sock.h"
#include "comm/boot/store.h"
#include "comm/transport/seal.h"

#include <openssl/crypto.h>

enum {
    MAX_PENDING = 64,          /* handshakes in progress at once; the oldest goes beyond */
    AUTH_TIMEOUT_MS = 3000,    /* a real rank answers the hello in microseconds */
};

/* "w tcp 3->5 plane 1" (" sealed" under SHOAL_SECURE): what a connection is for; both sides
 * MAC it, and a sealed link's keys are derived with it. */
static void context(const shoal_comm *c, int from, int to, int plane, char *out, size_t cap)
{
    snprintf(out, cap, "%.40s tcp %d->%d plane %d%s", c->prefix, from, to, plane, c->secure ? " sealed" : "");
}

/* The link over a connection whose handshake just ended: plain, or sealed with keys of its
 * own; takes fd (closed on error). Tests: SHOAL_TEST_SEAL_FLIP=RANK:RECORD corrupts one
 * record of RANK's collective links. */
static shoal_result make_link(shoal_comm *c, int fd, int peer, int plane, const char *key, const char *ctx,
                              const sh_auth_nonces *n, int is_client)
{
    sh_link **slot = plane ? &c->p2p[peer] : &c->coll[peer];
    if (!c->secure) {
        shoal_result rc = sh_link_fd_create(fd, peer, slot);
        if (rc != SHOAL_OK) close(fd);
        return rc;
    }
    sh_seal_keys k;
    shoal_result rc = sh_seal_derive(key, n, ctx, is_client, &k);
    if (rc != SHOAL_OK) {
        close(fd);
        return rc;
    }
    rc = sh_seal_link_create(fd, peer, &k, slot);
    OPENSSL_cleanse(&k, sizeof k);
    const char *flip = sh_env_str("SHOAL_TEST_SEAL_FLIP");
    int frank = -1;
    unsigned long long rec = 0;
    if (rc == SHOAL_OK && flip && sscanf(flip, "%d:%llu", &frank, &rec) == 2 && frank == c->rank && !plane)
        sh_seal_test_flip(*slot, rec);
    return rc;
}

typedef struct {
    int fd; /* -1: free slot */
    char who[64];
    uint64_t deadline_ns;
    unsigned char hello[SH_AUTH_HELLO_NBYTES];
    unsigned char in[SH_AUTH_CLIENT_NBYTES];
    size_t in_nbytes;
} pending;

static void refuse(pending *p, const char *why)
{
    if (sh_sock_log_refusal()) SH_LOG_W("comm", "tcp: refused a connection from %s: %s", p->who, why);
    close(p->fd);
    p->fd = -1;
}

/* Read what a pending handshake has; when whole, check it and make the link. */
static shoal_result on_pending(shoal_comm *c, const unsigned char *want, const char *key,
                               pending *p, int *need_in)
{
    for (;;) {
        ssize_t n = recv(p->fd, p->in + p->in_nbytes, sizeof p->in - p->in_nbytes, MSG_DONTWAIT);
        if (n == 0) {
            refuse(p, p->in_nbytes ? "closed during the handshake" : "closed before the handshake (a port scan?)");
            return SHOAL_OK;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) refuse(p, strerror(errno));
            return SHOAL_OK;
        }
        p->in_nbytes += (size_t)n;
        if (!sh_auth_client_greeting_ok(p->in, p->in_nbytes)) {
            refuse(p, "not a shoal rank (bad greeting)");
            return SHOAL_OK;
        }
        if (p->in_nbytes == sizeof p->in) break;
    }
    char ctx[SH_AUTH_CTX_NBYTES], why[200];
    unsigned char reply[SH_AUTH_REPLY_NBYTES];
    sh_auth_nonces nonces;
    if (sh_auth_server_check(key, p->hello, p->in, ctx, reply, &nonces) != SHOAL_OK) {
        snprintf(why, sizeof why, "%s (a process outside the job?)", shoal_last_error_message());
        sh_auth_refuse(p->fd);
        refuse(p, why);
        return SHOAL_OK;
    }
    int from = -1, to = -1, plane = -1, end = 0;
    char pre[64];
    if (sscanf(ctx, "%63s tcp %d->%d plane %d%n", pre, &from, &to, &plane, &end) != 4 ||
        strcmp(ctx + end, c->secure ? " sealed" : "") != 0 ||
        strcmp(pre, c->prefix) != 0 || to != c->rank || from <= c->rank || from >= c->world ||
        !want[from] || plane < 0 || plane > 1 || (plane ? c->p2p[from] : c->coll[from])) {
        snprintf(why, sizeof why, "holds the key but is not expected here (\"%.80s\")", ctx);
        sh_auth_refuse(p->fd);
        refuse(p, why);
        return SHOAL_OK;
    }
    /* 32 bytes into a fresh socket's empty buffer: never blocks for long. */
    if (sh_sock_write_all(p->fd, reply, sizeof reply, sh_sock_deadline(AUTH_TIMEOUT_MS)) != SHOAL_OK) {
        refuse(p, "left before the end of the handshake");
        return SHOAL_OK;
    }
    shoal_result rc = make_link(c, p->fd, from, plane, key, ctx, &nonces, 0);
    p->fd = -1;
    (*need_in)--;
    return rc;
}

static void accept_one(int lfd, pending *pend, uint64_t dl)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    int slot = -1;
    for (int i = 0; i < MAX_PENDING; i++)
        if (pend[i].fd < 0) {
            slot = i;
            break;
        }
    if (slot < 0) { /* full of strangers: the oldest goes */
        slot = 0;
        for (int i = 1; i < MAX_PENDING; i++)
            if (pend[i].deadline_ns < pend[slot].deadline_ns) slot = i;
        refuse(&pend[slot], "too many handshakes at once; this was the oldest");
    }
    pending *p = &pend[slot];
    memset(p, 0, sizeof *p);
    p->fd = fd;
    sh_sock_peer_str(fd, p->who, sizeof p->who);
    uint64_t adl = sh_sock_deadline(AUTH_TIMEOUT_MS);
    p->deadline_ns = adl < dl ? adl : dl;
    if (sh_auth_server_hello(p->hello) != SHOAL_OK)
        refuse(p, shoal_last_error_message());
    else if (send(fd, p->hello, sizeof p->hello, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof p->hello)
        refuse(p, "could not send the hello");
    else
        sh_sock_tune(fd);
}

static shoal_result accept_higher(shoal_comm *c, const unsigned char *want, const char *key,
                                  int lfd, int need_in, uint64_t dl)
{
    pending pend[MAX_PENDING];
    struct pollfd pf[1 + MAX_PENDING];
    for (int i = 0; i < MAX_PENDING; i++) pend[i].fd = -1;
    shoal_result rc = SHOAL_OK;
    while (rc == SHOAL_OK && need_in > 0) {
        uint64_t now = sh_now_ns();
        if (sh_interrupted()) {
            rc = SH_FAIL(SHOAL_ERR_INTERRUPTED, "tcp: stopped by %s while waiting for ranks to connect",
                         sh_interrupt_name(sh_interrupted()));
            break;
        }
        if (now >= dl) {
            char missing[256] = "";
            size_t len = 0;
            for (int p = c->rank + 1; p < c->world && len < sizeof missing - 16; p++)
                if (want[p] && (!c->coll[p] || !c->p2p[p]))
                    len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d", len ? ", " : "", p);
            rc = SH_FAIL(SHOAL_ERR_TIMEOUT, "tcp: rank%s %s never connected to rank %d within %d ms "
                         "(did %s die, or can it not reach this host? see SHOAL_SOCKET_IFNAME)",
                         strchr(missing, ',') ? "s" : "", missing, c->rank, c->timeout_ms,
                         strchr(missing, ',') ? "they" : "it");
            break;
        }
        uint64_t next = dl;
        pf[0] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < MAX_PENDING; i++) {
            if (pend[i].fd >= 0 && pend[i].deadline_ns <= now)
                refuse(&pend[i], "no handshake within the deadline (a stalled stranger?)");
            if (pend[i].fd >= 0 && pend[i].deadline_ns < next) next = pend[i].deadline_ns;
            pf[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
        }
        int wait_ms = (int)((next - now) / 1000000ull) + 1;
        int n = poll(pf, 1 + MAX_PENDING, wait_ms > 200 ? 200 : wait_ms);
        if (n < 0 && errno != EINTR) {
            rc = SH_FAIL(SHOAL_ERR_IO, "tcp: poll: %s", strerror(errno));
            break;
        }
        if (n <= 0) continue;
        for (int i = 0; i < MAX_PENDING && rc == SHOAL_OK; i++)
            if (pend[i].fd >= 0 && pf[1 + i].revents) rc = on_pending(c, want, key, &pend[i], &need_in);
        if (pf[0].revents & POLLIN) accept_one(lfd, pend, dl);
    }
    for (int i = 0; i < MAX_PENDING; i++)
        if (pend[i].fd >= 0) close(pend[i].fd);
    return rc;
}

static shoal_result connect_lower(shoal_comm *c, int p, const char *key, uint64_t dl)
{
    char v[96], skey[128], pb[128];
    size_t vn = 0;
    snprintf(skey, sizeof skey, "%s/tcp/%d", c->prefix, p);
    int left_ms = (int)((dl > sh_now_ns() ? dl - sh_now_ns() : 0) / 1000000ull) + 1;
    shoal_result rc = sh_store_get(c->store, skey, v, sizeof v - 1, &vn, left_ms);
    if (rc == SHOAL_ERR_TIMEOUT)
        return SH_FAIL(SHOAL_ERR_TIMEOUT, "tcp: %s never published its address within %d ms "
                       "(did it start, or die?)", sh_comm_peer_name(c, p, pb, sizeof pb), c->timeout_ms);
    SH_TRY(rc);
    v[vn < sizeof v ? vn : sizeof v - 1] = 0;
    char *colon = strrchr(v, ':');
    int pport = colon ? atoi(colon + 1) : 0;
    if (!colon || pport <= 0 || pport > 65535)
        return SH_FAIL(SHOAL_ERR_PEER, "tcp: %s published a bad address \"%s\"",
                       sh_comm_peer_name(c, p, pb, sizeof pb), v);
    *colon = 0;
    for (int plane = 0; plane < 2; plane++) {
        int fd = -1;
        char peer[256];
        snprintf(peer, sizeof peer, "%s at %s:%d", sh_comm_peer_name(c, p, pb, sizeof pb), v, pport);
        /* A flood of strangers can push this handshake out of the peer's pending set before
         * it completes (the peer keeps the newest; SHOAL_ERR_IO): try again until the
         * deadline. A refusal (SHOAL_ERR_PEER) is final. */
        for (;;) {
            rc = sh_sock_connect(v, pport, dl, &fd);
            if (rc == SHOAL_OK) {
                char ctx[SH_AUTH_CTX_NBYTES];
                sh_auth_nonces nonces;
                context(c, c->rank, p, plane, ctx, sizeof ctx);
                rc = sh_auth_client(fd, key, ctx, peer, dl, &nonces);
                if (rc == SHOAL_OK) rc = make_link(c, fd, p, plane, key, ctx, &nonces, 1);
                else close(fd);
            }
            if (rc != SHOAL_ERR_IO || sh_now_ns() + 100000000ull >= dl) break;
            struct timespec ts = {0, 50000000L};
            nanosleep(&ts, NULL);
        }
        if (rc != SHOAL_OK) {
            sh_err_prefix("tcp: connecting to %s: ", peer);
            return rc;
        }
    }
    return SHOAL_OK;
}

/* Listen on addr: on the first free port of SHOAL_PORT_RANGE (for firewalls), else on any. */
static shoal_result listen_in_range(const char *addr, int *lfd, int *port)
{
    const char *range = sh_env_is_set("SHOAL_PORT_RANGE") ? sh_env_str("SHOAL_PORT_RANGE") : NULL;
    if (!range) return sh_sock_listen(addr, 0, lfd, port);
    int lo = 0, hi = 0, end = 0;
    if (sscanf(range, "%d-%d%n", &lo, &hi, &end) != 2 || range[end] || lo < 1 || hi > 65535 || lo > hi)
        return SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_PORT_RANGE=\"%s\": expected LO-HI with 1 <= LO <= HI <= 65535, "
                       "e.g. 29501-29600", range);
    for (int p = lo; p <= hi; p++) {
        if (sh_sock_listen(addr, p, lfd, port) == SHOAL_OK) return SHOAL_OK;
    }
    return SH_FAIL(SHOAL_ERR_IO, "tcp: no free port in SHOAL_PORT_RANGE=%s on %s (each rank of this host needs one; "
                   "widen the range)", range, addr && addr[0] ? addr : "*");
}

shoal_result sh_tcp_connect(shoal_comm *c, const unsigned char *want)
{
    int need_in = 0, any = 0;
    for (int p = 0; p < c->world; p++)
        if (p != c->rank && want[p]) {
            any = 1;
            if (p > c->rank) need_in += 2;
        }
    if (!any) return SHOAL_OK;
    if (!c->store)
        return SH_FAIL(SHOAL_ERR_INVALID, "tcp: this communicator has no store to meet its peers in");
    const char *key = sh_store_job_key(c->store);
    uint64_t dl = sh_sock_deadline(c->timeout_ms);
    long bind_all = 0, sndbuf_kb = 0;
    SH_TRY(sh_env_long("SHOAL_BIND_ALL", &bind_all));
    SH_TRY(sh_env_long("SHOAL_SOCKET_SNDBUF_KB", &sndbuf_kb)); /* a bad value stops here, not silently in sh_sock_tune */
    char addr[64] = "", skey[128], v[96];
    SH_TRY(sh_sock_local_addr(sh_store_host(c->store), addr, sizeof addr));
    int lfd = -1, port = 0;
    SH_TRY(listen_in_range(bind_all ? NULL : addr, &lfd, &port));
    int n = snprintf(v, sizeof v, "%s:%d", addr, port);
    SH_LOG_D("comm", "tcp: listening on %s for the ranks of other hosts", v);
    snprintf(skey, sizeof skey, "%s/tcp/%d", c->prefix, c->rank);
    shoal_result rc = sh_store_set(c->store, skey, v, (size_t)n);
    for (int p = 0; p < c->rank && rc == SHOAL_OK; p++)
        if (want[p]) rc = connect_lower(c, p, key, dl);
    if (rc == SHOAL_OK) rc = accept_higher(c, want, key, lfd, need_in, dl);
    close(lfd);
    return rc;
}

/* Peers on other hosts, or every peer under SHOAL_TRANSPORT=tcp (and a split
 * communicator's peers on other hosts under mpi: MPI links serve the whole job only). */
static int tcp_can_reach(const shoal_comm *c, int peer)
{
    if (c->transport == SH_TRANSPORT_TCP) return 1;
    int same_host = c->host_of[peer] == c->host_of[c->rank];
    return !same_host && (c->transport == SH_TRANSPORT_AUTO || (c->transport == SH_TRANSPORT_MPI && c->parent));
}

const sh_transport_ops sh_tcp_transport = {"tcp", tcp_can_reach, sh_tcp_connect, NULL};
