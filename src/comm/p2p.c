/* p2p.c — tagged messages: one progress thread per communicator moves sends out and
 * incoming frames in, matching them to posted receives in order. A frame whose header
 * finds a matching receive posted lands straight in that receive's buffer (no copy, no
 * allocation); others are kept in a buffer of their own until a receive asks. Send copies
 * reuse the buffers of finished sends.
 * Frame: magic u32, tag i32, dtype u32, pad u32, nbytes u64; then the payload.
 * Not here: collectives (coll/), argument checks (comm.c).
 * Proved by tests/comm/test_comm.c. */
#include "comm/p2p.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"

enum { FRAME_MAGIC = 0x73503250 /* "sP2P" */ };
typedef struct {
    uint32_t magic;
    int32_t tag;
    uint32_t dtype, pad;
    uint64_t nbytes;
} frame;

typedef enum { OP_SEND, OP_RECV } op_kind;

struct sh_p2p_op {
    op_kind kind;
    shoal_comm *c;
    int peer, tag;
    shoal_dtype dt;
    unsigned char *buf;   /* send: our copy of frame + payload; recv: the caller's */
    size_t nbytes;        /* send: frame + payload; recv: capacity */
    size_t cap_nbytes;    /* send: room in buf */
    size_t done;          /* send: bytes out */
    uint64_t deadline_ns; /* recv: 0 = the communicator's no-progress rule */
    int finished;
    int filling;          /* recv: a message is landing straight in buf (inbound.into) */
    shoal_result rc;
    char msg[512];
    int got_peer;
    size_t got_nbytes;
    struct sh_p2p_op *next;
};

enum { SPARES = 4 };                         /* finished sends' buffers kept for reuse */
#define SPARE_MAX_NBYTES ((size_t)64 << 20) /* larger ones go back to the system */

typedef struct msg {
    int peer, tag;
    shoal_dtype dt;
    unsigned char *data;
    size_t nbytes;
    struct msg *next;
} msg;

typedef struct {
    frame hdr;
    size_t hdr_done;
    unsigned char *data;  /* our buffer, or into->buf */
    sh_p2p_op *into;      /* the posted receive this frame lands in, or NULL */
    size_t done;
    int dead;
    char why[600];        /* dead: what ended the link, naming the peer */
    int oom;              /* a frame could not be moved out of a receive that gave up */
} inbound;

struct sh_p2p {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t thread;
    int running, stopping;
    sh_p2p_op *sends, *sends_tail; /* FIFO per communicator, sent in order per peer */
    sh_p2p_op *recvs, *recvs_tail; /* posted, in order */
    msg *unexpected, *unexpected_tail;
    inbound *in;                   /* [world] */
    uint64_t last_progress_ns;
    unsigned char *spare[SPARES];  /* buffers of finished sends, or NULL */
    size_t spare_nbytes[SPARES];
};

/* The smallest kept buffer with room for nbytes, taken; NULL if none. Lock held. */
static unsigned char *spare_take(struct sh_p2p *s, size_t nbytes, size_t *cap_nbytes)
{
    int best = -1;
    for (int i = 0; i < SPARES; i++)
        if (s->spare[i] && s->spare_nbytes[i] >= nbytes && (best < 0 || s->spare_nbytes[i] < s->spare_nbytes[best]))
            best = i;
    if (best < 0) return NULL;
    unsigned char *b = s->spare[best];
    *cap_nbytes = s->spare_nbytes[best];
    s->spare[best] = NULL;
    return b;
}

/* Keep a finished send's buffer in place of an empty or smaller one, else free it. Lock held. */
static void spare_give(struct sh_p2p *s, unsigned char *b, size_t cap_nbytes)
{
    int slot = -1;
    for (int i = 0; i < SPARES; i++) {
        if (!s->spare[i]) {
            slot = i;
            break;
        }
        if (s->spare_nbytes[i] < cap_nbytes && (slot < 0 || s->spare_nbytes[i] < s->spare_nbytes[slot])) slot = i;
    }
    if (slot < 0 || cap_nbytes > SPARE_MAX_NBYTES) {
        free(b);
        return;
    }
    free(s->spare[slot]);
    s->spare[slot] = b;
    s->spare_nbytes[slot] = cap_nbytes;
}

