/* sock.c — TCP helpers with deadlines, interface choice and the job-key handshake.
 * Not here: the store protocol (store_server.c, store_client.c), the mesh of rank links (transport/tcp.c).
 * Proved by tests/comm/test_store.c, test_transport_tcp.c and test_comm_faults.c. */
#include "comm/boot/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/env.h"
#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "comm/boot/interrupt.h"

uint64_t sh_sock_deadline(int timeout_ms)
{
    return sh_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1) * 1000000ull;
}

static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = sh_now_ns();
    if (now >= deadline_ns) return 0;
    uint64_t ms = (deadline_ns - now) / 1000000ull + 1;
    return ms > 1000000 ? 1000000 : (int)ms;
}

/* Wait for ev on fd, in slices of at most 250 ms: a signal's request to stop
 * (interrupt.h) is seen within a quarter second. */
static shoal_result wait_fd(int fd, short ev, uint64_t deadline_ns, const char *what)
{
    for (;;) {
        int sig = sh_interrupted();
        if (sig) return SH_FAIL(SHOAL_ERR_INTERRUPTED, "stopped by %s while %s", sh_interrupt_name(sig), what);
        int left = ms_left(deadline_ns);
        if (left == 0) return SH_FAIL(SHOAL_ERR_TIMEOUT, "timed out %s", what);
        struct pollfd p = {fd, ev, 0};
        int n = poll(&p, 1, left < 250 ? left : 250);
        if (n > 0) return SHOAL_OK;
        if (n < 0 && errno != EINTR) return SH_FAIL(SHOAL_ERR_IO, "poll: %s", strerror(errno));
    }
}

/* sh_sock_read_all that also says how many bytes came before a failure. */
static shoal_result read_counted(int fd, void *buf, size_t nbytes, uint64_t deadline_ns, size_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (nbytes > 0) {
        ssize_t n = recv(fd, p, nbytes, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            nbytes -= (size_t)n;
            *got += (size_t)n;
            continue;
        }
        if (n == 0) return SH_FAIL(SHOAL_ERR_PEER, "connection closed by the other side");
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return SH_FAIL(SHOAL_ERR_PEER, "connection lost: %s", strerror(errno));
        SH_TRY(wait_fd(fd, POLLIN, deadline_ns, "waiting for data"));
    }
    return SHOAL_OK;
}

shoal_result sh_sock_read_all(int fd, void *buf, size_t nbytes, uint64_t deadline_ns)
{
    size_t got;
    return read_counted(fd, buf, nbytes, deadline_ns, &got);
}

shoal_result sh_sock_write_all(int fd, const void *buf, size_t nbytes, uint64_t deadline_ns)
{
    const unsigned char *p = buf;
    while (nbytes > 0) {
        ssize_t n = send(fd, p, nbytes, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            nbytes -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return SH_FAIL(SHOAL_ERR_PEER, "connection lost: %s", strerror(errno));
        SH_TRY(wait_fd(fd, POLLOUT, deadline_ns, "sending"));
    }
    return SHOAL_OK;
}

static long read_proc_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static pthread_once_t buf_max_once = PTHREAD_ONCE_INIT;
static long rmax = -1; /* net.core.rmem_max in bytes; -1: unknown */
static void read_buf_max(void)
{
    rmax = read_proc_long("/proc/sys/net/core/rmem_max");
}

void sh_sock_tune(int fd)
{
    enum { BIG_NBYTES = 4 << 20 };
    int one = 1, big = BIG_NBYTES;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sh_sock_tune_cc(fd);
    /* Setting a buffer size turns off the kernel's autotuning for that socket, and the
     * size is clamped to net.core.[rw]mem_max (often 208 KiB): then the fixed buffer is
     * smaller than autotuning would grow to on a fast link. So the receive buffer is set
     * only where the kernel allows the whole 4 MiB. The send buffer is small on purpose:
     * with a large one a ring step's block goes out in one burst, the receiver's window hits
     * zero, reordering across the cores' backlogs makes spurious fast retransmits, and the
     * kernel spends several times the CPU per byte (bench/net/run.sh shows it). It must
     * still cover rate x round trip, hence SHOAL_SOCKET_SNDBUF_KB. */
    pthread_once(&buf_max_once, read_buf_max);
    long snd_kb = 128;
    if (sh_env_long("SHOAL_SOCKET_SNDBUF_KB", &snd_kb) != SHOAL_OK) snd_kb = 128; /* sh_tcp_connect reports it */
    int snd = (int)(snd_kb * 1024);
    if (snd > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
    if (rmax >= BIG_NBYTES) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
}

/* An address of either family and its length. */
typedef struct {
    struct sockaddr_storage ss;
    socklen_t len;
} net_addr;

static void set_port(net_addr *a, int port)
{
    if (a->ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&a->ss)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)&a->ss)->sin_port = htons((uint16_t)port);
}

