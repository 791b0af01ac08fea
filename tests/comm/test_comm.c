/* test_comm.c — proves the communicator end to end with real processes: rendezvous through
 * rank 0's store, shared-memory and TCP links, every collective x dtype x op in place and
 * out of place for 1..8 ranks, non-blocking operations, point-to-point, split. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "coll_check.h"
#include "comm/comm_internal.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

static int san(void)
{
    const char *s = getenv("SHOAL_TEST_SAN");
    return s && s[0] == '1';
}

static void matrix_small(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    size_t counts[] = {0, 1, (size_t)(n > 1 ? n - 1 : 2), (size_t)n + 1, 1009};
    cc_matrix(c, counts, 5, *(int *)arg);
}

static void t_matrix_shm(void)
{
    int all = 1;
    for (int n = 1; n <= 8; n++) {
        if (san() && n > 4) break;
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 240};
        RUN_RANKS(n, &o, matrix_small, &all);
    }
}

static void t_matrix_tcp(void)
{
    int some = 0;
    for (int n = 2; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp", .deadline_s = 240};
        RUN_RANKS(n, &o, matrix_small, &some);
    }
}

/* Forced algorithms over socketpair and shared-memory links made before fork. */
static void t_forced_algos(void)
{
    const char *algos[] = {"ring", "rd", "tree"};
    int some = 0;
    for (int a = 0; a < 3; a++)
        for (int n = 2; n <= 5; n += 3) {
            sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = algos[a]};
            RUN_RANKS(n, &o, matrix_small, &some);
            o.links = SH_TEST_SHM;
            RUN_RANKS(n, &o, matrix_small, &some);
        }
}

/* 64 MiB: float32 sum allreduce and int32 broadcast; staging stays bounded. */
static void big(shoal_comm *c, void *arg)
{
    size_t count = san() ? (4u << 20) / 4 : (64u << 20) / 4;
    cc_run(c, 0, SHOAL_FLOAT32, SHOAL_SUM, count, 0);
    cc_run(c, 0, SHOAL_FLOAT32, SHOAL_SUM, count, 1);
    cc_run(c, 1, SHOAL_INT32, SHOAL_SUM, count, 0);
    cc_run(c, 4, SHOAL_FLOAT32, SHOAL_SUM, count / (size_t)shoal_comm_world(c), 0);
    CHECK(c->scratch_nbytes <= (4u << 20), "staging grew to %zu bytes for a %zu-byte message",
          c->scratch_nbytes, count * 4);
}

static void t_big(void)
{
    for (int n = 2; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 240};
        RUN_RANKS(n, &o, big, NULL);
    }
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp", .deadline_s = 240};
    RUN_RANKS(2, &o, big, NULL);
}

