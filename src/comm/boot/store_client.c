/* store_client.c — a rank's connections to rank 0's store: a small pool, one connection per
 * request in flight, each proving the job key; set, get (waiting for a key), add, barrier.
 * Not here: the server (store_server.c), the handshake's cryptography (sock.c).
 * Proved by tests/comm/test_store.c. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "comm/boot/sock.h"
#include "comm/boot/store_wire.h"

/* A small pool of connections, one per request in flight: a thread whose get waits for a
 * key never holds up another thread's request (two threads splitting communicators at
 * once would otherwise wait on each other across ranks). A connection that fails half-way
 * is closed (its stream is out of step) and the next request opens a fresh one. */

enum { POOL = 8, RECONNECT_TIMEOUT_MS = 3000 };

struct sh_store {
    pthread_mutex_t mu;
    pthread_cond_t idle;  /* a connection became free */
    int fd[POOL];         /* -1: not open */
    unsigned char busy[POOL];
    char where[300];
    char host[256];
    int port;
    char *key;
};

/* Connect and prove the key; a handshake the store dropped unanswered (it sheds floods of
 * strangers) is tried again, a little later each time, until the deadline. */
static shoal_result open_conn(const char *addr, int port, const char *key, int timeout_ms, int once, int *fd_out)
{
    *fd_out = -1;
    uint64_t dl = sh_sock_deadline(timeout_ms);
    char peer[400];
    snprintf(peer, sizeof peer, "rank 0's store at %s:%d", addr, port);
    for (int pause_ms = 20;; pause_ms = pause_ms < 400 ? 2 * pause_ms : 400) {
        int fd = -1;
        shoal_result rc = once ? sh_sock_connect_once(addr, port, dl, &fd) : sh_sock_connect(addr, port, dl, &fd);
        if (rc != SHOAL_OK) {
            sh_err_prefix("rank 0's rendezvous store at %s:%d (SHOAL_MASTER_ADDR/SHOAL_MASTER_PORT): ",
                          addr, port);
            return rc;
        }
        rc = sh_auth_client(fd, key, "store", peer, dl, NULL);
        if (rc == SHOAL_OK) {
            *fd_out = fd;
            return SHOAL_OK;
        }
        close(fd);
        if (rc == SHOAL_ERR_IO && sh_now_ns() + (uint64_t)pause_ms * 1000000ull < dl) {
            struct timespec ts = {0, pause_ms * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (rc == SHOAL_ERR_TIMEOUT)
            sh_err_prefix("%s accepted the connection but did not answer the handshake: ", peer);
        return rc;
    }
}

static shoal_result connect_store(const char *addr, int port, const char *key, int timeout_ms, int once,
                                  sh_store **out)
{
    *out = NULL;
    int fd = -1;
    SH_TRY(open_conn(addr, port, key, timeout_ms, once, &fd));
    sh_store *s = calloc(1, sizeof *s);
    if (s) s->key = strdup(key);
    if (!s || !s->key) {
        close(fd);
        free(s);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < POOL; i++) s->fd[i] = -1;
    s->fd[0] = fd;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    snprintf(s->where, sizeof s->where, "%s:%d", addr, port);
    snprintf(s->host, sizeof s->host, "%s", addr);
    s->port = port;
    *out = s;
    return SHOAL_OK;
}

shoal_result sh_store_connect(const char *addr, int port, const char *key, int timeout_ms, sh_store **out)
{
    return connect_store(addr, port, key, timeout_ms, 0, out);
}

shoal_result sh_store_connect_once(const char *addr, int port, const char *key, int timeout_ms, sh_store **out)
{
    return connect_store(addr, port, key, timeout_ms, 1, out);
}

void sh_store_close(sh_store *s)
{
    if (!s) return;
    for (int i = 0; i < POOL; i++)
        if (s->fd[i] >= 0) close(s->fd[i]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->idle);
    free(s->key);
    free(s);
}

const char *sh_store_job_key(const sh_store *s) { return s->key; }
const char *sh_store_host(const sh_store *s) { return s->host; }
int sh_store_port(const sh_store *s) { return s->port; }

/* A connection for one request: an idle open one, else a new one, else wait for one. */
static shoal_result acquire(sh_store *s, int *slot)
{
    pthread_mutex_lock(&s->mu);
    for (;;) {
        int open_idle = -1, empty = -1;
        for (int i = 0; i < POOL; i++) {
            if (s->busy[i]) continue;
            if (s->fd[i] >= 0 && open_idle < 0) open_idle = i;
            if (s->fd[i] < 0 && empty < 0) empty = i;
        }
        int i = open_idle >= 0 ? open_idle : empty;
        if (i >= 0) {
            s->busy[i] = 1;
            pthread_mutex_unlock(&s->mu);
            *slot = i;
            if (s->fd[i] >= 0) return SHOAL_OK;
            int fd = -1;
            shoal_result rc = open_conn(s->host, s->port, s->key, RECONNECT_TIMEOUT_MS, 0, &fd);
            pthread_mutex_lock(&s->mu);
            s->fd[i] = fd;
            if (rc != SHOAL_OK) {
                s->busy[i] = 0;
                pthread_cond_signal(&s->idle);
            }
            pthread_mutex_unlock(&s->mu);
            if (rc != SHOAL_OK) {
                char why[640];
                snprintf(why, sizeof why, "%s", shoal_last_error_message()); /* SH_FAIL writes where it reads */
                return SH_FAIL(SHOAL_ERR_PEER, "rank 0's store at %s cannot be reached any more "
                               "(did rank 0 end or die?): %s", s->where, why);
            }
            return SHOAL_OK;
        }
        pthread_cond_wait(&s->idle, &s->mu);
    }
}

static void release(sh_store *s, int slot, int failed)
{
    pthread_mutex_lock(&s->mu);
    if (failed && s->fd[slot] >= 0) {
        close(s->fd[slot]);
        s->fd[slot] = -1;
    }
    s->busy[slot] = 0;
    pthread_cond_signal(&s->idle);
    pthread_mutex_unlock(&s->mu);
}

static shoal_result request(sh_store *s, int op, const char *key, const void *val, size_t vlen,
                            int timeout_ms, void *out, size_t cap, size_t *out_nbytes)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen >= SH_STORE_MAX_KEY || vlen > SH_STORE_MAX_VALUE_NBYTES)
        return SH_FAIL(SHOAL_ERR_INVALID, "store: key \"%.40s\" (%zu bytes) or its value (%zu bytes) "
                       "is empty or too long (limits %d and %d bytes)", key, klen, vlen, SH_STORE_MAX_KEY - 1,
                       SH_STORE_MAX_VALUE_NBYTES);
    uint32_t len = (uint32_t)(7 + klen + vlen), tmo = (uint32_t)(timeout_ms > 0 ? timeout_ms : 0);
    uint16_t kl = (uint16_t)klen;
    unsigned char hdr[11];
    memcpy(hdr, &len, 4);
    hdr[4] = (unsigned char)op;
    memcpy(hdr + 5, &tmo, 4);
    memcpy(hdr + 9, &kl, 2);
    int slot = -1;
    SH_TRY(acquire(s, &slot));
    int fd = s->fd[slot];
    uint64_t dl = sh_sock_deadline((timeout_ms > 0 ? timeout_ms : 0) + 10000);
    shoal_result rc;
    unsigned char one[1024]; /* small requests leave in one segment */
    if (sizeof hdr + klen + vlen <= sizeof one) {
        memcpy(one, hdr, sizeof hdr);
        memcpy(one + sizeof hdr, key, klen);
        if (vlen) memcpy(one + sizeof hdr + klen, val, vlen);
        rc = sh_sock_write_all(fd, one, sizeof hdr + klen + vlen, dl);
    } else {
        rc = sh_sock_write_all(fd, hdr, sizeof hdr, dl);
        if (rc == SHOAL_OK) rc = sh_sock_write_all(fd, key, klen, dl);
        if (rc == SHOAL_OK && vlen) rc = sh_sock_write_all(fd, val, vlen, dl);
    }
    uint32_t rlen = 0;
    unsigned char st = SH_STORE_ST_BAD;
    if (rc == SHOAL_OK) rc = sh_sock_read_all(fd, &rlen, 4, dl);
    if (rc == SHOAL_OK && (rlen < 1 || rlen > SH_STORE_MAX_VALUE_NBYTES + 1))
        rc = SH_FAIL(SHOAL_ERR_PEER, "bad reply from the store");
    if (rc == SHOAL_OK) rc = sh_sock_read_all(fd, &st, 1, dl);
    char why[640] = ""; /* a refusal's or a stop's reason comes as the value */
    int is_why = st == SH_STORE_ST_REFUSED || st == SH_STORE_ST_STOPPED;
    if (is_why) {
        out = why;
        cap = sizeof why - 1;
    }
    size_t vn = rlen - 1, got = 0;
    while (rc == SHOAL_OK && got < vn) {
        unsigned char tmp[4096];
        size_t take = vn - got < sizeof tmp ? vn - got : sizeof tmp;
        rc = sh_sock_read_all(fd, tmp, take, dl);
        if (rc == SHOAL_OK && out && got < cap)
            memcpy((unsigned char *)out + got, tmp, got + take <= cap ? take : cap - got);
        got += take;
    }
    release(s, slot, rc != SHOAL_OK);
    if (rc != SHOAL_OK) {
        sh_err_prefix("rank 0's store at %s: ", s->where);
        return rc;
    }
    if (st == SH_STORE_ST_REFUSED) return SH_FAIL(SHOAL_ERR_MISMATCH, "%s", why);
    if (st == SH_STORE_ST_STOPPED) return SH_FAIL(SHOAL_ERR_MISMATCH, "the job was stopped: %s", why);
    if (out_nbytes) *out_nbytes = vn;
    if (st == SH_STORE_ST_TIMEOUT)
        return SH_FAIL(SHOAL_ERR_TIMEOUT, "key \"%s\" did not appear in rank 0's store within %d ms",
                       key, timeout_ms);
    if (st != SH_STORE_ST_OK) return SH_FAIL(SHOAL_ERR_PEER, "rank 0's store refused the request");
    return SHOAL_OK;
}

