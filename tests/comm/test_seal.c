/* test_seal.c — sealed links (SHOAL_SECURE=1): keys per connection and direction; bytes
 * both ways through a relay process that sees only ciphertext; a flipped byte, a replayed,
 * a dropped and a swapped record on the wire each refused, naming the peer; and whole
 * communicators across two hosts forced on loopback (SHOAL_HOST_ID): data equal, a record
 * corrupted in flight named at the receiver, sealed links only when asked, ranks that
 * disagree on SHOAL_SECURE stopped at start-up.
 * Proves src/comm/transport/seal.c and its use in tcp.c and boot.c. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "base/err.h"
#include "comm/comm_internal.h"
#include "comm/transport/seal.h"
#include "comm/transport/xfer.h"
#include "lib/ranks.h"
#include "lib/run.h"
#include "shoal/comm.h"

static const char *JOB_KEY = "seal-test-job-key";

static int has(const char *msg, const char *want) { return strstr(msg, want) != NULL; }

static void fake_nonces(sh_auth_nonces *n, unsigned char seed)
{
    for (int i = 0; i < 32; i++) {
        n->client[i] = (unsigned char)(seed + i);
        n->server[i] = (unsigned char)(seed * 7 + 3 * i);
    }
}

static void keys_differ_by_direction_and_connection(void)
{
    sh_auth_nonces n1, n2;
    fake_nonces(&n1, 1);
    fake_nonces(&n2, 2);
    sh_seal_keys c1, s1, c2, o1;
    CHECK_OK(sh_seal_derive(JOB_KEY, &n1, "w tcp 1->0 plane 0 sealed", 1, &c1));
    CHECK_OK(sh_seal_derive(JOB_KEY, &n1, "w tcp 1->0 plane 0 sealed", 0, &s1));
    CHECK_OK(sh_seal_derive(JOB_KEY, &n2, "w tcp 1->0 plane 0 sealed", 1, &c2));
    CHECK_OK(sh_seal_derive("another job", &n1, "w tcp 1->0 plane 0 sealed", 1, &o1));
    CHECK(!memcmp(c1.send, s1.recv, 32) && !memcmp(c1.recv, s1.send, 32), "the two ends' keys do not pair up");
    CHECK(memcmp(c1.send, c1.recv, 32) != 0, "both directions share one key");
    CHECK(memcmp(c1.send, c2.send, 32) != 0, "two connections (other nonces) share a key");
    CHECK(memcmp(c1.send, o1.send, 32) != 0, "another job key gives the same key");
}

/* ---- a relay process between the two ends of a link ---- */

typedef enum { RELAY_PASS, RELAY_FLIP, RELAY_REPLAY, RELAY_DROP, RELAY_SWAP } relay_mode;

static int read_full(int fd, unsigned char *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const unsigned char *p, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t k = write(fd, p + put, n - put);
        if (k <= 0) return -1;
        put += (size_t)k;
    }
    return 0;
}

/* One record of the a -> b stream into rec (header, ciphertext, tag); its length or -1. */
static long read_record(int fd, unsigned char *rec)
{
    uint32_t len;
    if (read_full(fd, rec, 4) != 0) return -1;
    memcpy(&len, rec, 4);
    if (len > SH_SEAL_RECORD_NBYTES) return -1;
    if (read_full(fd, rec + 4, len + 16) != 0) return -1;
    return 4 + (long)len + 16;
}

/* Forward from a to b record by record, doing `mode` to record 1 (the second), and (a
 * second process) from b to a as it comes; exit 1 if `secret` (16 bytes) is seen on the
 * wire from a. Both end when the ends close. */
static void relay(int a, int b, relay_mode mode, const unsigned char *secret)
{
    if (fork() == 0) {
        unsigned char buf[4096];
        ssize_t k;
        while ((k = read(b, buf, sizeof buf)) > 0)
            if (write_full(a, buf, (size_t)k) != 0) break;
        _exit(0);
    }
    unsigned char *rec = malloc(4 + SH_SEAL_RECORD_NBYTES + 16), *held = malloc(4 + SH_SEAL_RECORD_NBYTES + 16);
    long held_n = 0, n;
    int seen = 0;
    for (long i = 0; (n = read_record(a, rec)) > 0; i++) {
        for (long k = 0; k + 16 <= n; k++)
            if (!memcmp(rec + k, secret, 16)) seen = 1;
        if (i == 1 && mode == RELAY_FLIP) rec[4 + (n - 20) / 2] ^= 0x01;
        if (i == 1 && mode == RELAY_DROP) continue;
        if (i == 1 && mode == RELAY_SWAP) {
            memcpy(held, rec, (size_t)n);
            held_n = n;
            continue;
        }
        if (write_full(b, rec, (size_t)n) != 0) break;
        if (i == 0 && mode == RELAY_REPLAY && write_full(b, rec, (size_t)n) != 0) break;
        if (i == 2 && held_n && write_full(b, held, (size_t)held_n) != 0) break;
    }
    _exit(seen);
}

