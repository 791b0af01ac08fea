/* elastic.c — elastic communicators: every process keeps a store of its own beside rank
 * 0's, so that the job's address book outlives any rank; shoal_comm_regroup finds the
 * store (the generation's, else the first member's that answers), takes part in the
 * agreement (elastic_members.c) and builds the new generation's communicator from the
 * list; a process that finds the job running joins it the same way.
 * Not here: the agreement itself (elastic_members.c), links (transport/), what the
 * members' progress means (src/train/elastic.c).
 * Proved by tests/comm/test_elastic.c. */
#include "comm/boot/elastic.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/boot.h"
#include "comm/boot/interrupt.h"
#include "comm/boot/sock.h"
#include "comm/transport/transport.h"

enum {
    FIND_STORE_MS = 700,  /* a store answers at once; one that does not is frozen or cut off */
    JOINERS_EVERY_MS = 200
};

struct sh_elastic {
    int min_world, max_world, settle_ms, timeout_ms;
    int64_t gen;
    sh_member me;             /* this process's record (its progress set at each regroup) */
    sh_member *members;       /* the generation's, in rank order */
    int nmembers;
    char store_host[128];     /* where the generation formed */
    int store_port;
    char key[640];
    sh_store_server *servers[2]; /* this process's own store; rank 0's, the job's first */
    shoal_result *tried;      /* [nmembers]: what the last search for the store found of each */
    shoal_regroup last;
    uint64_t joiners_at_ns;
    int joiners;
};

/* What a communicator of the job is made with, whatever its generation. */
typedef struct {
    sh_transport_kind transport;
    sh_algo_kind algo;
    int timeout_ms, secure;
    size_t chunk_nbytes;
} settings;

static void settings_of(const shoal_comm *c, settings *st)
{
    *st = (settings){c->transport, c->algo, c->timeout_ms, c->secure, c->chunk_nbytes};
}

void sh_elastic_free(sh_elastic *e)
{
    if (!e) return;
    free(e->members);
    free(e->tried);
    sh_store_server_stop(e->servers[0]);
    sh_store_server_stop(e->servers[1]);
    free(e);
}

/* The state every process of an elastic job keeps, and the store of its own (listening
 * where the other ranks reach this host). */
static shoal_result elastic_new(const shoal_comm_opts *o, const shoal_comm *c, int world, int own_store, sh_elastic **out)
{
    *out = NULL;
    long settle = 1000, bind_all = 0;
    SH_TRY(sh_env_long("SHOAL_ELASTIC_SETTLE_MS", &settle));
    SH_TRY(sh_env_long("SHOAL_BIND_ALL", &bind_all));
    if (o->elastic_min > world)
        return SH_FAIL(SHOAL_ERR_INVALID, "elastic: the minimum of %d ranks is above the job's %d", o->elastic_min, world);
    sh_elastic *e = NULL;
    SH_TRY(sh_calloc(1, sizeof *e, (void **)&e));
    e->min_world = o->elastic_min;
    e->max_world = o->elastic_max > 0 ? o->elastic_max : world;
    if (e->max_world < world) e->max_world = world;
    e->settle_ms = (int)settle;
    e->timeout_ms = c->timeout_ms;
    snprintf(e->key, sizeof e->key, "%s", sh_store_job_key(c->store));
    snprintf(e->store_host, sizeof e->store_host, "%s", sh_store_host(c->store));
    e->store_port = sh_store_port(c->store);
    sh_member *m = &e->me;
    m->job_rank = c->rank;
    m->id = c->proc_id;
    m->pid = (int)getpid();
    m->progress = -1;
    m->secure = c->secure;
    gethostname(m->hostname, sizeof m->hostname - 1);
    sh_boot_host_id(m->hostid, sizeof m->hostid);
    shoal_result rc = SHOAL_OK;
    if (!own_store) { /* rank 0: its store is the job's */
        snprintf(m->cand_host, sizeof m->cand_host, "%s", e->store_host);
        m->cand_port = e->store_port;
    } else {
        rc = sh_sock_local_addr(e->store_host, m->cand_host, sizeof m->cand_host);
        if (rc == SHOAL_OK) rc = sh_store_server_start(bind_all ? NULL : m->cand_host, 0, e->key, 0, 0, &e->servers[0]);
        if (rc == SHOAL_OK) m->cand_port = sh_store_server_port(e->servers[0]);
    }
    if (rc != SHOAL_OK) {
        sh_elastic_free(e);
        return rc;
    }
    sh_job_note_elastic();
    *out = e;
    return SHOAL_OK;
}