shoal_result sh_store_claim(sh_store *s, int rank, int world, uint64_t id, const char *who)
{
    unsigned char v[SH_STORE_CLAIM_HDR_NBYTES + SH_STORE_CLAIM_WHO_NBYTES];
    int32_t r = rank, w = world;
    memcpy(v, &r, 4);
    memcpy(v + 4, &w, 4);
    memcpy(v + 8, &id, 8);
    size_t wn = strnlen(who, SH_STORE_CLAIM_WHO_NBYTES - 1);
    memcpy(v + SH_STORE_CLAIM_HDR_NBYTES, who, wn);
    return request(s, SH_STORE_OP_CLAIM, "claim", v, SH_STORE_CLAIM_HDR_NBYTES + wn, 0, NULL, 0, NULL);
}

shoal_result sh_store_set(sh_store *s, const char *key, const void *val, size_t nbytes)
{
    return request(s, SH_STORE_OP_SET, key, val, nbytes, 0, NULL, 0, NULL);
}

shoal_result sh_store_get(sh_store *s, const char *key, void *val, size_t cap, size_t *nbytes,
                          int timeout_ms)
{
    return request(s, SH_STORE_OP_GET, key, NULL, 0, timeout_ms, val, cap, nbytes);
}

shoal_result sh_store_add(sh_store *s, const char *key, int64_t delta, int64_t *after)
{
    int64_t v = 0;
    size_t n = 0;
    SH_TRY(request(s, SH_STORE_OP_ADD, key, &delta, 8, 0, &v, sizeof v, &n));
    if (after) *after = v;
    return SHOAL_OK;
}

