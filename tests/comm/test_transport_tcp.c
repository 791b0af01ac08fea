/* test_transport_tcp.c — the TCP mesh with real processes: full and partial meshes of 2-5
 * ranks moving data both ways on both planes, a second mesh under a sub-communicator's
 * prefix, listeners bound to one address (not 0.0.0.0) unless SHOAL_BIND_ALL=1, strangers
 * at every rank's port (scans, garbage, a flood of stalled handshakes, the wrong key, the
 * right key claiming to be someone else) while the job connects, and ranks that never
 * connect named within the deadline.
 * Not here: the rendezvous (test_boot.c), the store (test_store.c).
 * Proves src/comm/transport/tcp.c and the handshake in src/comm/boot/sock.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include "../check.h"
#include "base/err.h"
#include "base/util.h"
#include "comm/boot/boot.h"
#include "comm/comm_internal.h"
#include "comm/boot/sock.h"
#include "comm/boot/store.h"
#include "lib/ranks.h"
#include "comm/transport/tcp.h"

static const char *KEY = "tcp-test-key";

static int free_port(void)
{
    int fd = -1, port = 0;
    if (sh_sock_listen("127.0.0.1", 0, &fd, &port) != SHOAL_OK) return 0;
    close(fd);
    return port;
}

static int has(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef enum { WANT_ALL, WANT_RING } want_shape;

typedef struct {
    int world, port, timeout_ms;
    want_shape shape;
    int bind_all;
    const char *ifname;     /* SHOAL_SOCKET_IFNAME */
    int late_rank, late_ms; /* this rank waits late_ms before connecting (-1: none) */
    int never_rank;         /* this rank boots but never connects (-1: none) */
    int sub_mesh;           /* 1: connect a second mesh under another prefix and use it too */
    int attack;             /* 1: a stranger process attacks ranks 0..world-2's ports */
    const char *cc;         /* SHOAL_TCP_CONGESTION (NULL: unset) */
    const char *sndbuf_kb;  /* SHOAL_SOCKET_SNDBUF_KB (NULL: unset, 128) */
} tcp_case;

static void set_env(const tcp_case *tc, int rank)
{
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("SHOAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", tc->world);
    setenv("SHOAL_WORLD_SIZE", v, 1);
    setenv("SHOAL_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", tc->port);
    setenv("SHOAL_MASTER_PORT", v, 1);
    setenv("SHOAL_JOB_KEY", KEY, 1);
    snprintf(v, sizeof v, "%d", tc->timeout_ms);
    setenv("SHOAL_TIMEOUT", v, 1);
    unsetenv("SHOAL_HOST_ID");
    if (tc->bind_all) setenv("SHOAL_BIND_ALL", "1", 1);
    else unsetenv("SHOAL_BIND_ALL");
    if (tc->ifname) setenv("SHOAL_SOCKET_IFNAME", tc->ifname, 1);
    else unsetenv("SHOAL_SOCKET_IFNAME");
    if (tc->cc) setenv("SHOAL_TCP_CONGESTION", tc->cc, 1);
    else unsetenv("SHOAL_TCP_CONGESTION");
    if (tc->sndbuf_kb) setenv("SHOAL_SOCKET_SNDBUF_KB", tc->sndbuf_kb, 1);
    else unsetenv("SHOAL_SOCKET_SNDBUF_KB");
}

static int wanted(const tcp_case *tc, int a, int b)
{
    if (a == b) return 0;
    if (tc->shape == WANT_ALL) return 1;
    int d = (a - b + tc->world) % tc->world;
    return d == 1 || d == tc->world - 1;
}

/* Byte i of what `from` sends `to` on `plane`. */
static unsigned char pattern(int from, int to, int plane, size_t i)
{
    return (unsigned char)((i * 2654435761u >> 7) + (unsigned)from * 31u + (unsigned)to * 7u + (unsigned)plane * 101u);
}

