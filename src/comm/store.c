/* store.c — rank 0's rendezvous store: a thread accepts connections; each authenticated
 * connection has a thread serving framed requests (set, get-with-wait, add). Strangers,
 * garbage and oversized frames are logged and dropped without disturbing the others.
 * Not here: the handshake (net.c), key naming (callers).
 * Proved by tests/comm/test_store.c. */
#include "comm/store.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/net.h"

enum { OP_SET = 1, OP_GET = 2, OP_ADD = 3 };
enum { ST_OK = 0, ST_TIMEOUT = 1, ST_BAD = 2 };
enum { MAX_KEY = 512, MAX_FRAME = SH_STORE_MAX_VALUE_NBYTES + MAX_KEY + 16, MAX_PENDING_AUTH = 64,
       AUTH_TIMEOUT_MS = 5000 };

typedef struct kv {
    char *key;
    void *val;
    size_t nbytes;
    struct kv *next;
} kv;

struct sh_store_server {
    int listen_fd, port;
    int wake[2];
    char *key;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* a key was set, or a connection ended */
    kv *items;
    int stopping;
    int nconns, nauth;   /* live connection threads; of them, still authenticating */
    int fds[1024];       /* live connection fds, to shut them down on stop */
};

typedef struct {
    sh_store_server *s;
    int fd;
    int slot;
} conn;

static kv *find(sh_store_server *s, const char *key)
{
    for (kv *i = s->items; i; i = i->next)
        if (strcmp(i->key, key) == 0) return i;
    return NULL;
}

static int reply(int fd, int status, const void *val, size_t nbytes)
{
    unsigned char hdr[5];
    uint32_t len = (uint32_t)(1 + nbytes);
    memcpy(hdr, &len, 4);
    hdr[4] = (unsigned char)status;
    uint64_t dl = sh_net_deadline(10000);
    if (sh_net_write_all(fd, hdr, 5, dl) != SHOAL_OK) return -1;
    if (nbytes && sh_net_write_all(fd, val, nbytes, dl) != SHOAL_OK) return -1;
    return 0;
}

/* One request: op u8, timeout_ms u32, keylen u16, key, value. Returns -1 to drop. */
static int serve(sh_store_server *s, int fd, unsigned char *f, size_t n)
{
    if (n < 7) return -1;
    int op = f[0];
    uint32_t tmo;
    uint16_t klen;
    memcpy(&tmo, f + 1, 4);
    memcpy(&klen, f + 5, 2);
    if (klen == 0 || klen >= MAX_KEY || (size_t)7 + klen > n) return -1;
    char key[MAX_KEY];
    memcpy(key, f + 7, klen);
    key[klen] = 0;
    const unsigned char *val = f + 7 + klen;
    size_t vlen = n - 7 - klen;
    pthread_mutex_lock(&s->mu);
    if (op == OP_SET || op == OP_ADD) {
        kv *it = find(s, key);
        if (!it) {
            it = calloc(1, sizeof *it);
            if (it) it->key = strdup(key);
            if (!it || !it->key) {
                pthread_mutex_unlock(&s->mu);
                free(it);
                return reply(fd, ST_BAD, NULL, 0);
            }
            it->next = s->items;
            s->items = it;
        }
        if (op == OP_SET) {
            void *copy = malloc(vlen ? vlen : 1);
            if (copy) memcpy(copy, val, vlen);
            free(it->val);
            it->val = copy;
            it->nbytes = copy ? vlen : 0;
        } else {
            int64_t cur = 0, d = 0;
            if (vlen != 8) {
                pthread_mutex_unlock(&s->mu);
                return -1;
            }
            memcpy(&d, val, 8);
            if (it->val && it->nbytes == 8) memcpy(&cur, it->val, 8);
            cur += d;
            if (!it->val || it->nbytes != 8) {
                free(it->val);
                it->val = malloc(8);
                it->nbytes = it->val ? 8 : 0;
            }
            if (it->val) memcpy(it->val, &cur, 8);
        }
        pthread_cond_broadcast(&s->cv);
        size_t rn = op == OP_ADD ? 8 : 0;
        unsigned char out[8];
        if (rn) memcpy(out, it->val, 8);
        pthread_mutex_unlock(&s->mu);
        return reply(fd, ST_OK, out, rn);
    }
    if (op == OP_GET) {
        uint64_t deadline = sh_now_ns() + (uint64_t)tmo * 1000000ull;
        kv *it;
        while (!(it = find(s, key)) && !s->stopping) {
            uint64_t now = sh_now_ns();
            if (now >= deadline) break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t wait_ns = deadline - now;
            if (wait_ns > 200000000ull) wait_ns = 200000000ull;
            ts.tv_nsec += (long)(wait_ns % 1000000000ull);
            ts.tv_sec += (time_t)(wait_ns / 1000000000ull) + ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        }
        if (!it) {
            pthread_mutex_unlock(&s->mu);
            return reply(fd, ST_TIMEOUT, NULL, 0);
        }
        void *copy = malloc(it->nbytes ? it->nbytes : 1);
        size_t cn = it->nbytes;
        if (copy) memcpy(copy, it->val, cn);
        pthread_mutex_unlock(&s->mu);
        int rc = copy ? reply(fd, ST_OK, copy, cn) : reply(fd, ST_BAD, NULL, 0);
        free(copy);
        return rc;
    }
    pthread_mutex_unlock(&s->mu);
    return -1;
}

