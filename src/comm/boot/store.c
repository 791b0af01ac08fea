/* store.c — rank 0's rendezvous store (as torch.distributed's TCPStore): one server thread
 * polls every connection at once, each with its own buffers, size cap and deadlines, so a
 * stranger that stalls, floods or sends garbage is dropped without slowing anyone else.
 * Connections prove the job key first (sock.c's handshake, run here as a state machine).
 * Not here: the handshake's cryptography (sock.c), key naming (callers).
 * Proved by tests/comm/test_store.c. */
#include "comm/boot/store.h"

#include <errno.h>
#include <fcntl.h>
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
#include "comm/boot/sock.h"

/* Wire format, little-endian as the hosts are (all ranks run the same build):
 *   request: len u32 | op u8 | timeout_ms u32 | keylen u16 | key | value   (len counts from op)
 *   reply:   len u32 | status u8 | value                                   (len counts from status) */
enum { OP_SET = 1, OP_GET = 2, OP_ADD = 3 };
enum { ST_OK = 0, ST_TIMEOUT = 1, ST_BAD = 2 };
enum {
    MAX_KEY = 512,
    MAX_FRAME = SH_STORE_MAX_VALUE_NBYTES + MAX_KEY + 16, /* the largest request we read */
    MAX_CONNS = 4096,         /* every connection, job's and strangers' */
    MAX_PENDING_AUTH = 256,   /* still in the handshake; the oldest is dropped beyond this */
    AUTH_TIMEOUT_MS = 5000,   /* a real rank answers the hello in microseconds */
    FRAME_TIMEOUT_MS = 30000, /* a request once begun must arrive whole within this */
    SEND_TIMEOUT_MS = 30000,  /* a reply must drain within this (the client stopped reading) */
    NBUCKETS = 1024,
    KEEP_BUF_NBYTES = 64 * 1024, /* buffers above this are freed after each request */
    /* On stop, rank 0 keeps serving while other ranks still talk to it (they may be a few
     * requests behind: the end of a split), until DRAIN_IDLE_MS pass without a request, or
     * DRAIN_MAX_MS in all. */
    DRAIN_IDLE_MS = 500,
    DRAIN_MAX_MS = 5000
};

typedef struct kv {
    char *key;
    void *val;
    size_t nbytes;
    struct kv *next;
} kv;

typedef enum { C_AUTH, C_READY, C_WAITING } conn_state;

typedef struct {
    int fd; /* -1: dropped, to be compacted away */
    conn_state st;
    char who[64];
    uint64_t since_ns;    /* accept time (C_AUTH) */
    uint64_t deadline_ns; /* of the handshake, of the request begun, or of the reply; 0: none */
    unsigned char hello[SH_AUTH_HELLO_NBYTES];
    unsigned char *in;
    size_t in_nbytes, in_cap;
    unsigned char *out;
    size_t out_nbytes, out_off, out_cap;
    char wait_key[MAX_KEY]; /* C_WAITING: the key a get waits for, until wait_ns */
    uint64_t wait_ns;
} conn;

struct sh_store_server {
    int listen_fd, port;
    int wake[2];
    char *key;
    pthread_t thread;
    kv *buckets[NBUCKETS];
    conn **conns;
    int nconns, conns_cap;
    struct pollfd *pfds;
    uint64_t listen_pause_until_ns; /* out of descriptors: stop accepting for a moment */
    uint64_t last_request_ns;       /* when a job's request was last served */
};

static unsigned bucket_of(const char *key)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 16777619u;
    return h % NBUCKETS;
}

static kv *find(sh_store_server *s, const char *key)
{
    for (kv *i = s->buckets[bucket_of(key)]; i; i = i->next)
        if (strcmp(i->key, key) == 0) return i;
    return NULL;
}

static kv *find_or_add(sh_store_server *s, const char *key)
{
    kv *it = find(s, key);
    if (it) return it;
    it = calloc(1, sizeof *it);
    if (!it) return NULL;
    it->key = strdup(key);
    if (!it->key) {
        free(it);
        return NULL;
    }
    unsigned b = bucket_of(key);
    it->next = s->buckets[b];
    s->buckets[b] = it;
    return it;
}