/* Floats that are not integers: every rank must get bitwise the same sum. */
static void bitwise_equal(shoal_comm *c, void *arg)
{
    size_t count = 100003;
    float *v = malloc(count * 4), *all = malloc(count * 4 * (size_t)shoal_comm_world(c));
    sh_rng g;
    sh_rng_seed(&g, (uint64_t)shoal_comm_rank(c) + 11);
    for (size_t i = 0; i < count; i++) v[i] = sh_rng_float(&g) * 3.3f - 1.1f;
    CHECK(shoal_allreduce(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(shoal_allgather(c, v, all, count, SHOAL_FLOAT32) == SHOAL_OK, "%s", shoal_last_error_message());
    int differ = 0;
    for (int r = 1; r < shoal_comm_world(c); r++)
        if (memcmp(all, all + (size_t)r * count, count * 4) != 0) differ++;
    CHECK(differ == 0, "%d ranks hold different float sums", differ);
    free(v);
    free(all);
}

static void t_bitwise(void)
{
    for (int n = 2; n <= 5; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL};
        RUN_RANKS(n, &o, bitwise_equal, NULL);
    }
}

/* Small allreduces go through shared slots, each reused two collectives later; between
 * them run collectives that let some ranks run ahead (a broadcast's root returns once its
 * bytes are in the rings). A rank that rewrote a slot before a slower rank had read it
 * would show up as a wrong sum. Rank 3 sleeps now and then to be the slow one. */
static void slots_interleaved(shoal_comm *c, void *arg)
{
    (void)arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    for (int it = 0; it < 3000; it++) {
        int64_t v[3] = {it, r, (int64_t)it * r}, want[3] = {(int64_t)it * n, (int64_t)n * (n - 1) / 2,
                                                            (int64_t)it * n * (n - 1) / 2};
        CHECK_OK(shoal_allreduce(c, v, v, 3, SHOAL_INT64, SHOAL_SUM));
        CHECK(v[0] == want[0] && v[1] == want[1] && v[2] == want[2], "rank %d it %d: got %lld %lld %lld", r, it,
              (long long)v[0], (long long)v[1], (long long)v[2]);
        if (v[0] != want[0] || v[1] != want[1] || v[2] != want[2]) return;
        if (it % 3 == 1) {
            int32_t b = r == it % n ? it : -1;
            CHECK_OK(shoal_broadcast(c, &b, &b, 1, SHOAL_INT32, it % n));
            CHECK(b == it, "rank %d it %d: broadcast gave %d", r, it, b);
        }

        if (r == n - 1 && it % 97 == 0) usleep(200);
    }
}

/* A small allreduce (slots) then a 16 KiB one (rings), over and over, with signals arriving
 * every few microseconds (as SIGINT and SIGHUP reach training ranks): a rank held up between
 * its look at a peer's slot and its look at the peer's ring must not take a peer that
 * published and went on to the big allreduce for one that made another call (a false
 * mismatch; without the second look this failed within a few thousand rounds). */
static _Atomic int spin_stop;
static void on_usr1(int sig) { (void)sig; }
static void *signaller(void *arg)
{
    (void)arg;
    while (!atomic_load(&spin_stop)) {
        kill(getpid(), SIGUSR1);
        usleep(20);
    }
    return NULL;
}

static void slot_then_ring(shoal_comm *c, void *arg)
{
    (void)arg;
    int r = shoal_comm_rank(c);
    pthread_t th;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    atomic_store(&spin_stop, 0);
    int spinning = pthread_create(&th, NULL, signaller, NULL) == 0;
    static float big[4096];
    for (int it = 0; it < 2000 && !shoal_comm_is_broken(c); it++) {
        double v[2] = {it, r};
        CHECK_OK(shoal_allreduce(c, v, v, 2, SHOAL_FLOAT64, SHOAL_SUM));
        for (int i = 0; i < 4096; i++) big[i] = (float)(r + i);
        CHECK_OK(shoal_allreduce(c, big, big, 4096, SHOAL_FLOAT32, SHOAL_SUM));
    }
    atomic_store(&spin_stop, 1);
    if (spinning) pthread_join(th, NULL);
}

static void t_slots_interleaved(void)
{
    for (int n = 2; n <= 3; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL};
        RUN_RANKS(n, &o, slot_then_ring, NULL);
    }
    for (int n = 2; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL};
        RUN_RANKS(n, &o, slots_interleaved, NULL);
    }
}

/* Non-blocking: several in flight, completed in start order, progressing while we sleep. */
static void nonblocking(shoal_comm *c, void *arg)
{
    enum { K = 5 };
    size_t count = 1 << 18;
    int32_t *b[K];
    shoal_request *req[K];
    for (int k = 0; k < K; k++) {
        b[k] = malloc(count * 4);
        for (size_t i = 0; i < count; i++) b[k][i] = (int32_t)(k + 1) * (shoal_comm_rank(c) + 1);
        CHECK(shoal_allreduce_start(c, b[k], b[k], count, SHOAL_INT32, SHOAL_SUM, &req[k]) == SHOAL_OK,
              "%s", shoal_last_error_message());
    }
    usleep(300000); /* "compute": the engine works meanwhile */
    int done_all = 1;
    for (int k = 0; k < K; k++) {
        int d = 0;
        shoal_test(req[k], &d);
        done_all &= d;
    }
    CHECK(done_all, "the operations did not progress while the caller slept");
    int n = shoal_comm_world(c);
    for (int k = K - 1; k >= 0; k--) { /* waiting out of order is fine */
        CHECK(shoal_wait(req[k]) == SHOAL_OK, "%s", shoal_last_error_message());
        int bad = 0;
        for (size_t i = 0; i < count; i++)
            if (b[k][i] != (k + 1) * n * (n + 1) / 2) bad++;
        CHECK(bad == 0, "request %d: %d wrong", k, bad);
        free(b[k]);
    }
    /* a blocking call after non-blocking ones runs after them */
    int32_t x = 1, y = 0;
    shoal_request *r1;
    CHECK(shoal_broadcast_start(c, &x, &y, 1, SHOAL_INT32, 0, &r1) == SHOAL_OK, "start");
    CHECK(shoal_allreduce(c, &x, &x, 1, SHOAL_INT32, SHOAL_SUM) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK(shoal_wait(r1) == SHOAL_OK && y == 1 && x == n, "y %d x %d", y, x);
}

static void t_nonblocking(void)
{
    for (int n = 2; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL};
        RUN_RANKS(n, &o, nonblocking, NULL);
    }
}

