/* test_netns.c — proves the TCP path and multi-host topologies across a real network:
 * network namespaces joined by veth pairs on a bridge, two ranks per "host" (shared memory
 * inside a namespace, TCP between them), every collective; then a host's link is taken
 * down mid-job and every rank must fail within the deadline, naming the lost peers.
 * Without root or `ip netns` the test says so and skips. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "coll_check.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

enum { MAX_HOSTS = 4 };
static char sw[32], hosts[MAX_HOSTS][32];
static int nhosts_made;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[600];
    snprintf(full, sizeof full, "%s >/dev/null 2>&1", cmd);
    return system(full);
}

static void teardown(void)
{
    for (int k = 0; k < nhosts_made; k++) sh("ip netns del %s", hosts[k]);
    if (sw[0]) sh("ip netns del %s", sw);
    nhosts_made = 0;
    sw[0] = 0;
}

/* A switch namespace with a bridge, and h host namespaces at 10.77.0.(k+1)/24. */
static int setup(int h)
{
    int id = (int)getpid() % 100000;
    snprintf(sw, sizeof sw, "shsw%d", id);
    if (sh("ip netns add %s", sw) != 0) {
        sw[0] = 0;
        return -1;
    }
    if (sh("ip -n %s link add br0 type bridge", sw) || sh("ip -n %s link set br0 up", sw)) return -1;
    for (int k = 0; k < h; k++) {
        snprintf(hosts[k], sizeof hosts[k], "shh%d-%d", id, k);
        if (sh("ip netns add %s", hosts[k])) return -1;
        nhosts_made = k + 1;
        if (sh("ip link add vh%d-%d type veth peer name vs%d-%d", id, k, id, k) ||
            sh("ip link set vh%d-%d netns %s", id, k, hosts[k]) || sh("ip link set vs%d-%d netns %s", id, k, sw) ||
            sh("ip -n %s link set vs%d-%d master br0", sw, id, k) || sh("ip -n %s link set vs%d-%d up", sw, id, k) ||
            sh("ip -n %s addr add 10.77.0.%d/24 dev vh%d-%d", hosts[k], k + 1, id, k) ||
            sh("ip -n %s link set vh%d-%d up", hosts[k], id, k) || sh("ip -n %s link set lo up", hosts[k]))
            return -1;
    }
    return 0;
}

static void matrix(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    CHECK(shoal_comm_nhosts(c) == n / 2, "%d hosts, want %d", shoal_comm_nhosts(c), n / 2);
    CHECK(shoal_comm_local_world(c) == 2, "%d ranks on this host", shoal_comm_local_world(c));
    size_t counts[] = {0, 1, (size_t)n + 1, 1009};
    cc_matrix(c, counts, 4, 0);
    /* Past a piece (512 KiB) in float32: every collective, dtype and placement pipelined over
     * the network. One op: the ops' arithmetic is the same at any count, each proven above. */
    static const shoal_dtype dts[] = {SHOAL_FLOAT32, SHOAL_INT8, SHOAL_BFLOAT16};
    for (int k = 0; k < 6; k++)
        for (int d = 0; d < 3; d++)
            for (int ip = 0; ip < 2; ip++) cc_run(c, k, dts[d], SHOAL_SUM, 300007, ip);
    cc_run(c, 0, SHOAL_FLOAT32, SHOAL_SUM, 4u << 20, 0);
}

static void link_down(shoal_comm *c, void *arg)
{
    int r = shoal_comm_rank(c);
    size_t count = 1 << 18;
    float *v = calloc(count, 4);
    CHECK(shoal_barrier(c) == SHOAL_OK, "%s", shoal_last_error_message());
    uint64_t t0 = sh_now_ns(), down_at = 0;
    shoal_result rc = SHOAL_OK;
    while (rc == SHOAL_OK && sh_now_ns() - t0 < 30000000000ull) {
        if (r == 0 && !down_at && sh_now_ns() - t0 > 500000000ull) {
            char cmd[160];
            snprintf(cmd, sizeof cmd, "ip -n %s link set vs%s-1 down", sw, sw + 4);
            if (system(cmd) != 0) fprintf(stderr, "could not take the link down\n");
            down_at = sh_now_ns();
        }
        rc = shoal_allreduce(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM);
    }
    CHECK(rc == SHOAL_ERR_TIMEOUT || rc == SHOAL_ERR_PEER, "rank %d: rc %d after %.1f s", r, rc,
          (double)(sh_now_ns() - t0) / 1e9);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "allreduce") && strstr(m, "rank "), "rank %d: %s", r, m);
    CHECK(shoal_comm_is_broken(c), "rank %d not broken", r);
    free(v);
}

static void t_netns(void)
{
    if (geteuid() != 0 || system("ip netns list >/dev/null 2>&1") != 0) {
        printf("test_netns: skipped: needs root and `ip netns` (iproute2)\n");
        return;
    }
    for (int h = 2; h <= MAX_HOSTS; h++) {
        if (setup(h) != 0) {
            printf("test_netns: skipped: cannot make network namespaces here\n");
            teardown();
            return;
        }
        const char *ns[2 * MAX_HOSTS];
        for (int r = 0; r < 2 * h; r++) ns[r] = hosts[r / 2];
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .netns = ns, .master_addr = "10.77.0.1", .deadline_s = 240};
        RUN_RANKS(2 * h, &o, matrix, NULL);
        o.transport = "tcp";
        RUN_RANKS(2 * h, &o, matrix, NULL);
        teardown();
    }
    /* a link goes down mid-job: everyone stops within the deadline */
    if (setup(2) == 0) {
        const char *ns[4] = {hosts[0], hosts[0], hosts[1], hosts[1]};
        sh_test_ranks_opts o = {.links = SH_TEST_REAL, .netns = ns, .master_addr = "10.77.0.1",
                                .timeout_ms = 2000, .deadline_s = 90};
        RUN_RANKS(4, &o, link_down, NULL);
    }
    teardown();
}

int main(void)
{
    check_begin("test_netns", 400);
    RUN(t_netns);
    teardown();
    return check_end();
}