static void drop(conn *cn, const char *why)
{
    if (cn->fd < 0) return;
    if (why && sh_sock_log_refusal())
        SH_LOG_W("comm", "store: dropped the connection from %s: %s", cn->who, why);
    close(cn->fd);
    cn->fd = -1;
}

/* Queue bytes to send; sent from the poll loop. Returns -1 when out of memory. */
static int queue(conn *cn, const void *p, size_t n)
{
    if (cn->out_off == cn->out_nbytes) cn->out_off = cn->out_nbytes = 0;
    if (cn->out_nbytes + n > cn->out_cap) {
        size_t cap = cn->out_nbytes + n;
        unsigned char *b = realloc(cn->out, cap);
        if (!b) return -1;
        cn->out = b;
        cn->out_cap = cap;
    }
    memcpy(cn->out + cn->out_nbytes, p, n);
    cn->out_nbytes += n;
    return 0;
}

static void reply(conn *cn, int status, const void *val, size_t nbytes)
{
    unsigned char hdr[5];
    uint32_t len = (uint32_t)(1 + nbytes);
    memcpy(hdr, &len, 4);
    hdr[4] = (unsigned char)status;
    if (queue(cn, hdr, 5) != 0 || (nbytes && queue(cn, val, nbytes) != 0))
        drop(cn, "out of memory for a reply");
    else
        cn->deadline_ns = sh_sock_deadline(SEND_TIMEOUT_MS);
}

/* Answer every get waiting for this key. */
static void wake_waiters(sh_store_server *s, const kv *it)
{
    for (int i = 0; i < s->nconns; i++) {
        conn *w = s->conns[i];
        if (w->fd >= 0 && w->st == C_WAITING && strcmp(w->wait_key, it->key) == 0) {
            w->st = C_READY;
            reply(w, ST_OK, it->val, it->nbytes);
        }
    }
}

/* One whole request f[0..n). Returns -1 when it is malformed (the caller drops). */
static int serve(sh_store_server *s, conn *cn, const unsigned char *f, size_t n)
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
    if (strlen(key) != klen) return -1;
    const unsigned char *val = f + 7 + klen;
    size_t vlen = n - 7 - klen;
    s->last_request_ns = sh_now_ns();
    if (op == OP_SET || op == OP_ADD) {
        if (op == OP_ADD && vlen != 8) return -1;
        kv *it = find_or_add(s, key);
        if (!it) {
            reply(cn, ST_BAD, NULL, 0);
            return 0;
        }
        if (op == OP_SET) {
            void *copy = malloc(vlen ? vlen : 1);
            if (!copy) {
                reply(cn, ST_BAD, NULL, 0);
                return 0;
            }
            memcpy(copy, val, vlen);
            free(it->val);
            it->val = copy;
            it->nbytes = vlen;
        } else {
            int64_t cur = 0, d = 0;
            memcpy(&d, val, 8);
            if (it->val && it->nbytes == 8) memcpy(&cur, it->val, 8);
            if (!it->val || it->nbytes != 8) {
                void *v8 = malloc(8);
                if (!v8) {
                    reply(cn, ST_BAD, NULL, 0);
                    return 0;
                }
                free(it->val);
                it->val = v8;
                it->nbytes = 8;
            }
            cur = (int64_t)((uint64_t)cur + (uint64_t)d); /* wraps, never traps */
            memcpy(it->val, &cur, 8);
        }
        reply(cn, ST_OK, op == OP_ADD ? it->val : NULL, op == OP_ADD ? 8 : 0);
        wake_waiters(s, it);
        return 0;
    }
    if (op == OP_GET) {
        kv *it = find(s, key);
        if (it) {
            reply(cn, ST_OK, it->val, it->nbytes);
        } else if (tmo == 0) {
            reply(cn, ST_TIMEOUT, NULL, 0);
        } else {
            cn->st = C_WAITING;
            memcpy(cn->wait_key, key, (size_t)klen + 1);
            cn->wait_ns = sh_now_ns() + (uint64_t)tmo * 1000000ull;
        }
        return 0;
    }
    return -1;
}

