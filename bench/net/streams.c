/* streams.c — does a collective gain from several TCP connections per peer? The upper bound:
 * K parallel streams (one thread each) moving NBYTES in all from one host to another, both
 * ways at once as a ring step does, against one stream. Run by bench/net/streams.sh across
 * the emulated cluster.
 *   streams recv PORT K NBYTES          (on the receiving host: listens, also sends back)
 *   streams send ADDR PORT K NBYTES     (prints {"streams": K, "gb_s": ...} per direction)
 * Not here: shoal's links (src/comm/transport/), which use one connection per peer. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { CHUNK = 1 << 20, MAX_STREAMS = 16 };

typedef struct {
    int fd;
    size_t nbytes;
    int sending;
} job;

static void *move(void *arg)
{
    job *j = arg;
    static __thread char buf[CHUNK];
    size_t left = j->nbytes;
    while (left) {
        size_t n = left < CHUNK ? left : CHUNK;
        ssize_t m = j->sending ? send(j->fd, buf, n, MSG_NOSIGNAL) : recv(j->fd, buf, n, 0);
        if (m <= 0) {
            perror(j->sending ? "streams: send" : "streams: recv");
            exit(1);
        }
        left -= (size_t)m;
    }
    return NULL;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Each stream sends and receives its share at once (a ring step's traffic). */
static double run_all(int *fds, int k, size_t total)
{
    pthread_t th[2 * MAX_STREAMS];
    job jobs[2 * MAX_STREAMS];
    double t0 = now();
    for (int i = 0; i < k; i++)
        for (int d = 0; d < 2; d++) {
            jobs[2 * i + d] = (job){fds[i], total / (size_t)k, d};
            pthread_create(&th[2 * i + d], NULL, move, &jobs[2 * i + d]);
        }
    for (int i = 0; i < 2 * k; i++) pthread_join(th[i], NULL);
    return now() - t0;
}

int main(int argc, char **argv)
{
    int recv_side = argc == 5 && !strcmp(argv[1], "recv"), send_side = argc == 6 && !strcmp(argv[1], "send");
    if (!recv_side && !send_side) {
        fprintf(stderr, "usage: streams recv PORT K NBYTES | streams send ADDR PORT K NBYTES\n");
        return 2;
    }
    int port = atoi(argv[recv_side ? 2 : 3]), k = atoi(argv[recv_side ? 3 : 4]);
    size_t total = strtoull(argv[recv_side ? 4 : 5], NULL, 10);
    if (k < 1 || k > MAX_STREAMS || total < (size_t)k) {
        fprintf(stderr, "streams: K from 1 to %d, NBYTES at least K\n", MAX_STREAMS);
        return 2;
    }
    int fds[MAX_STREAMS], one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (recv_side) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, MAX_STREAMS)) {
            perror("streams: listen");
            return 1;
        }
        for (int i = 0; i < k; i++) fds[i] = accept(l, NULL, NULL);
        close(l);
    } else {
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        for (int i = 0; i < k; i++) {
            fds[i] = socket(AF_INET, SOCK_STREAM, 0);
            for (int tries = 0; connect(fds[i], (struct sockaddr *)&a, sizeof a); tries++) {
                if (tries > 200) {
                    perror("streams: connect");
                    return 1;
                }
                close(fds[i]);
                fds[i] = socket(AF_INET, SOCK_STREAM, 0);
                usleep(10000);
            }
        }
    }
    for (int i = 0; i < k; i++) setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double s = run_all(fds, k, total);
    if (send_side) printf("{\"streams\": %d, \"nbytes\": %zu, \"gb_s\": %.4f}\n", k, total, (double)total / s / 1e9);
    for (int i = 0; i < k; i++) close(fds[i]);
    return 0;
}