shoal_result sh_elastic_begin(shoal_comm *c, const shoal_comm_opts *o)
{
    sh_elastic *e = NULL;
    SH_TRY(elastic_new(o, c, c->world, c->rank != 0, &e));
    c->elastic = e;
    char key[64], rec[1024];
    snprintf(key, sizeof key, "w/elastic/%d", c->rank);
    int n = sh_member_format(&e->me, rec, sizeof rec);
    return sh_store_set(c->store, key, rec, (size_t)n);
}

shoal_result sh_elastic_started(shoal_comm *c)
{
    sh_elastic *e = c->elastic;
    SH_TRY(sh_calloc((size_t)c->world, sizeof *e->members, (void **)&e->members));
    e->nmembers = c->world;
    for (int r = 0; r < c->world; r++) {
        char key[64], rec[1024];
        size_t n = 0;
        snprintf(key, sizeof key, "w/elastic/%d", r);
        SH_TRY(sh_store_get(c->store, key, rec, sizeof rec - 1, &n, c->timeout_ms));
        rec[n] = 0;
        SH_TRY(sh_member_parse(rec, &e->members[r]));
    }
    if (c->rank == 0) SH_TRY(sh_store_set(c->store, "e/gen", "0", 1));
    e->last = (shoal_regroup){.generation = 0, .rank = c->rank, .world = c->world, .progress = -1};
    return SHOAL_OK;
}

/* The generation's store, else the first member's that answers (in rank order): *primary
 * = 1 for the generation's own. */
static shoal_result find_store(sh_elastic *e, sh_store **s, int *primary)
{
    *s = NULL;
    char tried[600] = "";
    size_t len = 0;
    free(e->tried);
    e->tried = calloc((size_t)e->nmembers + 1, sizeof *e->tried); /* SHOAL_OK: not tried, or answered */
    for (int i = -1; i < e->nmembers; i++) {
        const char *host = i < 0 ? e->store_host : e->members[i].cand_host;
        int port = i < 0 ? e->store_port : e->members[i].cand_port;
        int seen = 0;
        for (int q = -1; q < i && !seen; q++)
            seen = !strcmp(host, q < 0 ? e->store_host : e->members[q].cand_host) &&
                   port == (q < 0 ? e->store_port : e->members[q].cand_port);
        if (seen) continue;
        shoal_result rc = sh_store_connect_once(host, port, e->key, FIND_STORE_MS, s);
        for (int k = 0; e->tried && rc != SHOAL_OK && k < e->nmembers; k++) /* whose store it is */
            if (!strcmp(host, e->members[k].cand_host) && port == e->members[k].cand_port) e->tried[k] = rc;
        if (rc == SHOAL_OK) {
            *primary = i < 0;
            if (i >= 0) SH_LOG_I("comm", "elastic: the job's store at %s:%d is lost; job rank %d's at %s:%d takes over",
                                 e->store_host, e->store_port, e->members[i].job_rank, host, port);
            return SHOAL_OK;
        }
        if (sh_interrupted()) return SH_FAIL(SHOAL_ERR_INTERRUPTED, "stopped by %s while looking for the job's store",
                                             sh_interrupt_name(sh_interrupted()));
        if (len + 40 < sizeof tried) len += (size_t)snprintf(tried + len, sizeof tried - len, "%s%s:%d", len ? ", " : "", host, port);
    }
    return SH_FAIL(SHOAL_ERR_PEER, "elastic: no store of the job answers (tried %s): this rank is cut off from the others",
                   tried);
}

