/* elastic_members.c — how an elastic job agrees on a generation's members, on its store:
 * each process arrives (a record under "e<gen>/a/<i>", joiners under "e<gen>/j/<i>"), the
 * first member to arrive decides and writes "e<gen>/closed" once, the others read it.
 * Not here: finding the store, building the communicator (elastic.c).
 * Proved by tests/comm/test_elastic.c. */
#include "comm/boot/elastic.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/sock.h"

enum {
    RECORD_NBYTES = 1024,
    RECORD_WAIT_MS = 2000, /* an arrival writes its record right after taking its place */
    PROBE_MS = 500,        /* a member's store takes a connection at once unless it is cut off */
    PROBE_ANSWER_MS = 500, /* ... and answers its handshake within this unless it is frozen */
    POLL_MS = 20,
    CLOSED_MAX_NBYTES = SH_STORE_MAX_VALUE_NBYTES
};

/* A name without spaces, so that a record stays one line of fields. */
static void plain(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src && src[n] && n + 1 < cap; n++) dst[n] = src[n] == ' ' || src[n] == '\n' ? '_' : src[n];
    dst[n] = 0;
    if (!n && cap > 1) snprintf(dst, cap, "?");
}

int sh_member_format(const sh_member *m, char *buf, size_t cap)
{
    char host[128], name[128], id[300];
    plain(host, sizeof host, m->cand_host);
    plain(name, sizeof name, m->hostname);
    plain(id, sizeof id, m->hostid);
    int n = snprintf(buf, cap, "%d %" PRIu64 " %d %" PRId64 " %d %d %s %d %s %s", m->job_rank, m->id, m->pid,
                     m->progress, m->joiner, m->secure, host, m->cand_port, name, id);
    return n < 0 ? 0 : (size_t)n < cap ? n : (int)cap - 1;
}

shoal_result sh_member_parse(const char *line, sh_member *m)
{
    memset(m, 0, sizeof *m);
    int n = sscanf(line, "%d %" SCNu64 " %d %" SCNd64 " %d %d %127s %d %127s %299s", &m->job_rank, &m->id, &m->pid,
                   &m->progress, &m->joiner, &m->secure, m->cand_host, &m->cand_port, m->hostname, m->hostid);
    if (n != 10) return SH_FAIL(SHOAL_ERR_FORMAT, "elastic: a member's record is damaged: \"%.80s\"", line);
    return SHOAL_OK;
}

shoal_result sh_elastic_arrive(sh_store *s, int64_t gen, const sh_member *m, int *index)
{
    char key[64], rec[RECORD_NBYTES];
    const char *list = m->joiner ? "j" : "a";
    int64_t after = 0;
    snprintf(key, sizeof key, "e%" PRId64 "/%s", gen, list);
    SH_TRY(sh_store_add(s, key, 1, &after));
    *index = (int)(after - 1);
    snprintf(key, sizeof key, "e%" PRId64 "/%s/%d", gen, list, *index);
    int n = sh_member_format(m, rec, sizeof rec);
    return sh_store_set(s, key, rec, (size_t)n);
}

/* The i-th record of a list; SHOAL_ERR_TIMEOUT when its process died between taking its
 * place and writing it. */
static shoal_result read_record(sh_store *s, int64_t gen, const char *list, int i, sh_member *m)
{
    char key[64], rec[RECORD_NBYTES];
    size_t n = 0;
    snprintf(key, sizeof key, "e%" PRId64 "/%s/%d", gen, list, i);
    SH_TRY(sh_store_get(s, key, rec, sizeof rec - 1, &n, RECORD_WAIT_MS));
    rec[n < sizeof rec ? n : sizeof rec - 1] = 0;
    return sh_member_parse(rec, m);
}

/* What the decider knows of a member of the last generation. */
typedef enum { M_AWAITED = 0, M_CAME, M_LOST, M_CUT, M_SILENT } member_state;

typedef struct {
    const sh_member *m;
    const sh_decide_opts *o;
    member_state st;
} probe_job;

