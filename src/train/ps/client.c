/* ps/client.c — a worker's side of the parameter server: pull the whole vector shard by
 * shard, push gradients shard by shard (compressed: each shard's residual kept, and handed
 * out and back for checkpoints), count clocks, say goodbye.
 * Not here: the servers (ps/server.c), the training step (the strategy), checkpoint files
 * (snapshot.c). Proved by tests/train/test_ps.c; residuals by tests/cli/test_train_compress.c. */
#include "train/ps/ps.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/err.h"
#include "base/trace.h"
#include "base/util.h"
#include "train/ps/proto.h"

/* The longest a worker waits for a server's answer between looks at whether a server is
 * gone (shoal_peer_check). */
#define WAIT_SLICE_MS 100

struct sh_ps_client {
    shoal_comm *c;
    sh_ps_config cfg;
    int64_t clock;
    int64_t rounds;         /* the fewest rounds of updates a server reported at the last pull */
    int lead;               /* the lowest worker not dropped, as last heard */
    size_t lo, count;       /* this worker's range of the vector (its local array's [0, count)) */
    size_t *at, *n;         /* [k]: its part of server k's shard (n 0: it never talks to k) */
    int nmeet;              /* servers it talks to */
    unsigned char *buf;
    size_t buf_nbytes;
    shoal_compressor **enc; /* [nservers]: compressed pushes (the shard's residual), or NULL */
    double pushed_nbytes;   /* every push's bytes, headers included */
};

static shoal_result send_to_server(sh_ps_client *w, int k, size_t nbytes);

/* The first message to every server: this worker's settings (a server that finds them
 * differ from its own stops the job, and the next answer says why). */
static shoal_result say_hello(sh_ps_client *w)
{
    size_t n = sh_ps_settings_text(&w->cfg, (char *)w->buf + sizeof(ps_hdr), PS_TEXT_MAX_NBYTES);
    for (int k = 0; k < w->cfg.nservers; k++) {
        ps_hdr h = {PS_MAGIC, PS_HELLO, 0, 0, (uint64_t)n, 0, {0, 0, 0}};
        memcpy(w->buf, &h, sizeof h);
        SH_TRY(send_to_server(w, k, sizeof h + n));
    }
    return SHOAL_OK;
}

