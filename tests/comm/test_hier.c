/* test_hier.c — proves the pipelined hierarchical allreduce (src/comm/coll/hier.c): the
 * piece count follows size and chunk, the selector takes hier where hosts hold several ranks,
 * results equal the independent expectations (coll_check.h) on even hosts for every dtype and
 * op with odd and non-power-of-two counts, float sums are bitwise equal on every rank, and a
 * rank killed or frozen during it makes every survivor fail within the timeout naming a rank.
 * Not here: the unpipelined shapes and the other algorithms (test_algo.c), real links
 * between emulated hosts (test_netlab.c). */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "coll_check.h"
#include "comm/coll/algo.h"
#include "comm/coll/select.h"
#include "comm/comm_internal.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

/* Large messages pipeline in 1 MiB pieces (at most 64), small ones do not; a chunk size
 * overrides the piece; never more pieces than elements. Up to 64 KiB, and on uneven hosts,
 * the leaders' shape. */
static void t_pieces_follow_size_and_chunk(void)
{
    shoal_comm *c = NULL;
    CHECK_OK(sh_comm_alloc(0, 4, &c));
    if (!c) return;
    CHECK(sh_hier_pieces(c, 16384, SHOAL_FLOAT32) == 1, "64 KiB: %zu pieces", sh_hier_pieces(c, 16384, SHOAL_FLOAT32));
    CHECK(sh_hier_pieces(c, 1 << 18, SHOAL_FLOAT32) == 1, "1 MiB: %zu", sh_hier_pieces(c, 1 << 18, SHOAL_FLOAT32));
    CHECK(sh_hier_pieces(c, 1 << 22, SHOAL_FLOAT32) == 16, "16 MiB: %zu", sh_hier_pieces(c, 1 << 22, SHOAL_FLOAT32));
    CHECK(sh_hier_pieces(c, 1 << 28, SHOAL_FLOAT32) == 64, "1 GiB: %zu", sh_hier_pieces(c, 1 << 28, SHOAL_FLOAT32));
    c->chunk_nbytes = 24;
    CHECK(sh_hier_pieces(c, 7, SHOAL_INT8) == 1, "7 bytes, chunk 24: %zu", sh_hier_pieces(c, 7, SHOAL_INT8));
    CHECK(sh_hier_pieces(c, 1009, SHOAL_FLOAT32) == 64, "1009 floats, chunk 24: %zu",
          sh_hier_pieces(c, 1009, SHOAL_FLOAT32));
    CHECK(sh_hier_pieces(c, 0, SHOAL_FLOAT32) == 1, "0 elements: %zu", sh_hier_pieces(c, 0, SHOAL_FLOAT32));
    /* where the selector takes hier: 2 hosts x 2 ranks above the recursive-doubling size */
    for (int r = 0; r < 4; r++) c->host_of[r] = r / 2;
    sh_comm_index_hosts(c);
    sh_coll ar = {SH_COLL_ALLREDUCE, NULL, NULL, 1 << 22, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    CHECK(sh_select_choose(c, &ar) == SH_ALGO_HIER, "16 MiB on 2 x 2 chose %s", sh_algo_name(sh_select_choose(c, &ar)));
    /* and within it the leaders' shape up to 64 KiB and for uneven hosts */
    c->chunk_nbytes = 0;
    CHECK(sh_hier_by_leaders(c, 16384, SHOAL_FLOAT32), "64 KiB on 2 x 2 not by leaders");
    CHECK(!sh_hier_by_leaders(c, 16385, SHOAL_FLOAT32), "64 KiB + 4 on 2 x 2 by leaders");
    CHECK(!sh_hier_by_leaders(c, 1 << 22, SHOAL_FLOAT32), "16 MiB on 2 x 2 by leaders");
    c->host_of[1] = 1; /* 1 + 3 */
    sh_comm_index_hosts(c);
    CHECK(sh_hier_by_leaders(c, 1 << 22, SHOAL_FLOAT32), "16 MiB on 1 + 3 ranks not by leaders");
    sh_comm_free(c);
}

/* Every dtype and op; counts below, at and above the piece count, odd and prime. */
static void exact(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    size_t counts[] = {1, (size_t)n + 1, 63, 1009, 70001};
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++)
        for (int o = 0; o < SHOAL_OP_COUNT; o++)
            for (int ci = 0; ci < 5; ci++) {
                if (counts[ci] > 2000 && d != SHOAL_FLOAT32 && d != SHOAL_INT64) continue;
                if (o == SHOAL_PROD && n > 6 && (d == SHOAL_INT8 || d == SHOAL_UINT8)) continue; /* 2^n */
                cc_run(c, 0, (shoal_dtype)d, (shoal_op)o, counts[ci], (int)(ci % 2));
            }
    /* the default piece: 4 MiB is four pieces */
    if (!c->chunk_nbytes)
        for (int ip = 0; ip < 2; ip++) cc_run(c, 0, SHOAL_FLOAT32, SHOAL_AVG, (4u << 20) / 4 + 3, ip);
    CHECK(c->chunk_nbytes == 0 || sh_hier_pieces(c, 70001, SHOAL_FLOAT32) > 1, "70001 floats did not pipeline");
    /* the default sizes take all three shapes: leaders, split, pipelined */
    CHECK(c->chunk_nbytes || (sh_hier_by_leaders(c, 1009, SHOAL_FLOAT32) && !sh_hier_by_leaders(c, 70001, SHOAL_FLOAT32) &&
                              sh_hier_pieces(c, 70001, SHOAL_FLOAT32) == 1),
          "1009 floats by leaders, 70001 split in one piece");
}

