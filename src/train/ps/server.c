/* ps/server.c — one parameter-server rank: its shard, the optimizer state, every worker's
 * clock; one thread receives every message (no thread per worker), checks it and hands pushes
 * and pulls to the rounds; goodbyes, workers silent or gone, the clock line.
 * Not here: when pulls are answered and pushes applied (ps/server_rounds.c), the worker side
 * (ps/client.c), the message layout (ps/proto.h).
 * Proved by tests/train/test_ps.c. */
#include "train/ps/server_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <time.h>

#include "base/env.h"
#include "base/err.h"
#include "base/trace.h"
#include "base/log.h"
#include "base/util.h"
#include "train/ps/proto.h"

/* How often, while messages keep coming, the server looks for workers that are gone (it
 * also looks whenever a wait of at most 100 ms ends empty). */
#define GONE_CHECK_NS 50000000ull

shoal_result sh_ps_shard_compressor(const sh_ps_config *cfg, size_t count, shoal_compressor **out)
{
    shoal_codec_opts o = cfg->codec;
    o.cols = o.codec == SHOAL_CODEC_1BIT ? SH_PS_1BIT_GROUP : 0;
    return shoal_compressor_create(&o, count, out);
}

void sh_ps_codec_words(const sh_ps_config *cfg, int32_t words[2])
{
    words[0] = (int32_t)cfg->codec.codec;
    words[1] = cfg->codec.codec == SHOAL_CODEC_TOPK ? (int32_t)(cfg->codec.topk_fraction * 1e9) : 0;
}

size_t sh_ps_settings_text(const sh_ps_config *cfg, char *buf, size_t nbytes)
{
    static const char *const modes[] = {"sync", "async", "ssp"};
    char codec[48];
    shoal_codec_format(&cfg->codec, codec, sizeof codec);
    int c = (int)cfg->consistency;
    int n = snprintf(buf, nbytes, "--consistency %s\n--staleness %d\n--compress %s\n--servers %d\na model of %zu "
                     "parameters\n%s", c >= 0 && c <= 2 ? modes[c] : "?", cfg->staleness, codec, cfg->nservers,
                     cfg->nparams, cfg->settings ? cfg->settings : "");
    return n < 0 ? 0 : (size_t)n < nbytes ? (size_t)n : nbytes - 1;
}