/* Point-to-point: both orders, big messages crossing, recv_any. */
static void p2p(shoal_comm *c, void *arg)
{
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    size_t count = 3 << 20; /* 12 MiB each way at once: needs buffering to not deadlock */
    int32_t *out = malloc(count * 4), *in = malloc(count * 4);
    int peer = r ^ 1;
    if (peer < n) {
        for (size_t i = 0; i < count; i++) out[i] = (int32_t)(i * 3 + (size_t)r);
        CHECK(shoal_send(c, out, count, SHOAL_INT32, peer, 7) == SHOAL_OK, "%s", shoal_last_error_message());
        CHECK(shoal_recv(c, in, count, SHOAL_INT32, peer, 7) == SHOAL_OK, "%s", shoal_last_error_message());
        int bad = 0;
        for (size_t i = 0; i < count; i++)
            if (in[i] != (int32_t)(i * 3 + (size_t)peer)) bad++;
        CHECK(bad == 0, "%d wrong", bad);
        /* tags keep messages apart: send tag 2 then 1, receive 1 then 2 */
        int32_t a = 100 + r, b = 200 + r, ga = 0, gb = 0;
        shoal_request *q;
        CHECK(shoal_send(c, &b, 1, SHOAL_INT32, peer, 2) == SHOAL_OK, "send");
        CHECK(shoal_send_start(c, &a, 1, SHOAL_INT32, peer, 1, &q) == SHOAL_OK, "send_start");
        CHECK(shoal_recv(c, &ga, 1, SHOAL_INT32, peer, 1) == SHOAL_OK && ga == 100 + peer, "tag 1: %d", ga);
        CHECK(shoal_recv(c, &gb, 1, SHOAL_INT32, peer, 2) == SHOAL_OK && gb == 200 + peer, "tag 2: %d", gb);
        CHECK(shoal_wait(q) == SHOAL_OK, "wait");
        /* a longer message than the receive is a mismatch */
        int32_t two[2] = {1, 2}, one = 0;
        CHECK(shoal_send(c, two, 2, SHOAL_INT32, peer, 3) == SHOAL_OK, "send");
        CHECK(shoal_recv(c, &one, 1, SHOAL_INT32, peer, 3) == SHOAL_ERR_MISMATCH, "too long accepted");
    }
    /* recv_any: rank 0 hears from everyone */
    if (r == 0) {
        int seen = 0;
        for (int k = 1; k < n; k++) {
            int64_t v = 0;
            int from = -1;
            size_t cnt = 0;
            CHECK(shoal_recv_any(c, &v, 1, SHOAL_INT64, 9, -1, &from, &cnt) == SHOAL_OK, "%s", shoal_last_error_message());
            CHECK(from >= 1 && from < n && v == from * 1000 && cnt == 1, "from %d v %lld", from, (long long)v);
            seen |= 1 << from;
        }
        CHECK(seen == ((1 << n) - 2), "seen %x", seen);
        int64_t v;
        int from;
        size_t cnt;
        CHECK(shoal_recv_any(c, &v, 1, SHOAL_INT64, 10, 100, &from, &cnt) == SHOAL_ERR_TIMEOUT, "no timeout");
        CHECK(!shoal_comm_is_broken(c), "a recv_any timeout broke the communicator");
    } else {
        int64_t v = r * 1000;
        CHECK(shoal_send(c, &v, 1, SHOAL_INT64, 0, 9) == SHOAL_OK, "%s", shoal_last_error_message());
    }
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
    free(out);
    free(in);
}