/* Shared-memory links (receive-reduce in place from the ring), every collective: the others
 * run beside the pipelined allreduce on the same links. */
static void shm_matrix(shoal_comm *c, void *arg)
{
    size_t counts[] = {1, 5, 1009};
    cc_matrix(c, counts, 3, 1);
}

static void t_pipelined_matches_expectations_on_even_hosts(void)
{
    /* ranks, ranks per host: 2 x 2, 4 x 2, 3 x 2, 2 x 3 */
    int shapes[][2] = {{4, 2}, {8, 2}, {6, 2}, {6, 3}};
    size_t chunks[] = {24, 4096, 0};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 3; k++) {
            if (check_under_san() && (shapes[i][0] > 6 || k == 1)) continue;
            sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = "hier", .ranks_per_host = shapes[i][1],
                                    .chunk_nbytes = chunks[k], .deadline_s = 200};
            RUN_RANKS(shapes[i][0], &o, exact, NULL);
        }
    if (!sh_test_shm.attach) return;
    sh_test_ranks_opts o = {.links = SH_TEST_SHM, .algo = "hier", .ranks_per_host = 2, .chunk_nbytes = 24};
    RUN_RANKS(4, &o, shm_matrix, NULL);
}

/* Non-integer floats: each block is summed once across hosts and copied, so all agree; the
 * trace names the pipelined path and the one-piece path apart. */
static void bitwise(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    size_t count = (3u << 20) / 4 + 5; /* three pieces and a bit */
    float *v = malloc(count * 4), *all = malloc(count * 4 * (size_t)n);
    sh_rng g;
    sh_rng_seed(&g, (uint64_t)shoal_comm_rank(c) * 7919 + count);
    for (size_t i = 0; i < count; i++) v[i] = sh_rng_float(&g) * 3.3f - 1.1f;
    CHECK(sh_hier_pieces(c, count, SHOAL_FLOAT32) == 4, "%zu pieces", sh_hier_pieces(c, count, SHOAL_FLOAT32));
    /* non-blocking, so that the trace names the pipelined path (a timeline's label) */
    shoal_request *req = NULL;
    shoal_request_trace tr = {0};
    CHECK_OK(shoal_allreduce_start(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM, &req));
    CHECK_OK(shoal_wait_trace(req, &tr));
    CHECK(tr.algorithm && strcmp(tr.algorithm, "hier-pipelined") == 0, "4 pieces ran as %s",
          tr.algorithm ? tr.algorithm : "(none)");
    float one = 1.0f; /* one piece: whatever runs it, not the pipelined path */
    CHECK_OK(shoal_allreduce_start(c, &one, &one, 1, SHOAL_FLOAT32, SHOAL_SUM, &req));
    CHECK_OK(shoal_wait_trace(req, &tr));
    CHECK(tr.algorithm && strcmp(tr.algorithm, "hier-pipelined") != 0, "one float ran as %s",
          tr.algorithm ? tr.algorithm : "(none)");
    CHECK(one == (float)n, "one float summed to %g on %d ranks", one, n);
    CHECK_OK(shoal_allgather(c, v, all, count, SHOAL_FLOAT32));
    int differ = 0;
    for (int r = 1; r < n; r++) differ += memcmp(all, all + (size_t)r * count, count * 4) != 0;
    CHECK(differ == 0, "%d ranks hold different float sums", differ);
    free(v);
    free(all);
}

static void t_float_sums_are_bitwise_equal_on_every_rank(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .ranks_per_host = 2}; /* auto: hier */
    RUN_RANKS(6, &o, bitwise, NULL);
}

