/* sock.h — TCP socket helpers with deadlines, interface choice, and the job-key handshake
 * every connection of a job makes (HMAC-SHA256 challenge-response, both directions, through
 * OpenSSL's libcrypto).
 * Not here: what flows after the handshake (store_server.c, transport/tcp.c).
 * Proved by tests/comm/test_store.c, test_transport_tcp.c and test_comm_faults.c. */
#ifndef SH_COMM_SOCK_H
#define SH_COMM_SOCK_H

#include <stddef.h>
#include <stdint.h>

#include "shoal/result.h"

/* Absolute deadline in ns of sh_now_ns() clock, timeout_ms from now. */
uint64_t sh_sock_deadline(int timeout_ms);
/* Read / write exactly nbytes before the deadline (blocking or non-blocking fd). */
shoal_result sh_sock_read_all(int fd, void *buf, size_t nbytes, uint64_t deadline_ns);
shoal_result sh_sock_write_all(int fd, const void *buf, size_t nbytes, uint64_t deadline_ns);
/* Hosts are IPv4 or IPv6 addresses ("10.0.0.1", "fd00::1", "[fd00::1]") or names. Connect
 * to host:port until the deadline: a refused connection is tried again after a growing
 * pause (10 ms doubling to 0.5 s, jittered), an unanswered one waits through the kernel's
 * SYN retries (2, 4, then 8 s an attempt). Waits of this file look at interrupt.h's watch
 * every 250 ms (SHOAL_ERR_INTERRUPTED). */
shoal_result sh_sock_connect(const char *host, int port, uint64_t deadline_ns, int *fd_out);
/* One attempt: a refusal (the host answered, nobody listens: a process that is gone) is
 * SHOAL_ERR_PEER at once; no route SHOAL_ERR_IO; no answer SHOAL_ERR_TIMEOUT at the
 * deadline. */
shoal_result sh_sock_connect_once(const char *host, int port, uint64_t deadline_ns, int *fd_out);
/* Listen on addr:port (port 0: any; addr NULL or "": every address of both families, or of
 * IPv4 where the host has no IPv6). *port_out: bound port. */
shoal_result sh_sock_listen(const char *addr, int port, int *fd_out, int *port_out);
/* The local address to listen on: SHOAL_SOCKET_IFNAME's (IPv4, else global IPv6), else the
 * one the kernel routes to master_addr from (in master_addr's family), else loopback. */
shoal_result sh_sock_local_addr(const char *master_addr, char *out, size_t cap);
/* "a.b.c.d:port" or "[v6]:port" of a connected socket's peer. */
const char *sh_sock_peer_str(int fd, char *buf, size_t cap);
/* TCP_NODELAY; SHOAL_TCP_CONGESTION's algorithm; 4 MiB buffers where net.core.[rw]mem_max
 * allow them, else autotuning. */
void sh_sock_tune(int fd);
/* sock_cc.c: SHOAL_TCP_CONGESTION on one socket (sh_sock_tune calls it); the variable, when
 * it names an algorithm, must be one the kernel lets this process set: one clear error at
 * start-up otherwise. */
void sh_sock_tune_cc(int fd);
shoal_result sh_sock_check_congestion(void);
/* 1 when a refused connection should be logged: the first SH_SOCK_LOG_REFUSALS, then every
 * 1000th, so a port scan cannot flood the job's output. */
enum { SH_SOCK_LOG_REFUSALS = 50 };
int sh_sock_log_refusal(void);

/* The handshake. context names what the connection is for ("store", "w/tcp 3->5 coll");
 * both sides must use the same key and context, or it fails without revealing the key.
 * The client sends its context (so a server can learn who connects); the server checks
 * it with accept_ctx (may be NULL: any context) and returns it in ctx_out. */
enum { SH_AUTH_CTX_NBYTES = 96 };
/* Both sides' nonces of a finished handshake: fresh for every connection, so keys derived
 * from them and the job key are the connection's own (transport/seal.c). */
typedef struct {
    unsigned char client[32], server[32];
} sh_auth_nonces;
/* peer: "rank 0's store at a:p", for errors; nonces may be NULL. Errors: SHOAL_ERR_PEER
 * when the server refused the key (or is not shoal), SHOAL_ERR_IO when it closed without a
 * verdict (a server shedding a flood drops handshakes: try again), SHOAL_ERR_TIMEOUT,
 * SHOAL_ERR_INTERRUPTED. */
shoal_result sh_auth_client(int fd, const char *key, const char *context, const char *peer,
                            uint64_t deadline_ns, sh_auth_nonces *nonces);
shoal_result sh_auth_server(int fd, const char *key, char ctx_out[SH_AUTH_CTX_NBYTES],
                            uint64_t deadline_ns);

/* The server side in pieces, for servers that poll many connections at once: send hello,
 * read SH_AUTH_CLIENT_NBYTES (the first 8 may be checked early with
 * sh_auth_client_greeting_ok to drop garbage at once), check, send reply. */
enum { SH_AUTH_HELLO_NBYTES = 40, SH_AUTH_CLIENT_NBYTES = 8 + 32 + SH_AUTH_CTX_NBYTES + 32,
       SH_AUTH_REPLY_NBYTES = 32 };
shoal_result sh_auth_server_hello(unsigned char hello[SH_AUTH_HELLO_NBYTES]); /* fails only without randomness */
/* Tell a client whose proof failed that it was refused (then close it), so that it does
 * not take the refusal for a dropped handshake and try again. */
void sh_auth_refuse(int fd);
int sh_auth_client_greeting_ok(const unsigned char *msg, size_t nbytes);
shoal_result sh_auth_server_check(const char *key, const unsigned char hello[SH_AUTH_HELLO_NBYTES],
                                  const unsigned char msg[SH_AUTH_CLIENT_NBYTES],
                                  char ctx_out[SH_AUTH_CTX_NBYTES],
                                  unsigned char reply[SH_AUTH_REPLY_NBYTES], sh_auth_nonces *nonces);

#endif