/* Read what the connection has; act on each whole unit (handshake, request). */
static void on_readable(sh_store_server *s, conn *cn)
{
    for (;;) {
        /* How many bytes the current unit needs in total. */
        size_t need;
        if (cn->st == C_AUTH) {
            need = SH_AUTH_CLIENT_NBYTES;
        } else if (cn->in_nbytes < 4) {
            need = 4;
        } else {
            uint32_t len;
            memcpy(&len, cn->in, 4);
            need = 4 + (size_t)len;
        }
        if (cn->in_cap < need) {
            unsigned char *b = realloc(cn->in, need);
            if (!b) {
                drop(cn, "out of memory for a request");
                return;
            }
            cn->in = b;
            cn->in_cap = need;
        }
        ssize_t got = recv(cn->fd, cn->in + cn->in_nbytes, need - cn->in_nbytes, MSG_DONTWAIT);
        if (got == 0) {
            if (cn->st == C_AUTH)
                drop(cn, cn->in_nbytes ? "closed during the handshake"
                                       : "closed before the handshake (a port scan?)");
            else if (cn->in_nbytes)
                drop(cn, "closed in the middle of a request");
            else
                drop(cn, NULL); /* a rank that is done */
            return;
        }
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) drop(cn, strerror(errno));
            return;
        }
        if (cn->in_nbytes == 0 && cn->st != C_AUTH) cn->deadline_ns = sh_sock_deadline(FRAME_TIMEOUT_MS);
        cn->in_nbytes += (size_t)got;
        if (cn->st == C_AUTH && !sh_auth_client_greeting_ok(cn->in, cn->in_nbytes)) {
            drop(cn, "refused: not a shoal client (bad greeting)");
            return;
        }
        if (cn->st != C_AUTH && cn->in_nbytes == 4) {
            uint32_t len;
            memcpy(&len, cn->in, 4);
            if (len < 7 || len > MAX_FRAME) {
                char why[96];
                snprintf(why, sizeof why, "a request of %u bytes (allowed 7..%d)", len, MAX_FRAME);
                drop(cn, why);
                return;
            }
            continue; /* now read the body */
        }
        if (cn->in_nbytes < need) continue;
        /* A whole unit. */
        cn->in_nbytes = 0;
        cn->deadline_ns = 0;
        if (cn->st == C_AUTH) {
            unsigned char r[SH_AUTH_REPLY_NBYTES];
            if (sh_auth_server_check(s->key, cn->hello, cn->in, NULL, r) != SHOAL_OK) {
                char why[160];
                snprintf(why, sizeof why, "refused: %s (a process outside the job?)",
                         shoal_last_error_message());
                drop(cn, why);
                return;
            }
            cn->st = C_READY;
            if (queue(cn, r, sizeof r) != 0) {
                drop(cn, "out of memory");
                return;
            }
        } else if (serve(s, cn, cn->in + 4, need - 4) != 0) {
            drop(cn, "malformed request");
            return;
        }
        if (cn->in_cap > KEEP_BUF_NBYTES) {
            free(cn->in);
            cn->in = NULL;
            cn->in_cap = 0;
        }
        /* One request at a time: the next is read once the reply has gone. */
        if (cn->st == C_WAITING || cn->out_off < cn->out_nbytes) return;
    }
}