static void *conn_main(void *arg)
{
    conn *cn = arg;
    sh_store_server *s = cn->s;
    int fd = cn->fd;
    char who[64], ctx[SH_AUTH_CTX_NBYTES];
    sh_net_peer_str(fd, who, sizeof who);
    shoal_result rc = sh_auth_server(fd, s->key, ctx, sh_net_deadline(AUTH_TIMEOUT_MS));
    pthread_mutex_lock(&s->mu);
    s->nauth--;
    pthread_mutex_unlock(&s->mu);
    if (rc != SHOAL_OK) {
        SH_LOG_W("comm", "store: refused a connection from %s: %s", who, shoal_last_error_message());
    } else {
        unsigned char *f = malloc(MAX_FRAME);
        while (f) {
            uint32_t len;
            struct pollfd p = {fd, POLLIN, 0};
            int pr = poll(&p, 1, 200);
            if (s->stopping) break;
            if (pr <= 0) continue;
            if (sh_net_read_all(fd, &len, 4, sh_net_deadline(30000)) != SHOAL_OK) break;
            if (len == 0 || len > MAX_FRAME) {
                SH_LOG_W("comm", "store: dropped %s: frame of %u bytes (limit %d)", who, len, MAX_FRAME);
                break;
            }
            if (sh_net_read_all(fd, f, len, sh_net_deadline(30000)) != SHOAL_OK) {
                SH_LOG_W("comm", "store: dropped %s: incomplete frame", who);
                break;
            }
            if (serve(s, fd, f, len) != 0) {
                SH_LOG_W("comm", "store: dropped %s: malformed request", who);
                break;
            }
        }
        free(f);
    }
    pthread_mutex_lock(&s->mu);
    s->fds[cn->slot] = -1;
    close(fd);
    s->nconns--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free(cn);
    return NULL;
}