static void finish(sh_p2p_op *op, shoal_result rc, const char *m)
{
    op->rc = rc;
    if (m) snprintf(op->msg, sizeof op->msg, "%s", m);
    op->finished = 1;
}

static int matches(const sh_p2p_op *r, int peer, int tag)
{
    return r->tag == tag && (r->peer < 0 || r->peer == peer);
}

static void deliver(sh_p2p_op *r, int peer, shoal_dtype dt, const unsigned char *data, size_t n)
{
    r->got_peer = peer;
    r->got_nbytes = n;
    if (n > r->nbytes) {
        char m[256];
        snprintf(m, sizeof m, "recv: rank %d sent %zu bytes with tag %d but the receive holds only %zu",
                 peer, n, r->tag, r->nbytes);
        finish(r, SHOAL_ERR_MISMATCH, m);
        return;
    }
    if (n) memcpy(r->buf, data, n);
    (void)dt;
    finish(r, SHOAL_OK, NULL);
}

/* A complete frame arrived from peer: hand it to the first posted receive that matches,
 * or keep it. Called with the lock held. */
static void arrived(struct sh_p2p *s, int peer, int tag, shoal_dtype dt, unsigned char *data, size_t n)
{
    sh_p2p_op **pp = &s->recvs, *prev = NULL;
    for (sh_p2p_op *r = s->recvs; r; prev = r, pp = &r->next, r = r->next) {
        if (r->filling || !matches(r, peer, tag)) continue;
        *pp = r->next;
        if (s->recvs_tail == r) s->recvs_tail = prev;
        deliver(r, peer, dt, data, n);
        free(data);
        pthread_cond_broadcast(&s->done);
        return;
    }
    msg *m = malloc(sizeof *m);
    if (!m) {
        free(data);
        return;
    }
    *m = (msg){peer, tag, dt, data, n, NULL};
    if (s->unexpected_tail) s->unexpected_tail->next = m;
    else s->unexpected = m;
    s->unexpected_tail = m;
}

/* The first posted receive that a frame from peer with this header would go to, when its
 * payload fits: the frame lands in it directly. NULL: keep the frame (too long for the
 * receive, which then fails as a mismatch on arrival, or nobody waits). Lock held. */
static sh_p2p_op *claim(struct sh_p2p *s, int peer, const frame *h)
{
    for (sh_p2p_op *r = s->recvs; r; r = r->next) {
        if (r->filling || !matches(r, peer, h->tag)) continue;
        if (h->nbytes > r->nbytes) return NULL;
        r->filling = 1;
        return r;
    }
    return NULL;
}

/* Receive r gives up (deadline) while a frame lands in it: the bytes so far move to a
 * buffer of the frame's own, which goes on as an unclaimed frame. Lock held. */
static void unclaim(struct sh_p2p *s, shoal_comm *c, sh_p2p_op *r)
{
    r->filling = 0;
    for (int p = 0; p < c->world; p++) {
        inbound *in = &s->in[p];
        if (in->into != r) continue;
        in->into = NULL;
        in->data = malloc(in->hdr.nbytes ? in->hdr.nbytes : 1);
        if (in->data) memcpy(in->data, r->buf, in->done);
        else in->oom = 1; /* pump fails the peer: the frame has nowhere to go */
        return;
    }
}

/* The oldest kept message that receive r matches, taken out of the list; NULL if none. */
static msg *take_unexpected(struct sh_p2p *s, const sh_p2p_op *r)
{
    msg *prev = NULL;
    for (msg *m = s->unexpected; m; prev = m, m = m->next) {
        if (m->tag != r->tag || (r->peer >= 0 && m->peer != r->peer)) continue;
        if (prev) prev->next = m->next;
        else s->unexpected = m->next;
        if (s->unexpected_tail == m) s->unexpected_tail = prev;
        return m;
    }
    return NULL;
}