static void on_writable(conn *cn)
{
    while (cn->out_off < cn->out_nbytes) {
        ssize_t n = send(cn->fd, cn->out + cn->out_off, cn->out_nbytes - cn->out_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            cn->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        drop(cn, cn->st == C_AUTH ? NULL : "connection lost while replying");
        return;
    }
    cn->out_off = cn->out_nbytes = 0;
    if (cn->st != C_AUTH) cn->deadline_ns = 0;
    if (cn->out_cap > KEEP_BUF_NBYTES) {
        free(cn->out);
        cn->out = NULL;
        cn->out_cap = 0;
    }
}

static void conn_free(conn *cn)
{
    if (!cn) return;
    if (cn->fd >= 0) close(cn->fd);
    free(cn->in);
    free(cn->out);
    free(cn);
}

static void accept_new(sh_store_server *s)
{
    for (int k = 0; k < 64; k++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                SH_LOG_W("comm", "store: out of file descriptors; not accepting for 100 ms");
                s->listen_pause_until_ns = sh_now_ns() + 100000000ull;
            }
            return;
        }
        /* Too many half-open strangers: drop the oldest; a real rank finishes in microseconds. */
        int pending = 0, oldest = -1;
        for (int i = 0; i < s->nconns; i++)
            if (s->conns[i]->fd >= 0 && s->conns[i]->st == C_AUTH) {
                pending++;
                if (oldest < 0 || s->conns[i]->since_ns < s->conns[oldest]->since_ns) oldest = i;
            }
        if (pending >= MAX_PENDING_AUTH) drop(s->conns[oldest], "too many connections in the handshake; this is the oldest");
        conn *cn = NULL;
        if (s->nconns < MAX_CONNS) {
            if (s->nconns == s->conns_cap) {
                int cap = s->conns_cap ? 2 * s->conns_cap : 64;
                conn **cs = realloc(s->conns, sizeof *cs * (size_t)cap);
                struct pollfd *ps = realloc(s->pfds, sizeof *ps * (size_t)(cap + 2));
                if (cs) s->conns = cs;
                if (ps) s->pfds = ps;
                if (cs && ps) s->conns_cap = cap;
            }
            if (s->nconns < s->conns_cap) cn = calloc(1, sizeof *cn);
        }
        char who[64];
        sh_sock_peer_str(fd, who, sizeof who);
        if (!cn) {
            if (sh_sock_log_refusal())
                SH_LOG_W("comm", "store: too many connections (%d); refused %s", s->nconns, who);
            close(fd);
            continue;
        }
        sh_sock_tune(fd); /* replies go out at once (no Nagle wait behind the client's ACK) */
        cn->fd = fd;
        cn->st = C_AUTH;
        memcpy(cn->who, who, sizeof who);
        cn->since_ns = sh_now_ns();
        cn->deadline_ns = sh_sock_deadline(AUTH_TIMEOUT_MS);
        sh_auth_server_hello(cn->hello);
        s->conns[s->nconns++] = cn;
        if (queue(cn, cn->hello, sizeof cn->hello) != 0) drop(cn, "out of memory");
        else on_writable(cn);
    }
}

/* Stopping: 1 once no rank of the job is still talking to us. */
static int drained(const sh_store_server *s, uint64_t stop_ns, uint64_t now)
{
    if (now >= stop_ns + DRAIN_MAX_MS * 1000000ull) return 1;
    if (now >= s->last_request_ns + DRAIN_IDLE_MS * 1000000ull &&
        now >= stop_ns + DRAIN_IDLE_MS * 1000000ull)
        return 1;
    for (int i = 0; i < s->nconns; i++)
        if (s->conns[i]->fd >= 0 && s->conns[i]->st != C_AUTH) return 0;
    return 1;
}

