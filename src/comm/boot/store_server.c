/* store_server.c — rank 0's rendezvous store (as torch.distributed's TCPStore): one server
 * thread polls every connection at once, each with its own buffers, size cap and deadlines,
 * so a stranger that stalls, floods or sends garbage is dropped without slowing anyone else.
 * Connections prove the job key first (sock.c's handshake, run here as a state machine).
 * Not here: the client (store_client.c), the handshake's cryptography (sock.c), key naming.
 * Proved by tests/comm/test_store.c and tests/fuzz/fuzz_store.c. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/interrupt.h"
#include "comm/boot/sock.h"
#include "comm/boot/store_wire.h"

enum {
    MAX_CONNS = 4096,         /* every connection, job's and strangers' */
    MAX_PENDING_AUTH = 256,   /* still in the handshake; the oldest is dropped beyond this */
    MAX_PENDING_PER_SOURCE = 128, /* ... and from one address beyond this, that address's oldest */
    MIN_AGE_MS = 100,         /* a handshake this young is never pushed out */
    AUTH_TIMEOUT_MS = 5000,   /* a real rank answers the hello in microseconds */
    BUSY_PENDING = 32,        /* from this many handshakes at once, new ones get a shorter deadline */
    BUSY_AUTH_TIMEOUT_MS = 1000,
    ACCEPT_ROUND = 128,       /* connections taken from the queue between two looks at the others */
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
    char wait_key[SH_STORE_MAX_KEY]; /* C_WAITING: the key a get waits for, until wait_ns */
    uint64_t wait_ns;
} conn;

/* A rank's claim: the process that holds it. */
typedef struct {
    uint64_t id; /* 0: not claimed */
    char who[SH_STORE_CLAIM_WHO_NBYTES];
} claim;

struct sh_store_server {
    int listen_fd, port;
    int world, strict;    /* claims: the job's size; a late duplicate stops the job too */
    claim *claims;        /* [world] */
    int nclaimed;
    char stopped_msg[640];
    _Atomic(const char *) stopped; /* stopped_msg once the job is stopped; read by rank 0's comm */
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
            reply(w, SH_STORE_ST_OK, it->val, it->nbytes);
        }
    }
}

/* Stop the job: every waiting get and every later request gets the reason. */
static void stop_job(sh_store_server *s, const char *why)
{
    if (atomic_load(&s->stopped)) return;
    snprintf(s->stopped_msg, sizeof s->stopped_msg, "%s", why);
    atomic_store(&s->stopped, s->stopped_msg);
    SH_LOG_E("comm", "store: the job is stopped: %s", why);
    for (int i = 0; i < s->nconns; i++) {
        conn *w = s->conns[i];
        if (w->fd >= 0 && w->st == C_WAITING) {
            w->st = C_READY;
            reply(w, SH_STORE_ST_STOPPED, s->stopped_msg, strlen(s->stopped_msg));
        }
    }
}

/* A rank's claim: its number, the job's size, the process. Refused when either cannot be;
 * then the job stops too, unless every rank had come and the key is secret. */
