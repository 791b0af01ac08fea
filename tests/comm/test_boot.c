/* test_boot.c — who a process is (options, shoal launch, Open MPI, MPICH/Hydra, Slurm), the
 * job key, the errors for missing or impossible values, host identity, and the rendezvous
 * with real processes: hosts learned, a stranger with the wrong key refused while the job
 * meets, ranks that never come named within the deadline, the store bound to one address.
 * Not here: links (test_transport_tcp.c), the public API end to end (test_comm.c).
 * Proves src/comm/boot.c. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "../check.h"
#include "base/err.h"
#include "base/util.h"
#include "comm/boot/boot.h"
#include "comm/boot/sock.h"
#include "comm/boot/store.h"
#include "lib/ranks.h"

static const char *const ALL_VARS[] = {
    "SHOAL_RANK", "SHOAL_WORLD_SIZE", "SHOAL_MASTER_ADDR", "SHOAL_MASTER_PORT", "SHOAL_JOB_KEY",
    "SHOAL_HOST_ID", "SHOAL_TRANSPORT", "SHOAL_ALGO", "SHOAL_TIMEOUT", "SHOAL_BIND_ALL",
    "SHOAL_SOCKET_IFNAME", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_NAMESPACE",
    "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_orte_precondition_transports", "PMI_RANK", "PMI_SIZE",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof ALL_VARS / sizeof ALL_VARS[0]; i++) unsetenv(ALL_VARS[i]);
}

static int free_port(void)
{
    int fd = -1, port = 0;
    if (sh_sock_listen("127.0.0.1", 0, &fd, &port) != SHOAL_OK) return 0;
    close(fd);
    return port;
}

static int has(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

static void reads_shoal_launch_variables(void)
{
    clear_env();
    setenv("SHOAL_RANK", "2", 1);
    setenv("SHOAL_WORLD_SIZE", "4", 1);
    setenv("SHOAL_MASTER_ADDR", "10.1.2.3", 1);
    setenv("SHOAL_MASTER_PORT", "1234", 1);
    setenv("SHOAL_JOB_KEY", "secret", 1);
    /* a launcher's variables beside ours: ours win */
    setenv("OMPI_COMM_WORLD_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "9", 1);
    sh_boot_env e;
    CHECK_OK(sh_boot_read_env(NULL, &e));
    CHECK(e.rank == 2 && e.world == 4 && !strcmp(e.source, "shoal"), "rank %d world %d from %s", e.rank,
          e.world, e.source);
    CHECK(!strcmp(e.master_addr, "10.1.2.3") && e.master_port == 1234, "%s:%d", e.master_addr, e.master_port);
    CHECK(!strcmp(e.job_key, "secret") && !e.key_is_derived, "key %s", e.job_key);
    /* options win over the environment */
    shoal_comm_opts o;
    shoal_comm_opts_default(&o);
    o.rank = 1;
    o.world = 3;
    o.master_addr = "127.0.0.2";
    o.master_port = 4321;
    o.job_key = "from-options";
    CHECK_OK(sh_boot_read_env(&o, &e));
    CHECK(e.rank == 1 && e.world == 3 && !strcmp(e.master_addr, "127.0.0.2") && e.master_port == 4321 &&
              !strcmp(e.job_key, "from-options"),
          "options: rank %d world %d %s:%d key %s", e.rank, e.world, e.master_addr, e.master_port, e.job_key);
    /* defaults: master 127.0.0.1:29500 */
    unsetenv("SHOAL_MASTER_ADDR");
    unsetenv("SHOAL_MASTER_PORT");
    CHECK_OK(sh_boot_read_env(NULL, &e));
    CHECK(!strcmp(e.master_addr, "127.0.0.1") && e.master_port == 29500, "%s:%d", e.master_addr, e.master_port);
    clear_env();
}