/* A communicator's first point-to-point operation is a receive whose message comes later:
 * it waits for it. (The no-progress deadline once counted from time zero when the progress
 * thread found the receive at its first look: the receive failed at once, as if the
 * message had been lost.) */
static void first_recv_waits(shoal_comm *c, void *arg)
{
    int64_t v = 0;
    if (shoal_comm_rank(c) == 0) {
        shoal_result rc = shoal_recv(c, &v, 1, SHOAL_INT64, 1, 11);
        CHECK(rc == SHOAL_OK && v == 42, "rc %d v %lld: %s", rc, (long long)v, shoal_last_error_message());
    } else {
        usleep(300000);
        v = 42;
        CHECK(shoal_send(c, &v, 1, SHOAL_INT64, 0, 11) == SHOAL_OK, "%s", shoal_last_error_message());
    }
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
}

static void t_p2p(void)
{
    for (int k = 0; k < 3; k++) {
        sh_test_ranks_opts f = {.links = SH_TEST_REAL, .timeout_ms = 2000};
        RUN_RANKS(2, &f, first_recv_waits, NULL);
    }
    for (int n = 2; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL};
        RUN_RANKS(n, &o, p2p, NULL);
    }
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp"};
    RUN_RANKS(2, &o, p2p, NULL);
}

/* Split: odd/even, ordered by descending key; collectives on the children. */
static void split(shoal_comm *c, void *arg)
{
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    shoal_comm *child = NULL;
    CHECK(shoal_comm_split(c, r % 2, -r, &child) == SHOAL_OK, "%s", shoal_last_error_message());
    if (!child) return;
    int members = (n + 1 - r % 2) / 2;
    CHECK(shoal_comm_world(child) == members, "child world %d want %d", shoal_comm_world(child), members);
    int want_rank = 0;
    for (int q = r + 2; q < n; q += 2) want_rank++; /* higher old ranks come first */
    CHECK(shoal_comm_rank(child) == want_rank, "child rank %d want %d", shoal_comm_rank(child), want_rank);
    int32_t v = r, s = 0;
    CHECK(shoal_allreduce(child, &v, &s, 1, SHOAL_INT32, SHOAL_SUM) == SHOAL_OK, "%s", shoal_last_error_message());
    int32_t want = 0;
    for (int q = r % 2; q < n; q += 2) want += q;
    CHECK(s == want, "child sum %d want %d", s, want);
    shoal_comm *none = (shoal_comm *)1;
    CHECK(shoal_comm_split(c, r == 0 ? -1 : 0, 0, &none) == SHOAL_OK, "%s", shoal_last_error_message());
    CHECK((r == 0) == (none == NULL), "colour -1 must give NULL");
    shoal_comm_destroy(none);
    shoal_comm_destroy(child);
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
}

static void t_split(void)
{
    for (int n = 2; n <= 5; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_REAL};
        RUN_RANKS(n, &o, split, NULL);
    }
}

/* IPv6: the store and the rank links over ::1 (written bare and in brackets), and
 * listeners on every address (SHOAL_BIND_ALL=1: one socket for both families) reached over
 * IPv4. Skipped where the host has no IPv6 loopback. */
static int have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

static void t_ipv6(void)
{
    int some = 0;
    if (!have_ipv6_loopback()) {
        printf("test_comm: skipped IPv6: no ::1 here\n");
    } else {
        const char *addrs[] = {"::1", "[::1]"};
        for (int i = 0; i < 2; i++) {
            sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp", .master_addr = addrs[i]};
            CHECK(RUN_RANKS(3, &o, matrix_small, &some) == 0, "3 ranks over tcp, master at %s", addrs[i]);
        }
    }
    setenv("SHOAL_BIND_ALL", "1", 1);
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp"};
    CHECK(RUN_RANKS(3, &o, matrix_small, &some) == 0, "3 ranks over tcp listening on every address");
    unsetenv("SHOAL_BIND_ALL");
}

/* ---- shared windows ---- */

typedef struct {
    float *params;
    size_t touched; /* elements this rank's apply stepped */
    int bad_reduced; /* apply saw a reduced value that is not the sum */
    size_t count;
    int world;
} win_apply;

/* grads of rank r at i: r * 2 + i % 7 (small integers: every sum is exact) */
static float win_grad(int r, size_t i) { return (float)(r * 2 + (int)(i % 7)); }

