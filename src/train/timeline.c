/* timeline.c — the Chrome trace of a run: clock alignment against rank 0, each rank's
 * events as JSON in rank 0's clock, gathered by rank 0 into one file.
 * Not here: recording (base/trace.c and the recording points), flags (cmd_train.c).
 * Proved by tests/cli/test_timeline.c. */

/* Clock alignment (NTP's idea, Cristian's algorithm): rank r sends rank 0 a ping at t0 of
 * its clock, rank 0 answers with T of its clock, r reads t1 (both legs are broadcasts, see
 * align_clocks). If the answer took half the
 * round trip, T happened at (t0 + t1) / 2 of r's clock, so offset = T - (t0 + t1) / 2 and
 * the error is at most (t1 - t0) / 2. Of ALIGN_ROUNDS rounds the one with the smallest
 * round trip wins. Every event's time is then local + offset - rank 0's start, in µs. */
#include "train/timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/trace.h"
#include "base/util.h"

#define ALIGN_ROUNDS 16

struct sh_timeline {
    shoal_comm *c;           /* borrowed; NULL alone */
    int rank, world;
    char path[1024];
    char role[64];
    int64_t offset_ns;       /* rank 0's clock minus this rank's */
    int64_t rtt_ns;          /* the round trip of the winning ping (0 on rank 0) */
    uint64_t base_ns;        /* rank 0's clock at the start: time 0 of the trace */
};

shoal_result sh_timeline_parse_steps(const char *text, int64_t *lo, int64_t *hi)
{
    char *end = NULL;
    errno = 0;
    long long a = strtoll(text, &end, 10);
    if (end == text || errno || a < 0) goto bad;
    if (*end == 0) {
        *lo = a;
        *hi = a + 1;
        return SHOAL_OK;
    }
    if (*end != ':') goto bad;
    const char *b_text = end + 1;
    if (*b_text == 0) {
        *lo = a;
        *hi = -1;
        return SHOAL_OK;
    }
    long long b = strtoll(b_text, &end, 10);
    if (end == b_text || *end || errno || b <= a) goto bad;
    *lo = a;
    *hi = b;
    return SHOAL_OK;
bad:
    return SH_FAIL(SHOAL_ERR_INVALID, "--timeline-steps %s: expected A:B with 0 <= A < B (steps A to "
                   "B-1, counted from 0), A: (from A to the end) or A (one step)", text);
}

/* Every rank's offset to rank 0, one rank r after the other. The ping is a broadcast rooted
 * at r, the answer a broadcast rooted at 0 carrying rank 0's clock, read between the two:
 * rank 0 cannot finish the first before r started it, nor r the second before rank 0
 * started it, so rank 0's reading lies inside r's round trip (the bound above holds). Every
 * rank joins each broadcast (collectives, not point-to-point messages: the tested path). */
static shoal_result align_clocks(sh_timeline *tl)
{
    for (int r = 1; r < tl->world; r++) {
        int64_t best_rtt = INT64_MAX;
        for (int k = 0; k < ALIGN_ROUNDS; k++) {
            int64_t ping = (int64_t)sh_now_ns(), ref = 0;
            SH_TRY(shoal_broadcast(tl->c, &ping, &ping, 1, SHOAL_INT64, r));
            if (tl->rank == 0) ref = (int64_t)sh_now_ns();
            SH_TRY(shoal_broadcast(tl->c, &ref, &ref, 1, SHOAL_INT64, 0));
            if (tl->rank != r) continue;
            int64_t pong = (int64_t)sh_now_ns(), rtt = pong - ping;
            if (rtt < best_rtt) {
                best_rtt = rtt;
                tl->offset_ns = ref - (ping + rtt / 2);
            }
        }
        if (tl->rank == r) tl->rtt_ns = best_rtt;
    }
    return SHOAL_OK;
}