/* Is a member that has not come still there? Its process on this host gone, or its store
 * refusing connections (the host answered, nobody listens): lost. No answer: cut off. A
 * store that takes the connection and then says nothing: a frozen process (SIGSTOP), which
 * will not come either. A store that answers: awaited (it is on its way). */
static void *probe_one(void *arg)
{
    probe_job *p = arg;
    const sh_member *m = p->m;
    p->st = M_AWAITED;
    if (!strcmp(m->hostid, p->o->me->hostid) && m->pid > 0 && kill(m->pid, 0) < 0 && errno == ESRCH) {
        p->st = M_LOST;
        return NULL;
    }
    int fd = -1;
    uint64_t dl = sh_sock_deadline(PROBE_MS);
    shoal_result rc = sh_sock_connect_once(m->cand_host, m->cand_port, dl, &fd);
    if (rc == SHOAL_ERR_PEER) p->st = M_LOST;
    else if (rc != SHOAL_OK) p->st = M_CUT;
    if (rc != SHOAL_OK) return NULL;
    char who[200];
    snprintf(who, sizeof who, "job rank %d's store at %s:%d", m->job_rank, m->cand_host, m->cand_port);
    rc = sh_auth_client(fd, p->o->key, "store", who, sh_sock_deadline(PROBE_ANSWER_MS), NULL);
    if (rc == SHOAL_ERR_TIMEOUT) p->st = M_SILENT;
    close(fd); /* after the handshake: a silent close, not a port scan */
    return NULL;
}

/* Every awaited member probed at once (a thread each). */
static void probe_awaited(const sh_decide_opts *o, member_state *st)
{
    probe_job *jobs = calloc((size_t)o->nold, sizeof *jobs);
    pthread_t *th = calloc((size_t)o->nold, sizeof *th);
    char *started = calloc((size_t)o->nold, 1);
    for (int k = 0; jobs && th && started && k < o->nold; k++) {
        if (st[k] != M_AWAITED) continue;
        if (o->tried && o->tried[k] != SHOAL_OK) { /* its store failed the search for one: no second look */
            st[k] = o->tried[k] == SHOAL_ERR_PEER ? M_LOST : o->tried[k] == SHOAL_ERR_TIMEOUT ? M_SILENT : M_CUT;
            continue;
        }
        jobs[k] = (probe_job){&o->old[k], o, M_AWAITED};
        started[k] = pthread_create(&th[k], NULL, probe_one, &jobs[k]) == 0;
        if (!started[k]) probe_one(&jobs[k]);
    }
    for (int k = 0; jobs && th && started && k < o->nold; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        if (st[k] == M_AWAITED) st[k] = jobs[k].st;
    }
    free(jobs);
    free(th);
    free(started);
}

static int find_member(const sh_decide_opts *o, uint64_t id)
{
    for (int k = 0; k < o->nold; k++)
        if (o->old[k].id == id) return k;
    return -1;
}

/* Arrivals of the last generation's members into came[] (by their place there), until none
 * is awaited, or settle_ms pass without one, or timeout_ms in all. */