static int get_port(const net_addr *a)
{
    return ntohs(a->ss.ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)&a->ss)->sin6_port
                                             : ((const struct sockaddr_in *)&a->ss)->sin_port);
}

/* "1.2.3.4", "::1" or "[::1]", or a name (IPv4 first, then IPv6, as getaddrinfo orders
 * them for this host). */
static shoal_result resolve(const char *host, int port, net_addr *out)
{
    memset(out, 0, sizeof *out);
    char bare[256];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof bare) {
        memcpy(bare, host + 1, n - 2);
        bare[n - 2] = 0;
    } else {
        snprintf(bare, sizeof bare, "%s", host);
    }
    struct sockaddr_in *v4 = (struct sockaddr_in *)&out->ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&out->ss;
    if (inet_pton(AF_INET, bare, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        out->len = sizeof *v4;
    } else if (inet_pton(AF_INET6, bare, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        out->len = sizeof *v6;
    } else {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
        int rc = getaddrinfo(bare, NULL, &hints, &res);
        if (rc != 0 || !res)
            return SH_FAIL(SHOAL_ERR_INVALID, "cannot resolve host \"%s\": %s", host, gai_strerror(rc));
        memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
        out->len = res->ai_addrlen;
        freeaddrinfo(res);
    }
    set_port(out, port);
    return SHOAL_OK;
}

/* The address as text, "1.2.3.4" or "::1"; an IPv4 peer of a socket that takes both
 * families (::ffff:1.2.3.4) as "1.2.3.4". */
static void addr_str(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    const struct in6_addr *v6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    const void *a = &((const struct sockaddr_in *)ss)->sin_addr;
    int fam = ss->ss_family;
    if (fam == AF_INET6) a = v6;
    if (fam == AF_INET6 && IN6_IS_ADDR_V4MAPPED(v6)) {
        a = &v6->s6_addr[12];
        fam = AF_INET;
    }
    if (!inet_ntop(fam, a, out, (socklen_t)cap)) snprintf(out, cap, "?");
}

/* Sleep ms (or until the deadline), a little less or more at random so that many ranks
 * retrying together spread out. */
static void pause_ms(int ms, uint64_t deadline_ns, unsigned *seed)
{
    int left = ms_left(deadline_ns);
    ms = ms * 3 / 4 + (int)(rand_r(seed) % (unsigned)(ms / 2 + 1));
    if (ms > left) ms = left;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static shoal_result connect_until(const char *host, int port, uint64_t deadline_ns, int once, int *fd_out)
{
    *fd_out = -1;
    net_addr a;
    SH_TRY(resolve(host, port, &a));
    int last_err = 0;
    /* An attempt whose SYN was dropped (a listener's queue full, under a flood) is answered
     * only by the kernel's retransmissions, 1, 3, 7 s later: each attempt waits through at
     * least one of them (2 s, then 4, then 8). A refusal (nobody listens yet) is retried
     * after 10 ms, doubling to half a second. */
    int window_ms = 2000, refused_ms = 10;
    unsigned seed = (unsigned)(sh_now_ns() ^ ((uint64_t)getpid() << 16));
    for (;;) {
        if (sh_interrupted())
            return SH_FAIL(SHOAL_ERR_INTERRUPTED, "stopped by %s while connecting to %s:%d",
                           sh_interrupt_name(sh_interrupted()), host, port);
        int fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return SH_FAIL(SHOAL_ERR_IO, "socket: %s", strerror(errno));
        int rc = connect(fd, (struct sockaddr *)&a.ss, a.len);
        if (rc < 0 && errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            uint64_t attempt_dl = sh_now_ns() + (uint64_t)window_ms * 1000000ull;
            if (attempt_dl > deadline_ns) attempt_dl = deadline_ns;
            int n = 0;
            for (;;) { /* in slices, so that a signal's request is seen within a quarter second */
                int left = ms_left(attempt_dl);
                n = left ? poll(&p, 1, left < 250 ? left : 250) : 0;
                if (n != 0 && !(n < 0 && errno == EINTR)) break;
                if (!left || sh_interrupted()) break;
            }
            if (n == 1) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
                rc = err ? -1 : 0;
                errno = err ? err : ETIMEDOUT;
            } else {
                rc = -1;
                errno = ETIMEDOUT;
            }
        }
        if (rc == 0) {
            sh_sock_tune(fd);
            *fd_out = fd;
            return SHOAL_OK;
        }
        last_err = errno;
        close(fd);
        if (once && last_err == ECONNREFUSED) /* the host answered: nobody listens there */
            return SH_FAIL(SHOAL_ERR_PEER, "nobody listens at %s:%d (%s)", host, port, strerror(last_err));
        if (once) /* no route, no answer: cut off, or the host is down */
            return SH_FAIL(last_err == ETIMEDOUT ? SHOAL_ERR_TIMEOUT : SHOAL_ERR_IO, "cannot reach %s:%d (%s)", host,
                           port, strerror(last_err));
        if (ms_left(deadline_ns) == 0)
            return SH_FAIL(SHOAL_ERR_TIMEOUT, "cannot connect to %s:%d (%s) before the deadline",
                           host, port, strerror(last_err));
        if (last_err == ETIMEDOUT) {
            window_ms = window_ms < 8000 ? 2 * window_ms : 8000;
        } else {
            pause_ms(refused_ms, deadline_ns, &seed);
            refused_ms = refused_ms < 500 ? 2 * refused_ms : 500;
        }
    }
}

shoal_result sh_sock_connect(const char *host, int port, uint64_t deadline_ns, int *fd_out)
{
    return connect_until(host, port, deadline_ns, 0, fd_out);
}

shoal_result sh_sock_connect_once(const char *host, int port, uint64_t deadline_ns, int *fd_out)
{
    return connect_until(host, port, deadline_ns, 1, fd_out);
}

shoal_result sh_sock_listen(const char *addr, int port, int *fd_out, int *port_out)
{
    net_addr a;
    memset(&a, 0, sizeof a);
    int fd = -1;
    if (addr && addr[0]) {
        SH_TRY(resolve(addr, port, &a));
        fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    } else {
        /* Every address: one IPv6 socket that takes IPv4 too, or IPv4 alone where the
         * host has no IPv6. */
        struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a.ss;
        v6->sin6_family = AF_INET6;
        v6->sin6_addr = in6addr_any;
        a.len = sizeof *v6;
        fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int zero = 0;
        if (fd >= 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero) < 0) {
            close(fd);
            fd = -1;
        }
        if (fd < 0) {
            struct sockaddr_in *v4 = (struct sockaddr_in *)&a.ss;
            memset(&a, 0, sizeof a);
            v4->sin_family = AF_INET;
            v4->sin_addr.s_addr = htonl(INADDR_ANY);
            a.len = sizeof *v4;
            fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        }
        set_port(&a, port);
    }
    if (fd < 0) return SH_FAIL(SHOAL_ERR_IO, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* A short accept queue on purpose: under a flood the kernel drops the excess SYNs at no
     * cost to us (a rank's is retransmitted; sh_sock_connect waits for that), while every
     * connection queued is one the server must take and look at before a rank's. */
    if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, 128) < 0) {
        int e = errno;
        close(fd);
        return SH_FAIL(SHOAL_ERR_IO, "cannot listen on %s:%d: %s%s", addr && addr[0] ? addr : "*",
                       port, strerror(e),
                       e == EADDRINUSE ? " (choose another SHOAL_MASTER_PORT)"
                       : e == EADDRNOTAVAIL ? " (not an address of this host: check "
                                              "SHOAL_MASTER_ADDR / SHOAL_SOCKET_IFNAME, or set SHOAL_BIND_ALL=1)"
                                            : "");
    }
    a.len = sizeof a.ss;
    getsockname(fd, (struct sockaddr *)&a.ss, &a.len);
    *fd_out = fd;
    if (port_out) *port_out = get_port(&a);
    return SHOAL_OK;
}