static void serve_claim(sh_store_server *s, conn *cn, const unsigned char *v, size_t vlen)
{
    int32_t rank, world;
    uint64_t id;
    memcpy(&rank, v, 4);
    memcpy(&world, v + 4, 4);
    memcpy(&id, v + 8, 8);
    char who[SH_STORE_CLAIM_WHO_NBYTES], why[600];
    size_t wn = vlen - SH_STORE_CLAIM_HDR_NBYTES < sizeof who - 1 ? vlen - SH_STORE_CLAIM_HDR_NBYTES : sizeof who - 1;
    memcpy(who, v + SH_STORE_CLAIM_HDR_NBYTES, wn);
    who[wn] = 0;
    if (world != s->world || rank < 0 || rank >= s->world) {
        snprintf(why, sizeof why, "rank %d (%s) was started for a job of %d ranks, but rank 0 (%s) for %d: every "
                 "rank must be started with the same world size (shoal launch -n, --nnodes; SHOAL_WORLD_SIZE)",
                 rank, who, world, s->claims[0].id ? s->claims[0].who : "the store's", s->world);
    } else if (s->claims[rank].id && s->claims[rank].id != id) {
        snprintf(why, sizeof why, "rank %d was claimed twice: by %s and by %s; each rank must be started once "
                 "(a duplicate --node-rank, or a process outside the job?)", rank, s->claims[rank].who, who);
    } else {
        if (!s->claims[rank].id) {
            s->claims[rank].id = id;
            snprintf(s->claims[rank].who, sizeof s->claims[rank].who, "%s", who);
            s->nclaimed++;
        }
        reply(cn, SH_STORE_ST_OK, NULL, 0);
        return;
    }
    reply(cn, SH_STORE_ST_REFUSED, why, strlen(why));
    if (s->nclaimed < s->world || s->strict) stop_job(s, why);
    else SH_LOG_W("comm", "store: refused a claim: %s", why);
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
    if (klen == 0 || klen >= SH_STORE_MAX_KEY || (size_t)7 + klen > n) return -1;
    char key[SH_STORE_MAX_KEY];
    memcpy(key, f + 7, klen);
    key[klen] = 0;
    if (strlen(key) != klen) return -1;
    const unsigned char *val = f + 7 + klen;
    size_t vlen = n - 7 - klen;
    s->last_request_ns = sh_now_ns();
    const char *stopped = atomic_load(&s->stopped);
    if (stopped) {
        reply(cn, SH_STORE_ST_STOPPED, stopped, strlen(stopped));
        return 0;
    }
    if (op == SH_STORE_OP_CLAIM) {
        if (vlen < SH_STORE_CLAIM_HDR_NBYTES || s->world <= 0) return -1;
        serve_claim(s, cn, val, vlen);
        return 0;
    }
    if (op == SH_STORE_OP_SET || op == SH_STORE_OP_ADD) {
        if (op == SH_STORE_OP_ADD && vlen != 8) return -1;
        kv *it = find_or_add(s, key);
        if (!it) {
            reply(cn, SH_STORE_ST_BAD, NULL, 0);
            return 0;
        }
        if (op == SH_STORE_OP_SET) {
            void *copy = malloc(vlen ? vlen : 1);
            if (!copy) {
                reply(cn, SH_STORE_ST_BAD, NULL, 0);
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
                    reply(cn, SH_STORE_ST_BAD, NULL, 0);
                    return 0;
                }
                free(it->val);
                it->val = v8;
                it->nbytes = 8;
            }
            cur = (int64_t)((uint64_t)cur + (uint64_t)d); /* wraps, never traps */
            memcpy(it->val, &cur, 8);
        }
        reply(cn, SH_STORE_ST_OK, op == SH_STORE_OP_ADD ? it->val : NULL, op == SH_STORE_OP_ADD ? 8 : 0);
        wake_waiters(s, it);
        return 0;
    }
    if (op == SH_STORE_OP_GET) {
        kv *it = find(s, key);
        if (it) {
            reply(cn, SH_STORE_ST_OK, it->val, it->nbytes);
        } else if (tmo == 0) {
            reply(cn, SH_STORE_ST_TIMEOUT, NULL, 0);
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
            if (len < 7 || len > SH_STORE_MAX_FRAME) {
                char why[96];
                snprintf(why, sizeof why, "a request of %u bytes (allowed 7..%d)", len, SH_STORE_MAX_FRAME);
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
            if (sh_auth_server_check(s->key, cn->hello, cn->in, NULL, r, NULL) != SHOAL_OK) {
                char why[160];
                sh_auth_refuse(cn->fd);
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

/* The address part of "a.b.c.d:port" / "[v6]:port". */
static size_t source_len(const char *who)
{
    const char *colon = strrchr(who, ':');
    return colon ? (size_t)(colon - who) : strlen(who);
}

/* Make room for one more handshake from who: beyond MAX_PENDING_PER_SOURCE from its address
 * that address's oldest goes (so a flooding host never pushes out another host's ranks),
 * beyond MAX_PENDING_AUTH the oldest of all. The one to go first gets a last look: a rank
 * whose answer already waits in its socket is served, not dropped. A handshake younger
 * than MIN_AGE_MS is never pushed out (a rank on a busy machine may take a moment to
 * answer): then the newcomer goes instead (its client tries again). conns[] is in accept
 * order, so the first match is the oldest. Returns the number pending, or -1 when the
 * newcomer must go. */
static int shed(sh_store_server *s, const char *who)
{
    size_t n = source_len(who);
    uint64_t young = sh_now_ns() - MIN_AGE_MS * 1000000ull;
    for (;;) {
        int pending = 0, same = 0, oldest = -1, oldest_same = -1;
        for (int i = 0; i < s->nconns; i++) {
            conn *cn = s->conns[i];
            if (cn->fd < 0 || cn->st != C_AUTH) continue;
            pending++;
            if (oldest < 0) oldest = i;
            if (source_len(cn->who) == n && !memcmp(cn->who, who, n)) {
                same++;
                if (oldest_same < 0) oldest_same = i;
            }
        }
        int victim = same >= MAX_PENDING_PER_SOURCE ? oldest_same : pending >= MAX_PENDING_AUTH ? oldest : -1;
        if (victim < 0) return pending;
        conn *cn = s->conns[victim];
        on_readable(s, cn); /* its last look: a whole answer makes it a rank, junk is dropped */
        if (cn->fd >= 0 && cn->out_off < cn->out_nbytes) on_writable(cn);
        if (cn->fd < 0 || cn->st != C_AUTH) continue; /* room made */
        if (cn->since_ns > young) return -1;
        drop(cn, victim == oldest_same ? "too many handshakes at once from its address; this is the oldest"
                                       : "too many connections in the handshake; this is the oldest");
    }
}

/* Take the connections the queue holds (ACCEPT_ROUND at a time, then the others are looked
 * at), so that a flood does not fill it; each gets the hello at once. */
static void accept_new(sh_store_server *s)
{
    for (int k = 0; k < ACCEPT_ROUND; k++) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                SH_LOG_W("comm", "store: out of file descriptors; not accepting for 100 ms");
                s->listen_pause_until_ns = sh_now_ns() + 100000000ull;
            }
            return;
        }
        char who[64];
        sh_sock_peer_str(fd, who, sizeof who);
        int pending = shed(s, who);
        if (pending < 0) { /* a burst of strangers younger than any rank needs: this one waits its turn */
            if (sh_sock_log_refusal())
                SH_LOG_W("comm", "store: too many handshakes at once; refused %s for now", who);
            close(fd);
            continue;
        }
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
        /* Under a flood a stalled stranger holds its place for less time. */
        cn->deadline_ns = sh_sock_deadline(pending >= BUSY_PENDING ? BUSY_AUTH_TIMEOUT_MS : AUTH_TIMEOUT_MS);
        s->conns[s->nconns++] = cn;
        if (sh_auth_server_hello(cn->hello) != SHOAL_OK) drop(cn, shoal_last_error_message());
        else if (queue(cn, cn->hello, sizeof cn->hello) != 0) drop(cn, "out of memory");
        else on_writable(cn);
    }
}

/* Stopping: 1 once no rank of the job is still talking to us. */
static int drained(const sh_store_server *s, uint64_t stop_ns, uint64_t now)
{
    if (now >= stop_ns + DRAIN_MAX_MS * 1000000ull || sh_interrupted()) return 1; /* a signal: go now */
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
                reply(cn, SH_STORE_ST_TIMEOUT, NULL, 0);
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

shoal_result sh_store_server_start(const char *addr, int port, const char *key, int world, int strict,
                                   sh_store_server **out)
{
    *out = NULL;
    sh_store_server *s = calloc(1, sizeof *s);
    if (!s) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for the store");
    s->wake[0] = s->wake[1] = -1;
    s->key = strdup(key);
    s->pfds = malloc(sizeof *s->pfds * 2);
    s->world = world > 0 ? world : 0;
    s->strict = strict;
    s->claims = calloc((size_t)(s->world > 0 ? s->world : 1), sizeof *s->claims);
    if (!s->key || !s->pfds || !s->claims) {
        free(s->key);
        free(s->pfds);
        free(s->claims);
        free(s);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for the store");
    }
    shoal_result rc = sh_sock_listen(addr, port, &s->listen_fd, &s->port);
    if (rc != SHOAL_OK) {
        free(s->key);
        free(s->pfds);
        free(s->claims);
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
        free(s->claims);
        free(s);
        return SH_FAIL(SHOAL_ERR_IO, "cannot start rank 0's store thread: %s", strerror(e));
    }
    *out = s;
    return SHOAL_OK;
}

int sh_store_server_port(const sh_store_server *s) { return s->port; }

const char *sh_store_server_stopped(const sh_store_server *s) { return s ? atomic_load(&s->stopped) : NULL; }

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
    free(s->claims);
    free(s->key);
    free(s);
}
