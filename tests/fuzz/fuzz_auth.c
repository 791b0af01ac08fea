/* fuzz_auth.c — libFuzzer target: the link handshake every connection of a job makes
 * (src/comm/boot/sock.c), from both ends, against a hostile peer.
 * Input: mode u8, then bytes. Mode % 4:
 *   0  sh_auth_server_check on a hello and a client message taken from the bytes (zero
 *      padded), and sh_auth_client_greeting_ok on every prefix length;
 *   1  a hostile server: the bytes are all it says (then it hangs up); sh_auth_client reads;
 *   2  a hostile client: the bytes are all it says; sh_auth_server reads;
 *   3  an honest client with a fuzzed key, nonces and context: the check must accept it,
 *      return the context NUL-terminated, and reply with the MAC the client expects.
 * Not here: the store's polled handshake (fuzz_store.c).
 * Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_auth.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "comm/boot/sock.h"

static const char *const fuzz_key = "fuzz-job-key";

/* The peer's side of a socket pair: write what the hostile peer says, then hang up. */
static int hostile_peer(const uint8_t *b, size_t n, int *fd_out)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    if (n > 65536) n = 65536; /* fits the socket buffer: the write never blocks */
    if (n && send(sv[1], b, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    shutdown(sv[1], SHUT_WR);
    *fd_out = sv[0];
    return sv[1];
}

static void honest_client(const uint8_t *b, size_t n)
{
    uint8_t in[1 + 32 + SH_AUTH_HELLO_NBYTES + 32 + SH_AUTH_CTX_NBYTES] = {0};
    memcpy(in, b, n < sizeof in ? n : sizeof in);
    char key[33];
    memcpy(key, in + 1, 32);
    key[32] = 0;
    if (!key[0]) snprintf(key, sizeof key, "k");
    const uint8_t *hello_nonce = in + 33, *client_nonce = in + 65, *ctx = in + 97;
    unsigned char hello[SH_AUTH_HELLO_NBYTES], msg[SH_AUTH_CLIENT_NBYTES];
    unsigned char mac_in[1 + 32 + 32 + SH_AUTH_CTX_NBYTES], reply[SH_AUTH_REPLY_NBYTES],
        want[32];
    memcpy(hello, "SHOAL1S", 8);
    memcpy(hello + 8, hello_nonce, 32);
    memcpy(msg, "SHOAL1C", 8);
    memcpy(msg + 8, client_nonce, 32);
    memcpy(msg + 40, ctx, SH_AUTH_CTX_NBYTES);
    mac_in[0] = 'C';
    memcpy(mac_in + 1, hello_nonce, 32);
    memcpy(mac_in + 33, client_nonce, 32);
    memcpy(mac_in + 65, ctx, SH_AUTH_CTX_NBYTES);
    HMAC(EVP_sha256(), key, (int)strlen(key), mac_in, sizeof mac_in, msg + 40 + SH_AUTH_CTX_NBYTES, NULL);
    char ctx_out[SH_AUTH_CTX_NBYTES];
    if (sh_auth_server_check(key, hello, msg, ctx_out, reply, NULL) != SHOAL_OK) abort();
    if (ctx_out[SH_AUTH_CTX_NBYTES - 1] != 0 || memcmp(ctx_out, ctx, SH_AUTH_CTX_NBYTES - 1))
        abort();
    mac_in[0] = 'S';
    memcpy(mac_in + 1, client_nonce, 32);
    memcpy(mac_in + 33, hello_nonce, 32);
    HMAC(EVP_sha256(), key, (int)strlen(key), mac_in, sizeof mac_in, want, NULL);
    if (memcmp(reply, want, 32) != 0) abort();
    /* A different key must be refused. */
    if (sh_auth_server_check("another key", hello, msg, NULL, reply, NULL) == SHOAL_OK &&
        strcmp(key, "another key") != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    switch (data[0] % 4) {
    case 0: {
        unsigned char hello[SH_AUTH_HELLO_NBYTES] = {0}, msg[SH_AUTH_CLIENT_NBYTES] = {0};
        unsigned char reply[SH_AUTH_REPLY_NBYTES];
        char ctx[SH_AUTH_CTX_NBYTES];
        size_t k = n < sizeof hello ? n : sizeof hello;
        memcpy(hello, b, k);
        memcpy(msg, b + k, n - k < sizeof msg ? n - k : sizeof msg);
        for (size_t len = 0; len <= 8 && len <= n; len++) (void)sh_auth_client_greeting_ok(b, len);
        if (sh_auth_server_check(fuzz_key, hello, msg, ctx, reply, NULL) == SHOAL_OK) abort(); /* forged */
        break;
    }
    case 1: {
        int fd, peer = hostile_peer(b, n, &fd);
        if (peer < 0) return 0;
        if (sh_auth_client(fd, fuzz_key, "fuzz ctx", "a hostile server", sh_sock_deadline(2000), NULL) ==
            SHOAL_OK)
            abort(); /* it cannot know the key */
        close(fd);
        close(peer);
        break;
    }
    case 2: {
        int fd, peer = hostile_peer(b, n, &fd);
        if (peer < 0) return 0;
        char ctx[SH_AUTH_CTX_NBYTES];
        if (sh_auth_server(fd, fuzz_key, ctx, sh_sock_deadline(2000)) == SHOAL_OK) abort();
        close(fd);
        close(peer);
        break;
    }
    default:
        honest_client(b, n);
        break;
    }
    return 0;
}