/* The new generation's communicator from its list; takes s (closed on failure). */
static shoal_result build(const settings *st, sh_elastic *e, const sh_member *list, int n, int me, int64_t gen,
                          sh_store *s, shoal_comm **out)
{
    *out = NULL;
    shoal_comm *c = NULL;
    shoal_result rc = sh_comm_alloc(me, n, &c);
    if (rc != SHOAL_OK) {
        sh_store_close(s);
        return rc;
    }
    c->job_rank = malloc(sizeof *c->job_rank * (size_t)n);
    if (!c->job_rank) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && rc == SHOAL_OK; i++) {
        if (list[i].secure != st->secure)
            rc = SH_FAIL(SHOAL_ERR_MISMATCH, "job rank %d runs with SHOAL_SECURE=%d but this rank with %d",
                         list[i].job_rank, list[i].secure, st->secure);
        c->job_rank[i] = list[i].job_rank;
        c->hostname[i] = strdup(list[i].hostname);
        c->host_of[i] = -1;
        for (int q = 0; q < i && c->host_of[i] < 0; q++)
            if (!strcmp(list[q].hostid, list[i].hostid)) c->host_of[i] = c->host_of[q];
        if (c->host_of[i] < 0) {
            int h = 0;
            for (int q = 0; q < i; q++)
                if (c->host_of[q] + 1 > h) h = c->host_of[q] + 1;
            c->host_of[i] = h;
        }
    }
    sh_comm_index_hosts(c);
    c->transport = st->transport;
    c->algo = st->algo;
    c->timeout_ms = st->timeout_ms;
    c->secure = st->secure;
    c->chunk_nbytes = st->chunk_nbytes;
    c->proc_id = e->me.id;
    snprintf(c->prefix, sizeof c->prefix, "e%" PRId64, gen);
    c->store = s;
    if (rc == SHOAL_OK) rc = sh_transport_connect_all(c);
    char key[64];
    snprintf(key, sizeof key, "e%" PRId64 "/ready", gen);
    if (rc == SHOAL_OK) rc = sh_store_barrier(s, key, n, c->timeout_ms); /* every member's links: confirmed */
    if (rc != SHOAL_OK) {
        shoal_comm_destroy(c); /* closes s */
        return rc;
    }
    *out = c;
    return SHOAL_OK;
}

/* What changed from e's generation to list's, into e->last; the launcher is told of the
 * ranks that left. */
static void note_change(sh_elastic *e, const sh_member *list, int n, int me, int64_t gen)
{
    shoal_regroup *g = &e->last;
    memset(g, 0, sizeof *g);
    g->generation = gen;
    g->rank = me;
    g->world = n;
    g->joiner = e->me.joiner;
    g->progress = -1;
    for (int i = 0; i < n; i++) {
        if (list[i].progress > g->progress) {
            g->progress = list[i].progress;
            g->progress_rank = i;
        }
        if (!list[i].joiner) continue; /* the decider marks those not of the last generation */
        if (g->njoined < SHOAL_REGROUP_LIST_MAX) g->joined[g->njoined] = list[i].job_rank;
        g->njoined++;
    }
    for (int k = 0; k < e->nmembers; k++) {
        int stays = 0;
        for (int i = 0; i < n; i++) stays |= e->members[k].id == list[i].id;
        if (stays) continue;
        if (g->nleft < SHOAL_REGROUP_LIST_MAX) g->left[g->nleft] = e->members[k].job_rank;
        g->nleft++;
        shoal_job_note_dropped(e->members[k].job_rank);
    }
}

/* One process's way into the next generation: arrive, decide when first, read the list,
 * build; a member left out (it came too late) tries again as a joiner, and a generation
 * whose communicator cannot be built (a member lost meanwhile) is followed by the next. */