shoal_result sh_timeline_start(shoal_comm *c, const char *path, int64_t step_lo, int64_t step_hi,
                               const char *role, sh_timeline **out)
{
    *out = NULL;
    sh_timeline *tl = calloc(1, sizeof *tl);
    if (!tl) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    tl->c = c;
    tl->rank = c ? shoal_comm_rank(c) : 0;
    tl->world = c ? shoal_comm_world(c) : 1;
    snprintf(tl->path, sizeof tl->path, "%s", path);
    snprintf(tl->role, sizeof tl->role, "%s", role);
    /* Rank 0 makes sure the file can be written before anyone trains for nothing. */
    shoal_result rc = SHOAL_OK;
    if (tl->rank == 0) {
        FILE *f = fopen(path, "w");
        if (!f) rc = SH_FAIL(SHOAL_ERR_IO, "--timeline %s: cannot create the file: %s", path, strerror(errno));
        else fclose(f);
    }
    if (c && tl->world > 1) {
        int64_t ok = rc == SHOAL_OK, all_ok = 0;
        shoal_result r = shoal_allreduce(c, &ok, &all_ok, 1, SHOAL_INT64, SHOAL_MIN);
        if (r == SHOAL_OK && !all_ok && rc == SHOAL_OK)
            r = SH_FAIL(SHOAL_ERR_IO, "--timeline %s: rank 0 cannot create the file", path);
        if (rc == SHOAL_OK) rc = r;
        if (rc == SHOAL_OK) rc = align_clocks(tl);
        uint64_t base = sh_now_ns();
        if (rc == SHOAL_OK) rc = shoal_broadcast(c, &base, &base, 1, SHOAL_INT64, 0);
        tl->base_ns = base;
    } else {
        tl->base_ns = sh_now_ns();
    }
    if (rc != SHOAL_OK) {
        free(tl);
        return rc;
    }
    sh_trace_reset();
    sh_trace_set_step(0);
    sh_trace_arm(step_lo, step_hi);
    *out = tl;
    return SHOAL_OK;
}

/* ---- JSON ---- */

typedef struct {
    char *b;
    size_t n, cap;
    int failed;
} sbuf;

static void put(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *s, const char *fmt, ...)
{
    if (s->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(s->b + s->n, s->cap - s->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            s->failed = 1;
            return;
        }
        if ((size_t)k < s->cap - s->n) {
            s->n += (size_t)k;
            return;
        }
        size_t cap = s->cap ? s->cap * 2 : 1 << 16;
        while (cap - s->n <= (size_t)k) cap *= 2;
        char *b = realloc(s->b, cap);
        if (!b) {
            s->failed = 1;
            return;
        }
        s->b = b;
        s->cap = cap;
    }
}

/* A JSON string body: quotes, backslashes and control characters escaped. */
static void put_str(sbuf *s, const char *text)
{
    put(s, "\"");
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\') put(s, "\\%c", *p);
        else if (*p < 0x20) put(s, "\\u%04x", *p);
        else put(s, "%c", *p);
    }
    put(s, "\"");
}

static const char *track_name(int track, char *buf, size_t nbytes)
{
    switch (track) {
    case SH_TRACK_STEP: return "step";
    case SH_TRACK_DATA: return "data loading";
    case SH_TRACK_FORWARD: return "forward (per layer)";
    case SH_TRACK_BACKWARD: return "backward (per layer)";
    case SH_TRACK_WAIT: return "waiting for communication";
    case SH_TRACK_COMM: return "communicator thread";
    case SH_TRACK_OPTIM: return "optimizer";
    case SH_TRACK_CKPT: return "checkpoint";
    case SH_TRACK_EVAL: return "evaluation";
    case SH_TRACK_PULL: return "ps pull";
    case SH_TRACK_PUSH: return "ps push";
    case SH_TRACK_SERVE: return "server: applying pushes";
    case SH_TRACK_STALE: return "server: pulls held (staleness bound)";
    case SH_TRACK_PIPE: return "pipeline stage (micro-batches, idle)";
    default: break;
    }
    snprintf(buf, nbytes, "bucket %d", track - SH_TRACK_BUCKET0);
    return buf;
}

