/* boot.c — from the environment to a communicator skeleton: rank, world, master, job key,
 * the store, and every rank's host.
 * Not here: links (transport/), choosing transports (transport/transport.c).
 * Proved by tests/comm/test_boot.c and tests/comm/test_comm.c. */
#include "comm/boot/boot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/sock.h"
#include "comm/boot/store.h"

static shoal_result env_int(const char *name, int *out, int *found)
{
    *found = sh_env_is_set(name);
    if (!*found) return SHOAL_OK;
    long v = 0;
    SH_TRY(sh_env_long(name, &v));
    *out = (int)v;
    return SHOAL_OK;
}

void sh_boot_first_node(const char *nodelist, char *out, size_t cap)
{
    /* "node[01-04,07],gpu5" -> "node01"; "a,b" -> "a"; "rack1-n[001-010]" -> "rack1-n001" */
    size_t n = 0;
    const char *p = nodelist;
    while (*p && *p != ',' && *p != '[' && n + 1 < cap) out[n++] = *p++;
    if (*p == '[') {
        p++;
        while (*p >= '0' && *p <= '9' && n + 1 < cap) out[n++] = *p++;
    }
    out[n] = 0;
}

shoal_result sh_boot_read_env(const shoal_comm_opts *o, sh_boot_env *e)
{
    memset(e, 0, sizeof *e);
    e->rank = o && o->rank >= 0 ? o->rank : -1;
    e->world = o && o->world > 0 ? o->world : -1;
    e->source = "options";
    static const struct {
        const char *rank, *world, *source;
    } launchers[] = {
        {"SHOAL_RANK", "SHOAL_WORLD_SIZE", "shoal"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi"},
        {"PMI_RANK", "PMI_SIZE", "mpich"},
        {"SLURM_PROCID", "SLURM_NTASKS", "slurm"},
    };
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && (e->rank < 0 || e->world < 0); i++) {
        int r = -1, w = -1, fr = 0, fw = 0;
        SH_TRY(env_int(launchers[i].rank, &r, &fr));
        SH_TRY(env_int(launchers[i].world, &w, &fw));
        if (!fr && !fw) continue;
        if (fr != fw)
            return SH_FAIL(SHOAL_ERR_INVALID, "%s is %s but %s is %s: set both, or start ranks with "
                           "`shoal launch -n N`", launchers[i].rank, fr ? "set" : "unset",
                           launchers[i].world, fw ? "set" : "unset");
        if (e->rank < 0) e->rank = r;
        if (e->world < 0) e->world = w;
        e->source = launchers[i].source;
    }
    if (e->rank < 0 || e->world < 0)
        return SH_FAIL(SHOAL_ERR_INVALID,
                       "SHOAL_RANK and SHOAL_WORLD_SIZE are unset: start ranks with `shoal launch -n N`, "
                       "mpirun, mpiexec or srun, or set SHOAL_RANK/SHOAL_WORLD_SIZE");
    if (e->rank >= e->world)
        return SH_FAIL(SHOAL_ERR_INVALID, "rank %d is not below the world size %d (from %s's variables)",
                       e->rank, e->world, e->source);
    const char *addr = o && o->master_addr ? o->master_addr : sh_env_str("SHOAL_MASTER_ADDR");
    snprintf(e->master_addr, sizeof e->master_addr, "%s", addr ? addr : "127.0.0.1");
    /* Under srun without SHOAL_MASTER_ADDR: task 0 runs on the step's first node. */
    if (!(o && o->master_addr) && !sh_env_is_set("SHOAL_MASTER_ADDR") && !strcmp(e->source, "slurm")) {
        const char *nl = sh_env_str("SLURM_STEP_NODELIST");
        if (!nl) nl = sh_env_str("SLURM_JOB_NODELIST");
        if (nl) sh_boot_first_node(nl, e->master_addr, sizeof e->master_addr);
    }
    long port = 0;
    if (o && o->master_port > 0) port = o->master_port;
    else SH_TRY(sh_env_long("SHOAL_MASTER_PORT", &port));
    e->master_port = (int)port;
    const char *key = o && o->job_key ? o->job_key : sh_env_str("SHOAL_JOB_KEY");
    if (key && key[0]) {
        snprintf(e->job_key, sizeof e->job_key, "%s", key);
    } else {
        /* No secret handed out: derive one every rank of this launch shares. It keeps
         * strays of other jobs out, but is not secret: set SHOAL_JOB_KEY for that. */
        const char *a = sh_env_str("PMIX_NAMESPACE"), *b = sh_env_str("OMPI_MCA_orte_hnp_uri");
        const char *t = sh_env_str("OMPI_MCA_orte_precondition_transports");
        const char *sj = sh_env_str("SLURM_JOB_ID"), *ss = sh_env_str("SLURM_STEP_ID");
        snprintf(e->job_key, sizeof e->job_key, "derived:%.100s:%.200s:%.80s:%.30s:%.30s:%s:%d",
                 a ? a : "", b ? b : "", t ? t : "", sj ? sj : "", ss ? ss : "", e->master_addr,
                 e->master_port);
        e->key_is_derived = 1;
        if (e->world > 1 && !strcmp(e->source, "shoal"))
            return SH_FAIL(SHOAL_ERR_INVALID,
                           "SHOAL_JOB_KEY is unset: `shoal launch` sets it; when starting ranks "
                           "yourself, give every rank the same secret SHOAL_JOB_KEY");
    }
    return SHOAL_OK;
}