typedef struct {
    int a_fd, b_fd; /* the ends' sockets, relay between */
    pid_t relay;
} wire;

static void wire_open(wire *w, relay_mode mode, const unsigned char *secret)
{
    int sa[2], sb[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sa) || socketpair(AF_UNIX, SOCK_STREAM, 0, sb)) abort();
    w->relay = fork();
    if (w->relay == 0) {
        close(sa[0]);
        close(sb[0]);
        relay(sa[1], sb[1], mode, secret);
    }
    close(sa[1]);
    close(sb[1]);
    w->a_fd = sa[0];
    w->b_fd = sb[0];
}

/* After both links closed: 1 when the relay saw no plaintext. */
static int wire_close(wire *w)
{
    int st = 0;
    waitpid(w->relay, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static const char *name_peer(void *ctx, int peer, char *buf, size_t cap)
{
    (void)ctx;
    snprintf(buf, cap, "rank %d (relay-test-host)", peer);
    return buf;
}

/* Links a (the client, rank 0's end, peer 1) and b (the server, rank 1's end, peer 0). */
static void pair_links(wire *w, const char *key_a, sh_link **a, sh_link **b)
{
    sh_auth_nonces n;
    fake_nonces(&n, 9);
    sh_seal_keys ka, kb;
    CHECK_OK(sh_seal_derive(key_a, &n, "t", 1, &ka));
    CHECK_OK(sh_seal_derive(JOB_KEY, &n, "t", 0, &kb));
    CHECK_OK(sh_seal_link_create(w->a_fd, 1, &ka, a));
    CHECK_OK(sh_seal_link_create(w->b_fd, 0, &kb, b));
}

static void xctx(sh_xfer_ctx *x)
{
    memset(x, 0, sizeof *x);
    x->what = "seal test";
    x->timeout_ms = 5000;
    x->peer_name = name_peer;
}

static unsigned char pat(size_t i, int dir) { return (unsigned char)(i * 131 + (i >> 9) + 17 * dir); }

static void carries_bytes_both_ways_through_a_relay(void)
{
    static const size_t sizes[] = {1, 100, SH_SEAL_RECORD_NBYTES - 1, SH_SEAL_RECORD_NBYTES,
                                   SH_SEAL_RECORD_NBYTES + 1, (1 << 20) + 7};
    unsigned char secret[16];
    for (int i = 0; i < 16; i++) secret[i] = pat((size_t)i + 4096, 0);
    wire w;
    wire_open(&w, RELAY_PASS, secret);
    sh_link *a, *b;
    pair_links(&w, JOB_KEY, &a, &b);
    sh_xfer_ctx x;
    xctx(&x);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        unsigned char *ab = malloc(n), *ba = malloc(n), *ab_in = calloc(1, n), *ba_in = calloc(1, n);
        for (size_t i = 0; i < n; i++) ab[i] = pat(i, 0), ba[i] = pat(i, 1);
        sh_xfer_op ops[4] = {
            {.link = a, .kind = SH_XFER_SEND, .buf = ab, .nbytes = n},
            {.link = b, .kind = SH_XFER_RECV, .buf = ab_in, .nbytes = n},
            {.link = b, .kind = SH_XFER_SEND, .buf = ba, .nbytes = n},
            {.link = a, .kind = SH_XFER_RECV, .buf = ba_in, .nbytes = n},
        };
        CHECK_OK(sh_xfer(&x, ops, 4));
        CHECK(!memcmp(ab, ab_in, n) && !memcmp(ba, ba_in, n), "%zu bytes came out changed", n);
        free(ab), free(ba), free(ab_in), free(ba_in);
    }
    /* a reduction reads the records in place (recv_peek) */
    enum { N = 300001 };
    float *mine = malloc(N * sizeof *mine), *theirs = malloc(N * sizeof *theirs);
    for (int i = 0; i < N; i++) mine[i] = (float)(i % 97), theirs[i] = (float)(i % 13);
    sh_xfer_op ops[2] = {
        {.link = a, .kind = SH_XFER_SEND, .buf = theirs, .nbytes = N * sizeof(float)},
        {.link = b, .kind = SH_XFER_RECV_REDUCE, .buf = mine, .nbytes = N * sizeof(float)},
    };
    x.dtype = SHOAL_FLOAT32;
    x.op = SHOAL_SUM;
    CHECK_OK(sh_xfer(&x, ops, 2));
    int bad = -1;
    for (int i = 0; i < N && bad < 0; i++)
        if (mine[i] != (float)(i % 97 + i % 13)) bad = i;
    CHECK(bad < 0, "reduced element %d is %g", bad, bad >= 0 ? mine[bad] : 0.0);
    CHECK(sh_seal_is_sealed(a) && sh_seal_is_sealed(b), "links are not sealed");
    sh_link_close(a);
    sh_link_close(b);
    CHECK(wire_close(&w), "the relay saw plaintext on the wire");
    free(mine);
    free(theirs);
}

/* Three records a -> b through a relay that does `mode` to the second: b must fail naming
 * the peer and the record. */
static void refused(relay_mode mode, const char *what, const char *key_a)
{
    wire w;
    unsigned char none[16] = {0xde, 0xad};
    wire_open(&w, mode, none);
    sh_link *a, *b;
    pair_links(&w, key_a, &a, &b);
    sh_xfer_ctx x;
    xctx(&x);
    size_t n = 3 * SH_SEAL_RECORD_NBYTES;
    unsigned char *src = malloc(n), *dst = calloc(1, n);
    for (size_t i = 0; i < n; i++) src[i] = pat(i, 2);
    sh_xfer_op send = {.link = a, .kind = SH_XFER_SEND, .buf = src, .nbytes = n};
    CHECK_OK(sh_xfer(&x, &send, 1)); /* the kernel and the relay hold what b has not read */
    sh_xfer_op recv = {.link = b, .kind = SH_XFER_RECV, .buf = dst, .nbytes = n};
    shoal_result rc = sh_xfer(&x, &recv, 1);
    const char *msg = shoal_last_error_message();
    CHECK(rc == SHOAL_ERR_PEER, "%s: got %s (%s)", what, shoal_result_name(rc), msg);
    CHECK(has(msg, "failed authentication") && has(msg, "rank 0 (relay-test-host)") &&
              has(msg, mode == RELAY_PASS ? "record 0" : "record 1"),
          "%s: the error does not say what failed and from whom: %s", what, msg);
    sh_link_close(a);
    sh_link_close(b);
    wire_close(&w);
    free(src);
    free(dst);
}

static void flipped_byte_on_the_wire_is_refused_naming_the_peer(void) { refused(RELAY_FLIP, "flip", JOB_KEY); }
static void replayed_record_is_refused(void) { refused(RELAY_REPLAY, "replay", JOB_KEY); }
static void dropped_record_is_refused(void) { refused(RELAY_DROP, "drop", JOB_KEY); }
static void reordered_records_are_refused(void) { refused(RELAY_SWAP, "swap", JOB_KEY); }
static void another_job_key_cannot_seal_for_this_one(void) { refused(RELAY_PASS, "other key", "another job key"); }

/* ---- whole communicators: four ranks, two hosts forced on loopback ---- */

typedef struct {
    int port, world;
    const char *secure[4];  /* each rank's SHOAL_SECURE (NULL: unset) */
    const char *flip;       /* SHOAL_TEST_SEAL_FLIP */
    int expect_fail;        /* every rank's create or allreduce must fail */
    const char *expect_msg; /* ... with this in its message */
    int odd_rank;           /* > 0: the rank whose setting differs; ranks started after the
                               stop may find no store (see job_rank) */
} job_case;

static void job_rank(int i, void *arg)
{
    const job_case *jc = arg;
    char v[64];
    snprintf(v, sizeof v, "%d", i);
    setenv("SHOAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", jc->world);
    setenv("SHOAL_WORLD_SIZE", v, 1);
    setenv("SHOAL_MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", jc->port);
    setenv("SHOAL_MASTER_PORT", v, 1);
    setenv("SHOAL_JOB_KEY", JOB_KEY, 1);
    snprintf(v, sizeof v, "seal-host-%d", i / 2);
    setenv("SHOAL_HOST_ID", v, 1);
    setenv("SHOAL_TIMEOUT", "8000", 1);
    if (jc->secure[i]) setenv("SHOAL_SECURE", jc->secure[i], 1);
    else unsetenv("SHOAL_SECURE");
    if (jc->flip) setenv("SHOAL_TEST_SEAL_FLIP", jc->flip, 1);
    else unsetenv("SHOAL_TEST_SEAL_FLIP");
    shoal_comm *c = NULL;
    shoal_result rc = shoal_comm_create(NULL, &c);
    if (rc == SHOAL_OK) {
        int sealed = jc->secure[i] && !strcmp(jc->secure[i], "1");
        for (int p = 0; p < jc->world; p++) {
            if (p == i) continue;
            int remote = p / 2 != i / 2;
            CHECK(sh_seal_is_sealed(c->coll[p]) == (sealed && remote) && sh_seal_is_sealed(c->p2p[p]) == (sealed && remote),
                  "rank %d: link to %d sealed %d, want %d", i, p, sh_seal_is_sealed(c->coll[p]), sealed && remote);
        }
        static const size_t counts[] = {1, 1000, 70000, 1 << 20};
        for (size_t k = 0; k < sizeof counts / sizeof counts[0] && rc == SHOAL_OK; k++) {
            size_t n = counts[k];
            float *x = malloc(n * sizeof *x);
            for (size_t j = 0; j < n; j++) x[j] = (float)((j + (size_t)i) % 31);
            rc = shoal_allreduce(c, x, x, n, SHOAL_FLOAT32, SHOAL_SUM);
            size_t bad = n;
            for (size_t j = 0; rc == SHOAL_OK && j < n && bad == n; j++) {
                float want = 0;
                for (int r = 0; r < jc->world; r++) want += (float)((j + (size_t)r) % 31);
                if (x[j] != want) bad = j;
            }
            if (rc == SHOAL_OK) CHECK(bad == n, "rank %d: element %zu of %zu is wrong", i, bad, n);
            free(x);
        }
        int64_t y = i;
        if (rc == SHOAL_OK) rc = shoal_broadcast(c, &y, &y, 1, SHOAL_INT64, 3);
        if (rc == SHOAL_OK) CHECK(y == 3, "rank %d: broadcast gave %lld", i, (long long)y);
    }
    const char *msg = shoal_last_error_message();
    if (jc->expect_fail) {
        CHECK(rc != SHOAL_OK, "rank %d: the job went on", i);
        /* the receiver of the bad record names it; the others name whoever gave up */
        /* a rank that comes after rank 0 stopped the job may find no store left to tell it:
         * it names the store; rank 0 and the rank that disagreed always name the cause */
        int late_ok = jc->odd_rank > 0 && i != 0 && i != jc->odd_rank &&
                      has(msg, "rendezvous store");
        if (jc->expect_msg && (!jc->flip || i == 0) && !late_ok)
            CHECK(has(msg, jc->expect_msg), "rank %d: \"%s\" not in: %s", i, jc->expect_msg, msg);
    } else {
        CHECK(rc == SHOAL_OK, "rank %d: %s", i, msg);
    }
    shoal_comm_destroy(c);
}

static void run_job(job_case *jc)
{
    jc->world = 4;
    jc->port = sh_test_free_ports(1);
    sh_test_ranks_opts o = {.deadline_s = 60, .dying_mask = jc->expect_fail ? 0xf : 0};
    RUN_PROCS(4, &o, job_rank, jc);
}

static void secure_job_across_two_hosts_gets_the_right_sums(void)
{
    job_case jc = {.secure = {"1", "1", "1", "1"}};
    run_job(&jc);
}

static void secure_mode_is_off_by_default(void)
{
    job_case jc = {.secure = {NULL, "0", NULL, NULL}};
    run_job(&jc);
}

static void record_corrupted_in_flight_is_named_at_the_receiver(void)
{
    /* rank 2 (the other host) sends rank 0 its ring data; its third record is spoiled */
    job_case jc = {.secure = {"1", "1", "1", "1"}, .flip = "2:2", .expect_fail = 1,
                   .expect_msg = "failed authentication"};
    run_job(&jc);
    job_case named = {.secure = {"1", "1", "1", "1"}, .flip = "2:2", .expect_fail = 1, .expect_msg = "rank 2"};
    run_job(&named);
}

static void ranks_that_disagree_on_secure_stop_at_start(void)
{
    job_case jc = {.secure = {"1", "1", "0", "1"}, .expect_fail = 1, .expect_msg = "SHOAL_SECURE",
                   .odd_rank = 2};
    run_job(&jc);
}

int main(void)
{
    check_begin("test_seal", 240);
    signal(SIGPIPE, SIG_IGN);
    RUN(keys_differ_by_direction_and_connection);
    RUN(carries_bytes_both_ways_through_a_relay);
    RUN(flipped_byte_on_the_wire_is_refused_naming_the_peer);
    RUN(replayed_record_is_refused);
    RUN(dropped_record_is_refused);
    RUN(reordered_records_are_refused);
    RUN(another_job_key_cannot_seal_for_this_one);
    RUN(secure_job_across_two_hosts_gets_the_right_sums);
    RUN(secure_mode_is_off_by_default);
    RUN(record_corrupted_in_flight_is_named_at_the_receiver);
    RUN(ranks_that_disagree_on_secure_stop_at_start);
    return check_end();
}