/* Kept message m (taken out of the list) to receive r; m is freed. */
static void deliver_msg(sh_p2p_op *r, msg *m)
{
    deliver(r, m->peer, m->dt, m->data, m->nbytes);
    free(m->data);
    free(m);
}

/* Give receive r the oldest kept message it matches; 1 if there was one. Lock held. */
static int deliver_kept(struct sh_p2p *s, sh_p2p_op *r)
{
    msg *m = take_unexpected(s, r);
    if (m) deliver_msg(r, m);
    return m != NULL;
}

/* Take posted receive r out of the list. Lock held. */
static void unpost(struct sh_p2p *s, sh_p2p_op *r)
{
    sh_p2p_op *prev = NULL;
    for (sh_p2p_op *q = s->recvs; q != r; q = q->next) {
        SH_ASSERT(q != NULL && "the receive is posted");
        prev = q;
    }
    if (prev) prev->next = r->next;
    else s->recvs = r->next;
    if (s->recvs_tail == r) s->recvs_tail = prev;
}

static void fail_peer(struct sh_p2p *s, shoal_comm *c, int peer, const char *why)
{
    char pb[128], m[512];
    sh_comm_peer_name(c, peer, pb, sizeof pb);
    snprintf(m, sizeof m, "point-to-point with %s: %s", pb, why);
    s->in[peer].dead = 1;
    snprintf(s->in[peer].why, sizeof s->in[peer].why, "%s is gone: %s", pb, why);
    sh_p2p_op *freed = s->in[peer].into; /* its half frame is dropped; the receive waits on */
    if (freed) {
        freed->filling = 0;
        s->in[peer].into = NULL;
        s->in[peer].data = NULL;
    }
    sh_p2p_op *prev = NULL;
    for (sh_p2p_op *r = s->recvs, *n; r; r = n) {
        n = r->next;
        if (r->peer == peer) {
            if (prev) prev->next = n;
            else s->recvs = n;
            if (s->recvs_tail == r) s->recvs_tail = prev;
            finish(r, SHOAL_ERR_PEER, m);
        } else {
            prev = r;
        }
    }
    prev = NULL;
    for (sh_p2p_op *o = s->sends, *n; o; o = n) {
        n = o->next;
        if (o->peer == peer) {
            if (prev) prev->next = n;
            else s->sends = n;
            if (s->sends_tail == o) s->sends_tail = prev;
            finish(o, SHOAL_ERR_PEER, m);
        } else {
            prev = o;
        }
    }
    /* A receive from any rank that the dead peer was filling may have been passed over by
     * other ranks' messages meanwhile: give it the oldest. */
    msg *k = freed && !freed->finished ? take_unexpected(s, freed) : NULL;
    if (k) {
        unpost(s, freed);
        deliver_msg(freed, k);
    }
    pthread_cond_broadcast(&s->done);
}