void sh_ps_shard(size_t nparams, int nservers, int k, size_t *lo, size_t *count)
{
    size_t base = nparams / (size_t)nservers, extra = nparams % (size_t)nservers;
    *lo = (size_t)k * base + ((size_t)k < extra ? (size_t)k : extra);
    *count = base + ((size_t)k < extra ? 1 : 0);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Each worker's range within this shard and the segments they make (plain: one, every
 * worker's). Workers that never meet the shard count as gone from the start. */
static shoal_result place_workers(sh_ps_server *s, const sh_ps_config *cfg)
{
    size_t nw = (size_t)s->nworkers;
    s->wa = calloc(nw, sizeof *s->wa);
    s->wn = calloc(nw, sizeof *s->wn);
    s->seg = calloc(nw, sizeof *s->seg);
    s->seg_cover = calloc(nw, sizeof *s->seg_cover);
    s->seg_pushes = calloc(nw, sizeof *s->seg_pushes);
    s->seg_a = calloc(nw, sizeof *s->seg_a);
    s->seg_n = calloc(nw, sizeof *s->seg_n);
    if (!s->wa || !s->wn || !s->seg || !s->seg_cover || !s->seg_pushes || !s->seg_a || !s->seg_n)
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    for (int w = 0; w < s->nworkers; w++) {
        size_t a = s->lo, b = s->lo + s->count;
        if (cfg->worker_lo) {
            size_t lo = cfg->worker_lo[w], hi = lo + cfg->worker_count[w];
            a = lo > a ? lo : a;
            b = hi < b ? hi : b;
        }
        s->seg[w] = -1;
        if (cfg->worker_lo && b <= a) continue; /* never here */
        s->wa[w] = a - s->lo;
        s->wn[w] = b - a;
        for (int k = 0; k < w && s->seg[w] < 0; k++)
            if (s->seg[k] >= 0 && s->wa[k] == s->wa[w] && s->wn[k] == s->wn[w]) s->seg[w] = s->seg[k];
        if (s->seg[w] < 0) {
            s->seg_a[s->nseg] = s->wa[w];
            s->seg_n[s->nseg] = s->wn[w];
            s->seg[w] = s->nseg++;
        }
        s->seg_cover[s->seg[w]]++;
        s->novl++;
    }
    return SHOAL_OK;
}

shoal_result sh_ps_server_create(shoal_comm *c, const sh_ps_config *cfg, const float *init_params,
                                 sh_ps_server **out)
{
    *out = NULL;
    int world = shoal_comm_world(c), rank = shoal_comm_rank(c);
    if (cfg->nservers < 1 || cfg->nservers >= world)
        return SH_FAIL(SHOAL_ERR_INVALID, "parameter server: %d servers need at least one worker among %d ranks",
                       cfg->nservers, world);
    if (rank >= cfg->nservers) return SH_FAIL(SHOAL_ERR_INVALID, "rank %d is a worker, not a server", rank);
    sh_ps_server *s = calloc(1, sizeof *s);
    if (!s) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    s->c = c;
    s->cfg = *cfg;
    s->cfg.ranges = NULL;
    if (s->cfg.timeout_ms <= 0) {
        long t = 60000;
        sh_env_long("SHOAL_TIMEOUT", &t);
        s->cfg.timeout_ms = (int)t;
    }
    s->k = rank;
    sh_ps_shard(cfg->nparams, cfg->nservers, rank, &s->lo, &s->count);
    s->nworkers = world - cfg->nservers;
    size_t n = s->count ? s->count : 1;
    /* the header just before the shard, which starts on 64 bytes as the workers' parameter
     * blocks do: the optimizer's loops then split into the same vector and scalar parts */
    if (posix_memalign((void **)&s->reply_base, 64, 64 + n * sizeof(float)) != 0) s->reply_base = NULL;
    s->reply = s->reply_base ? s->reply_base + 64 - sizeof(ps_hdr) : NULL;
    s->params = s->reply ? (float *)(s->reply + sizeof(ps_hdr)) : NULL;
    s->acc = calloc(n, sizeof(float));
    s->grad = calloc(n, sizeof(float)); /* what no worker's range covers stays 0 */
    s->clock = calloc((size_t)s->nworkers, sizeof *s->clock);
    s->alive = calloc((size_t)s->nworkers, sizeof *s->alive);
    s->bye = calloc((size_t)s->nworkers, sizeof *s->bye);
    s->pending = calloc((size_t)s->nworkers, sizeof *s->pending);
    s->done_owed = calloc((size_t)s->nworkers, sizeof *s->done_owed);
    s->last_seen_ns = calloc((size_t)s->nworkers, sizeof *s->last_seen_ns);
    s->held_ns = calloc((size_t)s->nworkers, sizeof *s->held_ns);
    s->pulled_at = calloc((size_t)s->nworkers, sizeof *s->pulled_at);
    s->pushed_since = calloc((size_t)s->nworkers, sizeof *s->pushed_since);
    s->buf_nbytes = sizeof(ps_hdr) + (n * sizeof(float) > PS_TEXT_MAX_NBYTES ? n * sizeof(float) : PS_TEXT_MAX_NBYTES);
    shoal_result crc = SHOAL_OK;
    if (cfg->codec.codec != SHOAL_CODEC_NONE) {
        crc = sh_ps_shard_compressor(cfg, s->count, &s->dec);
        size_t pn = crc == SHOAL_OK ? shoal_compressor_payload_nbytes(s->dec) : 0;
        if (sizeof(ps_hdr) + pn > s->buf_nbytes) s->buf_nbytes = sizeof(ps_hdr) + pn;
        s->grad_in = malloc(n * sizeof(float));
    }
    s->buf = malloc(s->buf_nbytes);
    s->line_nbytes = 96 + 40 * (size_t)s->nworkers; /* " w123=<19 digits> (dropped)" each */
    s->line = malloc(s->line_nbytes);
    /* Weight-decay ranges, cut to this shard and shifted to its origin. */
    sh_param_range *rr = calloc((size_t)(cfg->nranges > 0 ? cfg->nranges : 1), sizeof *rr);
    int nr = 0;
    for (int i = 0; i < cfg->nranges; i++) {
        size_t a = cfg->ranges[i].offset, b = a + cfg->ranges[i].count;
        if (a < s->lo) a = s->lo;
        if (b > s->lo + s->count) b = s->lo + s->count;
        if (a >= b) continue;
        rr[nr++] = (sh_param_range){a - s->lo, b - a, cfg->ranges[i].decay};
    }
    if (cfg->nranges == 0) rr[nr++] = (sh_param_range){0, s->count, 1};
    shoal_result rc = crc;
    if (rc == SHOAL_OK && s->dec && !s->grad_in) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    if (rc == SHOAL_OK && (!s->params || !s->acc || !s->grad || !s->clock || !s->alive || !s->bye || !s->pending ||
                           !s->held_ns || !s->done_owed || !s->last_seen_ns || !s->buf || !s->line || !rr ||
                           !s->pulled_at || !s->pushed_since))
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for a shard of %zu parameters", s->count);
    if (rc == SHOAL_OK) rc = place_workers(s, cfg);
    if (rc == SHOAL_OK) rc = sh_optim_create(&cfg->optim, s->count, rr, nr, &s->opt);
    free(rr);
    if (rc != SHOAL_OK) {
        sh_ps_server_destroy(s);
        return rc;
    }
    memcpy(s->params, init_params + s->lo, s->count * sizeof(float));
    if (cfg->resume_path) {
        rc = sh_ps_rounds_load(s);
        if (rc != SHOAL_OK) {
            sh_ps_server_destroy(s);
            return rc;
        }
    }
    uint64_t now = sh_now_ns();
    for (int w = 0; w < s->nworkers; w++) {
        s->alive[w] = 1;
        s->pending[w] = 0;
        s->last_seen_ns[w] = now;
        s->bye[w] = s->seg[w] < 0; /* never here: as if it had said goodbye */
    }
    *out = s;
    return SHOAL_OK;
}

static void reap(sh_ps_server *s)
{
    for (int i = 0; i < s->ninflight;) {
        int done = 0;
        shoal_test(s->inflight[i], &done);
        if (!done) {
            i++;
            continue;
        }
        if (shoal_wait(s->inflight[i]) != SHOAL_OK)
            SH_LOG_W("ps", "server %d: a reply was lost: %s", s->k, shoal_last_error_message());
        s->inflight[i] = s->inflight[--s->ninflight];
    }
}

/* Send header h and payload to worker w without waiting (the comm copies the message). The
 * shard is sent from where it lives, after room for its header; anything else is copied
 * behind the header in buf. */
void sh_ps_server_send_to(sh_ps_server *s, int w, const ps_hdr *h, const void *payload, size_t nbytes)
{
    unsigned char *msg = payload == s->params ? s->reply : s->buf;
    memcpy(msg, h, sizeof *h);
    if (nbytes && msg == s->buf) memcpy(s->buf + sizeof *h, payload, nbytes);
    if (s->ninflight == s->cap_inflight) {
        int cap = s->cap_inflight ? 2 * s->cap_inflight : 16;
        shoal_request **p = realloc(s->inflight, (size_t)cap * sizeof *p);
        if (!p) return;
        s->inflight = p;
        s->cap_inflight = cap;
    }
    shoal_request *r = NULL;
    if (shoal_send_start(s->c, msg, sizeof *h + nbytes, SHOAL_UINT8, s->cfg.nservers + w,
                         PS_TAG_TO_WORKER, &r) == SHOAL_OK)
        s->inflight[s->ninflight++] = r;
    else
        SH_LOG_W("ps", "server %d: cannot answer worker rank %d: %s", s->k, s->cfg.nservers + w,
                 shoal_last_error_message());
}

/* The lead, the worker that prints and reports: the lowest one not dropped (one that said
 * goodbye still leads). -1 when every worker was dropped. */
int sh_ps_server_lead_worker(const sh_ps_server *s)
{
    for (int w = 0; w < s->nworkers; w++)
        if (s->alive[w]) return w;
    return -1;
}

/* Answer each goodbye whose lower workers have all said goodbye or been dropped: from then
 * on the lead can no longer change for that worker, and DONE tells it who leads. */
static void answer_byes(sh_ps_server *s)
{
    for (int w = 0; w < s->nworkers; w++) {
        if (!s->done_owed[w]) continue;
        int settled = 1;
        for (int v = 0; v < w && settled; v++) settled = s->bye[v] || !s->alive[v];
        if (!settled) continue;
        ps_hdr h = {PS_MAGIC, PS_DONE, s->clock[w], 0, 0, sh_ps_server_lead_worker(s), {0, 0, 0}};
        sh_ps_server_send_to(s, w, &h, NULL, 0);
        s->done_owed[w] = 0;
    }
}

/* Every quarter timeout, each worker whose pull or goodbye waits on other workers hears
 * HOLD: a worker can then call a server lost after one SHOAL_TIMEOUT of silence, not two
 * (a held pull may rightly wait a whole timeout for a silent worker to be dropped). */
static void send_holds(sh_ps_server *s)
{
    uint64_t now = sh_now_ns();
    if (now - s->hold_sent_ns < (uint64_t)s->cfg.timeout_ms * 250000ull) return;
    s->hold_sent_ns = now;
    for (int w = 0; w < s->nworkers; w++) {
        if (!s->alive[w] || !(s->done_owed[w] || s->pending[w])) continue;
        ps_hdr h = {PS_MAGIC, PS_HOLD, s->clock[w], 0, 0, sh_ps_server_lead_worker(s), {0, 0, 0}};
        sh_ps_server_send_to(s, w, &h, NULL, 0);
    }
}

static void refuse(sh_ps_server *s, int peer, const char *why)
{
    s->st.refused++;
    SH_LOG_W("ps", "server %d: refused a message from rank %d: %s", s->k, peer, why);
}

/* The job cannot go on: every live worker but `except` (-1: none) is told why (ABORT), and
 * this returns rc with the same words. */
static shoal_result abort_job(sh_ps_server *s, int except, shoal_result rc, const char *msg)
{
    size_t n = strlen(msg);
    for (int v = 0; v < s->nworkers; v++)
        if (s->alive[v] && !s->bye[v] && v != except) {
            ps_hdr h = {PS_MAGIC, PS_ABORT, 0, 0, (uint64_t)n, -1, {0, 0, 0}};
            sh_ps_server_send_to(s, v, &h, msg, n);
        }
    reap(s);
    return SH_FAIL(rc, "%s", msg);
}

/* Worker w is lost (why: its silence, or its link ended): dropped, the others going on
 * (async, ssp); or, in sync mode, the end of the job: every other worker is told at once,
 * and this returns SHOAL_ERR_PEER naming it. */
static shoal_result lose_worker(sh_ps_server *s, int w, const char *why)
{
    int rank = s->cfg.nservers + w;
    const char *host = shoal_comm_host(s->c, rank);
    if (s->cfg.consistency != SH_PS_SYNC) {
        s->alive[w] = 0;
        s->pending[w] = 0;
        s->st.dropped_workers++;
        SH_LOG_W("ps", "server %d: dropped worker rank %d (%s): %s; the others go on", s->k, rank, host ? host : "?",
                 why);
        if (s->cfg.on_drop) s->cfg.on_drop(rank);
        return SHOAL_OK;
    }
    char msg[512];
    snprintf(msg, sizeof msg, "parameter server %d: worker rank %d (%s) %s; sync mode cannot go on", s->k, rank,
             host ? host : "?", why);
    return abort_job(s, w, SHOAL_ERR_PEER, msg);
}

/* Workers silent past the deadline are lost. */
static shoal_result check_silence(sh_ps_server *s)
{
    uint64_t now = sh_now_ns(), limit = (uint64_t)s->cfg.timeout_ms * 1000000ull;
    for (int w = 0; w < s->nworkers; w++) {
        if (!s->alive[w] || s->bye[w] || s->pending[w]) continue; /* waiting on us is not silence */
        if (now - s->last_seen_ns[w] < limit) continue;
        char why[64];
        snprintf(why, sizeof why, "sent nothing for %d ms", s->cfg.timeout_ms);
        SH_TRY(lose_worker(s, w, why));
    }
    return SHOAL_OK;
}

/* Workers whose process or link is gone (shoal_peer_check) are lost at once, not after a
 * timeout of silence; a frozen one still looks alive and is left to check_silence. */
static shoal_result check_gone(sh_ps_server *s)
{
    for (int w = 0; w < s->nworkers; w++) {
        if (!s->alive[w] || s->bye[w]) continue;
        if (shoal_peer_check(s->c, s->cfg.nservers + w) != SHOAL_ERR_PEER) continue;
        char why[400]; /* "rank 3 (hostb) is gone: its process ... has exited": the reason */
        const char *msg = shoal_last_error_message(), *after = strstr(msg, "is gone: ");
        snprintf(why, sizeof why, "is gone: %s", after ? after + 9 : msg);
        SH_TRY(lose_worker(s, w, why));
    }
    return SHOAL_OK;
}

/* Append to buf[*pos..nbytes), keeping it terminated; what does not fit is cut. */
static void append(char *buf, size_t nbytes, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t nbytes, size_t *pos, const char *fmt, ...)
{
    if (*pos + 1 >= nbytes) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *pos, nbytes - *pos, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    *pos += (size_t)n < nbytes - *pos ? (size_t)n : nbytes - *pos - 1;
}

size_t sh_ps_server_clock_line(const sh_ps_server *s, char *buf, size_t nbytes)
{
    if (!nbytes) return 0;
    buf[0] = 0;
    int any_live = 0;
    for (int w = 0; w < s->nworkers; w++) any_live |= s->alive[w] && !s->bye[w];
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    int slowest = -1;
    size_t pos = 0;
    append(buf, nbytes, &pos, "ps server %d: clocks", s->k);
    for (int w = 0; w < s->nworkers; w++) {
        if (s->seg[w] < 0) continue; /* its range never meets this shard */
        append(buf, nbytes, &pos, " w%d=%lld%s", w, (long long)s->clock[w],
               !s->alive[w] ? " (dropped)" : s->bye[w] ? " (done)" : "");
        if (!s->alive[w] || (s->bye[w] && any_live)) continue;
        if (s->clock[w] < mn) {
            mn = s->clock[w];
            slowest = w;
        }
        if (s->clock[w] > mx) mx = s->clock[w];
    }
    if (slowest >= 0)
        append(buf, nbytes, &pos, ", spread %lld (slowest w%d)", (long long)(mx - mn), slowest);
    else
        append(buf, nbytes, &pos, ", every worker dropped");
    return pos;
}

static void log_clocks(sh_ps_server *s)
{
    size_t n = sh_ps_server_clock_line(s, s->line, s->line_nbytes - 1);
    s->line[n] = '\n';
    s->line[n + 1] = 0;
    fputs(s->line, s->cfg.clock_log); /* one call: lines of other ranks stay whole */
    fflush(s->cfg.clock_log);
}

/* A push from worker w (rank peer) of n bytes under header h: checked against this shard,
 * its codec and the worker's clock (refused, with the reason, when it does not fit), decoded
 * and applied. An error is the server's own (decoding, saving after an update). */
static shoal_result handle_push(sh_ps_server *s, int w, int peer, const ps_hdr *h, size_t n)
{
    int32_t words[2];
    sh_ps_codec_words(&s->cfg, words);
    if (h->pad[0] != words[0] || h->pad[1] != words[1]) {
        char why[200], mine[48];
        snprintf(why, sizeof why, "push compressed with codec %d (parameter %d) but this server decodes %s; "
                 "start every rank with the same --compress", (int)h->pad[0], (int)h->pad[1],
                 shoal_codec_format(&s->cfg.codec, mine, sizeof mine));
        refuse(s, peer, why);
        return SHOAL_OK;
    }
    size_t want_n = sizeof *h + (s->dec ? shoal_compressor_payload_nbytes(s->dec) : h->count * sizeof(float));
    if (h->offset != s->lo + s->wa[w] || h->count != s->wn[w] || n != want_n) {
        char why[200];
        snprintf(why, sizeof why, "push for [%llu, +%llu) with %zu bytes; this server holds [%zu, +%zu) of it",
                 (unsigned long long)h->offset, (unsigned long long)h->count, n, s->lo + s->wa[w], s->wn[w]);
        refuse(s, peer, why);
        return SHOAL_OK;
    }
    if (h->clock != s->clock[w]) {
        refuse(s, peer, "push with a stale clock");
        return SHOAL_OK;
    }
    s->st.pushes++;
    s->st.pushed_mb += (double)(n - sizeof *h) / 1e6;
    int64_t before = s->updates;
    uint64_t t0 = sh_trace_on() ? sh_now_ns() : 0;
    const float *g = (const float *)(s->buf + sizeof *h); /* buf is malloc-aligned */
    if (s->dec) {
        SH_TRY(shoal_compressor_decode(s->dec, s->buf + sizeof *h, n - sizeof *h, s->grad_in));
        g = s->grad_in;
    }
    sh_ps_rounds_apply_push(s, w, g);
    if (t0) sh_trace_span(SH_TRACK_SERVE, "push", t0, sh_now_ns(), "worker", w, "clock", s->clock[w] - 1);
    return s->updates != before ? sh_ps_rounds_after_update(s) : SHOAL_OK;
}

/* A worker's first message: its settings. Ranks that differ would wait on each other or
 * compute with different rules: the job stops at once, naming the option and both ranks. */
static shoal_result handle_hello(sh_ps_server *s, int peer, size_t n)
{
    char mine[PS_TEXT_MAX_NBYTES];
    size_t m = sh_ps_settings_text(&s->cfg, mine, sizeof mine);
    const char *theirs = (const char *)s->buf + sizeof(ps_hdr);
    size_t tn = n - sizeof(ps_hdr);
    if (tn == m && !memcmp(theirs, mine, m)) return SHOAL_OK;
    size_t a = 0; /* the first line that differs: [a, its end) in both */
    for (size_t i = 0; i < m && i < tn && mine[i] == theirs[i]; i++)
        if (mine[i] == '\n') a = i + 1;
    size_t ea = a, eb = a;
    while (ea < m && mine[ea] != '\n') ea++;
    while (eb < tn && theirs[eb] != '\n') eb++;
    const char *host = shoal_comm_host(s->c, peer);
    const char *flag = strstr(mine + a, "--");
    size_t fn = flag && flag < mine + ea ? strcspn(flag, " \n") : 0;
    char msg[640];
    snprintf(msg, sizeof msg, "parameter server %d: worker rank %d (%s) was started with %.*s but this server (rank "
             "%d) with %.*s; start every rank with the same %.*s", s->k, peer, host ? host : "?",
             (int)(eb - a > 200 ? 200 : eb - a), theirs + a, s->k, (int)(ea - a > 200 ? 200 : ea - a), mine + a,
             (int)(fn ? fn : 5), fn ? flag : "model");
    return abort_job(s, -1, SHOAL_ERR_MISMATCH, msg);
}

/* One message of n bytes from rank peer, in s->buf: a worker's pull, push or goodbye, each
 * checked first (what does not fit is refused, with the reason); then whatever it released. */
static shoal_result handle(sh_ps_server *s, int peer, size_t n)
{
    int w = peer - s->cfg.nservers;
    if (w < 0 || w >= s->nworkers) {
        refuse(s, peer, "not a worker rank");
        return SHOAL_OK;
    }
    ps_hdr h;
    if (n < sizeof h) {
        refuse(s, peer, "shorter than a header");
        return SHOAL_OK;
    }
    memcpy(&h, s->buf, sizeof h);
    if (h.magic != PS_MAGIC) {
        refuse(s, peer, "bad magic");
        return SHOAL_OK;
    }
    if (!s->alive[w] || s->bye[w]) {
        refuse(s, peer, s->bye[w] ? "the worker already said goodbye" : "stale message from a dropped worker");
        return SHOAL_OK;
    }
    s->last_seen_ns[w] = sh_now_ns();
    switch (h.kind) {
    case PS_PULL:
        if (h.clock != s->clock[w]) {
            refuse(s, peer, "pull for a clock the server does not have for it");
            break;
        }
        s->pending[w] = 1;
        sh_ps_rounds_serve_pulls(s);
        if (s->pending[w]) { /* it has to wait */
            s->st.deferred_pulls++;
            s->held_ns[w] = sh_now_ns();
        }
        break;
    case PS_PUSH:
        SH_TRY(handle_push(s, w, peer, &h, n));
        break;
    case PS_BYE:
        s->bye[w] = 1;
        s->done_owed[w] = 1;
        break;
    case PS_HELLO:
        SH_TRY(handle_hello(s, peer, n));
        break;
    default:
        refuse(s, peer, "unknown message kind");
    }
    sh_ps_rounds_serve_pulls(s);
    answer_byes(s);
    return SHOAL_OK;
}

shoal_result sh_ps_server_run(sh_ps_server *s)
{
    double cpu0 = cpu_seconds();
    shoal_result rc = SHOAL_OK;
    uint64_t log_every_ns = (uint64_t)(s->cfg.clock_log_ms > 0 ? s->cfg.clock_log_ms : 0) * 1000000ull;
    uint64_t next_log_ns = sh_now_ns() + log_every_ns, gone_checked_ns = 0;
    for (;;) {
        int wait_ms = 100;
        if (s->cfg.clock_log && log_every_ns) { /* on time, also while every worker waits */
            uint64_t now = sh_now_ns();
            if (now >= next_log_ns) {
                log_clocks(s);
                next_log_ns = now + log_every_ns;
            }
            uint64_t left_ms = (next_log_ns - now + 999999) / 1000000;
            if (left_ms < (uint64_t)wait_ms) wait_ms = left_ms ? (int)left_ms : 1;
        }
        int active = 0;
        for (int w = 0; w < s->nworkers; w++) active += s->alive[w] && !s->bye[w];
        if (!active) break;
        int peer = -1;
        size_t n = 0;
        send_holds(s);
        shoal_result r = shoal_recv_any(s->c, s->buf, s->buf_nbytes, SHOAL_UINT8, PS_TAG_TO_SERVER, wait_ms, &peer, &n);
        reap(s);
        if (r == SHOAL_OK) rc = handle(s, peer, n);
        else if (r == SHOAL_ERR_MISMATCH) refuse(s, peer, "longer than any message for this shard");
        else if (r != SHOAL_ERR_TIMEOUT && !(r == SHOAL_ERR_PEER && peer >= 0)) rc = r; /* a peer's: check_gone */
        if (rc != SHOAL_OK) break;
        /* between waits, at least every GONE_CHECK_NS: lost workers end their wait at once */
        uint64_t now = sh_now_ns();
        if (r == SHOAL_OK && now - gone_checked_ns < GONE_CHECK_NS) continue;
        gone_checked_ns = now;
        rc = check_gone(s);
        if (rc == SHOAL_OK) rc = check_silence(s);
        if (rc != SHOAL_OK) break;
        sh_ps_rounds_serve_pulls(s); /* a dropped worker may release others */
        answer_byes(s);
    }
    if (s->cfg.clock_log) log_clocks(s);
    if (rc == SHOAL_OK && s->cfg.save_path) rc = sh_ps_rounds_save(s);
    for (int tries = 0; s->ninflight && tries < 200; tries++) {
        reap(s);
        if (s->ninflight) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    s->st.cpu_s = cpu_seconds() - cpu0;
    return rc;
}

void sh_ps_server_stats(const sh_ps_server *s, sh_ps_stats *out) { *out = s->st; }

const float *sh_ps_server_params(const sh_ps_server *s, size_t *lo, size_t *count)
{
    *lo = s->lo;
    *count = s->count;
    return s->params;
}

void sh_ps_server_destroy(sh_ps_server *s)
{
    if (!s) return;
    for (int i = 0; i < s->ninflight; i++) shoal_wait(s->inflight[i]);
    free(s->inflight);
    sh_optim_destroy(s->opt);
    free(s->reply_base);
    free(s->acc);
    free(s->grad);
    free(s->grad_in);
    shoal_compressor_destroy(s->dec);
    free(s->clock);
    free(s->alive);
    free(s->bye);
    free(s->pending);
    free(s->held_ns);
    free(s->pulled_at);
    free(s->pushed_since);
    free(s->wa);
    free(s->wn);
    free(s->seg);
    free(s->seg_cover);
    free(s->seg_a);
    free(s->seg_n);
    free(s->seg_pushes);
    free(s->done_owed);
    free(s->last_seen_ns);
    free(s->buf);
    free(s->line);
    free(s);
}