static const char *track_cat(int track)
{
    switch (track) {
    case SH_TRACK_STEP: return "step";
    case SH_TRACK_DATA: return "data";
    case SH_TRACK_FORWARD: return "forward";
    case SH_TRACK_BACKWARD: return "backward";
    case SH_TRACK_WAIT: return "wait";
    case SH_TRACK_OPTIM: return "optimizer";
    case SH_TRACK_CKPT: return "checkpoint";
    case SH_TRACK_EVAL: return "eval";
    case SH_TRACK_PULL: case SH_TRACK_PUSH: case SH_TRACK_SERVE: case SH_TRACK_STALE: return "ps";
    case SH_TRACK_PIPE: return "pipeline";
    default: return "comm";
    }
}

#define MAX_TRACKS 4096

typedef struct {
    sh_timeline *tl;
    sbuf *s;
    unsigned char seen[MAX_TRACKS];
} emit_ctx;

static void emit_event(void *arg, const sh_trace_event *ev)
{
    emit_ctx *x = arg;
    sh_timeline *tl = x->tl;
    int64_t t = (int64_t)ev->start_ns + tl->offset_ns - (int64_t)tl->base_ns;
    if (ev->track > 0 && ev->track < MAX_TRACKS) x->seen[ev->track] = 1;
    put(x->s, "{\"name\":");
    put_str(x->s, ev->name);
    put(x->s, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
        "\"args\":{\"step\":%" PRId64, track_cat(ev->track), tl->rank, ev->track, (double)t * 1e-3,
        (double)ev->dur_ns * 1e-3, ev->step);
    for (int i = 0; i < SH_TRACE_NARGS; i++)
        if (ev->key[i]) put(x->s, ",\"%s\":%" PRId64, ev->key[i], ev->val[i]);
    for (int i = 0; i < 2; i++)
        if (ev->skey[i] && ev->sval[i]) {
            put(x->s, ",\"%s\":", ev->skey[i]);
            put_str(x->s, ev->sval[i]);
        }
    put(x->s, "}},\n");
}

/* This rank's part of the traceEvents array: names of the process and its tracks, then
 * every event, each line ending in ",\n". */
static shoal_result serialize(sh_timeline *tl, sbuf *s)
{
    emit_ctx *x = calloc(1, sizeof *x);
    if (!x) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    x->tl = tl;
    x->s = s;
    sh_trace_each(emit_event, x);
    char pname[160];
    const char *host = tl->c ? shoal_comm_host(tl->c, tl->rank) : NULL;
    snprintf(pname, sizeof pname, "rank %d (%s%s%s)", tl->rank, tl->role, host ? ", " : "", host ? host : "");
    put(s, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", tl->rank);
    put_str(s, pname);
    put(s, "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":"
        "{\"sort_index\":%d}},\n", tl->rank, tl->rank);
    for (int k = 1; k < MAX_TRACKS; k++) {
        if (!x->seen[k]) continue;
        char buf[32];
        put(s, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}},\n",
            tl->rank, k, track_name(k, buf, sizeof buf));
        put(s, "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":"
            "{\"sort_index\":%d}},\n", tl->rank, k, k);
    }
    free(x);
    if (s->failed) return SH_FAIL(SHOAL_ERR_NOMEM, "--timeline: out of memory for %zu events", sh_trace_count());
    return SHOAL_OK;
}