shoal_result sh_sock_local_addr(const char *master_addr, char *out, size_t cap)
{
    const char *ifname = sh_env_str("SHOAL_SOCKET_IFNAME");
    if (ifname && ifname[0]) {
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) < 0) return SH_FAIL(SHOAL_ERR_IO, "getifaddrs: %s", strerror(errno));
        /* its IPv4 address, else its global IPv6 one (a link-local one needs a scope) */
        int found = 0;
        for (int pass = 0; pass < 2 && !found; pass++)
            for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
                if (!i->ifa_addr || strcmp(i->ifa_name, ifname) != 0) continue;
                int fam = i->ifa_addr->sa_family;
                if (fam != (pass ? AF_INET6 : AF_INET)) continue;
                const struct in6_addr *v6 = &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
                if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(v6)) continue;
                addr_str((const struct sockaddr_storage *)i->ifa_addr, out, cap);
                found = 1;
            }
        freeifaddrs(ifs);
        if (!found)
            return SH_FAIL(SHOAL_ERR_INVALID,
                           "SHOAL_SOCKET_IFNAME=%s: no such interface with an IPv4 or global IPv6 address "
                           "(see `ip addr`)", ifname);
        return SHOAL_OK;
    }
    /* The address the kernel routes to the master from, in the master's family. */
    net_addr a;
    if (resolve(master_addr, 9, &a) != SHOAL_OK) {
        snprintf(out, cap, "127.0.0.1");
        return SHOAL_OK;
    }
    snprintf(out, cap, a.ss.ss_family == AF_INET6 ? "::1" : "127.0.0.1");
    int fd = socket(a.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return SHOAL_OK;
    if (connect(fd, (struct sockaddr *)&a.ss, a.len) == 0) {
        struct sockaddr_storage me;
        socklen_t len = sizeof me;
        if (getsockname(fd, (struct sockaddr *)&me, &len) == 0) addr_str(&me, out, cap);
    }
    close(fd);
    return SHOAL_OK;
}