/* Move what can move now; returns bytes moved. Lock held. */
static size_t pump(struct sh_p2p *s, shoal_comm *c)
{
    size_t moved = 0;
    for (int p = 0; p < c->world; p++) {
        sh_link *l = c->p2p[p];
        inbound *in = &s->in[p];
        if (!l || in->dead) continue;
        if (in->oom) {
            fail_peer(s, c, p, "message too large for memory");
            continue;
        }
        for (int rounds = 0; rounds < 64; rounds++) {
            if (in->hdr_done < sizeof in->hdr) {
                ssize_t n = l->ops->recv_some(l, (unsigned char *)&in->hdr + in->hdr_done,
                                              sizeof in->hdr - in->hdr_done);
                if (n < 0) {
                    fail_peer(s, c, p, shoal_last_error_message());
                    break;
                }
                if (n == 0) break;
                moved += (size_t)n;
                in->hdr_done += (size_t)n;
                if (in->hdr_done < sizeof in->hdr) break;
                if (in->hdr.magic != FRAME_MAGIC || in->hdr.nbytes > ((uint64_t)1 << 40) ||
                    in->hdr.tag < 0) {
                    fail_peer(s, c, p, "sent a malformed message header");
                    l->ops->abort(l, "malformed message");
                    break;
                }
                in->done = 0;
                in->into = claim(s, p, &in->hdr);
                in->data = in->into ? in->into->buf : malloc(in->hdr.nbytes ? in->hdr.nbytes : 1);
                if (!in->data) {
                    fail_peer(s, c, p, "message too large for memory");
                    break;
                }
            }
            if (in->done < in->hdr.nbytes) {
                ssize_t n = l->ops->recv_some(l, in->data + in->done, in->hdr.nbytes - in->done);
                if (n < 0) {
                    fail_peer(s, c, p, shoal_last_error_message());
                    break;
                }
                moved += (size_t)n;
                in->done += (size_t)n;
                if (in->done < in->hdr.nbytes) break;
            }
            if (in->into) { /* landed in place: the receive is done */
                sh_p2p_op *r = in->into;
                unpost(s, r);
                r->filling = 0;
                r->got_peer = p;
                r->got_nbytes = in->hdr.nbytes;
                finish(r, SHOAL_OK, NULL);
                pthread_cond_broadcast(&s->done);
                in->into = NULL;
            } else {
                arrived(s, p, in->hdr.tag, (shoal_dtype)in->hdr.dtype, in->data, in->hdr.nbytes);
            }
            in->data = NULL;
            in->hdr_done = 0;
        }
    }
    /* Sends: the first pending send to each peer moves (order per peer kept). */
    unsigned char busy[1024] = {0};
    sh_p2p_op *prev = NULL;
    for (sh_p2p_op *o = s->sends, *n; o; o = n) {
        n = o->next;
        int p = o->peer;
        if (p < 1024 && busy[p]) {
            prev = o;
            continue;
        }
        if (p < 1024) busy[p] = 1;
        sh_link *l = c->p2p[p];
        ssize_t k = l->ops->send_some(l, o->buf + o->done, o->nbytes - o->done);
        if (k < 0) {
            fail_peer(s, c, p, shoal_last_error_message());
            return moved + 1; /* lists changed: start over next time */
        }
        o->done += (size_t)k;
        moved += (size_t)k;
        if (o->done == o->nbytes) {
            if (prev) prev->next = n;
            else s->sends = n;
            if (s->sends_tail == o) s->sends_tail = prev;
            finish(o, SHOAL_OK, NULL);
            pthread_cond_broadcast(&s->done);
        } else {
            prev = o;
        }
    }
    return moved;
}

static void expire(struct sh_p2p *s, shoal_comm *c, uint64_t now)
{
    sh_p2p_op *prev = NULL;
    for (sh_p2p_op *r = s->recvs, *n; r; r = n) {
        n = r->next;
        if (r->deadline_ns && now > r->deadline_ns) {
            if (prev) prev->next = n;
            else s->recvs = n;
            if (s->recvs_tail == r) s->recvs_tail = prev;
            int got = 0;
            if (r->filling) { /* its frame goes on alone; one that passed it over is due */
                unclaim(s, c, r);
                got = deliver_kept(s, r);
            }
            if (!got) {
                char m[256];
                snprintf(m, sizeof m, "recv: no message with tag %d arrived in time", r->tag);
                finish(r, SHOAL_ERR_TIMEOUT, m);
            }
            pthread_cond_broadcast(&s->done);
        } else {
            prev = r;
        }
    }
    uint64_t limit = (uint64_t)c->timeout_ms * 1000000ull;
    int waiting = s->sends != NULL;
    for (sh_p2p_op *r = s->recvs; r; r = r->next)
        if (!r->deadline_ns) waiting = 1;
    if (!waiting || now - s->last_progress_ns < limit) return;
    /* Nothing moved for the whole deadline while sends or plain receives wait. */
    while (s->sends) {
        sh_p2p_op *o = s->sends;
        s->sends = o->next;
        char pb[128], m[512];
        snprintf(m, sizeof m, "send to %s: no progress for %d ms (peer dead, frozen or not receiving)",
                 sh_comm_peer_name(c, o->peer, pb, sizeof pb), c->timeout_ms);
        finish(o, SHOAL_ERR_TIMEOUT, m);
    }
    s->sends_tail = NULL;
    prev = NULL;
    for (sh_p2p_op *r = s->recvs, *n; r; r = n) {
        n = r->next;
        if (!r->deadline_ns) {
            if (prev) prev->next = n;
            else s->recvs = n;
            if (s->recvs_tail == r) s->recvs_tail = prev;
            if (r->filling) unclaim(s, c, r);
            char pb[128], m[512];
            if (r->peer >= 0) sh_comm_peer_name(c, r->peer, pb, sizeof pb);
            else snprintf(pb, sizeof pb, "any rank");
            snprintf(m, sizeof m, "recv from %s (tag %d): nothing for %d ms (peer dead, frozen or not sending)",
                     pb, r->tag, c->timeout_ms);
            finish(r, SHOAL_ERR_TIMEOUT, m);
        } else {
            prev = r;
        }
    }
    pthread_cond_broadcast(&s->done);
}