typedef struct {
    const char *rank_var, *world_var, *source;
    const char *id_var[2], *id_a[2], *id_b[2]; /* job ids two jobs differ by */
} launcher;

static void reads_each_launchers_variables_and_derives_a_key(void)
{
    const launcher ls[] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "openmpi",
         {"PMIX_NAMESPACE", "OMPI_MCA_orte_precondition_transports"},
         {"1291321345", "9795fab2e5bd06f8-7ca94b3fbf167fed"},
         {"1291321346", "0123456789abcdef-0123456789abcdef"}},
        {"PMI_RANK", "PMI_SIZE", "mpich", {NULL, NULL}, {NULL, NULL}, {NULL, NULL}},
        {"SLURM_PROCID", "SLURM_NTASKS", "slurm", {"SLURM_JOB_ID", "SLURM_STEP_ID"}, {"4242", "0"},
         {"4243", "0"}},
    };
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        const launcher *l = &ls[i];
        clear_env();
        setenv(l->rank_var, "3", 1);
        setenv(l->world_var, "5", 1);
        setenv("SHOAL_MASTER_ADDR", "10.0.0.1", 1);
        for (int k = 0; k < 2; k++)
            if (l->id_var[k]) setenv(l->id_var[k], l->id_a[k], 1);
        sh_boot_env a, b;
        CHECK_OK(sh_boot_read_env(NULL, &a));
        CHECK(a.rank == 3 && a.world == 5 && !strcmp(a.source, l->source), "%s: rank %d world %d from %s",
              l->source, a.rank, a.world, a.source);
        CHECK(a.key_is_derived && a.job_key[0], "%s: no derived key", l->source);
        /* Every rank of the job derives the same key... */
        setenv(l->rank_var, "0", 1);
        CHECK_OK(sh_boot_read_env(NULL, &b));
        CHECK(!strcmp(a.job_key, b.job_key), "%s: ranks of one job derived different keys", l->source);
        /* ...another job (other job ids) another one. */
        if (l->id_var[0]) {
            for (int k = 0; k < 2; k++) setenv(l->id_var[k], l->id_b[k], 1);
            CHECK_OK(sh_boot_read_env(NULL, &b));
            CHECK(strcmp(a.job_key, b.job_key) != 0, "%s: two jobs derived the same key", l->source);
        }
        /* SHOAL_JOB_KEY, when given, is used as it is. */
        setenv("SHOAL_JOB_KEY", "given", 1);
        CHECK_OK(sh_boot_read_env(NULL, &b));
        CHECK(!strcmp(b.job_key, "given") && !b.key_is_derived, "%s: key %s", l->source, b.job_key);
        /* half a launcher's pair is an error naming both */
        clear_env();
        setenv(l->rank_var, "1", 1);
        CHECK_RC(sh_boot_read_env(NULL, &b), SHOAL_ERR_INVALID);
        CHECK(has(shoal_last_error_message(), l->rank_var) && has(shoal_last_error_message(), l->world_var),
              "%s", shoal_last_error_message());
    }
    clear_env();
}