int sh_sock_log_refusal(void)
{
    static unsigned long count; /* refusals in this process, every listener together */
    unsigned long n = __atomic_add_fetch(&count, 1, __ATOMIC_RELAXED);
    if (n == SH_SOCK_LOG_REFUSALS)
        SH_LOG_W("comm", "%d connections refused so far; from now on every 1000th is logged",
                 SH_SOCK_LOG_REFUSALS);
    return n <= SH_SOCK_LOG_REFUSALS || n % 1000 == 0;
}

const char *sh_sock_peer_str(int fd, char *buf, size_t cap)
{
    net_addr a;
    a.len = sizeof a.ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (getpeername(fd, (struct sockaddr *)&a.ss, &a.len) == 0) {
        addr_str(&a.ss, ip, sizeof ip);
        snprintf(buf, cap, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, get_port(&a));
    } else {
        snprintf(buf, cap, "unknown peer");
    }
    return buf;
}

/* ---- handshake ----
 * server -> client: "SHOAL1S\0" nonce_s[32]
 * client -> server: "SHOAL1C\0" nonce_c[32] ctx[96] mac_c[32]   mac_c = HMAC(key, "C" ns nc ctx)
 * server -> client: mac_s[32]                                  mac_s = HMAC(key, "S" nc ns ctx)
 * A server that sees a wrong MAC says "SHOAL1R\0" (refused) and closes; one that closes
 * without a verdict was shedding a flood of strangers (the client may try again). HMAC, nonces and the
 * comparison are libcrypto's. */

