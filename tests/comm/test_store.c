/* test_store.c — rank 0's rendezvous store with real processes and sockets: set/get/add/
 * barrier across processes, gets that wait and time out, the job key, and strangers (port
 * scans, garbage, 1 GB length prefixes, half frames, stalled handshakes) that must not
 * Not here: the rendezvous built on it (test_boot.c), the TCP mesh (test_transport_tcp.c).
 * disturb the job: a flooding address never pushes out another's handshake, and under a
 * flood a stalled handshake goes within a second.
 * Proves src/comm/boot/store_server.c, store_client.c and the handshake in src/comm/boot/sock.c. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "../check.h"
#include "base/err.h"
#include "base/util.h"
#include "comm/boot/sock.h"
#include "comm/boot/store.h"
#include "lib/ranks.h"

static const char *KEY = "test-store-key";

/* The store server runs in its own process (so no test fd is shared with it); its stderr
 * goes to log_path. It stops when the parent closes ctl. */
typedef struct {
    pid_t pid;
    int ctl;
    int port;
    char log_path[64];
} server_proc;

static int server_start(server_proc *sp)
{
    int pp[2], ctl[2];
    if (pipe(pp) < 0 || pipe(ctl) < 0) return -1;
    snprintf(sp->log_path, sizeof sp->log_path, "/tmp/test_store_%d.log", (int)getpid());
    sp->pid = fork();
    if (sp->pid == 0) {
        close(pp[0]);
        close(ctl[1]);
        int lf = open(sp->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (lf >= 0) dup2(lf, 2);
        sh_store_server *s = NULL;
        int port = -1;
        if (sh_store_server_start("127.0.0.1", 0, KEY, 0, 0, &s) == SHOAL_OK) port = sh_store_server_port(s);
        if (write(pp[1], &port, sizeof port) != sizeof port) _exit(2);
        char b;
        while (read(ctl[0], &b, 1) > 0) {
        }
        sh_store_server_stop(s);
        _exit(0);
    }
    close(pp[1]);
    close(ctl[0]);
    sp->ctl = ctl[1];
    sp->port = -1;
    if (read(pp[0], &sp->port, sizeof sp->port) != sizeof sp->port) sp->port = -1;
    close(pp[0]);
    return sp->port > 0 ? 0 : -1;
}

/* Stop the server; returns its log (caller frees). */
static char *server_stop(server_proc *sp)
{
    close(sp->ctl);
    int st = 0;
    waitpid(sp->pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "store process ended with status %d", st);
    FILE *f = fopen(sp->log_path, "r");
    char *log = calloc(1, 1 << 16);
    if (f && log) {
        size_t n = fread(log, 1, (1 << 16) - 1, f);
        log[n] = 0;
    }
    if (f) fclose(f);
    unlink(sp->log_path);
    return log;
}

static void four_ranks(int i, void *arg)
{
    int port = *(const int *)arg;
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", port, KEY, 5000, &s));
    if (!s) return;
    char k[64], v[64];
    snprintf(k, sizeof k, "w/r/%d", i);
    int n = snprintf(v, sizeof v, "value of rank %d", i);
    CHECK_OK(sh_store_set(s, k, v, (size_t)n));
    for (int r = 0; r < 4; r++) {
        char got[64] = {0}, want[64];
        size_t gn = 0;
        snprintf(k, sizeof k, "w/r/%d", r);
        int wn = snprintf(want, sizeof want, "value of rank %d", r);
        CHECK_OK(sh_store_get(s, k, got, sizeof got, &gn, 5000));
        CHECK(gn == (size_t)wn && memcmp(got, want, gn) == 0, "rank %d read \"%.*s\" for %s", i,
              (int)gn, got, k);
    }
    /* 100 atomic increments each: the counter ends at 400 whatever the interleaving. */
    int64_t after = 0, prev = -1;
    for (int j = 0; j < 100; j++) {
        CHECK_OK(sh_store_add(s, "w/counter", 1, &after));
        CHECK(after > prev && after >= 1 && after <= 400, "counter went %lld -> %lld", (long long)prev,
              (long long)after);
        prev = after;
    }
    CHECK_OK(sh_store_barrier(s, "w/b1", 4, 5000));
    int64_t total = 0;
    CHECK_OK(sh_store_add(s, "w/counter", 0, &total));
    CHECK(total == 400, "after the barrier the counter is %lld, want 400", (long long)total);
    /* A second barrier with another key works too (no state left from the first). */
    CHECK_OK(sh_store_barrier(s, "w/b2", 4, 5000));
    sh_store_close(s);
}

static void waits_for_one_key(int i, void *arg)
{
    int port = *(const int *)arg;
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", port, KEY, 5000, &s));
    if (!s) return;
    char v[16] = {0};
    size_t n = 0;
    if (i == 3) {
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
        CHECK_OK(sh_store_set(s, "bcast", "hello", 5));
    }
    CHECK_OK(sh_store_get(s, "bcast", v, sizeof v, &n, 10000));
    CHECK(n == 5 && !memcmp(v, "hello", 5), "process %d read \"%.*s\"", i, (int)n, v);
    sh_store_close(s);
}

static void one_set_wakes_every_process_waiting_for_the_key(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    RUN_PROCS(4, NULL, waits_for_one_key, &sp.port);
    free(server_stop(&sp));
}

static void store_sets_gets_adds_and_barriers_across_4_processes(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    RUN_PROCS(4, NULL, four_ranks, &sp.port);
    free(server_stop(&sp));
}

static void setter_late(int i, void *arg)
{
    (void)i;
    int port = *(const int *)arg;
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", port, KEY, 5000, &s));
    struct timespec ts = {0, 300 * 1000000};
    nanosleep(&ts, NULL);
    CHECK_OK(sh_store_set(s, "late", "here", 4));
    sh_store_close(s);
}

/* Process 1 sets "late" 300 ms after process 0 started waiting for it. */
static void get_then_late_set(int i, void *arg)
{
    if (i == 1) {
        setter_late(i, arg);
        return;
    }
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", *(const int *)arg, KEY, 5000, &s));
    if (!s) return;
    char v[16] = {0};
    size_t n = 0;
    CHECK_OK(sh_store_get(s, "late", v, sizeof v, &n, 10000));
    CHECK(n == 4 && memcmp(v, "here", 4) == 0, "got \"%.*s\"", (int)n, v);
    sh_store_close(s);
}

static void get_waits_for_a_later_set_then_times_out(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 5000, &s));
    if (!s) return;
    /* Not there yet: the get waits for the other process's set. */
    RUN_PROCS(2, NULL, get_then_late_set, &sp.port);
    char v[16] = {0};
    size_t n = 0;
    /* Never set: TIMEOUT naming the key, well before the harness deadline. */
    uint64_t t0 = sh_now_ns();
    CHECK_RC(sh_store_get(s, "never/set", v, sizeof v, &n, 300), SHOAL_ERR_TIMEOUT);
    CHECK(strstr(shoal_last_error_message(), "never/set") != NULL, "%s", shoal_last_error_message());
    CHECK(sh_now_ns() - t0 < 5000000000ull, "a 300 ms get took %.1f s", (double)(sh_now_ns() - t0) * 1e-9);
    /* timeout 0: one look. */
    CHECK_RC(sh_store_get(s, "never/set", v, sizeof v, &n, 0), SHOAL_ERR_TIMEOUT);
    /* The connection is still good after timeouts. */
    CHECK_OK(sh_store_set(s, "after", "x", 1));
    CHECK_OK(sh_store_get(s, "after", v, sizeof v, &n, 0));
    /* A barrier nobody else joins times out saying how many came. */
    CHECK_RC(sh_store_barrier(s, "lonely", 3, 300), SHOAL_ERR_TIMEOUT);
    CHECK(strstr(shoal_last_error_message(), "1 of 3") != NULL, "%s", shoal_last_error_message());
    sh_store_close(s);
    free(server_stop(&sp));
}