void sh_boot_host_id(char *out, size_t cap)
{
    const char *forced = sh_env_str("SHOAL_HOST_ID");
    if (forced && forced[0]) {
        snprintf(out, cap, "%s", forced);
        return;
    }
    char host[256] = "?", boot[64] = "", ns[64] = "";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    ssize_t n = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    ns[n > 0 ? n : 0] = 0;
    snprintf(out, cap, "%s/%s/%s", host, boot, ns);
}

static shoal_result fill_options(const shoal_comm_opts *o, shoal_comm *c)
{
    const char *t = o && o->transport ? o->transport : sh_env_str("SHOAL_TRANSPORT");
    static const char *tnames[] = {"auto", "shm", "tcp", "mpi"};
    int ok = 0;
    for (int i = 0; i < 4; i++)
        if (t && !strcmp(t, tnames[i])) {
            c->transport = (sh_transport_kind)i;
            ok = 1;
        }
    if (!ok) return SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_TRANSPORT=%s: use auto, shm, tcp or mpi", t ? t : "");
    const char *a = o && o->algo ? o->algo : sh_env_str("SHOAL_ALGO");
    static const char *anames[] = {"auto", "ring", "rd", "rhd", "tree", "hier", "mpi"};
    ok = 0;
    for (int i = 0; i < SH_ALGO_COUNT; i++)
        if (a && !strcmp(a, anames[i])) {
            c->algo = (sh_algo_kind)i;
            ok = 1;
        }
    if (!ok)
        return SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_ALGO=%s: use auto, ring, rd, rhd, tree, hier or mpi",
                       a ? a : "");
    if (o && o->timeout_ms > 0) c->timeout_ms = o->timeout_ms;
    long secure = 0;
    SH_TRY(sh_env_long("SHOAL_SECURE", &secure));
    c->secure = (int)secure;
    if (c->secure && c->transport == SH_TRANSPORT_MPI)
        return SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_SECURE=1 seals shoal's own TCP links, but SHOAL_TRANSPORT=mpi "
                       "sends through the MPI library in the clear: use SHOAL_TRANSPORT=auto or tcp");
    long chunk = 0;
    SH_TRY(sh_env_long("SHOAL_CHUNK_BYTES", &chunk));
    c->chunk_nbytes = o && o->chunk_nbytes ? o->chunk_nbytes : (size_t)chunk;
    return SHOAL_OK;
}

/* Rank `first` did not come before the deadline: name it and every later rank that has not
 * come either (one look each, no more waiting). */
static shoal_result missing_ranks(shoal_comm *c, const sh_boot_env *e, int first)
{
    char list[200];
    int n = 1;
    unsigned char *away = calloc((size_t)e->world, 1);
    if (away) {
        away[first] = 1;
        for (int r = first + 1; r < e->world; r++) {
            char key[64], v[8];
            size_t vn = 0;
            snprintf(key, sizeof key, "w/host/%d", r);
            away[r] = sh_store_get(c->store, key, v, sizeof v, &vn, 0) != SHOAL_OK;
        }
        sh_format_ranks(list, sizeof list, away, e->world, &n);
        free(away);
    } else {
        snprintf(list, sizeof list, "%d", first);
    }
    char many[32] = "";
    if (n > 1) snprintf(many, sizeof many, " (%d ranks)", n);
    return SH_FAIL(SHOAL_ERR_TIMEOUT,
                   "rank%s %s of %d%s never joined the rendezvous at %s:%d within %d ms (did %s "
                   "start? are they pointed at this master? SHOAL_TIMEOUT sets the deadline)",
                   n > 1 ? "s" : "", list, e->world, many, e->master_addr, e->master_port, c->timeout_ms,
                   n > 1 ? "they" : "it");
}