static void *accept_main(void *arg)
{
    sh_store_server *s = arg;
    for (;;) {
        struct pollfd p[2] = {{s->listen_fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR) break;
        if (s->stopping || p[1].revents) break;
        if (!(p[0].revents & POLLIN)) continue;
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        pthread_mutex_lock(&s->mu);
        int slot = -1;
        for (int i = 0; i < 1024; i++)
            if (s->fds[i] < 0) {
                slot = i;
                break;
            }
        if (slot < 0 || s->nauth >= MAX_PENDING_AUTH) {
            pthread_mutex_unlock(&s->mu);
            char who[64];
            SH_LOG_W("comm", "store: too many connections; dropped %s", sh_net_peer_str(fd, who, sizeof who));
            close(fd);
            continue;
        }
        conn *cn = malloc(sizeof *cn);
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 * 1024);
        if (cn) {
            *cn = (conn){s, fd, slot};
            s->fds[slot] = fd;
            s->nconns++;
            s->nauth++;
        }
        if (!cn || pthread_create(&t, &at, conn_main, cn) != 0) {
            if (cn) {
                s->fds[slot] = -1;
                s->nconns--;
                s->nauth--;
            }
            close(fd);
            free(cn);
        }
        pthread_attr_destroy(&at);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

shoal_result sh_store_server_start(const char *addr, int port, const char *key,
                                   sh_store_server **out)
{
    *out = NULL;
    sh_store_server *s = calloc(1, sizeof *s);
    if (!s) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for the store");
    for (int i = 0; i < 1024; i++) s->fds[i] = -1;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->key = strdup(key);
    shoal_result rc = sh_net_listen(addr, port, &s->listen_fd, &s->port);
    if (rc != SHOAL_OK) {
        free(s->key);
        free(s);
        sh_err_prefix("rank 0's rendezvous store: ");
        return rc;
    }
    if (pipe(s->wake) < 0 || pthread_create(&s->acceptor, NULL, accept_main, s) != 0) {
        close(s->listen_fd);
        free(s->key);
        free(s);
        return SH_FAIL(SHOAL_ERR_IO, "cannot start the store thread");
    }
    *out = s;
    return SHOAL_OK;
}

int sh_store_server_port(const sh_store_server *s) { return s->port; }

void sh_store_server_stop(sh_store_server *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    for (int i = 0; i < 1024; i++)
        if (s->fds[i] >= 0) shutdown(s->fds[i], SHUT_RDWR);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (write(s->wake[1], "x", 1) < 0) { /* the acceptor also sees `stopping` */
    }
    pthread_join(s->acceptor, NULL);
    pthread_mutex_lock(&s->mu);
    uint64_t until = sh_now_ns() + 3000000000ull;
    while (s->nconns > 0 && sh_now_ns() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50000000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    int leaked = s->nconns > 0;
    pthread_mutex_unlock(&s->mu);
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    if (leaked) return; /* a connection thread is stuck in a write: leave its memory be */
    for (kv *i = s->items, *n; i; i = n) {
        n = i->next;
        free(i->key);
        free(i->val);
        free(i);
    }
    free(s->key);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* ---- client ---- */

struct sh_store {
    int fd;
    pthread_mutex_t mu;
    char where[128];
};

shoal_result sh_store_connect(const char *addr, int port, const char *key, int timeout_ms,
                              sh_store **out)
{
    *out = NULL;
    uint64_t dl = sh_net_deadline(timeout_ms);
    int fd = -1;
    shoal_result rc = sh_net_connect(addr, port, dl, &fd);
    if (rc != SHOAL_OK) {
        sh_err_prefix("rank 0's rendezvous store at %s:%d (SHOAL_MASTER_ADDR/SHOAL_MASTER_PORT): ",
                      addr, port);
        return rc;
    }
    rc = sh_auth_client(fd, key, "store", dl);
    if (rc != SHOAL_OK) {
        close(fd);
        sh_err_prefix("rank 0's store at %s:%d: ", addr, port);
        return rc;
    }
    sh_store *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    s->fd = fd;
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->where, sizeof s->where, "%s:%d", addr, port);
    *out = s;
    return SHOAL_OK;
}

void sh_store_close(sh_store *s)
{
    if (!s) return;
    close(s->fd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static shoal_result request(sh_store *s, int op, const char *key, const void *val, size_t vlen,
                            int timeout_ms, void *out, size_t cap, size_t *out_nbytes)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen >= MAX_KEY || vlen > SH_STORE_MAX_VALUE_NBYTES)
        return SH_FAIL(SHOAL_ERR_INVALID, "store key or value too long (key \"%.40s\")", key);
    uint32_t len = (uint32_t)(7 + klen + vlen), tmo = (uint32_t)(timeout_ms > 0 ? timeout_ms : 0);
    uint16_t kl = (uint16_t)klen;
    unsigned char hdr[11];
    memcpy(hdr, &len, 4);
    hdr[4] = (unsigned char)op;
    memcpy(hdr + 5, &tmo, 4);
    memcpy(hdr + 9, &kl, 2);
    pthread_mutex_lock(&s->mu);
    uint64_t dl = sh_net_deadline((timeout_ms > 0 ? timeout_ms : 0) + 10000);
    shoal_result rc = sh_net_write_all(s->fd, hdr, sizeof hdr, dl);
    if (rc == SHOAL_OK) rc = sh_net_write_all(s->fd, key, klen, dl);
    if (rc == SHOAL_OK && vlen) rc = sh_net_write_all(s->fd, val, vlen, dl);
    uint32_t rlen = 0;
    unsigned char st = ST_BAD;
    if (rc == SHOAL_OK) rc = sh_net_read_all(s->fd, &rlen, 4, dl);
    if (rc == SHOAL_OK && (rlen < 1 || rlen > SH_STORE_MAX_VALUE_NBYTES + 1))
        rc = SH_FAIL(SHOAL_ERR_PEER, "bad reply from the store");
    if (rc == SHOAL_OK) rc = sh_net_read_all(s->fd, &st, 1, dl);
    size_t vn = rlen - 1, got = 0;
    while (rc == SHOAL_OK && got < vn) {
        unsigned char tmp[4096];
        size_t take = vn - got < sizeof tmp ? vn - got : sizeof tmp;
        rc = sh_net_read_all(s->fd, tmp, take, dl);
        if (rc == SHOAL_OK && out && got < cap)
            memcpy((unsigned char *)out + got, tmp, got + take <= cap ? take : cap - got);
        got += take;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc != SHOAL_OK) {
        sh_err_prefix("rank 0's store at %s: ", s->where);
        return rc;
    }
    if (out_nbytes) *out_nbytes = vn;
    if (st == ST_TIMEOUT)
        return SH_FAIL(SHOAL_ERR_TIMEOUT, "key \"%s\" did not appear in rank 0's store within %d ms",
                       key, timeout_ms);
    if (st != ST_OK) return SH_FAIL(SHOAL_ERR_PEER, "rank 0's store refused the request");
    return SHOAL_OK;
}

shoal_result sh_store_set(sh_store *s, const char *key, const void *val, size_t nbytes)
{
    return request(s, OP_SET, key, val, nbytes, 0, NULL, 0, NULL);
}

shoal_result sh_store_get(sh_store *s, const char *key, void *val, size_t cap, size_t *nbytes,
                          int timeout_ms)
{
    return request(s, OP_GET, key, NULL, 0, timeout_ms, val, cap, nbytes);
}

shoal_result sh_store_add(sh_store *s, const char *key, int64_t delta, int64_t *after)
{
    int64_t v = 0;
    size_t n = 0;
    SH_TRY(request(s, OP_ADD, key, &delta, 8, 0, &v, sizeof v, &n));
    if (after) *after = v;
    return SHOAL_OK;
}

shoal_result sh_store_barrier(sh_store *s, const char *key, int nranks, int timeout_ms)
{
    char k[MAX_KEY], done[MAX_KEY];
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