static void values_keep_their_bytes_and_lengths(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 5000, &s));
    if (!s) return;
    size_t big_nbytes = SH_STORE_MAX_VALUE_NBYTES;
    unsigned char *big = malloc(big_nbytes), *back = malloc(big_nbytes);
    for (size_t i = 0; i < big_nbytes; i++) big[i] = (unsigned char)(i * 2654435761u >> 13);
    CHECK_OK(sh_store_set(s, "big", big, big_nbytes));
    size_t n = 0;
    memset(back, 0, big_nbytes);
    CHECK_OK(sh_store_get(s, "big", back, big_nbytes, &n, 0));
    CHECK(n == big_nbytes && memcmp(big, back, n) == 0, "1 MiB value came back as %zu bytes", n);
    /* cap smaller than the value: copies cap bytes, reports the whole length */
    unsigned char small[10] = {0};
    CHECK_OK(sh_store_get(s, "big", small, sizeof small, &n, 0));
    CHECK(n == big_nbytes && memcmp(small, big, sizeof small) == 0, "n %zu", n);
    /* empty values and binary bytes (zeros) */
    CHECK_OK(sh_store_set(s, "empty", NULL, 0));
    CHECK_OK(sh_store_get(s, "empty", small, sizeof small, &n, 0));
    CHECK(n == 0, "empty value came back as %zu bytes", n);
    /* overwrite */
    CHECK_OK(sh_store_set(s, "k", "\0a\0b", 4));
    CHECK_OK(sh_store_set(s, "k", "xyz", 3));
    CHECK_OK(sh_store_get(s, "k", small, sizeof small, &n, 0));
    CHECK(n == 3 && memcmp(small, "xyz", 3) == 0, "overwrite gave %zu bytes", n);
    /* negative deltas */
    int64_t after = 0;
    CHECK_OK(sh_store_add(s, "ctr", -5, &after));
    CHECK(after == -5, "after %lld", (long long)after);
    CHECK_OK(sh_store_add(s, "ctr", 7, &after));
    CHECK(after == 2, "after %lld", (long long)after);
    /* too big, or a bad key: refused on this side with a clear line, connection still good */
    CHECK_RC(sh_store_set(s, "toobig", big, big_nbytes + 1), SHOAL_ERR_INVALID);
    CHECK_RC(sh_store_set(s, "", "x", 1), SHOAL_ERR_INVALID);
    char longkey[700];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = 0;
    CHECK_RC(sh_store_set(s, longkey, "x", 1), SHOAL_ERR_INVALID);
    CHECK_OK(sh_store_get(s, "k", small, sizeof small, &n, 0));
    free(big);
    free(back);
    sh_store_close(s);
    free(server_stop(&sp));
}