static shoal_result gather_members(sh_store *s, int64_t gen, const sh_decide_opts *o, member_state *st, sh_member *came)
{
    char key[64];
    snprintf(key, sizeof key, "e%" PRId64 "/a", gen);
    uint64_t t0 = sh_now_ns(), last = t0;
    int seen = 0, probed = 0;
    for (;;) {
        int64_t n = 0;
        SH_TRY(sh_store_add(s, key, 0, &n));
        for (; seen < n; seen++) {
            sh_member m;
            if (read_record(s, gen, "a", seen, &m) != SHOAL_OK) continue; /* died on the way: not a member */
            int k = find_member(o, m.id);
            if (k < 0 || st[k] == M_CAME) continue;
            st[k] = M_CAME;
            came[k] = m;
            last = sh_now_ns();
        }
        if (!probed) { /* once: those gone for sure are not waited for */
            probe_awaited(o, st);
            probed = 1;
            continue;
        }
        int awaited = 0;
        for (int k = 0; k < o->nold; k++) awaited += st[k] == M_AWAITED;
        uint64_t now = sh_now_ns();
        if (!awaited || now >= last + (uint64_t)o->settle_ms * 1000000ull ||
            now >= t0 + (uint64_t)o->timeout_ms * 1000000ull)
            return SHOAL_OK;
        struct timespec ts = {0, POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static int by_job_rank(const void *a, const void *b)
{
    const sh_member *x = a, *y = b;
    if (x->job_rank != y->job_rank) return x->job_rank < y->job_rank ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Joiners that fit (up to max_world, the same SHOAL_SECURE), after the n members in list;
 * the others are told why. Returns the new count. */
static int add_joiners(sh_store *s, int64_t gen, const sh_decide_opts *o, sh_member *list, int n, int cap)
{
    char key[64];
    int64_t nj = 0;
    snprintf(key, sizeof key, "e%" PRId64 "/j", gen);
    if (sh_store_add(s, key, 0, &nj) != SHOAL_OK) return n;
    for (int i = 0; i < nj; i++) {
        sh_member m;
        if (read_record(s, gen, "j", i, &m) != SHOAL_OK) continue;
        int dup = 0;
        for (int q = 0; q < n; q++) dup |= list[q].id == m.id;
        if (dup) continue;
        char why[256] = "";
        if (m.secure != o->me->secure)
            snprintf(why, sizeof why, "it runs with SHOAL_SECURE=%d but the job with %d", m.secure, o->me->secure);
        else if (n >= o->max_world || n >= cap)
            snprintf(why, sizeof why, "the job has its maximum of %d ranks", o->max_world);
        if (why[0]) {
            snprintf(key, sizeof key, "e%" PRId64 "/no/%016" PRIx64, gen, m.id);
            (void)sh_store_set(s, key, why, strlen(why));
            continue;
        }
        m.joiner = 1;
        list[n++] = m;
    }
    return n;
}

/* "job rank 2 on hostc (gone)", ... for every member that did not come. */
static void name_left(const sh_decide_opts *o, const member_state *st, char *buf, size_t cap)
{
    static const char *const why[] = {"did not come", "", "gone", "unreachable", "not answering"};
    size_t len = 0;
    buf[0] = 0;
    int shown = 0;
    for (int k = 0; k < o->nold && len + 64 < cap; k++) {
        if (st[k] == M_CAME) continue;
        if (shown++ == 8) {
            len += (size_t)snprintf(buf + len, cap - len, ", ...");
            break;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%sjob rank %d on %.60s (%s)", len ? ", " : "", o->old[k].job_rank,
                                o->old[k].hostname, why[st[k]]);
    }
}

/* The list or the reason to stop, once. */
static shoal_result close_generation(sh_store *s, int64_t gen, const sh_decide_opts *o, const member_state *st,
                                     sh_member *list, int n)
{
    char key[64], left[700];
    int k_came = 0, k_lost = 0;
    for (int k = 0; k < o->nold; k++) {
        k_came += st[k] == M_CAME;
        k_lost += st[k] == M_LOST;
    }
    int base = o->nold - k_lost;
    int quorum = o->primary ? 2 * k_came >= base : 2 * k_came > base;
    name_left(o, st, left, sizeof left);
    snprintf(key, sizeof key, "e%" PRId64 "/closed", gen);
    char *v = malloc(CLOSED_MAX_NBYTES);
    if (!v) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    size_t len = 0;
    if (!quorum)
        len = (size_t)snprintf(v, CLOSED_MAX_NBYTES, "stop %s left; only %d of the %d ranks before still reach each "
                               "other (at %s): not a majority, so they cannot tell lost ranks from a cut link; "
                               "stopping, lest two halves of the job train on", left, k_came, base,
                               o->primary ? "the job's store" : "a member's store");
    else if (n < o->min_world)
        len = (size_t)snprintf(v, CLOSED_MAX_NBYTES, "stop %s left; %d rank%s remain%s, fewer than the job's minimum "
                               "of %d: stopping", left, n, n == 1 ? "" : "s", n == 1 ? "s" : "", o->min_world);
    else {
        qsort(list, (size_t)n, sizeof *list, by_job_rank);
        len = (size_t)snprintf(v, CLOSED_MAX_NBYTES, "ok %d %d\n", o->primary, n);
        for (int i = 0; i < n && len + RECORD_NBYTES < CLOSED_MAX_NBYTES; i++) {
            len += (size_t)sh_member_format(&list[i], v + len, CLOSED_MAX_NBYTES - len);
            v[len++] = '\n';
        }
    }
    if (len >= CLOSED_MAX_NBYTES) len = CLOSED_MAX_NBYTES - 1;
    shoal_result rc = sh_store_set(s, key, v, len);
    free(v);
    if (rc == SHOAL_OK && quorum && n >= o->min_world) {
        char g[32];
        int gl = snprintf(g, sizeof g, "%" PRId64, gen);
        rc = sh_store_set(s, "e/gen", g, (size_t)gl);
    }
    return rc;
}

shoal_result sh_elastic_decide(sh_store *s, int64_t gen, const sh_decide_opts *o)
{
    member_state *st = calloc((size_t)o->nold + 1, sizeof *st);
    sh_member *came = calloc((size_t)o->nold + 1, sizeof *came);
    int cap = o->max_world > o->nold ? o->max_world : o->nold;
    sh_member *list = calloc((size_t)cap + 1, sizeof *list);
    shoal_result rc = SHOAL_OK;
    if (!st || !came || !list) {
        rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
        goto done;
    }
    rc = gather_members(s, gen, o, st, came);
    if (rc != SHOAL_OK) goto done;
    int n = 0;
    for (int k = 0; k < o->nold; k++)
        if (st[k] == M_CAME && n < cap) list[n++] = came[k];
    n = add_joiners(s, gen, o, list, n, cap);
    rc = close_generation(s, gen, o, st, list, n);
done:
    free(st);
    free(came);
    free(list);
    return rc;
}

shoal_result sh_elastic_wait_closed(sh_store *s, int64_t gen, int timeout_ms, int *primary, sh_member **list, int *n)
{
    *list = NULL;
    *n = 0;
    char key[64];
    snprintf(key, sizeof key, "e%" PRId64 "/closed", gen);
    char *v = malloc(CLOSED_MAX_NBYTES + 1);
    if (!v) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    size_t vn = 0;
    shoal_result rc = sh_store_get(s, key, v, CLOSED_MAX_NBYTES, &vn, timeout_ms);
    if (rc != SHOAL_OK) {
        free(v);
        return rc;
    }
    v[vn] = 0;
    int count = 0;
    if (!strncmp(v, "stop ", 5)) {
        rc = SH_FAIL(SHOAL_ERR_PEER, "%s", v + 5);
    } else if (sscanf(v, "ok %d %d", primary, &count) != 2 || count < 1) {
        rc = SH_FAIL(SHOAL_ERR_FORMAT, "elastic: generation %" PRId64 "'s list is damaged", gen);
    } else if ((rc = sh_calloc((size_t)count, sizeof **list, (void **)list)) == SHOAL_OK) {
        char *line = strchr(v, '\n');
        for (int i = 0; i < count && rc == SHOAL_OK; i++) {
            if (!line) {
                rc = SH_FAIL(SHOAL_ERR_FORMAT, "elastic: generation %" PRId64 "'s list is short", gen);
                break;
            }
            line++;
            char *end = strchr(line, '\n');
            if (end) *end = 0;
            rc = sh_member_parse(line, &(*list)[i]);
            line = end;
        }
        if (rc == SHOAL_OK) *n = count;
    }
    free(v);
    if (rc != SHOAL_OK) {
        free(*list);
        *list = NULL;
    }
    return rc;
}

int sh_elastic_refusal(sh_store *s, int64_t gen, uint64_t id, char *why, size_t cap)
{
    char key[64];
    size_t n = 0;
    snprintf(key, sizeof key, "e%" PRId64 "/no/%016" PRIx64, gen, id);
    if (sh_store_get(s, key, why, cap - 1, &n, 0) != SHOAL_OK) return 0;
    why[n < cap ? n : cap - 1] = 0;
    return 1;
}
