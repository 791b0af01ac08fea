/* fuzz_store.c — libFuzzer target: the store server's request handling (src/comm/boot/store_server.c)
 * fed bytes as clients' connections would send them, through its per-connection handler
 * (on_readable/on_writable) over socket pairs, without the server thread.
 * Input: a sequence of segments, each  conn u8 | length u16 (little-endian) | bytes.
 * Connections 0..2 start past the handshake (C_READY: requests), connection 3 at its start
 * (C_AUTH: a stranger's greeting); conn % 4 picks one. After each segment the server reads
 * what it can and the client side drains the replies; at the end every waiting get times
 * out, as the poll loop's deadline would make it.
 * The target includes store_server.c itself to reach its static handler.
 * Driven by scripts/fuzz.sh (clang) and tests/fuzz/test_fuzz_store.c. */
#include "comm/boot/store_server.c"

#include <stdint.h>

enum { FUZZ_NCONNS = 4 };

static void drain(int fd)
{
    char sink[4096];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sh_store_server *s = calloc(1, sizeof *s);
    if (!s) return 0;
    s->key = strdup("fuzz-job-key");
    s->listen_fd = s->wake[0] = s->wake[1] = -1;
    s->conns = calloc(FUZZ_NCONNS, sizeof *s->conns);
    int client[FUZZ_NCONNS];
    for (int i = 0; i < FUZZ_NCONNS; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0) abort();
        conn *cn = calloc(1, sizeof *cn);
        if (!cn) abort();
        cn->fd = sv[0];
        cn->st = i == FUZZ_NCONNS - 1 ? C_AUTH : C_READY;
        snprintf(cn->who, sizeof cn->who, "fuzz client %d", i);
        if (cn->st == C_AUTH && sh_auth_server_hello(cn->hello) != SHOAL_OK) abort();
        s->conns[s->nconns++] = cn;
        client[i] = sv[1];
    }
    size_t at = 0;
    while (at + 3 <= size) {
        int i = data[at] % FUZZ_NCONNS;
        size_t n = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
        at += 3;
        if (n > size - at) n = size - at;
        conn *cn = s->conns[i];
        if (cn->fd >= 0 && n) (void)!send(client[i], data + at, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        at += n;
        /* What serve_main does when the connection is readable and writable. */
        for (int round = 0; round < 4; round++) {
            for (int k = 0; k < s->nconns; k++) {
                conn *c = s->conns[k];
                if (c->fd >= 0 && c->st != C_WAITING) on_readable(s, c);
                if (c->fd >= 0 && c->out_off < c->out_nbytes) on_writable(c);
                drain(client[k]);
            }
        }
    }
    for (int k = 0; k < s->nconns; k++) {
        conn *c = s->conns[k];
        if (c->fd >= 0 && c->st == C_WAITING) {
            c->st = C_READY;
            reply(c, SH_STORE_ST_TIMEOUT, NULL, 0);
            on_writable(c);
        }
        close(client[k]);
        conn_free(c);
    }
    free(s->conns);
    for (int b = 0; b < NBUCKETS; b++)
        for (kv *it = s->buckets[b], *next; it; it = next) {
            next = it->next;
            free(it->key);
            free(it->val);
            free(it);
        }
    free(s->key);
    free(s);
    return 0;
}