static void wrong_key_is_refused_with_a_clear_line_and_logged(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    sh_store *s = NULL;
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", sp.port);
    CHECK_RC(sh_store_connect("127.0.0.1", sp.port, "another-jobs-key", 3000, &s), SHOAL_ERR_PEER);
    CHECK(s == NULL, "a handle was returned");
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "job key rejected by rank 0's store") && strstr(m, where) &&
              strstr(m, "SHOAL_JOB_KEY differs"), "message: %s", m);
    /* The right key still works. */
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 3000, &s));
    CHECK_OK(s ? sh_store_set(s, "a", "b", 1) : SHOAL_ERR_INTERNAL);
    sh_store_close(s);
    char *log = server_stop(&sp);
    CHECK(log && strstr(log, "refused") && strstr(log, "wrong job key") && strstr(log, "127.0.0.1:"),
          "the store's log does not name the refused connection: %s", log ? log : "");
    free(log);
}

static void connecting_to_nothing_times_out_naming_the_address(void)
{
    /* A port nobody listens on: bind one, note it, close it. */
    int fd = -1, port = 0;
    CHECK_OK(sh_sock_listen("127.0.0.1", 0, &fd, &port));
    close(fd);
    sh_store *s = NULL;
    uint64_t t0 = sh_now_ns();
    CHECK_RC(sh_store_connect("127.0.0.1", port, KEY, 400, &s), SHOAL_ERR_TIMEOUT);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%d", port);
    CHECK(strstr(shoal_last_error_message(), where) != NULL, "%s", shoal_last_error_message());
    CHECK(sh_now_ns() - t0 < 5000000000ull, "a 400 ms connect took %.1f s", (double)(sh_now_ns() - t0) * 1e-9);
    /* Something that accepts but never speaks: TIMEOUT too, not a hang. */
    CHECK_OK(sh_sock_listen("127.0.0.1", 0, &fd, &port));
    CHECK_RC(sh_store_connect("127.0.0.1", port, KEY, 400, &s), SHOAL_ERR_TIMEOUT);
    CHECK(strstr(shoal_last_error_message(), "did not answer") != NULL, "%s", shoal_last_error_message());
    close(fd);
}

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(0x7f000001)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the server closes fd within timeout_ms (reads until EOF or reset). */
static int closed_by_server(int fd, int timeout_ms)
{
    uint64_t end = sh_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    char b[4096];
    while (sh_now_ns() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        ssize_t n = recv(fd, b, sizeof b, 0);
        if (n <= 0) return 1;
    }
    return 0;
}