static shoal_result regroup(sh_elastic *e, const settings *st, shoal_comm **out)
{
    *out = NULL;
    uint64_t dl = sh_now_ns() + (uint64_t)(3 * (int64_t)e->timeout_ms + e->settle_ms) * 1000000ull;
    int64_t gen = e->gen + 1;
    for (;;) {
        if (sh_now_ns() > dl)
            return SH_FAIL(SHOAL_ERR_TIMEOUT, "elastic: no new generation of the job formed within %d ms",
                           3 * e->timeout_ms + e->settle_ms);
        sh_store *s = NULL;
        int primary = 0, index = 0, n = 0, formed_primary = 0;
        if (!e->me.joiner) {
            SH_TRY(find_store(e, &s, &primary));
        } else {
            SH_TRY(sh_store_connect_once(e->store_host, e->store_port, e->key, FIND_STORE_MS + e->timeout_ms, &s));
            char g[32];
            size_t gn = 0;
            if (sh_store_get(s, "e/gen", g, sizeof g - 1, &gn, 0) == SHOAL_OK) {
                g[gn] = 0;
                gen = strtoll(g, NULL, 10) + 1;
            }
        }
        shoal_result rc = sh_elastic_arrive(s, gen, &e->me, &index);
        if (rc == SHOAL_OK && !e->me.joiner && index == 0) {
            sh_decide_opts d = {e->members, e->nmembers, &e->me, primary, e->min_world, e->max_world,
                                e->settle_ms, e->timeout_ms, e->key, e->tried};
            rc = sh_elastic_decide(s, gen, &d);
        }
        sh_member *list = NULL;
        if (rc == SHOAL_OK)
            rc = sh_elastic_wait_closed(s, gen, e->me.joiner ? e->timeout_ms : 2 * e->timeout_ms + e->settle_ms,
                                        &formed_primary, &list, &n);
        if (rc == SHOAL_ERR_TIMEOUT && !e->me.joiner) { /* the decider was lost: the next one decides */
            sh_store_close(s);
            gen++;
            continue;
        }
        if (rc == SHOAL_ERR_TIMEOUT)
            rc = SH_FAIL(SHOAL_ERR_TIMEOUT, "elastic: the job at %s:%d did not take this process in within %d ms (it "
                         "takes new ranks at its next step's end: is it stuck?)", e->store_host, e->store_port,
                         e->timeout_ms);
        int me = -1;
        for (int i = 0; rc == SHOAL_OK && i < n; i++)
            if (list[i].id == e->me.id) me = i;
        if (rc == SHOAL_OK && me < 0) { /* not on the list */
            char why[300];
            free(list);
            if (e->me.joiner && sh_elastic_refusal(s, gen, e->me.id, why, sizeof why)) {
                sh_store_close(s);
                return SH_FAIL(SHOAL_ERR_PEER, "elastic: the job at %s:%d did not take this process in: %s",
                               e->store_host, e->store_port, why);
            }
            if (!e->me.joiner)
                SH_LOG_W("comm", "elastic: generation %" PRId64 " formed without this rank (it came too late); it "
                         "joins the next", gen);
            e->me.joiner = 1; /* from the store where it formed */
            snprintf(e->store_host, sizeof e->store_host, "%s", sh_store_host(s));
            e->store_port = sh_store_port(s);
            sh_store_close(s);
            continue;
        }
        if (rc != SHOAL_OK) {
            sh_store_close(s);
            return rc;
        }
        shoal_comm *c = NULL;
        char host[128];
        snprintf(host, sizeof host, "%s", sh_store_host(s));
        int port = sh_store_port(s);
        rc = build(st, e, list, n, me, gen, s, &c); /* takes s */
        if (rc != SHOAL_OK) {
            if (rc == SHOAL_ERR_INTERRUPTED || rc == SHOAL_ERR_MISMATCH || rc == SHOAL_ERR_NOMEM) {
                free(list);
                return rc;
            }
            SH_LOG_W("comm", "elastic: generation %" PRId64 " could not be built (%s); trying the next", gen,
                     shoal_last_error_message());
            free(list);
            gen++;
            continue;
        }
        note_change(e, list, n, me, gen);
        free(e->members);
        e->members = list;
        e->nmembers = n;
        e->gen = gen;
        e->me.joiner = 0;
        snprintf(e->store_host, sizeof e->store_host, "%s", host);
        e->store_port = port;
        c->elastic = e;
        SH_LOG_I("comm", "elastic: generation %" PRId64 " of %d ranks at %s:%d (%s store); this is rank %d", gen, n,
                 host, port, formed_primary ? "the job's" : "a new", me);
        *out = c;
        return SHOAL_OK;
    }
}