static void win_step(void *ctx, size_t off, size_t n, const float *reduced)
{
    win_apply *a = ctx;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < a->world; r++) want += win_grad(r, off + i);
        a->bad_reduced += reduced[i] != want;
        a->params[off + i] -= reduced[i];
    }
    a->touched += n;
}

/* Every rank sees the common block and every block; an allreduce_apply with params in the
 * common block steps each element exactly once (whatever the size or forced algorithm),
 * feeds apply the reduced gradients and leaves the same weights everywhere. */
static void window(shoal_comm *c, void *arg)
{
    (void)arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    size_t counts[] = {1, (size_t)n + 1, 1000, 300000}, cap = 300000;
    shoal_window *w = NULL;
    CHECK(shoal_window_create(c, cap * sizeof(float) + 3, cap * sizeof(float) + 5, &w) == SHOAL_OK, "%s",
          shoal_last_error_message());
    if (!w) return;
    float *common = shoal_window_common(w);
    CHECK(((uintptr_t)common & ((2u << 20) - 1)) == 0, "common block not on a 2 MiB boundary");
    CHECK(shoal_window_block(w, n) == NULL && shoal_window_block(w, -1) == NULL, "block of no rank");
    for (int p = 0; p < n; p++) {
        unsigned char *b = shoal_window_block(w, p);
        CHECK(b && b >= (unsigned char *)(common + cap) && ((uintptr_t)b & ((2u << 20) - 1)) == 0,
              "block %d at %p, common at %p", p, (void *)b, (void *)common);
    }
    float *mine = shoal_window_block(w, r);
    if (r == 0)
        for (size_t i = 0; i < cap; i++) common[i] = (float)i;
    for (size_t i = 0; i < cap; i++) mine[i] = (float)(r * 1000000 + (int)i);
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
    int seen = 0;
    for (size_t i = 0; i < cap; i += 997) {
        seen += common[i] == (float)i;
        for (int p = 0; p < n; p++)
            seen += ((float *)shoal_window_block(w, p))[i] == (float)(p * 1000000 + (int)i);
    }
    CHECK(seen == (int)((cap + 996) / 997) * (n + 1), "rank %d: the window's contents differ across ranks", r);
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
    for (int k = 0; k < 4; k++) {
        size_t count = counts[k];
        if (r == 0)
            for (size_t i = 0; i < count; i++) common[i] = 1000.0f;
        for (size_t i = 0; i < count; i++) mine[i] = win_grad(r, i);
        CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
        win_apply a = {common, 0, 0, count, n};
        shoal_request *req = NULL;
        shoal_result rc = shoal_allreduce_apply_start(c, mine, common, count, SHOAL_SUM, win_step, &a, &req);
        if (rc == SHOAL_OK) rc = shoal_wait(req);
        CHECK(rc == SHOAL_OK, "count %zu: %s", count, shoal_last_error_message());
        int64_t t = (int64_t)a.touched, total = 0;
        CHECK(shoal_allreduce(c, &t, &total, 1, SHOAL_INT64, SHOAL_SUM) == SHOAL_OK, "%s",
              shoal_last_error_message());
        CHECK(total == (int64_t)count, "count %zu on %d ranks: %lld elements stepped in all (each once: %zu)", count, n,
              (long long)total, count);
        CHECK(a.bad_reduced == 0, "count %zu: apply saw %d wrong reduced gradients", count, a.bad_reduced);
        size_t wrong = 0;
        for (size_t i = 0; i < count; i++) {
            float want = 1000.0f;
            for (int p = 0; p < n; p++) want -= win_grad(p, i);
            wrong += common[i] != want;
        }
        CHECK(wrong == 0, "count %zu on %d ranks: rank %d sees %zu wrong weights", count, n, r, wrong);
        CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
    }
}

/* allreduce_apply into each rank's own params (no window), averaging: every rank ends with
 * the same stepped weights whatever the path; apply sees the average; the ring and the CMA
 * path step each element once in all (each block by its holder, ZeRO stage 1), the
 * hierarchical one's split shape once per host (each local rank its block), the others
 * every element on every rank; whatever the path, the ranks with apply_lead step each
 * element once between them (the optimizer state a checkpoint keeps). */
typedef struct {
    float *params;
    size_t touched, lo, hi;
    int bad_reduced, world;
} own_apply;