static void strangers_are_dropped_and_logged_while_the_job_goes_on(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    /* A port scan: connect and close. */
    int fd = raw_connect(sp.port);
    CHECK(fd >= 0, "cannot connect");
    close(fd);
    /* Random bytes. */
    int garbage = raw_connect(sp.port);
    unsigned char junk[65536];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 131 + 7);
    if (write(garbage, junk, sizeof junk) < 0) {
    }
    /* Members of the job gone wrong: a 1 GB length prefix, and half a frame then silence. */
    int huge = raw_connect(sp.port), half = raw_connect(sp.port);
    CHECK_OK(sh_auth_client(huge, KEY, "store", "store", sh_sock_deadline(5000), NULL));
    CHECK_OK(sh_auth_client(half, KEY, "store", "store", sh_sock_deadline(5000), NULL));
    uint32_t len = 1u << 30;
    CHECK(write(huge, &len, 4) == 4, "write");
    len = 100;
    unsigned char frame[4 + 20] = {0};
    memcpy(frame, &len, 4);
    frame[4] = 2; /* a get */
    CHECK(write(half, frame, sizeof frame) == (ssize_t)sizeof frame, "write");
    CHECK(closed_by_server(huge, 5000), "the store kept a connection that announced 1 GB");
    CHECK(closed_by_server(garbage, 5000), "the store kept a connection that sent garbage");
    /* Slowloris: connections that never finish the handshake, some after a few bytes; more
     * than the 128 the server keeps half-open from one address. (Last, so that the lines
     * above are among the first the server logs one by one.) */
    int nstall = 140;
    int *stalled = malloc(sizeof(int) * (size_t)nstall);
    for (int i = 0; i < nstall; i++) {
        stalled[i] = raw_connect(sp.port);
        if (i % 2 && stalled[i] >= 0 && write(stalled[i], "SHOAL1C", 7) != 7) {
        }
    }
    /* They age past the store's 100 ms of grace: from now the oldest of them go first. */
    struct timespec aged = {0, 150 * 1000000L};
    nanosleep(&aged, NULL);
    /* The job, while every stalled connection is still open: it must not wait for them. */
    RUN_PROCS(4, NULL, four_ranks, &sp.port); /* the job */
    /* And one more client after all that. */
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 3000, &s));
    int64_t total = 0;
    CHECK_OK(s ? sh_store_add(s, "w/counter", 0, &total) : SHOAL_ERR_INTERNAL);
    CHECK(total == 400, "counter %lld", (long long)total);
    sh_store_close(s);
    for (int i = 0; i < nstall; i++)
        if (stalled[i] >= 0) close(stalled[i]);
    free(stalled);
    close(half);
    close(huge);
    close(garbage);
    char *log = server_stop(&sp);
    CHECK(log && strstr(log, "a request of 1073741824 bytes"), "1 GB frame not logged: %.300s", log ? log : "");
    CHECK(log && strstr(log, "bad greeting"), "garbage not logged");
    CHECK(log && strstr(log, "port scan"), "connect-and-close not logged");
    CHECK(log && strstr(log, "too many handshakes at once"), "slowloris eviction not logged");
    free(log);
}

/* A raw connection from a chosen local address (127.0.0.x) to the store. */
static int raw_connect_from(int port, uint32_t from)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(from)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(0x7f000001)};
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&me, sizeof me) < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The client's half of the handshake by hand (sock.c's protocol), so a test can hold it
 * back: answer the hello already read; then 1 if the store's reply arrives within 3 s. */