static void under_slurm_the_master_is_the_first_node(void)
{
    const char *cases[][2] = {{"node[01-04,07],gpu5", "node01"}, {"a,b", "a"}, {"solo", "solo"},
                              {"rack1-n[001-010]", "rack1-n001"}, {"n[3,5]", "n3"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[64];
        sh_boot_first_node(cases[i][0], out, sizeof out);
        CHECK(!strcmp(out, cases[i][1]), "%s -> %s, want %s", cases[i][0], out, cases[i][1]);
    }
    char tiny[4];
    sh_boot_first_node("verylongname[1-2]", tiny, sizeof tiny);
    CHECK(strlen(tiny) == 3, "truncation gave \"%s\"", tiny);
    clear_env();
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_JOB_NODELIST", "other[1-9]", 1);
    setenv("SLURM_STEP_NODELIST", "cn[07-09],gpu1", 1);
    sh_boot_env e;
    CHECK_OK(sh_boot_read_env(NULL, &e));
    CHECK(!strcmp(e.master_addr, "cn07"), "master %s", e.master_addr);
    unsetenv("SLURM_STEP_NODELIST");
    CHECK_OK(sh_boot_read_env(NULL, &e));
    CHECK(!strcmp(e.master_addr, "other1"), "master %s", e.master_addr);
    setenv("SHOAL_MASTER_ADDR", "10.9.9.9", 1);
    CHECK_OK(sh_boot_read_env(NULL, &e));
    CHECK(!strcmp(e.master_addr, "10.9.9.9"), "SHOAL_MASTER_ADDR must win, got %s", e.master_addr);
    clear_env();
}

static void bad_environments_get_one_clear_line(void)
{
    sh_boot_env e;
    clear_env();
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    const char *m = shoal_last_error_message();
    CHECK(has(m, "SHOAL_RANK") && has(m, "shoal launch") && has(m, "mpirun") && has(m, "srun") && !strchr(m, '\n'),
          "%s", m);
    setenv("SHOAL_RANK", "3", 1);
    setenv("SHOAL_WORLD_SIZE", "2", 1);
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "rank 3") && has(shoal_last_error_message(), "world size 2"), "%s",
          shoal_last_error_message());
    setenv("SHOAL_RANK", "x1", 1);
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_RANK") && has(shoal_last_error_message(), "x1"), "%s",
          shoal_last_error_message());
    setenv("SHOAL_RANK", "-1", 1);
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_RANK"), "%s", shoal_last_error_message());
    setenv("SHOAL_RANK", "1", 1);
    setenv("SHOAL_WORLD_SIZE", "0", 1);
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_WORLD_SIZE"), "%s", shoal_last_error_message());
    setenv("SHOAL_WORLD_SIZE", "2", 1);
    setenv("SHOAL_JOB_KEY", "k", 1);
    setenv("SHOAL_MASTER_PORT", "http", 1);
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_MASTER_PORT") && has(shoal_last_error_message(), "http"), "%s",
          shoal_last_error_message());
    setenv("SHOAL_MASTER_PORT", "70000", 1);
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_MASTER_PORT"), "%s", shoal_last_error_message());
    /* ranks started by hand without a key: told to set one */
    unsetenv("SHOAL_MASTER_PORT");
    unsetenv("SHOAL_JOB_KEY");
    CHECK_RC(sh_boot_read_env(NULL, &e), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_JOB_KEY"), "%s", shoal_last_error_message());
    /* bad transport / algorithm names */
    setenv("SHOAL_JOB_KEY", "k", 1);
    setenv("SHOAL_RANK", "0", 1);
    setenv("SHOAL_WORLD_SIZE", "1", 1);
    setenv("SHOAL_TRANSPORT", "carrier-pigeon", 1);
    shoal_comm *c = NULL;
    CHECK_RC(sh_boot_world(NULL, &c), SHOAL_ERR_INVALID);
    CHECK(c == NULL && has(shoal_last_error_message(), "SHOAL_TRANSPORT=carrier-pigeon"), "%s",
          shoal_last_error_message());
    unsetenv("SHOAL_TRANSPORT");
    setenv("SHOAL_ALGO", "bogo", 1);
    CHECK_RC(sh_boot_world(NULL, &c), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_ALGO=bogo"), "%s", shoal_last_error_message());
    clear_env();
}

static void host_identity_can_be_forced_and_otherwise_names_this_machine(void)
{
    clear_env();
    char id[300], id2[300], host[256] = "";
    sh_boot_host_id(id, sizeof id);
    sh_boot_host_id(id2, sizeof id2);
    gethostname(host, sizeof host - 1);
    CHECK(!strcmp(id, id2) && has(id, host), "host id \"%s\" (host %s)", id, host);
    CHECK(has(id, "net:["), "host id \"%s\" does not include the network namespace", id);
    setenv("SHOAL_HOST_ID", "rack7-node3", 1);
    sh_boot_host_id(id, sizeof id);
    CHECK(!strcmp(id, "rack7-node3"), "forced id gave \"%s\"", id);
    clear_env();
}

/* ---- the rendezvous with real processes ---- */

typedef struct {
    int world, port, timeout_ms;
    const char *key;        /* SHOAL_JOB_KEY of the real ranks */
    unsigned absent;        /* bit r: rank r never starts */
    int hosts_of_two;       /* 1: SHOAL_HOST_ID = "h<rank/2>" */
    int stranger;           /* 1: one more process with a wrong key claims rank world-1 */
    int bind_all;           /* SHOAL_BIND_ALL for rank 0 */
    const char *probe_addr; /* rank 0 checks whether its store answers on this address */
    int probe_expect;       /* 1: it should answer there */
    const char *missing;    /* the absent ranks as the message writes them; NULL: "1, 3" */
} boot_case;

static void set_rank_env(const boot_case *bc, int rank, const char *key)
{
    clear_env();
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("SHOAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", bc->world);
    setenv("SHOAL_WORLD_SIZE", v, 1);
    setenv("SHOAL_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", bc->port);
    setenv("SHOAL_MASTER_PORT", v, 1);
    setenv("SHOAL_JOB_KEY", key, 1);
    snprintf(v, sizeof v, "%d", bc->timeout_ms);
    setenv("SHOAL_TIMEOUT", v, 1);
    if (bc->hosts_of_two) {
        snprintf(v, sizeof v, "h%d", rank / 2);
        setenv("SHOAL_HOST_ID", v, 1);
    }
    if (bc->bind_all) setenv("SHOAL_BIND_ALL", "1", 1);
}

static int answers_on(const char *addr, int port)
{
    int fd = -1;
    if (sh_sock_connect(addr, port, sh_sock_deadline(300), &fd) != SHOAL_OK) return 0;
    close(fd);
    return 1;
}

static void rank_main(const boot_case *bc, int rank)
{
    set_rank_env(bc, rank, bc->key);
    shoal_comm *c = NULL;
    uint64_t t0 = sh_now_ns();
    shoal_result rc = sh_boot_world(NULL, &c);
    uint64_t took_ms = (sh_now_ns() - t0) / 1000000ull;
    if (bc->absent) {
        /* Someone never comes: every present rank times out naming exactly the absent ones. */
        CHECK(rc == SHOAL_ERR_TIMEOUT, "rank %d: %s: %s", rank, shoal_result_name(rc), shoal_last_error_message());
        char want[64] = "";
        int n = 0, len = 0;
        for (int r = 0; r < bc->world; r++)
            if (bc->absent >> r & 1) {
                len += snprintf(want + len, sizeof want - (size_t)len, "%s%d", n ? ", " : "", r);
                n++;
            }
        if (bc->missing) snprintf(want, sizeof want, "%s", bc->missing);
        CHECK(has(shoal_last_error_message(), want), "rank %d: missing \"%s\" in: %s", rank, want,
              shoal_last_error_message());
        CHECK(took_ms < (uint64_t)bc->timeout_ms + 3000, "rank %d gave up after %llu ms (deadline %d)", rank,
              (unsigned long long)took_ms, bc->timeout_ms);
        return;
    }
    CHECK(rc == SHOAL_OK, "rank %d: %s", rank, shoal_last_error_message());
    if (rc != SHOAL_OK) return;
    CHECK(c->rank == rank && c->world == bc->world && !strcmp(c->prefix, "w"), "rank %d: %d/%d %s", rank,
          c->rank, c->world, c->prefix);
    CHECK(c->store != NULL && (rank == 0) == (c->store_server != NULL), "rank %d: store %p server %p", rank,
          (void *)c->store, (void *)c->store_server);
    CHECK(c->timeout_ms == bc->timeout_ms, "timeout %d", c->timeout_ms);
    int links = 0;
    for (int r = 0; r < bc->world; r++) links += c->coll[r] != NULL || c->p2p[r] != NULL;
    CHECK(links == 0, "rank %d: boot made %d links", rank, links);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    for (int r = 0; r < bc->world; r++) {
        int want_host = bc->hosts_of_two ? r / 2 : 0;
        CHECK(c->host_of[r] == want_host, "rank %d sees rank %d on host %d, want %d", rank, r, c->host_of[r],
              want_host);
        CHECK(c->hostname[r] && !strcmp(c->hostname[r], host), "hostname of %d: %s", r,
              c->hostname[r] ? c->hostname[r] : "(null)");
    }
    int want_nhosts = bc->hosts_of_two ? (bc->world + 1) / 2 : 1;
    int want_local_world = bc->hosts_of_two ? ((rank / 2) * 2 + 1 < bc->world ? 2 : 1) : bc->world;
    CHECK(c->nhosts == want_nhosts && c->local_world == want_local_world &&
              c->local_rank == (bc->hosts_of_two ? rank % 2 : rank),
          "rank %d: nhosts %d local %d/%d", rank, c->nhosts, c->local_rank, c->local_world);
    if (rank == 0 && bc->probe_addr) {
        int ans = answers_on(bc->probe_addr, bc->port);
        CHECK(ans == bc->probe_expect, "the store %s on %s:%d", ans ? "answers" : "does not answer",
              bc->probe_addr, bc->port);
    }
    /* A stranger started late (a loaded machine) must still find the store: rank 0 keeps it
     * until the stranger has tried (stranger_main leaves a file). */
    if (rank == 0 && bc->stranger) {
        char done[64];
        snprintf(done, sizeof done, "/tmp/shoal-test-boot-stranger-%d", bc->port);
        for (int ms = 0; ms < bc->timeout_ms && access(done, F_OK) != 0; ms += 10) usleep(10000);
        unlink(done);
    }
    /* Everyone done before rank 0 takes the store away. */
    CHECK_OK(sh_store_barrier(c->store, "test/done", bc->world, bc->timeout_ms));
    shoal_comm_destroy(c);
}

static void stranger_main(const boot_case *bc)
{
    set_rank_env(bc, bc->world - 1, "not-this-jobs-key");
    shoal_comm *c = NULL;
    shoal_result rc = sh_boot_world(NULL, &c);
    char done[64];
    snprintf(done, sizeof done, "/tmp/shoal-test-boot-stranger-%d", bc->port);
    FILE *f = fopen(done, "w"); /* rank 0 may take its store away now */
    if (f) fclose(f);
    CHECK(rc == SHOAL_ERR_PEER && c == NULL, "stranger: %s: %s", shoal_result_name(rc), shoal_last_error_message());
    CHECK(has(shoal_last_error_message(), "job key rejected by rank 0's store at 127.0.0.1:"), "stranger: %s",
          shoal_last_error_message());
}

typedef struct {
    const boot_case *bc;
    int rank_of[17]; /* process i plays this rank; world: the stranger */
} boot_procs;

static void boot_proc(int i, void *arg)
{
    const boot_procs *bp = arg;
    if (bp->rank_of[i] == bp->bc->world) stranger_main(bp->bc);
    else rank_main(bp->bc, bp->rank_of[i]);
}

static void run_boot(const boot_case *bc)
{
    boot_procs bp = {.bc = bc};
    int n = 0;
    for (int r = 0; r <= bc->world; r++) {
        int is_stranger = r == bc->world;
        if (is_stranger && !bc->stranger) break;
        if (!is_stranger && (bc->absent >> r & 1)) continue;
        bp.rank_of[n++] = r;
    }
    RUN_PROCS(n, NULL, boot_proc, &bp);
}

static void ranks_meet_and_learn_every_host(void)
{
    for (int world = 1; world <= 5; world++) {
        boot_case bc = {.world = world, .port = free_port(), .timeout_ms = 5000, .key = "k1"};
        run_boot(&bc);
        bc.port = free_port();
        bc.hosts_of_two = 1;
        run_boot(&bc);
    }
}

static void a_stranger_with_the_wrong_key_is_refused_while_the_job_meets(void)
{
    boot_case bc = {.world = 3, .port = free_port(), .timeout_ms = 5000, .key = "the-key", .stranger = 1};
    run_boot(&bc);
}

static void ranks_that_never_come_are_named_within_the_deadline(void)
{
    boot_case bc = {.world = 3, .port = free_port(), .timeout_ms = 1000, .key = "k", .absent = 1u << 2};
    run_boot(&bc);
    boot_case bc2 = {.world = 5, .port = free_port(), .timeout_ms = 1000, .key = "k", .absent = (1u << 1) | (1u << 3)};
    run_boot(&bc2);
    /* runs of absent ranks are joined and counted */
    boot_case bc3 = {.world = 7, .port = free_port(), .timeout_ms = 1000, .key = "k", .absent = 0x3eu,
                     .missing = "ranks 1-5 of 7 (5 ranks) never joined"};
    run_boot(&bc3);
}

/* Rank 1 of 2 whose master never comes. */
static void rank_1_alone(int i, void *arg)
{
    (void)i;
    const boot_case *bc = arg;
    set_rank_env(bc, 1, "k");
    shoal_comm *c = NULL;
    uint64_t t0 = sh_now_ns();
    CHECK_RC(sh_boot_world(NULL, &c), SHOAL_ERR_TIMEOUT);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", bc->port);
    CHECK(has(shoal_last_error_message(), where), "%s", shoal_last_error_message());
    CHECK(sh_now_ns() - t0 < 5000000000ull, "took %.1f s", (double)(sh_now_ns() - t0) * 1e-9);
}

static void master_unreachable_times_out_naming_it(void)
{
    boot_case bc = {.world = 2, .port = free_port(), .timeout_ms = 600, .key = "k"};
    RUN_PROCS(1, NULL, rank_1_alone, &bc);
}

/* A local IPv4 address other than loopback, or "" when this machine has none. */
static void other_local_addr(char *out, size_t cap)
{
    out[0] = 0;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) < 0) return;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)i->ifa_addr;
            if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
            inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)cap);
            break;
        }
    freeifaddrs(ifs);
}