static void own_step(void *ctx, size_t off, size_t n, const float *reduced)
{
    own_apply *a = ctx;
    for (size_t i = 0; i < n; i++) {
        float sum = 0;
        for (int r = 0; r < a->world; r++) sum += win_grad(r, off + i);
        a->bad_reduced += reduced[i] != sum / (float)a->world;
        a->params[off + i] -= reduced[i];
    }
    a->touched += n;
    if (off < a->lo) a->lo = off;
    if (off + n > a->hi) a->hi = off + n;
}

static void apply_private(shoal_comm *c, void *arg)
{
    const char *forced = arg;
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    /* 100000 floats: the hierarchical split shape (64 KiB .. 1 MiB) */
    size_t counts[] = {1, (size_t)n + 1, 1000, 100000, 300000}, cap = 300000;
    float *params = malloc(cap * sizeof(float)), *grads = malloc(cap * sizeof(float));
    CHECK(params && grads, "out of memory");
    if (!params || !grads) goto out;
    for (int k = 0; k < 5; k++) {
        size_t count = counts[k];
        for (size_t i = 0; i < count; i++) {
            params[i] = 1000.0f;
            grads[i] = win_grad(r, i);
        }
        own_apply a = {params, 0, SIZE_MAX, 0, 0, n};
        shoal_request *req = NULL;
        shoal_request_trace tr = {0};
        shoal_result rc = shoal_allreduce_apply_start(c, grads, params, count, SHOAL_AVG, own_step, &a, &req);
        if (rc == SHOAL_OK) rc = shoal_wait_trace(req, &tr);
        CHECK(rc == SHOAL_OK, "count %zu: %s", count, shoal_last_error_message());
        const char *path = tr.algorithm ? tr.algorithm : "?";
        if (forced) /* hier: in pieces (hier-pipelined) from 1 MiB */
            CHECK(strncmp(path, forced, strlen(forced)) == 0, "SHOAL_ALGO=%s ran %s", forced, path);
        int hosts = shoal_comm_nhosts(c);
        /* the hierarchical split shape: more than 64 KiB (in pieces from 1 MiB) */
        int per_host = strncmp(path, "hier", 4) == 0 && count * 4 > 65536;
        int pieces = strcmp(path, "hier-pipelined") == 0; /* a block of each piece */
        int once = strcmp(path, "ring") == 0 || strcmp(path, "cma") == 0 || per_host;
        int64_t t[2] = {(int64_t)a.touched, tr.apply_lead ? (int64_t)a.touched : 0}, total[2] = {0, 0};
        CHECK(shoal_allreduce(c, t, total, 2, SHOAL_INT64, SHOAL_SUM) == SHOAL_OK, "%s",
              shoal_last_error_message());
        int64_t want = (int64_t)count * (!once ? n : per_host ? hosts : 1);
        CHECK(total[0] == want, "count %zu on %d ranks by %s: %lld elements stepped in all, %lld wanted", count, n,
              path, (long long)total[0], (long long)want);
        CHECK(total[1] == (int64_t)count, "count %zu on %d ranks by %s: the ranks with apply_lead stepped %lld",
              count, n, path, (long long)total[1]);
        if (once && a.touched) /* one block of the holder's, never all of it on 2+ ranks */
            CHECK((pieces || a.hi - a.lo == a.touched) && (count < (size_t)n || a.touched < count),
                  "count %zu by %s: rank %d stepped [%zu, %zu), %zu elements", count, path, r, a.lo, a.hi,
                  a.touched);
        CHECK(a.bad_reduced == 0, "count %zu by %s: apply saw %d wrong averages", count, path, a.bad_reduced);
        size_t wrong = 0;
        for (size_t i = 0; i < count; i++) {
            float sum = 0;
            for (int p = 0; p < n; p++) sum += win_grad(p, i);
            wrong += params[i] != 1000.0f - sum / (float)n;
        }
        CHECK(wrong == 0, "count %zu on %d ranks by %s: rank %d holds %zu wrong weights", count, n, path, r, wrong);
    }
out:
    free(params);
    free(grads);
}