static void *progress_main(void *arg)
{
    shoal_comm *c = arg;
    struct sh_p2p *s = c->p2p_state;
    pthread_mutex_lock(&s->mu);
    /* The no-progress rule counts from now: the first operations may be posted before
     * this thread first looks (it then never waits for work, which also sets it). */
    uint64_t idle_since = s->last_progress_ns = sh_now_ns();
    while (!s->stopping) {
        if (!s->sends && !s->recvs) {
            pthread_cond_wait(&s->work, &s->mu);
            s->last_progress_ns = idle_since = sh_now_ns();
            continue;
        }
        size_t moved = pump(s, c);
        uint64_t now = sh_now_ns();
        if (moved) {
            s->last_progress_ns = idle_since = now;
            continue;
        }
        expire(s, c, now);
        uint64_t idle = now - idle_since;
        pthread_mutex_unlock(&s->mu);
        if (idle < (uint64_t)c->spin_us * 1000ull) {
            /* spin */
        } else if (idle < 2000000ull) {
            sched_yield();
        } else {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static shoal_result state(shoal_comm *c, struct sh_p2p **out)
{
    if (!c->p2p_state) {
        struct sh_p2p *s = calloc(1, sizeof *s);
        if (!s) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        s->in = calloc((size_t)c->world, sizeof *s->in);
        if (!s->in) {
            free(s);
            return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        }
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->work, NULL);
        pthread_cond_init(&s->done, NULL);
        c->p2p_state = s;
        if (pthread_create(&s->thread, NULL, progress_main, c) != 0) {
            c->p2p_state = NULL;
            free(s->in);
            free(s);
            return SH_FAIL(SHOAL_ERR_IO, "cannot start the point-to-point thread");
        }
        s->running = 1;
    }
    *out = c->p2p_state;
    return SHOAL_OK;
}

shoal_result sh_p2p_send_start(shoal_comm *c, const void *buf, size_t nbytes, shoal_dtype dt,
                               int peer, int tag, sh_p2p_op **out)
{
    struct sh_p2p *s;
    SH_TRY(state(c, &s));
    sh_p2p_op *o = calloc(1, sizeof *o);
    size_t cap_nbytes = sizeof(frame) + nbytes;
    pthread_mutex_lock(&s->mu);
    unsigned char *copy = spare_take(s, sizeof(frame) + nbytes, &cap_nbytes);
    pthread_mutex_unlock(&s->mu);
    if (!copy) copy = malloc(cap_nbytes);
    if (!o || !copy) {
        free(o);
        free(copy);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for a %zu-byte send", nbytes);
    }
    frame f = {FRAME_MAGIC, tag, (uint32_t)dt, 0, nbytes};
    memcpy(copy, &f, sizeof f);
    if (nbytes) memcpy(copy + sizeof f, buf, nbytes);
    *o = (sh_p2p_op){.kind = OP_SEND, .c = c, .peer = peer, .tag = tag, .dt = dt, .buf = copy,
                     .nbytes = sizeof f + nbytes, .cap_nbytes = cap_nbytes};
    pthread_mutex_lock(&s->mu);
    if (s->in[peer].dead) {
        char pb[128];
        snprintf(o->msg, sizeof o->msg, "send to %s: the peer is gone", sh_comm_peer_name(c, peer, pb, sizeof pb));
        o->rc = SHOAL_ERR_PEER;
        o->finished = 1;
    } else {
        if (s->sends_tail) s->sends_tail->next = o;
        else s->sends = o;
        s->sends_tail = o;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    *out = o;
    return SHOAL_OK;
}

shoal_result sh_p2p_recv_start(shoal_comm *c, void *buf, size_t nbytes, shoal_dtype dt, int peer,
                               int tag, int timeout_ms, sh_p2p_op **out)
{
    struct sh_p2p *s;
    SH_TRY(state(c, &s));
    sh_p2p_op *o = calloc(1, sizeof *o);
    if (!o) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    *o = (sh_p2p_op){.kind = OP_RECV, .c = c, .peer = peer, .tag = tag, .dt = dt, .buf = buf,
                     .nbytes = nbytes,
                     .deadline_ns = timeout_ms >= 0 ? sh_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0};
    pthread_mutex_lock(&s->mu);
    deliver_kept(s, o);
    if (!o->finished && peer >= 0 && s->in[peer].dead) {
        char pb[128];
        snprintf(o->msg, sizeof o->msg, "recv from %s: the peer is gone", sh_comm_peer_name(c, peer, pb, sizeof pb));
        o->rc = SHOAL_ERR_PEER;
        o->finished = 1;
    }
    if (!o->finished) {
        if (s->recvs_tail) s->recvs_tail->next = o;
        else s->recvs = o;
        s->recvs_tail = o;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    *out = o;
    return SHOAL_OK;
}

static shoal_result result(sh_p2p_op *o, int *peer, size_t *nbytes)
{
    shoal_result rc = o->rc;
    if (peer) *peer = o->got_peer;
    if (nbytes) *nbytes = o->got_nbytes;
    if (rc != SHOAL_OK) SH_FAIL(rc, "%s", o->msg);
    if (o->kind == OP_SEND) {
        struct sh_p2p *s = o->c->p2p_state;
        pthread_mutex_lock(&s->mu);
        spare_give(s, o->buf, o->cap_nbytes);
        pthread_mutex_unlock(&s->mu);
    }
    free(o);
    return rc;
}

shoal_result sh_p2p_wait(sh_p2p_op *o, int *peer, size_t *nbytes)
{
    struct sh_p2p *s = o->c->p2p_state;
    pthread_mutex_lock(&s->mu);
    while (!o->finished) pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return result(o, peer, nbytes);
}

shoal_result sh_p2p_test(sh_p2p_op *o, int *done)
{
    struct sh_p2p *s = o->c->p2p_state;
    pthread_mutex_lock(&s->mu);
    int f = o->finished;
    pthread_mutex_unlock(&s->mu);
    *done = f;
    return SHOAL_OK;
}

void sh_p2p_destroy(shoal_comm *c)
{
    struct sh_p2p *s = c->p2p_state;
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->running) pthread_join(s->thread, NULL);
    for (msg *m = s->unexpected, *n; m; m = n) {
        n = m->next;
        free(m->data);
        free(m);
    }
    for (int p = 0; p < c->world; p++)
        if (!s->in[p].into) free(s->in[p].data);
    for (int i = 0; i < SPARES; i++) free(s->spare[i]);
    free(s->in);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    free(s);
    c->p2p_state = NULL;
}

shoal_result sh_p2p_peer_lost(shoal_comm *c, int peer)
{
    struct sh_p2p *s = c->p2p_state;
    if (!s) return SHOAL_OK;
    char why[600] = "";
    pthread_mutex_lock(&s->mu);
    if (s->in[peer].dead) snprintf(why, sizeof why, "%s", s->in[peer].why);
    pthread_mutex_unlock(&s->mu);
    return why[0] ? SH_FAIL(SHOAL_ERR_PEER, "%s", why) : SHOAL_OK;
}