static void the_store_listens_on_the_master_address_only(void)
{
    char other[64];
    other_local_addr(other, sizeof other);
    /* Without another interface, 127.0.0.2 still tells a 127.0.0.1 bind from a wildcard one. */
    if (!other[0]) snprintf(other, sizeof other, "127.0.0.2");
    boot_case bc = {.world = 2, .port = free_port(), .timeout_ms = 5000, .key = "k", .probe_addr = other,
                    .probe_expect = 0};
    run_boot(&bc);
    bc.port = free_port();
    bc.bind_all = 1;
    bc.probe_expect = 1;
    run_boot(&bc);
}

int main(void)
{
    check_begin("test_boot", 120);
    signal(SIGPIPE, SIG_IGN);
    RUN(reads_shoal_launch_variables);
    RUN(reads_each_launchers_variables_and_derives_a_key);
    RUN(under_slurm_the_master_is_the_first_node);
    RUN(bad_environments_get_one_clear_line);
    RUN(host_identity_can_be_forced_and_otherwise_names_this_machine);
    RUN(ranks_meet_and_learn_every_host);
    RUN(a_stranger_with_the_wrong_key_is_refused_while_the_job_meets);
    RUN(ranks_that_never_come_are_named_within_the_deadline);
    RUN(master_unreachable_times_out_naming_it);
    RUN(the_store_listens_on_the_master_address_only);
    return check_end();
}