/* HMAC-SHA256 (libcrypto) over who | n1 | n2 | ctx. */
static shoal_result mac(const char *key, char who, const unsigned char *n1, const unsigned char *n2,
                        const char *ctx, unsigned char out[32])
{
    unsigned char msg[1 + 32 + 32 + SH_AUTH_CTX_NBYTES];
    msg[0] = (unsigned char)who;
    memcpy(msg + 1, n1, 32);
    memcpy(msg + 33, n2, 32);
    memcpy(msg + 65, ctx, SH_AUTH_CTX_NBYTES);
    unsigned int n = 0;
    if (!HMAC(EVP_sha256(), key, (int)strlen(key), msg, sizeof msg, out, &n) || n != 32)
        return SH_FAIL(SHOAL_ERR_INTERNAL, "HMAC-SHA256 failed in libcrypto");
    return SHOAL_OK;
}

static shoal_result nonce(unsigned char out[32])
{
    if (RAND_bytes(out, 32) != 1) /* never a guessable nonce: the connection fails instead */
        return SH_FAIL(SHOAL_ERR_IO, "libcrypto's RAND_bytes could not make a handshake nonce");
    return SHOAL_OK;
}

shoal_result sh_auth_client(int fd, const char *key, const char *context, const char *peer,
                            uint64_t deadline_ns, sh_auth_nonces *nonces)
{
    unsigned char hello[40], ns[32], nc[32], m[32], ms[32];
    char ctx[SH_AUTH_CTX_NBYTES] = {0};
    snprintf(ctx, sizeof ctx, "%s", context);
    shoal_result rc = sh_sock_read_all(fd, hello, sizeof hello, deadline_ns);
    if (rc == SHOAL_ERR_PEER)
        return SH_FAIL(SHOAL_ERR_IO, "%s closed the connection before its hello (busy shedding strangers?)", peer);
    SH_TRY(rc);
    if (memcmp(hello, "SHOAL1S", 8) != 0)
        return SH_FAIL(SHOAL_ERR_PEER, "%s does not speak shoal's protocol (another program on "
                                       "that port?)", peer);
    memcpy(ns, hello + 8, 32);
    SH_TRY(nonce(nc));
    SH_TRY(mac(key, 'C', ns, nc, ctx, m));
    unsigned char msg[8 + 32 + SH_AUTH_CTX_NBYTES + 32];
    memcpy(msg, "SHOAL1C", 8);
    memcpy(msg + 8, nc, 32);
    memcpy(msg + 40, ctx, SH_AUTH_CTX_NBYTES);
    memcpy(msg + 40 + SH_AUTH_CTX_NBYTES, m, 32);
    rc = sh_sock_write_all(fd, msg, sizeof msg, deadline_ns);
    size_t got = 0;
    if (rc == SHOAL_OK) rc = read_counted(fd, ms, 32, deadline_ns, &got);
    if (rc == SHOAL_ERR_TIMEOUT || rc == SHOAL_ERR_INTERRUPTED) return rc;
    if (rc != SHOAL_OK && got >= 8 && memcmp(ms, "SHOAL1R", 8) == 0)
        return SH_FAIL(SHOAL_ERR_PEER, "job key rejected by %s: this process is not part of the "
                                       "job (SHOAL_JOB_KEY differs)", peer);
    if (rc != SHOAL_OK)
        return SH_FAIL(SHOAL_ERR_IO, "%s closed the connection during the handshake without a verdict "
                                     "(busy shedding strangers?)", peer);
    SH_TRY(mac(key, 'S', nc, ns, ctx, m));
    if (CRYPTO_memcmp(m, ms, 32) != 0)
        return SH_FAIL(SHOAL_ERR_PEER, "%s does not hold this job's key (SHOAL_JOB_KEY differs)", peer);
    if (nonces) {
        memcpy(nonces->client, nc, 32);
        memcpy(nonces->server, ns, 32);
    }
    return SHOAL_OK;
}