shoal_result sh_store_barrier(sh_store *s, const char *key, int nranks, int timeout_ms)
{
    char k[SH_STORE_MAX_KEY], done[SH_STORE_MAX_KEY];
    snprintf(k, sizeof k, "%s/count", key);
    snprintf(done, sizeof done, "%s/done", key);
    int64_t after = 0;
    SH_TRY(sh_store_add(s, k, 1, &after));
    if (after == nranks) SH_TRY(sh_store_set(s, done, "1", 1));
    char b[4];
    size_t n;
    shoal_result rc = sh_store_get(s, done, b, sizeof b, &n, timeout_ms);
    if (rc == SHOAL_ERR_TIMEOUT) {
        int64_t now = 0;
        sh_store_add(s, k, 0, &now);
        return SH_FAIL(SHOAL_ERR_TIMEOUT, "barrier \"%s\": only %lld of %d ranks arrived within %d ms",
                       key, (long long)now, nranks, timeout_ms);
    }
    return rc;
}

shoal_result sh_store_barrier_named(sh_store *s, const char *key, int rank, int nranks, int timeout_ms)
{
    char k[SH_STORE_MAX_KEY];
    snprintf(k, sizeof k, "%s/r/%d", key, rank);
    SH_TRY(sh_store_set(s, k, "1", 1));
    shoal_result rc = sh_store_barrier(s, key, nranks, timeout_ms);
    unsigned char *away = NULL;
    if (rc != SHOAL_ERR_TIMEOUT || nranks < 1 || !(away = calloc((size_t)nranks, 1))) return rc;
    char first[512], list[200];
    snprintf(first, sizeof first, "%s", shoal_last_error_message());
    for (int r = 0; r < nranks; r++) { /* one look each: who never said it came */
        char v[4];
        size_t n = 0;
        snprintf(k, sizeof k, "%s/r/%d", key, r);
        away[r] = sh_store_get(s, k, v, sizeof v, &n, 0) != SHOAL_OK;
    }
    int count = 0;
    sh_format_ranks(list, sizeof list, away, nranks, &count);
    free(away);
    if (count == 1)
        return SH_FAIL(SHOAL_ERR_TIMEOUT, "%s; rank %s did not (did it start? SHOAL_TIMEOUT sets the wait)", first,
                       list);
    return SH_FAIL(SHOAL_ERR_TIMEOUT, "%s; ranks %s (%d ranks) did not (did they start? SHOAL_TIMEOUT sets the "
                   "wait)", first, list, count);
}