shoal_result sh_elastic_join(const shoal_comm_opts *o, shoal_comm *skel, shoal_comm **out)
{
    *out = NULL;
    sh_elastic *e = NULL;
    settings st;
    settings_of(skel, &st);
    shoal_result rc = elastic_new(o, skel, skel->world, 1, &e);
    sh_store_close(skel->store);
    skel->store = NULL;
    sh_store_server_stop(skel->store_server);
    skel->store_server = NULL;
    sh_comm_free(skel);
    if (rc != SHOAL_OK) return rc;
    e->me.joiner = 1;
    SH_LOG_I("comm", "elastic: the job at %s:%d already runs; this process joins it at its next regroup", e->store_host,
             e->store_port);
    rc = regroup(e, &st, out);
    if (rc != SHOAL_OK) sh_elastic_free(e);
    return rc;
}

/* ---- public ---- */

static shoal_result check_elastic(const shoal_comm *c, const char *what)
{
    if (!c || c->magic != SH_COMM_MAGIC)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: not a live communicator (used after shoal_comm_destroy?)", what);
    if (!c->elastic)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: the communicator is not elastic (create it with elastic_min > 0)", what);
    return SHOAL_OK;
}

shoal_result shoal_comm_regroup(shoal_comm **cp, int64_t progress, shoal_regroup *out)
{
    if (!cp) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_comm_regroup: c is NULL");
    SH_TRY(check_elastic(*cp, "shoal_comm_regroup"));
    shoal_comm *c = *cp;
    *cp = NULL;
    sh_elastic *e = c->elastic;
    settings st;
    settings_of(c, &st);
    if (c->store_server) e->servers[1] = c->store_server; /* rank 0's: others may still use it */
    sh_store *old = c->store;
    c->store = NULL;
    c->store_server = NULL;
    c->elastic = NULL;
    sh_comm_break(c, "the job regroups", 1); /* the peers still waiting on this rank stop at once */
    shoal_comm_destroy(c);
    sh_store_close(old); /* a fresh connection each time: the old one may lead to a frozen store */
    e->me.progress = progress;
    sh_interrupt_watch(1);
    shoal_result rc = regroup(e, &st, cp);
    sh_interrupt_watch(0);
    if (rc != SHOAL_OK) {
        sh_elastic_free(e);
        return rc;
    }
    if (out) *out = e->last;
    return SHOAL_OK;
}

shoal_result shoal_comm_last_regroup(const shoal_comm *c, shoal_regroup *out)
{
    SH_TRY(check_elastic(c, "shoal_comm_last_regroup"));
    if (!out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_comm_last_regroup: out is NULL");
    *out = c->elastic->last;
    return SHOAL_OK;
}

int shoal_comm_joiners(shoal_comm *c)
{
    if (!c || c->magic != SH_COMM_MAGIC || !c->elastic || !c->store) return 0;
    sh_elastic *e = c->elastic;
    uint64_t now = sh_now_ns();
    if (e->joiners_at_ns && now < e->joiners_at_ns + JOINERS_EVERY_MS * 1000000ull) return e->joiners;
    e->joiners_at_ns = now;
    char key[64];
    int64_t n = 0;
    snprintf(key, sizeof key, "e%" PRId64 "/j", e->gen + 1);
    e->joiners = sh_store_add(c->store, key, 0, &n) == SHOAL_OK && n > 0 ? (int)n : 0;
    return e->joiners;
}

int shoal_comm_job_rank(const shoal_comm *c, int rank)
{
    if (!c || c->magic != SH_COMM_MAGIC || rank < 0 || rank >= c->world) return -1;
    const shoal_comm *p = c;
    int r = rank;
    return p->job_rank ? p->job_rank[r] : r;
}