shoal_result sh_ps_client_create(shoal_comm *c, const sh_ps_config *cfg, sh_ps_client **out)
{
    *out = NULL;
    if (shoal_comm_rank(c) < cfg->nservers)
        return SH_FAIL(SHOAL_ERR_INVALID, "rank %d is a server, not a worker", shoal_comm_rank(c));
    sh_ps_client *w = calloc(1, sizeof *w);
    if (!w) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    w->c = c;
    w->cfg = *cfg;
    if (w->cfg.timeout_ms <= 0) {
        long t = 60000;
        sh_env_long("SHOAL_TIMEOUT", &t);
        w->cfg.timeout_ms = (int)t;
    }
    size_t lo, most = 0;
    int me = shoal_comm_rank(c) - cfg->nservers;
    w->lo = cfg->worker_lo ? cfg->worker_lo[me] : 0;
    w->count = cfg->worker_lo ? cfg->worker_count[me] : cfg->nparams;
    w->at = calloc((size_t)cfg->nservers, sizeof *w->at);
    w->n = calloc((size_t)cfg->nservers, sizeof *w->n);
    if (!w->at || !w->n) {
        sh_ps_client_destroy(w);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    for (int k = 0; k < cfg->nservers; k++) {
        size_t n;
        sh_ps_shard(cfg->nparams, cfg->nservers, k, &lo, &n);
        if (n > most) most = n;
        size_t a = lo > w->lo ? lo : w->lo, b = lo + n < w->lo + w->count ? lo + n : w->lo + w->count;
        w->at[k] = a;
        w->n[k] = b > a ? b - a : 0;
        w->nmeet += b > a || !cfg->worker_lo; /* the whole vector meets every shard, empty ones too */
    }
    w->buf_nbytes = sizeof(ps_hdr) + most * sizeof(float) + 512;
    if (cfg->codec.codec != SHOAL_CODEC_NONE) {
        w->enc = calloc((size_t)cfg->nservers, sizeof *w->enc);
        if (!w->enc) {
            free(w);
            return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        }
        for (int k = 0; k < cfg->nservers; k++) {
            size_t n;
            sh_ps_shard(cfg->nparams, cfg->nservers, k, &lo, &n);
            shoal_result rc = sh_ps_shard_compressor(cfg, n, &w->enc[k]);
            if (rc != SHOAL_OK) {
                sh_ps_client_destroy(w);
                return rc;
            }
            size_t pn = sizeof(ps_hdr) + shoal_compressor_payload_nbytes(w->enc[k]) + 512;
            if (pn > w->buf_nbytes) w->buf_nbytes = pn;
        }
    }
    if (w->buf_nbytes < sizeof(ps_hdr) + PS_TEXT_MAX_NBYTES) w->buf_nbytes = sizeof(ps_hdr) + PS_TEXT_MAX_NBYTES;
    w->buf = malloc(w->buf_nbytes);
    if (!w->buf) {
        sh_ps_client_destroy(w);
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    }
    shoal_result rc = say_hello(w);
    if (rc != SHOAL_OK) {
        sh_ps_client_destroy(w);
        return rc;
    }
    *out = w;
    return SHOAL_OK;
}

/* A server that ended the job (ABORT: a sync worker was lost) may be gone before this worker
 * read why; when a server cannot be reached, the reason waiting in the inbox becomes the
 * error, if one is there. rc and its message otherwise. */
static shoal_result abort_reason(sh_ps_client *w, shoal_result rc)
{
    if (rc != SHOAL_ERR_PEER) return rc;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", shoal_last_error_message());
    int peer = -1;
    size_t n = 0;
    while (shoal_recv_any(w->c, w->buf, w->buf_nbytes, SHOAL_UINT8, PS_TAG_TO_WORKER, 0, &peer, &n) == SHOAL_OK) {
        ps_hdr h;
        if (n < sizeof h || peer < 0 || peer >= w->cfg.nservers) continue;
        memcpy(&h, w->buf, sizeof h);
        if (h.magic != PS_MAGIC || h.kind != PS_ABORT) continue;
        size_t m = h.count < n - sizeof h ? h.count : n - sizeof h;
        return SH_FAIL(SHOAL_ERR_PEER, "%.*s", (int)m, (const char *)w->buf + sizeof h);
    }
    return SH_FAIL(rc, "%s", keep);
}

static shoal_result send_to_server(sh_ps_client *w, int k, size_t nbytes)
{
    shoal_result rc = shoal_send(w->c, w->buf, nbytes, SHOAL_UINT8, k, PS_TAG_TO_SERVER);
    if (rc != SHOAL_OK) sh_err_prefix("to parameter server %d: ", k); /* the caller names this rank */
    return abort_reason(w, rc);
}

/* 1 when this worker's range meets server k's shard (the whole vector meets every one). */
static int meets(const sh_ps_client *w, int k) { return w->n[k] > 0 || !w->cfg.worker_lo; }

static shoal_result send_hdr(sh_ps_client *w, int k, const ps_hdr *h, const void *payload, size_t nbytes)
{
    memcpy(w->buf, h, sizeof *h);
    if (nbytes) memcpy(w->buf + sizeof *h, payload, nbytes);
    return send_to_server(w, k, sizeof *h + nbytes);
}

shoal_result sh_ps_client_check_servers(sh_ps_client *w, const char *what)
{
    for (int k = 0; k < w->cfg.nservers; k++) {
        if (shoal_peer_check(w->c, k) != SHOAL_ERR_PEER) continue;
        char why[400]; /* "rank 0 (hostb) is gone: its process ... has exited": the reason */
        const char *msg = shoal_last_error_message(), *after = strstr(msg, "is gone: ");
        snprintf(why, sizeof why, "%s", after ? after + 9 : msg);
        return SH_FAIL(SHOAL_ERR_PEER, "parameter server %d (rank %d) is gone: %s; %s", k, k, why, what);
    }
    return SHOAL_OK;
}

shoal_result sh_ps_client_check_job(sh_ps_client *w, const char *what)
{
    SH_TRY(sh_ps_client_check_servers(w, what));
    if (w->cfg.consistency != SH_PS_SYNC) return SHOAL_OK; /* the servers drop a lost worker */
    int me = shoal_comm_rank(w->c), world = shoal_comm_world(w->c);
    for (int r = w->cfg.nservers; r < world; r++) {
        if (r == me || shoal_peer_check(w->c, r) != SHOAL_ERR_PEER) continue;
        char why[400];
        const char *msg = shoal_last_error_message(), *after = strstr(msg, "is gone: ");
        snprintf(why, sizeof why, "%s", after ? after + 9 : msg);
        return SH_FAIL(SHOAL_ERR_PEER, "worker rank %d is gone: %s; sync mode cannot go on without it; %s", r, why,
                       what);
    }
    return SHOAL_OK;
}

/* One message from a server to this worker: a well-formed header from a server rank, not an
 * abort (whose reason becomes the error), the lead it names taken (drops only ever raise
 * it). A server that holds its answer says HOLD every quarter timeout, so one timeout of
 * silence means it is dead or frozen; a server whose process or link is gone is found
 * between waits of at most WAIT_SLICE_MS. `what` names the wait in errors. */
static shoal_result recv_answer(sh_ps_client *w, const char *what, ps_hdr *h, size_t *n, int *peer)
{
    int wait_ms = w->cfg.timeout_ms;
    uint64_t deadline = sh_now_ns() + (uint64_t)wait_ms * 1000000ull;
    *peer = -1;
    *n = 0;
    char lost[160];
    snprintf(lost, sizeof lost, "this worker cannot go on without its shard (it waited for %s)", what);
    shoal_result rc;
    for (;;) {
        uint64_t now = sh_now_ns();
        int left_ms = now < deadline ? (int)((deadline - now + 999999) / 1000000) : 0;
        int slice = left_ms < WAIT_SLICE_MS ? left_ms : WAIT_SLICE_MS;
        rc = shoal_recv_any(w->c, w->buf, w->buf_nbytes, SHOAL_UINT8, PS_TAG_TO_WORKER, slice > 0 ? slice : 1, peer,
                            n);
        if (rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT) SH_TRY(abort_reason(w, sh_ps_client_check_servers(w, lost)));
        if (rc != SHOAL_ERR_TIMEOUT || left_ms <= slice) break;
    }
    if (rc == SHOAL_ERR_TIMEOUT)
        return SH_FAIL(SHOAL_ERR_TIMEOUT, "no %s from the servers within %d ms (a server is dead "
                       "or frozen)", what, wait_ms);
    SH_TRY(rc);
    if (*n < sizeof *h || *peer < 0 || *peer >= w->cfg.nservers)
        return SH_FAIL(SHOAL_ERR_PEER, "a malformed message from rank %d (waiting for %s)", *peer, what);
    memcpy(h, w->buf, sizeof *h);
    if (h->magic == PS_MAGIC && h->kind == PS_ABORT) {
        size_t m = h->count < *n - sizeof *h ? h->count : *n - sizeof *h;
        return SH_FAIL(SHOAL_ERR_PEER, "%.*s", (int)m, (const char *)w->buf + sizeof *h);
    }
    if (h->magic == PS_MAGIC && h->lead > w->lead) w->lead = h->lead;
    return SHOAL_OK;
}

shoal_result sh_ps_client_pull(sh_ps_client *w, float *params)
{
    uint64_t t0 = sh_trace_on() ? sh_now_ns() : 0;
    int64_t holds = 0, rounds = INT64_MAX;
    for (int k = 0; k < w->cfg.nservers; k++) {
        if (!meets(w, k)) continue;
        ps_hdr h = {PS_MAGIC, PS_PULL, w->clock, 0, 0, 0, {0, 0, 0}};
        SH_TRY(send_hdr(w, k, &h, NULL, 0));
    }
    for (int got = 0; got < w->nmeet;) {
        ps_hdr h = {0};
        size_t n;
        int peer;
        SH_TRY(recv_answer(w, "parameters", &h, &n, &peer));
        if (h.magic == PS_MAGIC && h.kind == PS_HOLD) { /* alive, waiting on others */
            holds++;
            continue;
        }
        got++;
        size_t lo = w->at[peer], cnt = w->n[peer];
        if (h.magic != PS_MAGIC || h.kind != PS_PARAMS || h.offset != lo || h.count != cnt ||
            n != sizeof h + cnt * sizeof(float))
            return SH_FAIL(SHOAL_ERR_PEER, "worker: parameter server %d sent a reply that does not fit its shard", peer);
        memcpy(params + (lo - w->lo), w->buf + sizeof h, cnt * sizeof(float));
        int64_t r = (int64_t)((uint64_t)(uint32_t)h.pad[0] | (uint64_t)(uint32_t)h.pad[1] << 32);
        if (r < rounds) rounds = r;
    }
    w->rounds = rounds;
    /* A pull the consistency bound held lasts until the slowest worker caught up: the
     * servers' rows show the hold itself (SH_TRACK_STALE). */
    if (t0) sh_trace_span(SH_TRACK_PULL, "pull", t0, sh_now_ns(), "clock", w->clock, "holds", holds);
    return SHOAL_OK;
}

shoal_result sh_ps_client_push(sh_ps_client *w, const float *grads)
{
    uint64_t t0 = sh_trace_on() ? sh_now_ns() : 0;
    for (int k = 0; k < w->cfg.nservers; k++) {
        if (!meets(w, k)) continue;
        size_t lo = w->at[k], cnt = w->n[k];
        const float *mine = grads + (lo - w->lo);
        ps_hdr h = {PS_MAGIC, PS_PUSH, w->clock, lo, cnt, 0, {0, 0, 0}};
        if (w->enc) { /* encoded straight behind the header */
            int32_t words[2];
            sh_ps_codec_words(&w->cfg, words);
            h.pad[0] = words[0], h.pad[1] = words[1];
            size_t pn = shoal_compressor_payload_nbytes(w->enc[k]);
            memcpy(w->buf, &h, sizeof h);
            SH_TRY(shoal_compressor_encode(w->enc[k], mine, w->buf + sizeof h));
            w->pushed_nbytes += (double)(sizeof h + pn);
            SH_TRY(send_to_server(w, k, sizeof h + pn));
            continue;
        }
        w->pushed_nbytes += (double)(sizeof h + cnt * sizeof(float));
        SH_TRY(send_hdr(w, k, &h, mine, cnt * sizeof(float)));
    }
    if (t0) sh_trace_span(SH_TRACK_PUSH, "push", t0, sh_now_ns(), "clock", w->clock, "bytes",
                          (int64_t)(w->count * sizeof(float)));
    w->clock++;
    /* sends are buffered: a server gone is found here, not a step later */
    return abort_reason(w, sh_ps_client_check_servers(w, "its push of this step is lost"));
}

int64_t sh_ps_client_clock(const sh_ps_client *w) { return w->clock; }

int64_t sh_ps_client_rounds(const sh_ps_client *w) { return w->rounds; }

void sh_ps_client_push_stats(const sh_ps_client *w, double *pushed_nbytes, double *residual_norm)
{
    *pushed_nbytes = w->pushed_nbytes;
    double s = 0;
    for (int k = 0; w->enc && k < w->cfg.nservers; k++) {
        double r = shoal_compressor_residual_norm(w->enc[k]);
        s += r * r;
    }
    *residual_norm = sqrt(s);
}

/* Only 1bit and topk with error feedback carry a residual from push to push; the PS
 * refuses lowrank, and fp16/bf16 keep a residual of zeros. */
static int keeps_residuals(const sh_ps_client *w)
{
    const shoal_codec_opts *o = &w->cfg.codec;
    return w->enc && o->error_feedback && (o->codec == SHOAL_CODEC_1BIT || o->codec == SHOAL_CODEC_TOPK);
}

size_t sh_ps_client_state_count(const sh_ps_client *w)
{
    if (!keeps_residuals(w)) return 0;
    size_t all = 0, n;
    for (int k = 0; k < w->cfg.nservers; k++) {
        (void)shoal_compressor_state(w->enc[k], &n);
        all += n;
    }
    return all;
}

void sh_ps_client_state_get(sh_ps_client *w, float *out)
{
    for (int k = 0; keeps_residuals(w) && k < w->cfg.nservers; k++) {
        size_t n;
        const float *st = shoal_compressor_state(w->enc[k], &n);
        memcpy(out, st, n * sizeof(float));
        out += n;
    }
}

void sh_ps_client_state_set(sh_ps_client *w, const float *in)
{
    for (int k = 0; keeps_residuals(w) && k < w->cfg.nservers; k++) {
        if (!in) {
            shoal_compressor_reset(w->enc[k]);
            continue;
        }
        size_t n;
        float *st = shoal_compressor_state(w->enc[k], &n);
        memcpy(st, in, n * sizeof(float));
        in += n;
    }
}

int sh_ps_client_lead(const sh_ps_client *w) { return w->lead; }

static shoal_result send_byes(sh_ps_client *w)
{
    shoal_result first = SHOAL_OK;
    for (int k = 0; k < w->cfg.nservers; k++) {
        if (!meets(w, k)) continue;
        ps_hdr h = {PS_MAGIC, PS_BYE, w->clock, 0, 0, 0, {0, 0, 0}};
        shoal_result rc = send_hdr(w, k, &h, NULL, 0);
        if (rc != SHOAL_OK && first == SHOAL_OK) first = rc;
    }
    return first;
}

void sh_ps_client_leave(sh_ps_client *w) { send_byes(w); }

shoal_result sh_ps_client_close(sh_ps_client *w)
{
    SH_TRY(send_byes(w));
    /* A server holds its answer while a lower worker trains (saying HOLD meanwhile). */
    for (int got = 0; got < w->nmeet;) {
        ps_hdr h = {0};
        size_t n;
        int peer;
        SH_TRY(recv_answer(w, "answer to this worker's goodbye", &h, &n, &peer));
        if (h.magic != PS_MAGIC || (h.kind != PS_DONE && h.kind != PS_HOLD))
            return SH_FAIL(SHOAL_ERR_PEER, "parameter server %d answered this worker's goodbye with "
                           "message kind %u", peer, (unsigned)h.kind);
        if (h.kind == PS_DONE) got++;
    }
    return SHOAL_OK;
}

void sh_ps_client_destroy(sh_ps_client *w)
{
    if (!w) return;
    for (int k = 0; w->enc && k < w->cfg.nservers; k++) shoal_compressor_destroy(w->enc[k]);
    free(w->enc);
    free(w->buf);
    free(w->at);
    free(w->n);
    free(w);
}