static void *serve_main(void *arg)
{
    sh_store_server *s = arg;
    uint64_t stop_ns = 0; /* when sh_store_server_stop asked; 0: serving */
    for (;;) {
        uint64_t now = sh_now_ns();
        if (stop_ns && drained(s, stop_ns, now)) break;
        /* Deadlines first: gets that waited long enough, and stalled connections. */
        uint64_t next = now + 1000000000ull;
        for (int i = 0; i < s->nconns; i++) {
            conn *cn = s->conns[i];
            if (cn->fd < 0) continue;
            if (cn->st == C_WAITING && now >= cn->wait_ns) {
                cn->st = C_READY;
                reply(cn, ST_TIMEOUT, NULL, 0);
            }
            if (cn->deadline_ns && now >= cn->deadline_ns) {
                drop(cn, cn->st == C_AUTH ? "refused: no handshake within the deadline (a stalled stranger?)"
                         : cn->out_off < cn->out_nbytes ? "stopped reading replies"
                                                        : "sent half a request and stalled");
                continue;
            }
            if (cn->st == C_WAITING && cn->wait_ns < next) next = cn->wait_ns;
            if (cn->deadline_ns && cn->deadline_ns < next) next = cn->deadline_ns;
        }
        /* Compact away dropped connections. */
        int live = 0;
        for (int i = 0; i < s->nconns; i++) {
            if (s->conns[i]->fd < 0) conn_free(s->conns[i]);
            else s->conns[live++] = s->conns[i];
        }
        s->nconns = live;
        if (stop_ns && next > now + 50000000ull) next = now + 50000000ull;
        struct pollfd *p = s->pfds;
        p[0] = (struct pollfd){stop_ns ? -1 : s->wake[0], POLLIN, 0};
        p[1] = (struct pollfd){now >= s->listen_pause_until_ns ? s->listen_fd : -1, POLLIN, 0};
        for (int i = 0; i < s->nconns; i++) {
            conn *cn = s->conns[i];
            short ev = POLLRDHUP; /* a waiting get still notices its client leaving */
            if (cn->out_off < cn->out_nbytes) ev |= POLLOUT;
            else if (cn->st != C_WAITING) ev |= POLLIN;
            p[2 + i] = (struct pollfd){cn->fd, ev, 0};
        }
        int wait_ms = (int)((next > now ? next - now : 0) / 1000000ull) + 1;
        int n = poll(p, (nfds_t)(2 + s->nconns), wait_ms);
        if (n < 0 && errno != EINTR) {
            SH_LOG_E("comm", "store: poll failed: %s; the store stops", strerror(errno));
            break;
        }
        if (n <= 0) continue;
        if (p[0].revents) { /* sh_store_server_stop: drain, then go */
            stop_ns = sh_now_ns();
            continue;
        }
        int nold = s->nconns;
        for (int i = 0; i < nold; i++) {
            conn *cn = s->conns[i];
            short re = p[2 + i].revents;
            if (cn->fd < 0 || !re) continue;
            if (re & POLLOUT) on_writable(cn);
            if (cn->fd >= 0 && (re & (POLLIN | POLLERR | POLLHUP)) && cn->st != C_WAITING) on_readable(s, cn);
            else if (cn->fd >= 0 && (re & (POLLRDHUP | POLLERR | POLLHUP)) && cn->st == C_WAITING)
                drop(cn, NULL); /* the client left while its get waited */
            if (cn->fd >= 0 && cn->out_off < cn->out_nbytes) on_writable(cn);
        }
        if (p[1].fd >= 0 && (p[1].revents & POLLIN)) accept_new(s);
    }
    return NULL;
}

shoal_result sh_store_server_start(const char *addr, int port, const char *key,
                                   sh_store_server **out)
{
    *out = NULL;
    sh_store_server *s = calloc(1, sizeof *s);
    if (!s) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for the store");
    s->wake[0] = s->wake[1] = -1;
    s->key = strdup(key);
    s->pfds = malloc(sizeof *s->pfds * 2);
    if (!s->key || !s->pfds) {
        free(s->key);
        free(s->pfds);
        free(s);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for the store");
    }
    shoal_result rc = sh_sock_listen(addr, port, &s->listen_fd, &s->port);
    if (rc != SHOAL_OK) {
        free(s->key);
        free(s->pfds);
        free(s);
        sh_err_prefix("rank 0's rendezvous store: ");
        return rc;
    }
    if (pipe2(s->wake, O_CLOEXEC) < 0 || pthread_create(&s->thread, NULL, serve_main, s) != 0) {
        int e = errno;
        close(s->listen_fd);
        if (s->wake[0] >= 0) close(s->wake[0]);
        if (s->wake[1] >= 0) close(s->wake[1]);
        free(s->key);
        free(s->pfds);
        free(s);
        return SH_FAIL(SHOAL_ERR_IO, "cannot start rank 0's store thread: %s", strerror(e));
    }
    *out = s;
    return SHOAL_OK;
}