static void t_apply_paths(void)
{
    const char *algos[] = {"ring", "rd", "tree"};
    for (int n = 2; n <= 3; n++) {
        for (int k = 0; k < 3; k++) {
            sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = algos[k]};
            RUN_RANKS(n, &o, apply_private, (void *)algos[k]);
        }
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp"};
        RUN_RANKS(n, &o, apply_private, NULL);
    }
    /* several ranks per host: the hierarchical allreduce, forced and chosen */
    int shapes[][2] = {{4, 2}, {6, 2}, {6, 3}};
    for (int i = 0; i < 3; i++)
        for (int forced = 0; forced < 2; forced++) {
            sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .ranks_per_host = shapes[i][1],
                                    .algo = forced ? "hier" : NULL};
            RUN_RANKS(shapes[i][0], &o, apply_private, forced ? "hier" : NULL);
        }
}

static void window_unsupported(shoal_comm *c, void *arg)
{
    (void)arg;
    shoal_window *w = (shoal_window *)1;
    CHECK(shoal_window_create(c, 4096, 4096, &w) == SHOAL_ERR_UNSUPPORTED && w == NULL,
          "a window over %s links on %d rank(s)", shoal_comm_world(c) > 1 ? "tcp" : "no",
          shoal_comm_world(c));
    CHECK(strstr(shoal_last_error_message(), "one host") != NULL, "%s", shoal_last_error_message());
}

static void t_window(void)
{
    const char *algos[] = {NULL, "ring", "rd"};
    for (int a = 0; a < 3; a++)
        for (int n = 2; n <= 4; n++) {
            if (san() && n > 2) break;
            sh_test_ranks_opts o = {.links = SH_TEST_REAL, .algo = algos[a], .deadline_s = 120};
            RUN_RANKS(n, &o, window, NULL);
        }
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .transport = "tcp"};
    RUN_RANKS(2, &o, window_unsupported, NULL);
    RUN_RANKS(1, &o, window_unsupported, NULL);
}

/* Argument errors: one clear message, the communicator stays usable. */
static void bad_args(shoal_comm *c, void *arg)
{
    float x[4] = {0};
    CHECK(shoal_allreduce(NULL, x, x, 1, SHOAL_FLOAT32, SHOAL_SUM) == SHOAL_ERR_INVALID, "NULL comm");
    CHECK(shoal_allreduce(c, x, x, 1, (shoal_dtype)99, SHOAL_SUM) == SHOAL_ERR_INVALID, "dtype");
    CHECK(strstr(shoal_last_error_message(), "data type") != NULL, "%s", shoal_last_error_message());
    CHECK(shoal_allreduce(c, x, x, 1, SHOAL_FLOAT32, (shoal_op)42) == SHOAL_ERR_INVALID, "op");
    CHECK(shoal_broadcast(c, x, x, 1, SHOAL_FLOAT32, 99) == SHOAL_ERR_INVALID, "root");
    CHECK(shoal_allreduce(c, NULL, x, 1, SHOAL_FLOAT32, SHOAL_SUM) == SHOAL_ERR_INVALID, "NULL send");
    CHECK(shoal_allreduce(c, x, x + 1, 2, SHOAL_FLOAT32, SHOAL_SUM) == SHOAL_ERR_INVALID, "overlap");
    CHECK(shoal_allreduce(c, x, x, (size_t)-1, SHOAL_FLOAT32, SHOAL_SUM) == SHOAL_ERR_INVALID, "huge count");
    CHECK(shoal_send(c, x, 1, SHOAL_FLOAT32, shoal_comm_rank(c), 0) == SHOAL_ERR_INVALID, "send to self");
    CHECK(shoal_send(c, x, 1, SHOAL_FLOAT32, 1 - shoal_comm_rank(c), -1) == SHOAL_ERR_INVALID, "negative tag");
    CHECK(!shoal_comm_is_broken(c), "argument errors broke the communicator");
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
}

static void t_bad_args(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL};
    RUN_RANKS(2, &o, bad_args, NULL);
}

int main(void)
{
    check_begin("test_comm", 600);
    RUN(t_bad_args);
    RUN(t_matrix_shm);
    RUN(t_matrix_tcp);
    RUN(t_forced_algos);
    RUN(t_big);
    RUN(t_bitwise);
    RUN(t_slots_interleaved);
    RUN(t_nonblocking);
    RUN(t_p2p);
    RUN(t_split);
    RUN(t_window);
    RUN(t_apply_paths);
    RUN(t_ipv6);
    return check_end();
}