/* Every wanted pair exchanges nbytes both ways on both planes at once. */
static void exchange(shoal_comm *c, const tcp_case *tc, size_t nbytes)
{
    int n = 0, w = c->world;
    sh_xfer_op *ops = calloc((size_t)(4 * w), sizeof *ops);
    unsigned char **bufs = calloc((size_t)(4 * w), sizeof *bufs);
    for (int p = 0; p < w; p++) {
        if (!wanted(tc, c->rank, p)) continue;
        for (int plane = 0; plane < 2; plane++) {
            sh_link *l = plane ? c->p2p[p] : c->coll[p];
            CHECK(l != NULL && l->peer == p, "rank %d: no plane-%d link to %d", c->rank, plane, p);
            if (!l) continue;
            unsigned char *s = malloc(nbytes), *r = malloc(nbytes);
            for (size_t i = 0; i < nbytes; i++) s[i] = pattern(c->rank, p, plane, i);
            memset(r, 0, nbytes);
            bufs[n] = s;
            ops[n++] = (sh_xfer_op){.link = l, .kind = SH_XFER_SEND, .buf = s, .nbytes = nbytes};
            bufs[n] = r;
            ops[n++] = (sh_xfer_op){.link = l, .kind = SH_XFER_RECV, .buf = r, .nbytes = nbytes};
        }
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "tcp test exchange", &x);
    CHECK_OK(sh_xfer(&x, ops, n));
    for (int i = 1; i < n; i += 2) {
        const sh_link *l = ops[i].link;
        int plane = l == c->p2p[l->peer];
        size_t bad = nbytes;
        for (size_t k = 0; k < nbytes && bad == nbytes; k++)
            if (bufs[i][k] != pattern(l->peer, c->rank, plane, k)) bad = k;
        CHECK(bad == nbytes, "rank %d: byte %zu from rank %d on plane %d is wrong", c->rank, bad, l->peer, plane);
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(ops);
    /* No link to ranks we did not want. */
    for (int p = 0; p < w; p++)
        if (!wanted(tc, c->rank, p))
            CHECK(!c->coll[p] && !c->p2p[p], "rank %d has an unwanted link to %d", c->rank, p);
}

/* The kernel's default congestion control here ("" where it cannot be read). */
static void system_cc(char *out, size_t cap)
{
    out[0] = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
    if (!f) return;
    if (!fgets(out, (int)cap, f)) out[0] = 0;
    out[strcspn(out, "\n")] = 0;
    fclose(f);
}

/* A link's congestion control: the one SHOAL_TCP_CONGESTION names, else the kernel's. */
static void check_congestion(const tcp_case *tc, int fd, int peer)
{
    char got[16] = "", sys[64];
    socklen_t len = sizeof got - 1;
    CHECK(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, got, &len) == 0, "TCP_CONGESTION: %s", strerror(errno));
    system_cc(sys, sizeof sys);
    if (tc->cc && strcmp(tc->cc, "system") != 0)
        CHECK(strcmp(got, tc->cc) == 0, "link to %d runs %s, SHOAL_TCP_CONGESTION=%s", peer, got, tc->cc);
    else
        CHECK(!sys[0] || strcmp(got, sys) == 0, "link to %d runs %s, the kernel's default is %s", peer, got, sys);
    /* the send buffer: SHOAL_SOCKET_SNDBUF_KB (default 128) KiB, clamped to wmem_max, doubled */
    long kb = tc->sndbuf_kb ? atol(tc->sndbuf_kb) : 128, wmax = -1;
    FILE *f = fopen("/proc/sys/net/core/wmem_max", "r");
    if (f) {
        if (fscanf(f, "%ld", &wmax) != 1) wmax = -1;
        fclose(f);
    }
    int snd = 0;
    socklen_t sl = sizeof snd;
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, &sl);
    long want = kb * 1024 < wmax ? kb * 1024 : wmax;
    if (kb > 0 && wmax > 0)
        CHECK(snd == 2 * want, "link to %d has a %d-byte send buffer, SHOAL_SOCKET_SNDBUF_KB=%ld wants %ld", peer, snd,
              kb, 2 * want);
}