/* Rank r's record "hostid\nhostname\nsecure S": its host, and the settings every rank must
 * share (a rank that differs stops every rank at once, naming it). */
static shoal_result read_host(shoal_comm *c, int r, char *v, char *id, size_t cap)
{
    char *name = strchr(v, '\n'), *rest = NULL;
    if (name) {
        *name++ = 0;
        rest = strchr(name, '\n');
        if (rest) *rest++ = 0;
    }
    snprintf(id, cap, "%.299s", v);
    c->hostname[r] = strdup(name ? name : "?");
    int secure = -1;
    if (!rest || sscanf(rest, "secure %d", &secure) != 1 || secure != c->secure) {
        char pb[128];
        return SH_FAIL(SHOAL_ERR_MISMATCH, "%s runs with SHOAL_SECURE=%d but rank %d with %d: every rank "
                       "must have the same (sealed links cannot talk to plain ones)",
                       sh_comm_peer_name(c, r, pb, sizeof pb), secure, c->rank, c->secure);
    }
    return SHOAL_OK;
}

/* Rank 0: serve the store. When the port is taken, or the master address is another
 * host's, the job may already have a rank 0: ask its store, so that the error names both
 * (a duplicate --node-rank 0) instead of the port. */
static shoal_result start_store(shoal_comm *c, const sh_boot_env *e, uint64_t id, const char *who)
{
    long bind_all = 0;
    SH_TRY(sh_env_long("SHOAL_BIND_ALL", &bind_all));
    shoal_result rc = sh_store_server_start(bind_all ? NULL : e->master_addr, e->master_port, e->job_key, e->world,
                                            e->key_is_derived, &c->store_server);
    if (rc != SHOAL_ERR_IO) return rc;
    char first[1024];
    snprintf(first, sizeof first, "%s", shoal_last_error_message());
    sh_store *other = NULL;
    shoal_result orc = sh_store_connect(e->master_addr, e->master_port, e->job_key, 2000, &other);
    if (orc == SHOAL_OK) orc = sh_store_claim(other, 0, e->world, id, who);
    char why[1024];
    snprintf(why, sizeof why, "%s", shoal_last_error_message()); /* SH_FAIL writes where it reads */
    sh_store_close(other);
    if (orc == SHOAL_ERR_MISMATCH) return SH_FAIL(SHOAL_ERR_MISMATCH, "%s", why);
    return SH_FAIL(rc, "%s", first);
}

/* Rank r's record "hostid\nhostname\nsecure S" for every r: hosts numbered by first appearance. */
static shoal_result learn_hosts(shoal_comm *c, const sh_boot_env *e, uint64_t dl)
{
    char (*ids)[300] = calloc((size_t)e->world, sizeof *ids);
    if (!ids) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    shoal_result rc = SHOAL_OK;
    for (int r = 0; r < e->world && rc == SHOAL_OK; r++) {
        char v[600], key[96];
        size_t vn = 0;
        snprintf(key, sizeof key, "w/host/%d", r);
        uint64_t now = sh_now_ns();
        int left_ms = now < dl ? (int)((dl - now) / 1000000ull) + 1 : 1;
        rc = sh_store_get(c->store, key, v, sizeof v - 1, &vn, left_ms);
        if (rc == SHOAL_ERR_TIMEOUT) {
            rc = missing_ranks(c, e, r);
            break;
        }
        if (rc != SHOAL_OK) break;
        v[vn < sizeof v ? vn : sizeof v - 1] = 0;
        rc = read_host(c, r, v, ids[r], sizeof ids[r]);
        if (rc != SHOAL_OK) break;
        int h = -1;
        for (int q = 0; q < r; q++)
            if (!strcmp(ids[q], ids[r])) {
                h = c->host_of[q];
                break;
            }
        if (h < 0) {
            h = 0;
            for (int q = 0; q < r; q++)
                if (c->host_of[q] + 1 > h) h = c->host_of[q] + 1;
        }
        c->host_of[r] = h;
    }
    free(ids);
    return rc;
}

/* Under MPICH's Hydra every rank holds a connection to its mpiexec (PMI_FD, an open
 * socket). Without SHOAL_JOB_KEY the key rests on the master's address and port, which a
 * process outside the job can learn: it must at least hold that connection too. */
