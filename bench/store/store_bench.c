/* store_bench.c — rank 0's rendezvous store under load: 4 client processes each make N
 * set+get round trips while S stalled strangers hold connections open half-way through the
 * handshake; prints requests per second. The strangers must not change the figure much.
 * Not here: collectives (bench/comm/, shoal bench).
 * Build and run:
 *   make BUILD=build-x && cc -O2 -pthread -Iinclude -Isrc bench/store/store_bench.c \
 *       build-x/libshoal.a -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt -o /tmp/store_bench
 *   /tmp/store_bench 5000 0 plain; /tmp/store_bench 5000 200 stalled */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "base/util.h"
#include "comm/boot/store.h"
int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: store_bench ROUND_TRIPS STALLED LABEL\n");
        return 2;
    }
    int n = atoi(argv[1]), nstall = atoi(argv[2]), nclients = 4;
    sh_store_server *srv = NULL;
    if (sh_store_server_start("127.0.0.1", 0, "k", 0, 0, &srv) != SHOAL_OK) return 1;
    int port = sh_store_server_port(srv);
    int *st = malloc(sizeof(int) * (size_t)(nstall + 1));
    for (int i = 0; i < nstall; i++) {
        st[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(0x7f000001)};
        connect(st[i], (struct sockaddr *)&a, sizeof a);
    }
    uint64_t t0 = sh_now_ns();
    for (int c = 0; c < nclients; c++)
        if (fork() == 0) {
            sh_store *s = NULL;
            if (sh_store_connect("127.0.0.1", port, "k", 10000, &s) != SHOAL_OK) _exit(2);
            char key[32], v[64];
            size_t got;
            for (int i = 0; i < n; i++) {
                snprintf(key, sizeof key, "c%d/%d", c, i % 64);
                if (sh_store_set(s, key, "0123456789abcdef", 16) != SHOAL_OK) _exit(3);
                if (sh_store_get(s, key, v, sizeof v, &got, 1000) != SHOAL_OK) _exit(4);
            }
            _exit(0);
        }
    int bad = 0;
    for (int c = 0; c < nclients; c++) {
        int w = 0;
        wait(&w);
        bad += !(WIFEXITED(w) && WEXITSTATUS(w) == 0);
    }
    double s = (double)(sh_now_ns() - t0) * 1e-9;
    printf("%s stalled=%d: %d clients x %d set+get: %.3f s, %.0f requests/s, failed clients %d\n", argv[3], nstall, nclients, n, s, 2.0 * n * nclients / s, bad);
    for (int i = 0; i < nstall; i++) close(st[i]);
    sh_store_server_stop(srv);
    return 0;
}