static void rank_main(const tcp_case *tc, int rank)
{
    set_env(tc, rank);
    shoal_comm *c = NULL;
    CHECK_OK(sh_boot_world(NULL, &c));
    if (!c) return;
    unsigned char *want = calloc((size_t)tc->world, 1);
    for (int p = 0; p < tc->world; p++) want[p] = (unsigned char)wanted(tc, rank, p);
    if (rank == tc->late_rank && tc->attack) {
        /* The others listen meanwhile: wait until the attacker has done its worst. */
        char v[4];
        size_t vn = 0;
        CHECK_OK(sh_store_get(c->store, "test/attacked", v, sizeof v, &vn, tc->timeout_ms));
    } else if (rank == tc->late_rank) {
        sleep_ms(tc->late_ms);
    }
    if (rank == tc->never_rank) {
        /* Boots, then never connects: the others must name it. Stay until they gave up. */
        sleep_ms(tc->timeout_ms + 1500);
        free(want);
        shoal_comm_destroy(c);
        return;
    }
    uint64_t t0 = sh_now_ns();
    shoal_result rc = sh_tcp_connect(c, want);
    uint64_t took_ms = (sh_now_ns() - t0) / 1000000ull;
    if (tc->never_rank >= 0) {
        char who[32];
        snprintf(who, sizeof who, "%d", tc->never_rank);
        int lower = rank < tc->never_rank;
        CHECK(rc == SHOAL_ERR_TIMEOUT, "rank %d: %s: %s", rank, shoal_result_name(rc), shoal_last_error_message());
        /* Lower ranks wait for it to connect; higher ones for its address. */
        CHECK(has(shoal_last_error_message(), lower ? "never connected" : "never published") &&
                  has(shoal_last_error_message(), who),
              "rank %d: %s", rank, shoal_last_error_message());
        CHECK(took_ms < (uint64_t)tc->timeout_ms + 3000, "rank %d gave up after %llu ms", rank,
              (unsigned long long)took_ms);
    } else {
        CHECK(rc == SHOAL_OK, "rank %d: %s", rank, shoal_last_error_message());
        if (rc == SHOAL_OK) {
            /* The published address is this host's, never the wildcard. */
            char k[64], v[96] = "";
            size_t vn = 0;
            snprintf(k, sizeof k, "w/tcp/%d", rank);
            CHECK_OK(sh_store_get(c->store, k, v, sizeof v - 1, &vn, 1000));
            CHECK(!has(v, "0.0.0.0") && has(v, "127.0.0.1:"), "rank %d published \"%s\"", rank, v);
            for (int p = 0; p < tc->world; p++)
                if (c->coll[p]) {
                    /* an accepted link of a listener on every address is IPv6, ::ffff:127.0.0.1 */
                    struct sockaddr_storage a;
                    socklen_t len = sizeof a;
                    getsockname(c->coll[p]->fd, (struct sockaddr *)&a, &len);
                    uint32_t v4 = 0;
                    if (a.ss_family == AF_INET) v4 = ntohl(((struct sockaddr_in *)&a)->sin_addr.s_addr);
                    else if (IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&a)->sin6_addr))
                        memcpy(&v4, &((struct sockaddr_in6 *)&a)->sin6_addr.s6_addr[12], 4), v4 = ntohl(v4);
                    CHECK(v4 == 0x7f000001, "link to %d is on %08x (family %d)", p, v4, a.ss_family);
                    check_congestion(tc, c->coll[p]->fd, p);
                }
            exchange(c, tc, check_under_san() ? 100000 : 1 << 20);
            exchange(c, tc, 1);
            if (tc->sub_mesh) {
                /* A sub-communicator's mesh: same ranks, another prefix, fresh links. */
                shoal_comm *sub = NULL;
                CHECK_OK(sh_comm_alloc(rank, tc->world, &sub));
                if (sub) {
                    snprintf(sub->prefix, sizeof sub->prefix, "w.s7.c0");
                    sub->store = c->store;
                    sub->timeout_ms = c->timeout_ms;
                    CHECK_OK(sh_tcp_connect(sub, want));
                    exchange(sub, tc, 4096);
                    sub->store = NULL;
                    sh_comm_free(sub);
                }
            }
        }
    }
    free(want);
    /* Everyone done before rank 0 takes the store away. */
    sh_store_barrier(c->store, "test/done", tc->world + (tc->attack ? 1 : 0), tc->timeout_ms + 5000);
    shoal_comm_destroy(c);
}