int sh_store_server_port(const sh_store_server *s) { return s->port; }

void sh_store_server_stop(sh_store_server *s)
{
    if (!s) return;
    while (write(s->wake[1], "x", 1) < 0 && errno == EINTR) {
    }
    pthread_join(s->thread, NULL);
    for (int i = 0; i < s->nconns; i++) conn_free(s->conns[i]);
    free(s->conns);
    free(s->pfds);
    close(s->listen_fd);
    close(s->wake[0]);
    close(s->wake[1]);
    for (int b = 0; b < NBUCKETS; b++)
        for (kv *i = s->buckets[b], *n; i; i = n) {
            n = i->next;
            free(i->key);
            free(i->val);
            free(i);
        }
    free(s->key);
    free(s);
}

/* ---- client ----
 * A small pool of connections, one per request in flight: a thread whose get waits for a
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

/* Connect and prove the key. */
static shoal_result open_conn(const char *addr, int port, const char *key, int timeout_ms, int *fd_out)
{
    *fd_out = -1;
    uint64_t dl = sh_sock_deadline(timeout_ms);
    int fd = -1;
    shoal_result rc = sh_sock_connect(addr, port, dl, &fd);
    if (rc != SHOAL_OK) {
        sh_err_prefix("rank 0's rendezvous store at %s:%d (SHOAL_MASTER_ADDR/SHOAL_MASTER_PORT): ",
                      addr, port);
        return rc;
    }
    char peer[400];
    snprintf(peer, sizeof peer, "rank 0's store at %s:%d", addr, port);
    rc = sh_auth_client(fd, key, "store", peer, dl);
    if (rc != SHOAL_OK) {
        close(fd);
        if (rc == SHOAL_ERR_TIMEOUT)
            sh_err_prefix("%s accepted the connection but did not answer the handshake: ", peer);
        return rc;
    }
    *fd_out = fd;
    return SHOAL_OK;
}

shoal_result sh_store_connect(const char *addr, int port, const char *key, int timeout_ms,
                              sh_store **out)
{
    *out = NULL;
    int fd = -1;
    SH_TRY(open_conn(addr, port, key, timeout_ms, &fd));
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
            shoal_result rc = open_conn(s->host, s->port, s->key, RECONNECT_TIMEOUT_MS, &fd);
            pthread_mutex_lock(&s->mu);
            s->fd[i] = fd;
            if (rc != SHOAL_OK) {
                s->busy[i] = 0;
                pthread_cond_signal(&s->idle);
            }
            pthread_mutex_unlock(&s->mu);
            if (rc != SHOAL_OK)
                return SH_FAIL(SHOAL_ERR_PEER, "rank 0's store at %s cannot be reached any more "
                               "(did rank 0 end or die?): %s", s->where, shoal_last_error_message());
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
    if (klen == 0 || klen >= MAX_KEY || vlen > SH_STORE_MAX_VALUE_NBYTES)
        return SH_FAIL(SHOAL_ERR_INVALID, "store: key \"%.40s\" (%zu bytes) or its value (%zu bytes) "
                       "is empty or too long (limits %d and %d bytes)", key, klen, vlen, MAX_KEY - 1,
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
    unsigned char st = ST_BAD;
    if (rc == SHOAL_OK) rc = sh_sock_read_all(fd, &rlen, 4, dl);
    if (rc == SHOAL_OK && (rlen < 1 || rlen > SH_STORE_MAX_VALUE_NBYTES + 1))
        rc = SH_FAIL(SHOAL_ERR_PEER, "bad reply from the store");
    if (rc == SHOAL_OK) rc = sh_sock_read_all(fd, &st, 1, dl);
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