static int answer_and_hear_back(int fd, const unsigned char hello[SH_AUTH_HELLO_NBYTES])
{
    unsigned char msg[SH_AUTH_CLIENT_NBYTES] = {0}, in[1 + 32 + 32 + SH_AUTH_CTX_NBYTES] = {0}, reply[32];
    memcpy(msg, "SHOAL1C", 8);
    for (int i = 0; i < 32; i++) msg[8 + i] = (unsigned char)(i * 7 + 1);
    memcpy(msg + 40, "store", 5);
    in[0] = 'C';
    memcpy(in + 1, hello + 8, 32);
    memcpy(in + 33, msg + 8, 32);
    memcpy(in + 65, msg + 40, SH_AUTH_CTX_NBYTES);
    HMAC(EVP_sha256(), KEY, (int)strlen(KEY), in, sizeof in, msg + 40 + SH_AUTH_CTX_NBYTES, NULL);
    if (sh_sock_write_all(fd, msg, sizeof msg, sh_sock_deadline(3000)) != SHOAL_OK) return 0;
    return sh_sock_read_all(fd, reply, sizeof reply, sh_sock_deadline(3000)) == SHOAL_OK;
}

static void a_flooding_address_does_not_push_out_another_addresss_handshake(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    /* a rank at 127.0.0.2, slow to answer */
    int rank = raw_connect_from(sp.port, 0x7f000002);
    unsigned char hello[SH_AUTH_HELLO_NBYTES];
    CHECK(rank >= 0 && sh_sock_read_all(rank, hello, sizeof hello, sh_sock_deadline(3000)) == SHOAL_OK, "no hello");
    /* meanwhile 127.0.0.1 floods the store with silent handshakes, more than it keeps */
    enum { NJUNK = 400 };
    int junk[NJUNK];
    for (int i = 0; i < NJUNK; i++) junk[i] = raw_connect_from(sp.port, 0x7f000001);
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    CHECK(rank >= 0 && answer_and_hear_back(rank, hello), "the flood from another address pushed the rank's handshake out");
    for (int i = 0; i < NJUNK; i++)
        if (junk[i] >= 0) close(junk[i]);
    if (rank >= 0) close(rank);
    free(server_stop(&sp));
}

static void under_a_flood_stalled_handshakes_go_within_a_second(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    enum { NBUSY = 40 }; /* more handshakes at once than a job makes */
    int busy[NBUSY];
    for (int i = 0; i < NBUSY; i++) busy[i] = raw_connect(sp.port);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    int late = raw_connect(sp.port);
    uint64_t t0 = sh_now_ns();
    CHECK(late >= 0 && closed_by_server(late, 4000), "a stalled handshake stayed 4 s while the store was busy");
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    CHECK(s < 2.0, "the stalled handshake went after %.1f s, want about 1", s);
    for (int i = 0; i < NBUSY; i++)
        if (busy[i] >= 0) close(busy[i]);
    if (late >= 0) close(late);
    free(server_stop(&sp));
}

static int count_lines_with(const char *log, const char *what)
{
    int n = 0;
    for (const char *p = log; p && (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static void a_port_scan_cannot_flood_the_log(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    int nscan = 400;
    for (int i = 0; i < nscan; i++) {
        int fd = raw_connect(sp.port);
        if (fd >= 0) close(fd);
    }
    /* The store still serves the job after the scan. */
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 3000, &s));
    CHECK_OK(s ? sh_store_set(s, "after/scan", "1", 1) : SHOAL_ERR_INTERNAL);
    sh_store_close(s);
    char *log = server_stop(&sp);
    int lines = count_lines_with(log, "dropped the connection");
    CHECK(lines >= 10 && lines <= SH_SOCK_LOG_REFUSALS, "%d refusals logged one by one of %d", lines, nscan);
    CHECK(log && strstr(log, "every 1000th"), "no line saying the rest are thinned out");
    free(log);
}

typedef struct {
    sh_store *s;
    shoal_result rc;
    uint64_t took_ns;
} waiter;

static void *wait_forever(void *arg)
{
    waiter *w = arg;
    char v[8];
    size_t n;
    uint64_t t0 = sh_now_ns();
    w->rc = sh_store_get(w->s, "never", v, sizeof v, &n, 20000);
    w->took_ns = sh_now_ns() - t0;
    return NULL;
}

static void stopping_the_store_ends_waiting_gets(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    waiter w = {0};
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 3000, &w.s));
    if (!w.s) return;
    pthread_t t;
    pthread_create(&t, NULL, wait_forever, &w);
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
    free(server_stop(&sp));
    pthread_join(t, NULL);
    CHECK(w.rc == SHOAL_ERR_PEER, "a get waiting on a stopped store returned %s", shoal_result_name(w.rc));
    CHECK(w.took_ns < 15000000000ull, "the waiting get took %.1f s", (double)w.took_ns * 1e-9);
    /* The client is thread-safe and reports the dead store again, without hanging. */
    CHECK_RC(sh_store_set(w.s, "x", "y", 1), SHOAL_ERR_PEER);
    sh_store_close(w.s);
}