static int raw_connect(const char *addr, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &a.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A local IPv4 address other than 127.0.0.1: another interface's, else 127.0.0.2. */
static void other_local_addr(char *out, size_t cap)
{
    snprintf(out, cap, "127.0.0.2");
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

/* The stranger: learns the ranks' ports from the store (test scaffolding: it borrows the
 * key for that), then throws everything at them while they wait for the late rank. */
static void attacker_main(const tcp_case *tc)
{
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", tc->port, KEY, 5000, &s));
    if (!s) return;
    int held[200], nheld = 0;
    char other[64];
    other_local_addr(other, sizeof other);
    for (int r = 0; r < tc->world - 1; r++) {
        char skey[64], v[96] = "";
        size_t vn = 0;
        snprintf(skey, sizeof skey, "w/tcp/%d", r);
        CHECK_OK(sh_store_get(s, skey, v, sizeof v - 1, &vn, 5000));
        char *colon = strrchr(v, ':');
        if (!colon) continue;
        *colon = 0;
        int port = atoi(colon + 1);
        /* Bound to one address: another address of this host does not answer (unless
         * SHOAL_BIND_ALL=1). */
        int fd = raw_connect(other, port);
        CHECK((fd >= 0) == (tc->bind_all != 0), "rank %d's listener %s on %s", r,
              fd >= 0 ? "answers" : "does not answer", other);
        if (fd >= 0) close(fd);
        /* port scan */
        fd = raw_connect(v, port);
        if (fd >= 0) close(fd);
        /* garbage, lots of it */
        fd = raw_connect(v, port);
        if (fd >= 0) {
            unsigned char junk[65536];
            for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 77 + 3);
            for (int k = 0; k < 16; k++)
                if (send(fd, junk, sizeof junk, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) break;
            close(fd);
        }
        /* wrong key */
        fd = raw_connect(v, port);
        if (fd >= 0) {
            char ctx[SH_AUTH_CTX_NBYTES];
            snprintf(ctx, sizeof ctx, "w tcp %d->%d plane 0", tc->world - 1, r);
            CHECK(sh_auth_client(fd, "wrong", ctx, "rank", sh_sock_deadline(3000), NULL) != SHOAL_OK,
                  "rank %d accepted the wrong key", r);
            close(fd);
        }
        /* right key, but claiming to be a rank that does not exist, or another communicator */
        const char *lies[] = {"w tcp 99->%d plane 0", "w.other tcp 3->%d plane 0", "w tcp 1->%d plane 7"};
        for (int k = 0; k < 3; k++) {
            fd = raw_connect(v, port);
            if (fd < 0) continue;
            char ctx[SH_AUTH_CTX_NBYTES];
            snprintf(ctx, sizeof ctx, lies[k], r);
            /* The listener checks the context after the MAC: it hangs up on us. */
            shoal_result arc = sh_auth_client(fd, KEY, ctx, "rank", sh_sock_deadline(3000), NULL);
            CHECK(arc != SHOAL_OK, "rank %d accepted \"%s\"", r, ctx);
            close(fd);
        }
        /* a flood of stalled handshakes, held open until the job is done */
        for (int k = 0; k < 80 && nheld < 200; k++) { /* more than the 64 kept half-open */
            fd = raw_connect(v, port);
            if (fd < 0) continue;
            if (k % 2 && write(fd, "SHOAL1C", 7) != 7) {
            }
            held[nheld++] = fd;
        }
    }
    CHECK_OK(sh_store_set(s, "test/attacked", "1", 1));
    CHECK_OK(sh_store_barrier(s, "test/done", tc->world + 1, tc->timeout_ms + 5000));
    for (int i = 0; i < nheld; i++) close(held[i]);
    sh_store_close(s);
}

/* Process r < world is rank r; process world, when there is one, the attacker. */
static void tcp_proc(int r, void *arg)
{
    const tcp_case *tc = arg;
    if (r < tc->world) {
        rank_main(tc, r);
        return;
    }
    set_env(tc, 0);
    attacker_main(tc);
}

static void run_tcp(const tcp_case *tc)
{
    RUN_PROCS(tc->world + (tc->attack ? 1 : 0), NULL, tcp_proc, (void *)tc);
}

static tcp_case base_case(int world)
{
    return (tcp_case){.world = world, .port = free_port(), .timeout_ms = 10000, .late_rank = -1,
                      .never_rank = -1};
}

static void meshes_of_2_to_5_ranks_move_data_both_ways_on_both_planes(void)
{
    for (int world = 2; world <= 5; world++) {
        tcp_case tc = base_case(world);
        tc.sub_mesh = world == 3;
        run_tcp(&tc);
    }
}

static void a_partial_mesh_makes_only_the_wanted_links(void)
{
    tcp_case tc = base_case(5);
    tc.shape = WANT_RING;
    run_tcp(&tc);
}

static void strangers_at_every_port_are_refused_while_the_job_connects(void)
{
    tcp_case tc = base_case(3);
    tc.attack = 1;
    tc.late_rank = 2; /* connects only once the attacker is done: the others listen meanwhile */
    run_tcp(&tc);
    /* and with every address bound: the attack still fails, the job still connects */
    tc.port = free_port();
    tc.bind_all = 1;
    run_tcp(&tc);
}


/* One rank whose environment variable var=value is wrong for a link: sh_tcp_connect stops
 * with one line naming it (a world of 2 whose other rank is never asked for). */
typedef struct {
    const char *var, *value, *says;
} bad_env;

static void bad_env_proc(int i, void *arg)
{
    (void)i;
    const bad_env *b = arg;
    tcp_case t1 = base_case(1);
    set_env(&t1, 0);
    setenv(b->var, b->value, 1);
    shoal_comm *c = NULL;
    CHECK_OK(sh_boot_world(NULL, &c));
    if (c) {
        shoal_comm *sub = NULL;
        CHECK_OK(sh_comm_alloc(0, 2, &sub));
        if (sub) {
            sub->store = c->store;
            unsigned char want[2] = {0, 1};
            CHECK_RC(sh_tcp_connect(sub, want), SHOAL_ERR_INVALID);
            CHECK(has(shoal_last_error_message(), b->says), "%s", shoal_last_error_message());
            sub->store = NULL;
            sh_comm_free(sub);
        }
        shoal_comm_destroy(c);
    }
}

static void the_interface_can_be_named(void)
{
    tcp_case tc = base_case(2);
    tc.ifname = "lo";
    run_tcp(&tc);
    /* an interface that does not exist: one clear line naming it */
    bad_env b = {"SHOAL_SOCKET_IFNAME", "nosuch0", "SHOAL_SOCKET_IFNAME=nosuch0"};
    RUN_PROCS(1, NULL, bad_env_proc, &b);
}

/* SHOAL_TCP_CONGESTION naming an algorithm the kernel refuses: one line at start-up. */
static void unknown_cc_proc(int i, void *arg)
{
    (void)i, (void)arg;
    tcp_case t1 = base_case(1);
    t1.cc = "nosuch";
    set_env(&t1, 0);
    shoal_comm *c = NULL;
    CHECK_RC(sh_boot_world(NULL, &c), SHOAL_ERR_INVALID);
    CHECK(has(shoal_last_error_message(), "SHOAL_TCP_CONGESTION=nosuch") &&
              has(shoal_last_error_message(), "tcp_allowed_congestion_control"),
          "%s", shoal_last_error_message());
    if (c) shoal_comm_destroy(c);
}

/* The kernel's congestion control unless SHOAL_TCP_CONGESTION names one ("system": the
 * kernel's); send buffers of SHOAL_SOCKET_SNDBUF_KB. */
static void congestion_control_and_send_buffer_are_chosen(void)
{
    tcp_case tc = base_case(2);
    run_tcp(&tc);
    tc.port = free_port();
    tc.cc = "reno"; /* always built in and allowed */
    run_tcp(&tc);
    tc.port = free_port();
    tc.cc = "system";
    run_tcp(&tc);
    RUN_PROCS(1, NULL, unknown_cc_proc, NULL);
    tc.port = free_port();
    tc.cc = NULL;
    tc.sndbuf_kb = "64";
    run_tcp(&tc);
    bad_env b = {"SHOAL_SOCKET_SNDBUF_KB", "lots", "SHOAL_SOCKET_SNDBUF_KB"}; /* not a number */
    RUN_PROCS(1, NULL, bad_env_proc, &b);
}

static void ranks_that_never_connect_are_named_within_the_deadline(void)
{
    tcp_case tc = base_case(3);
    tc.timeout_ms = 1000;
    tc.never_rank = 1; /* rank 0 waits for it to connect, rank 2 for its address */
    run_tcp(&tc);
}

int main(void)
{
    check_begin("test_transport_tcp", 150);
    signal(SIGPIPE, SIG_IGN);
    RUN(meshes_of_2_to_5_ranks_move_data_both_ways_on_both_planes);
    RUN(a_partial_mesh_makes_only_the_wanted_links);
    RUN(strangers_at_every_port_are_refused_while_the_job_connects);
    RUN(the_interface_can_be_named);
    RUN(congestion_control_and_send_buffer_are_chosen);
    RUN(ranks_that_never_connect_are_named_within_the_deadline);
    return check_end();
}
