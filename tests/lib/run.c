/* run.c — run a shell command from a test and capture its output (see run.h).
 * Not here: rank harnesses (ranks.c).
 * Used by the tests that drive binaries; proved through them. */
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

int sh_test_run(const char *cmd, char *out, size_t out_nbytes)
{
    if (out_nbytes) out[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = out_nbytes ? fread(out, 1, out_nbytes - 1, p) : 0;
    if (out_nbytes) out[n] = 0;
    char rest[4096]; /* read what did not fit to the end: a closed pipe would kill the writer */
    while (fread(rest, 1, sizeof rest, p) > 0) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *sh_test_shoal_bin(void)
{
    const char *bin = getenv("SHOAL_BIN");
    return bin && *bin ? bin : "build/shoal";
}

int sh_test_shoal_in(const char *dir, const char *env, const char *cmd, const char *args, char *out,
                     size_t out_nbytes)
{
    char line[4096];
    snprintf(line, sizeof line, "cd %s && %s %s %s %s 2>&1", dir, env, sh_test_shoal_bin(), cmd, args);
    return sh_test_run(line, out, out_nbytes);
}

long long sh_test_file_nbytes(const char *dir, const char *name)
{
    char path[600];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

double sh_test_json_number(const char *text, const char *key)
{
    char want[64];
    snprintf(want, sizeof want, "\"%s\":", key);
    const char *p = strstr(text, want);
    return p ? atof(p + strlen(want)) : -1;
}

int sh_test_count(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, s)) != NULL; p++) n++;
    return n;
}

/* 1 when a TCP socket can bind port on every address right now. */
static int port_is_free(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_ANY)};
    int ok = bind(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

int sh_test_free_ports(int count)
{
    /* Below the kernel's ephemeral ports (32768-60999): the outgoing connections of tests running
     * beside this one take those at random, and one could hold the port by the time it is used. */
    enum { LO = 20000, HI = 32700 };
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
    int base = LO;
    for (int tries = 0; tries < 200; tries++) {
        base = LO + (int)(rand_r(&seed) % (unsigned)(HI - LO - count));
        int k = 0;
        while (k < count && port_is_free(base + k)) k++;
        if (k == count) return base;
    }
    return base;
}