static void *adder(void *arg)
{
    sh_store *s = arg;
    for (int i = 0; i < 200; i++)
        if (sh_store_add(s, "shared", 1, NULL) != SHOAL_OK) break;
    return NULL;
}

static void one_client_is_safe_from_many_threads(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    sh_store *s = NULL;
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 3000, &s));
    if (!s) return;
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, adder, s);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    int64_t total = 0;
    CHECK_OK(sh_store_add(s, "shared", 0, &total));
    CHECK(total == 800, "4 threads x 200 adds gave %lld", (long long)total);
    sh_store_close(s);
    free(server_stop(&sp));
}

typedef struct {
    sh_store *s;
    shoal_result rc;
    char v[8];
    size_t n;
} late_getter;

static void *get_late_key(void *arg)
{
    late_getter *g = arg;
    g->rc = sh_store_get(g->s, "late/key", g->v, sizeof g->v, &g->n, 20000);
    return NULL;
}

static void a_waiting_get_does_not_hold_up_other_threads(void)
{
    server_proc sp;
    CHECK(server_start(&sp) == 0, "cannot start the store");
    if (sp.port <= 0) return;
    late_getter g = {0};
    CHECK_OK(sh_store_connect("127.0.0.1", sp.port, KEY, 3000, &g.s));
    if (!g.s) return;
    pthread_t t;
    pthread_create(&t, NULL, get_late_key, &g);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    /* While that get waits on the same client, this thread's requests go through. */
    uint64_t t0 = sh_now_ns();
    char v[8];
    size_t n = 0;
    for (int i = 0; i < 50; i++) {
        CHECK_OK(sh_store_set(g.s, "other", "o", 1));
        CHECK_OK(sh_store_get(g.s, "other", v, sizeof v, &n, 1000));
    }
    CHECK(sh_now_ns() - t0 < 10000000000ull, "50 requests beside a waiting get took %.1f s",
          (double)(sh_now_ns() - t0) * 1e-9);
    /* and the set this thread makes is what releases the waiting one */
    CHECK_OK(sh_store_set(g.s, "late/key", "done", 4));
    pthread_join(t, NULL);
    CHECK(g.rc == SHOAL_OK && g.n == 4 && memcmp(g.v, "done", 4) == 0, "waiting get: %s",
          shoal_result_name(g.rc));
    sh_store_close(g.s);
    free(server_stop(&sp));
}

int main(void)
{
    check_begin("test_store", 120);
    signal(SIGPIPE, SIG_IGN);
    RUN(store_sets_gets_adds_and_barriers_across_4_processes);
    RUN(get_waits_for_a_later_set_then_times_out);
    RUN(one_set_wakes_every_process_waiting_for_the_key);
    RUN(values_keep_their_bytes_and_lengths);
    RUN(wrong_key_is_refused_with_a_clear_line_and_logged);
    RUN(connecting_to_nothing_times_out_naming_the_address);
    RUN(strangers_are_dropped_and_logged_while_the_job_goes_on);
    RUN(a_port_scan_cannot_flood_the_log);
    RUN(a_flooding_address_does_not_push_out_another_addresss_handshake);
    RUN(under_a_flood_stalled_handshakes_go_within_a_second);
    RUN(stopping_the_store_ends_waiting_gets);
    RUN(one_client_is_safe_from_many_threads);
    RUN(a_waiting_get_does_not_hold_up_other_threads);
    return check_end();
}