static shoal_result check_pmi_connection(const sh_boot_env *e)
{
    if (!e->key_is_derived || strcmp(e->source, "mpich") != 0) return SHOAL_OK;
    long fd = -1;
    struct stat st;
    if (!sh_env_is_set("PMI_FD") || sh_env_long("PMI_FD", &fd) != SHOAL_OK || fstat((int)fd, &st) != 0 ||
        !S_ISSOCK(st.st_mode))
        return SH_FAIL(SHOAL_ERR_INVALID, "PMI_RANK=%d and PMI_SIZE=%d are set but this process holds no connection to "
                       "an mpiexec (PMI_FD): it was not started by MPICH's Hydra, and without SHOAL_JOB_KEY it may "
                       "not join a job; give every rank the job's secret SHOAL_JOB_KEY", e->rank, e->world);
    return SHOAL_OK;
}

/* An elastic job that already runs (its store holds a generation): this process joins it
 * (boot/elastic.c) instead of claiming a rank. */
static int job_runs(shoal_comm *c, const shoal_comm_opts *o)
{
    char v[32];
    size_t vn = 0;
    if (!o || o->elastic_min <= 0) return 0;
    return sh_store_get(c->store, "e/gen", v, sizeof v, &vn, 0) == SHOAL_OK;
}

shoal_result sh_boot_world(const shoal_comm_opts *o, shoal_comm **out)
{
    int joining = 0;
    return sh_boot_world_or_join(o, out, &joining); /* joins only when o asks for elastic */
}

shoal_result sh_boot_world_or_join(const shoal_comm_opts *o, shoal_comm **out, int *joining)
{
    *out = NULL;
    *joining = 0;
    sh_boot_env e;
    SH_TRY(sh_boot_read_env(o, &e));
    SH_TRY(check_pmi_connection(&e));
    shoal_comm *c = NULL;
    SH_TRY(sh_comm_alloc(e.rank, e.world, &c));
    shoal_result rc = fill_options(o, c);
    if (rc != SHOAL_OK) goto fail;
    if (c->secure && e.key_is_derived) { /* keys from a key others can work out hide nothing */
        rc = SH_FAIL(SHOAL_ERR_INVALID, "SHOAL_SECURE=1 needs a secret SHOAL_JOB_KEY: the key derived from the %s "
                     "job's variables is not secret; give every rank one (openssl rand -hex 32)", e.source);
        goto fail;
    }
    char host[256], who[160]; /* "pid 123 on hostb": names this process in a refused claim */
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    sh_log_set_rank(e.rank, host);
    snprintf(who, sizeof who, "pid %d on %.100s", (int)getpid(), host);
    uint64_t id = 0; /* this process's, so that its own reconnections are not a second claim */
    while (id == 0)
        if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) id = sh_now_ns() ^ ((uint64_t)getpid() << 32);
    if (e.key_is_derived && e.rank == 0) /* once a job, at the default level: on a shared cluster it matters */
        SH_LOG_W("comm", "no SHOAL_JOB_KEY: the job key is derived from the %s job's variables, which is not secret (another user on these hosts could join); give every rank a secret one, e.g. mpirun -x SHOAL_JOB_KEY=$(openssl rand -hex 32), or export it before srun", e.source);
    if (e.rank == 0) {
        rc = start_store(c, &e, id, who);
        if (rc != SHOAL_OK) goto fail;
    }
    /* One deadline for the whole rendezvous, connecting included. */
    uint64_t dl = sh_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    c->proc_id = id;
    rc = sh_store_connect(e.master_addr, e.master_port, e.job_key, c->timeout_ms, &c->store);
    if (rc == SHOAL_OK && job_runs(c, o)) {
        *joining = 1;
        *out = c;
        return SHOAL_OK;
    }
    if (rc == SHOAL_OK) rc = sh_store_claim(c->store, e.rank, e.world, id, who);
    if (rc != SHOAL_OK) goto fail;
    /* Publish "hostid\nhostname\nsecure S", then learn everyone's. */
    char me[600], hid[300], key[96];
    sh_boot_host_id(hid, sizeof hid);
    int n = snprintf(me, sizeof me, "%s\n%s\nsecure %d", hid, host, c->secure);
    snprintf(key, sizeof key, "w/host/%d", e.rank);
    rc = sh_store_set(c->store, key, me, (size_t)n);
    if (rc == SHOAL_OK) rc = learn_hosts(c, &e, dl);
    if (rc != SHOAL_OK) goto fail;
    sh_comm_index_hosts(c);
    *out = c;
    return SHOAL_OK;
fail:
    sh_store_close(c->store);
    c->store = NULL;
    sh_store_server_stop(c->store_server);
    c->store_server = NULL;
    sh_comm_free(c);
    return rc;
}
