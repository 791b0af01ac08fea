/* test_link.c — proves src/comm/transport/link.c and xfer.c (socket links, the transfer engine) and the
 * multi-process harness in tests/lib/ranks.c: real processes over real socketpairs. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "comm/comm_internal.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

/* Every rank sends 3 MiB + 5 bytes to every other rank and receives theirs, all at once:
 * the engine must interleave or the socket buffers fill and everyone deadlocks. */
static void all_to_all_bytes(shoal_comm *c, void *arg)
{
    size_t nbytes = 3 * 1024 * 1024 + 5;
    int n = c->world;
    unsigned char *out = malloc(nbytes), *in = malloc(nbytes * (size_t)n);
    for (size_t i = 0; i < nbytes; i++) out[i] = (unsigned char)(i * 7 + (size_t)c->rank);
    sh_xfer_op ops[16];
    int k = 0;
    for (int p = 0; p < n; p++) {
        if (p == c->rank) continue;
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_SEND, out, nbytes, 0, NULL, 0, 0, NULL};
        ops[k++] = (sh_xfer_op){c->coll[p], SH_XFER_RECV, in + (size_t)p * nbytes, nbytes, 0, NULL, 0, 0, NULL};
    }
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "test exchange", &x);
    shoal_result rc = sh_xfer(&x, ops, k);
    CHECK(rc == SHOAL_OK, "rank %d: %s", c->rank, shoal_last_error_message());
    int bad = 0;
    for (int p = 0; p < n; p++) {
        if (p == c->rank) continue;
        for (size_t i = 0; i < nbytes; i++)
            if (in[(size_t)p * nbytes + i] != (unsigned char)(i * 7 + (size_t)p)) bad++;
    }
    CHECK(bad == 0, "rank %d: %d wrong bytes", c->rank, bad);
    free(out);
    free(in);
}

/* RECV_REDUCE: rank 1 sends int32 values; rank 0 adds them into its own. Odd byte splits
 * across the socket are the engine's business. */
static void recv_reduce_adds(shoal_comm *c, void *arg)
{
    size_t count = 1000003;
    int32_t *v = malloc(count * 4);
    for (size_t i = 0; i < count; i++) v[i] = (int32_t)(i % 1000) + c->rank * 5000;
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "test reduce", &x);
    x.dtype = SHOAL_INT32;
    x.op = SHOAL_SUM;
    sh_xfer_op op;
    if (c->rank == 1) op = (sh_xfer_op){c->coll[0], SH_XFER_SEND, v, count * 4, 0, NULL, 0, 0, NULL};
    else op = (sh_xfer_op){c->coll[1], SH_XFER_RECV_REDUCE, v, count * 4, 0, NULL, 0, 0, NULL};
    CHECK(sh_xfer(&x, &op, 1) == SHOAL_OK, "%s", shoal_last_error_message());
    if (c->rank == 0) {
        int bad = 0;
        for (size_t i = 0; i < count; i++)
            if (v[i] != 2 * (int32_t)(i % 1000) + 5000) bad++;
        CHECK(bad == 0, "%d wrong sums", bad);
    }
    free(v);
}

/* A silent peer: the receiver gives up after its timeout with a message naming the peer. */
static void silent_peer_times_out(shoal_comm *c, void *arg)
{
    if (c->rank == 1) {
        sleep(2);
        return;
    }
    char b[8];
    c->timeout_ms = 300;
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "allreduce", &x);
    sh_xfer_op op = {c->coll[1], SH_XFER_RECV, b, sizeof b, 0, NULL, 0, 0, NULL};
    uint64_t t0 = sh_now_ns();
    shoal_result rc = sh_xfer(&x, &op, 1);
    double ms = (double)(sh_now_ns() - t0) / 1e6;
    CHECK(rc == SHOAL_ERR_TIMEOUT, "rc %d", rc);
    CHECK(strstr(shoal_last_error_message(), "rank 1 (host0)") != NULL, "%s", shoal_last_error_message());
    CHECK(strstr(shoal_last_error_message(), "allreduce") != NULL, "%s", shoal_last_error_message());
    CHECK(ms >= 290 && ms < 1500, "gave up after %.0f ms", ms);
}

/* A peer that dies (SIGKILL) mid-transfer: PEER error at once, naming it. */
static void dead_peer_is_named(shoal_comm *c, void *arg)
{
    if (c->rank == 1) {
        char b[100] = {0};
        if (write(c->coll[0]->fd, b, sizeof b) < 0) abort();
        raise(SIGKILL);
    }
    char b[1000];
    sh_xfer_ctx x;
    sh_comm_xfer_ctx(c, "broadcast", &x);
    sh_xfer_op op = {c->coll[1], SH_XFER_RECV, b, sizeof b, 0, NULL, 0, 0, NULL};
    shoal_result rc = sh_xfer(&x, &op, 1);
    CHECK(rc == SHOAL_ERR_PEER, "rc %d", rc);
    CHECK(strstr(shoal_last_error_message(), "broadcast with rank 1 (host0)") != NULL, "%s",
          shoal_last_error_message());
}

static void crash_fn(shoal_comm *c, void *arg) { if (c->rank == 1) abort(); }

static void harness_names_the_crashed_rank(void)
{
    int p = 0, f = 0;
    int bad = sh_test_ranks(3, NULL, crash_fn, NULL, &p, &f);
    CHECK(bad == 1 && f == 1, "bad %d failed %d", bad, f);
}

static void t_all_to_all(void)
{
    for (int n = 2; n <= 4; n++) RUN_RANKS(n, NULL, all_to_all_bytes, NULL);
}
static void t_recv_reduce(void) { RUN_RANKS(2, NULL, recv_reduce_adds, NULL); }
static void t_timeout(void) { RUN_RANKS(2, NULL, silent_peer_times_out, NULL); }
static void t_dead(void)
{
    RUN_RANKS(2, &(sh_test_ranks_opts){.dying_mask = 2u}, dead_peer_is_named, NULL);
}

int main(void)
{
    check_begin("test_link", 120);
    RUN(t_all_to_all);
    RUN(t_recv_reduce);
    RUN(t_timeout);
    RUN(t_dead);
    RUN(harness_names_the_crashed_rank);
    return check_end();
}
