/* test_comm.c — proves the communicator end to end with real processes: rendezvous through
 * rank 0's store, shared-memory and TCP links, every collective x dtype x op in place and
 * out of place for 1..8 ranks, non-blocking operations, point-to-point, split. */
#include <stdint.h>
#include <stdlib.h>
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

static void t_slots_interleaved(void)
{
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

static void t_p2p(void)
{
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
    return check_end();
}