static shoal_result write_file(sh_timeline *tl, char **parts, const int64_t *nbytes,
                               const int64_t *offsets, const int64_t *rtts, const int64_t *dropped)
{
    FILE *f = fopen(tl->path, "w");
    if (!f) return SH_FAIL(SHOAL_ERR_IO, "--timeline %s: cannot create the file: %s", tl->path, strerror(errno));
    fprintf(f, "{\"traceEvents\":[\n");
    for (int r = 0; r < tl->world; r++) fwrite(parts[r], 1, (size_t)nbytes[r], f);
    /* A last metadata event: JSON allows no trailing comma after the parts' last line. */
    fprintf(f, "{\"name\":\"clock_alignment\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{}}\n],\n");
    fprintf(f, "\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"generator\":\"shoal\",\"ranks\":%d,"
            "\"clock_alignment\":\"each rank's CLOCK_MONOTONIC shifted to rank 0's by the ping with the "
            "smallest of %d round trips; error at most half that round trip\",\"offset_ns\":[",
            tl->world, ALIGN_ROUNDS);
    for (int r = 0; r < tl->world; r++) fprintf(f, "%s%" PRId64, r ? "," : "", offsets[r]);
    fprintf(f, "],\"rtt_ns\":[");
    for (int r = 0; r < tl->world; r++) fprintf(f, "%s%" PRId64, r ? "," : "", rtts[r]);
    fprintf(f, "],\"dropped_events\":[");
    for (int r = 0; r < tl->world; r++) fprintf(f, "%s%" PRId64, r ? "," : "", dropped[r]);
    fprintf(f, "]}}\n");
    if (ferror(f) | fclose(f))
        return SH_FAIL(SHOAL_ERR_IO, "--timeline %s: write failed (disk full?)", tl->path);
    return SHOAL_OK;
}

shoal_result sh_timeline_finish(sh_timeline *tl)
{
    sh_trace_disarm();
    sbuf s = {0};
    shoal_result rc = serialize(tl, &s);
    int world = tl->world;
    /* per rank: part bytes, clock offset, round trip, dropped events */
    int64_t mine[4] = {(int64_t)s.n, tl->offset_ns, tl->rtt_ns, (int64_t)sh_trace_dropped()};
    int64_t *all = calloc((size_t)world * 4, sizeof *all);
    int64_t *col = calloc((size_t)world * 4, sizeof *col);
    char **parts = calloc((size_t)world, sizeof *parts);
    if (!all || !col || !parts) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    if (rc == SHOAL_OK && tl->c && world > 1) rc = shoal_allgather(tl->c, mine, all, 4, SHOAL_INT64);
    else if (all) memcpy(all, mine, sizeof mine);
    for (int r = 0; r < world; r++)
        for (int k = 0; all && col && k < 4; k++) col[k * world + r] = all[r * 4 + k];
    /* Each rank's part reaches rank 0 by a broadcast rooted at that rank: every rank takes
     * part (the others drop what they get), through the collectives' tested paths. */
    int64_t most = 0;
    for (int r = 1; rc == SHOAL_OK && r < world; r++)
        if (col[r] > most) most = col[r];
    char *scratch = most ? malloc((size_t)most) : NULL;
    if (most && !scratch) rc = SH_FAIL(SHOAL_ERR_NOMEM, "--timeline: out of memory for %lld bytes of events",
                                       (long long)most);
    if (rc == SHOAL_OK && parts) parts[0] = s.b;
    for (int r = 1; rc == SHOAL_OK && r < world; r++) {
        if (!col[r]) continue;
        char *buf = tl->rank == r ? s.b : scratch;
        if (tl->rank == 0 && !(buf = parts[r] = malloc((size_t)col[r])))
            rc = SH_FAIL(SHOAL_ERR_NOMEM, "--timeline: out of memory for rank %d's events", r);
        if (rc == SHOAL_OK) rc = shoal_broadcast(tl->c, buf, buf, (size_t)col[r], SHOAL_UINT8, r);
    }
    free(scratch);
    if (rc == SHOAL_OK && tl->rank == 0)
        rc = write_file(tl, parts, col, col + world, col + 2 * world, col + 3 * world);
    for (int r = 1; parts && r < world; r++) free(parts[r]);
    free(parts);
    free(col);
    free(all);
    free(s.b);
    sh_trace_reset();
    free(tl);
    return rc;
}

void sh_timeline_abandon(sh_timeline *tl)
{
    if (!tl) return;
    sh_trace_reset();
    free(tl);
}