shoal_result sh_auth_server_hello(unsigned char hello[SH_AUTH_HELLO_NBYTES])
{
    memcpy(hello, "SHOAL1S", 8);
    return nonce(hello + 8);
}

void sh_auth_refuse(int fd)
{
    (void)!send(fd, "SHOAL1R", 8, MSG_DONTWAIT | MSG_NOSIGNAL); /* best effort: it is closed next */
}

int sh_auth_client_greeting_ok(const unsigned char *msg, size_t nbytes)
{
    return memcmp(msg, "SHOAL1C", nbytes < 8 ? nbytes : 8) == 0;
}

shoal_result sh_auth_server_check(const char *key, const unsigned char hello[SH_AUTH_HELLO_NBYTES],
                                  const unsigned char msg[SH_AUTH_CLIENT_NBYTES],
                                  char ctx_out[SH_AUTH_CTX_NBYTES],
                                  unsigned char reply[SH_AUTH_REPLY_NBYTES], sh_auth_nonces *nonces)
{
    unsigned char m[32];
    if (!sh_auth_client_greeting_ok(msg, 8))
        return SH_FAIL(SHOAL_ERR_PEER, "not a shoal client (bad greeting)");
    char ctx[SH_AUTH_CTX_NBYTES];
    memcpy(ctx, msg + 40, SH_AUTH_CTX_NBYTES);
    ctx[SH_AUTH_CTX_NBYTES - 1] = 0;
    /* The MAC covers the context as sent (before we terminate it). */
    SH_TRY(mac(key, 'C', hello + 8, msg + 8, (const char *)msg + 40, m));
    if (CRYPTO_memcmp(m, msg + 40 + SH_AUTH_CTX_NBYTES, 32) != 0)
        return SH_FAIL(SHOAL_ERR_PEER, "wrong job key");
    SH_TRY(mac(key, 'S', msg + 8, hello + 8, (const char *)msg + 40, reply));
    if (ctx_out) memcpy(ctx_out, ctx, SH_AUTH_CTX_NBYTES);
    if (nonces) {
        memcpy(nonces->client, msg + 8, 32);
        memcpy(nonces->server, hello + 8, 32);
    }
    return SHOAL_OK;
}

shoal_result sh_auth_server(int fd, const char *key, char ctx_out[SH_AUTH_CTX_NBYTES],
                            uint64_t deadline_ns)
{
    unsigned char hello[SH_AUTH_HELLO_NBYTES], msg[SH_AUTH_CLIENT_NBYTES], reply[32];
    SH_TRY(sh_auth_server_hello(hello));
    SH_TRY(sh_sock_write_all(fd, hello, sizeof hello, deadline_ns));
    SH_TRY(sh_sock_read_all(fd, msg, 8, deadline_ns));
    if (!sh_auth_client_greeting_ok(msg, 8))
        return SH_FAIL(SHOAL_ERR_PEER, "not a shoal client (bad greeting)");
    SH_TRY(sh_sock_read_all(fd, msg + 8, sizeof msg - 8, deadline_ns));
    shoal_result rc = sh_auth_server_check(key, hello, msg, ctx_out, reply, NULL);
    if (rc != SHOAL_OK) {
        sh_auth_refuse(fd);
        return rc;
    }
    SH_TRY(sh_sock_write_all(fd, reply, sizeof reply, deadline_ns));
    return SHOAL_OK;
}