/* Rank 2 (the first rank of the second host) dies or freezes at the start of a 4 MiB
 * pipelined allreduce: every survivor returns PEER or TIMEOUT naming a rank, within the
 * communicator's 3 s timeout and some slack. */
static void one_fails(shoal_comm *c, void *arg)
{
    int sig = *(const int *)arg;
    int32_t pid = (int32_t)getpid(), pids[8];
    CHECK_OK(shoal_allgather(c, &pid, pids, 1, SHOAL_INT32));
    size_t count = 1 << 20;
    float *v = calloc(count, 4);
    CHECK(sh_hier_pieces(c, count, SHOAL_FLOAT32) == 4, "%zu pieces", sh_hier_pieces(c, count, SHOAL_FLOAT32));
    if (c->rank == 2) raise(sig);
    sh_coll op = {SH_COLL_ALLREDUCE, v, v, count, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    uint64_t t0 = sh_now_ns();
    shoal_result rc = sh_select_algo_run(c, &op);
    double s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT, "rank %d got %s", c->rank, shoal_result_name(rc));
    CHECK(s < 8, "rank %d took %.1f s to notice", c->rank, s);
    const char *m = shoal_last_error_message();
    CHECK(strstr(m, "rank ") != NULL && strstr(m, "allreduce") != NULL, "rank %d: %s", c->rank, m);
    if (c->rank == 3) /* rank 2's neighbour within the host names it */
        CHECK(strstr(m, "rank 2") != NULL, "rank 3 does not name rank 2: %s", m);
    if (c->rank == 0 && sig == SIGSTOP) kill(pids[2], SIGKILL);
    free(v);
}

static void t_survivors_fail_fast_when_a_rank_dies_or_freezes(void)
{
    int sigs[] = {SIGKILL, SIGSTOP};
    for (int i = 0; i < 2; i++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = "hier", .ranks_per_host = 2,
                                .timeout_ms = 3000, .dying_mask = 1u << 2, .deadline_s = 60};
        RUN_RANKS(8, &o, one_fails, &sigs[i]);
    }
}

/* Two hosts of one rank: above 64 KiB up to 1 MiB the plain allreduce is one exchange each
 * way (rd), the one with an update the ring (each rank steps its block); outside that window
 * the ring for both. The sums are right either way. */
static void pair_step(void *ctx, size_t off, size_t n, const float *reduced)
{
    float *params = ctx;
    for (size_t i = 0; i < n; i++) params[off + i] = reduced[i];
}

static void pair_choice(shoal_comm *c, void *arg)
{
    (void)arg;
    size_t counts[] = {16384, 16385, 65536, 262144, 262145, 1048576};
    const char *plain[] = {"ring", "rd", "rd", "rd", "ring", "ring"};
    float *v = malloc(1048576 * 4), *p = malloc(1048576 * 4);
    for (int k = 0; k < 6; k++) {
        size_t count = counts[k];
        for (int apply = 0; apply < 2; apply++) {
            for (size_t i = 0; i < count; i++) v[i] = (float)(i % 7) + (float)shoal_comm_rank(c);
            shoal_request *req = NULL;
            shoal_request_trace tr = {0};
            if (apply) CHECK_OK(shoal_allreduce_apply_start(c, v, p, count, SHOAL_SUM, pair_step, p, &req));
            else CHECK_OK(shoal_allreduce_start(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM, &req));
            CHECK_OK(shoal_wait_trace(req, &tr));
            const char *want = apply ? "ring" : plain[k];
            CHECK(tr.algorithm && strcmp(tr.algorithm, want) == 0, "%zu floats%s ran as %s, not %s", count,
                  apply ? " with an update" : "", tr.algorithm ? tr.algorithm : "(none)", want);
            const float *out = apply ? p : v;
            size_t wrong = 0;
            for (size_t i = 0; i < count; i++) wrong += out[i] != 2.0f * (float)(i % 7) + 1.0f;
            CHECK(wrong == 0, "%zu floats%s: %zu wrong sums", count, apply ? " with an update" : "", wrong);
        }
    }
    free(v);
    free(p);
}

static void t_two_hosts_choose_by_size_and_update(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .ranks_per_host = 1};
    RUN_RANKS(2, &o, pair_choice, NULL);
}

int main(void)
{
    check_begin("test_hier", 580);
    RUN(t_pieces_follow_size_and_chunk);
    RUN(t_pipelined_matches_expectations_on_even_hosts);
    RUN(t_float_sums_are_bitwise_equal_on_every_rank);
    RUN(t_two_hosts_choose_by_size_and_update);
    RUN(t_survivors_fail_fast_when_a_rank_dies_or_freezes);
    return check_end();
}
