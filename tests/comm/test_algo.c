/* test_algo.c — proves the collective algorithms (src/comm/coll/) with real processes over
 * real socketpairs (and shared-memory links when the harness has them): every forced
 * algorithm against the same independently computed expectations, every collective x
 * dtype x op, in place and out of place, 1..8 ranks, counts 0, 1, n-1, n+1 and a prime,
 * tiny chunks so the pipelined code runs many chunks; hierarchical allreduce over faked
 * hosts (even and uneven); algorithms over sub-groups running side by side; bitwise equal
 * float results on every rank; 16 MiB with bounded staging; the fallback rules. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "coll_check.h"
#include "comm/coll/select.h"
#include "comm/comm_internal.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

static const char *algos[] = {"auto", "ring", "rd", "rhd", "tree", "hier"};
enum { NALGOS = 6 };

typedef struct {
    int all_dtypes;
    int kinds_mask; /* bit k: collective k of cc_run */
} matrix_arg;

static void matrix(shoal_comm *c, void *argp)
{
    const matrix_arg *a = argp;
    int n = shoal_comm_world(c);
    size_t counts[] = {0, 1, (size_t)(n > 1 ? n - 1 : 2), (size_t)n + 1, 1009};
    for (int k = 0; k < 6; k++) {
        if (!(a->kinds_mask & (1 << k))) continue;
        for (int d = 0; d < SHOAL_DTYPE_COUNT; d++) {
            if (!a->all_dtypes && d != SHOAL_FLOAT32 && d != SHOAL_INT8 && d != SHOAL_FLOAT16) continue;
            int reduces = k == 0 || k == 2 || k == 4;
            for (int o = 0; o < (reduces ? SHOAL_OP_COUNT : 1); o++) {
                if (o == SHOAL_PROD && n > 6) continue; /* 2^n must fit int8 */
                for (int ip = 0; ip < 2; ip++)
                    for (int ci = 0; ci < 5; ci++) cc_run(c, k, (shoal_dtype)d, (shoal_op)o, counts[ci], ip);
            }
        }
    }
    if (a->kinds_mask & 1) /* a large prime: uneven blocks, many chunks */
        for (int ip = 0; ip < 2; ip++) {
            cc_run(c, 0, SHOAL_FLOAT32, SHOAL_SUM, 65537, ip);
            cc_run(c, 0, SHOAL_INT32, SHOAL_AVG, 65537, ip);
        }
    CHECK_OK(shoal_barrier(c));
}

/* Each forced algorithm, 1..8 ranks, tiny chunks (24 bytes: every dtype's multiple) and the
 * default chunk. Allreduce gets every dtype; the other collectives the usual three. */
static void t_forced_algorithms_match_expectations(void)
{
    int maxn = check_under_san() ? 5 : 8;
    for (int a = 0; a < NALGOS; a++)
        for (int n = 1; n <= maxn; n++) {
            if (check_under_san() && n == 4 && a > 1) continue;
            size_t chunk = (n + a) % 2 ? 24 : 0;
            sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = algos[a], .chunk_nbytes = chunk,
                                    .ranks_per_host = a == 5 ? 2 : 0, .deadline_s = 200};
            matrix_arg all = {1, 1 << 0}, rest = {0, 0x3e};
            if (n == 7 || n == 8) all.all_dtypes = 0; /* keep the run short; 1..6 covered all */
            RUN_RANKS(n, &o, matrix, &all);
            RUN_RANKS(n, &o, matrix, &rest);
        }
}

/* Shared-memory links (in-place receive-reduce from the ring) for a few shapes. */
static void shm_matrix(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    size_t counts[] = {0, 1, (size_t)n - 1, (size_t)n + 1, 1009};
    cc_matrix(c, counts, 5, 0);
}

static void t_forced_algorithms_over_shm(void)
{
    if (!sh_test_shm.attach) return;
    for (int a = 1; a < NALGOS; a++)
        for (int n = 3; n <= 4; n++) {
            sh_test_ranks_opts o = {.links = SH_TEST_SHM, .algo = algos[a], .chunk_nbytes = n == 3 ? 24 : 0,
                                    .ranks_per_host = a == 5 ? 2 : 0};
            RUN_RANKS(n, &o, shm_matrix, NULL);
        }
}

/* Hierarchical allreduce: even hosts (2 x 2, 3 x 2, 2 x 4) and uneven (3 + 1, 3 + 2, 2 + 1). */
static void hier_sizes(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    size_t counts[] = {0, 1, (size_t)n + 1, 1009, 70001};
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++)
        for (int o = 0; o < SHOAL_OP_COUNT; o++)
            for (int ci = 0; ci < 5; ci++) {
                if (counts[ci] > 2000 && d != SHOAL_FLOAT32 && d != SHOAL_INT64) continue;
                cc_run(c, 0, (shoal_dtype)d, (shoal_op)o, counts[ci], (int)(ci % 2));
            }
}

static void t_hier_allreduce_on_even_and_uneven_hosts(void)
{
    int shapes[][2] = {{4, 2}, {6, 2}, {8, 4}, {4, 3}, {5, 3}, {3, 2}};
    for (int i = 0; i < 6; i++) {
        if (check_under_san() && shapes[i][0] > 5) continue;
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = "hier", .ranks_per_host = shapes[i][1],
                                .chunk_nbytes = i % 2 ? 24 : 0};
        RUN_RANKS(shapes[i][0], &o, hier_sizes, NULL);
    }
    /* auto picks hier above the recursive-doubling size when hosts hold several ranks */
    for (int i = 0; i < 2; i++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .ranks_per_host = 2 + i};
        RUN_RANKS(4 + i, &o, hier_sizes, NULL);
    }
}

/* Two groups (even and odd ranks) run algorithms side by side on one communicator: the
 * algorithms only touch their group's links. */
static void subgroups(shoal_comm *c, void *arg)
{
    int r = c->rank, n = c->world;
    int ranks[8], gn = 0, me = -1;
    for (int q = r % 2; q < n; q += 2) {
        if (q == r) me = gn;
        ranks[gn++] = q;
    }
    sh_group g = {gn, me, ranks};
    size_t count = 1013;
    int32_t *buf = malloc(count * 4 * 8), *want = malloc(count * 4);
    typedef shoal_result (*ar_fn)(shoal_comm *, const sh_group *, const void *, void *, size_t, shoal_dtype,
                                  shoal_op);
    ar_fn fns[] = {sh_ring_allreduce, sh_rd_allreduce, sh_rhd_allreduce};
    for (int f = 0; f < 3; f++) {
        for (size_t i = 0; i < count; i++) buf[i] = (int32_t)((size_t)r * 1000 + i);
        CHECK_OK(fns[f](c, &g, buf, buf, count, SHOAL_INT32, SHOAL_SUM));
        long bad = 0;
        for (size_t i = 0; i < count; i++) {
            int64_t s = 0;
            for (int k = 0; k < gn; k++) s += (int64_t)ranks[k] * 1000 + (int64_t)i;
            if (buf[i] != (int32_t)s) bad++;
        }
        CHECK(bad == 0, "group allreduce %d on rank %d: %ld wrong", f, r, bad);
    }
    /* broadcast from the group's last member, tree and chain; reduce to member 0 */
    for (int f = 0; f < 2; f++) {
        for (size_t i = 0; i < count; i++) buf[i] = me == gn - 1 ? (int32_t)(i * 3 + (size_t)r) : -1;
        CHECK_OK((f ? sh_tree_chain_broadcast : sh_tree_broadcast)(c, &g, buf, count, SHOAL_INT32, gn - 1));
        long bad = 0;
        for (size_t i = 0; i < count; i++) bad += buf[i] != (int32_t)(i * 3 + (size_t)ranks[gn - 1]);
        CHECK(bad == 0, "group broadcast %d on rank %d: %ld wrong", f, r, bad);
    }
    for (size_t i = 0; i < count; i++) buf[i] = (int32_t)(i % 11) + r;
    memset(want, 0, count * 4);
    CHECK_OK(sh_tree_reduce(c, &g, buf, me == 0 ? want : NULL, count, SHOAL_INT32, SHOAL_MAX, 0));
    if (me == 0) {
        long bad = 0;
        for (size_t i = 0; i < count; i++) bad += want[i] != (int32_t)(i % 11) + ranks[gn - 1];
        CHECK(bad == 0, "group reduce on rank %d: %ld wrong", r, bad);
    }
    /* allgather: ring always, recursive doubling when the group is a power of two */
    for (int f = 0; f < 2; f++) {
        if (f == 1 && (gn & (gn - 1))) continue;
        for (size_t i = 0; i < count * (size_t)gn; i++) buf[i] = -1;
        for (size_t i = 0; i < count; i++) buf[(size_t)me * count + i] = (int32_t)(i + (size_t)r * 7);
        CHECK_OK((f ? sh_rd_allgather : sh_ring_allgather)(c, &g, buf, count, SHOAL_INT32));
        long bad = 0;
        for (int k = 0; k < gn; k++)
            for (size_t i = 0; i < count; i++) bad += buf[(size_t)k * count + i] != (int32_t)(i + (size_t)ranks[k] * 7);
        CHECK(bad == 0, "group allgather %d on rank %d: %ld wrong", f, r, bad);
    }
    CHECK_OK(sh_misc_barrier(c, &g));
    free(buf);
    free(want);
}

static void t_algorithms_run_on_subgroups_side_by_side(void)
{
    for (int n = 2; n <= 7; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .chunk_nbytes = n % 2 ? 64 : 0};
        RUN_RANKS(n, &o, subgroups, NULL);
    }
}

/* Non-integer floats: every rank must hold bitwise the same sum, whatever the algorithm. */
static void bitwise(shoal_comm *c, void *arg)
{
    int n = shoal_comm_world(c);
    size_t counts[] = {5, 777, 100003};
    for (int ci = 0; ci < 3; ci++) {
        size_t count = counts[ci];
        float *v = malloc(count * 4), *all = malloc(count * 4 * (size_t)n);
        sh_rng g;
        sh_rng_seed(&g, (uint64_t)shoal_comm_rank(c) * 7919 + count);
        for (size_t i = 0; i < count; i++) v[i] = sh_rng_float(&g) * 3.3f - 1.1f;
        CHECK_OK(shoal_allreduce(c, v, v, count, SHOAL_FLOAT32, SHOAL_SUM));
        CHECK_OK(shoal_allgather(c, v, all, count, SHOAL_FLOAT32));
        int differ = 0;
        for (int r = 1; r < n; r++) differ += memcmp(all, all + (size_t)r * count, count * 4) != 0;
        CHECK(differ == 0, "%s: %d ranks hold different float sums (count %zu)", algos[c->algo], differ, count);
        free(v);
        free(all);
    }
}

static void t_float_results_are_bitwise_equal_on_every_rank(void)
{
    for (int a = 0; a < NALGOS; a++)
        for (int n = 3; n <= 5; n++) {
            sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = algos[a], .ranks_per_host = a == 5 ? 2 : 0,
                                    .chunk_nbytes = n == 4 ? 4096 : 0};
            RUN_RANKS(n, &o, bitwise, NULL);
        }
}

/* 16 MiB (4 MiB under sanitizers; above every size select.c's choices turn on, 8x the bound):
 * float32 sum allreduce and int32 broadcast; the staging stays a few chunks, never the message. */
static void big(shoal_comm *c, void *arg)
{
    size_t count = check_under_san() ? (4u << 20) / 4 : (16u << 20) / 4;
    cc_run(c, 0, SHOAL_FLOAT32, SHOAL_SUM, count, c->rank % 2);
    cc_run(c, 1, SHOAL_INT32, SHOAL_SUM, count, 0);
    CHECK(c->scratch_nbytes <= (2u << 20), "%s: staging grew to %zu bytes for a %zu-byte message",
          algos[c->algo], c->scratch_nbytes, count * 4);
}

static void t_16mib_with_bounded_staging(void)
{
    for (int n = 2; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 200};
        RUN_RANKS(n, &o, big, NULL);
    }
    /* the forced algorithms that stage (recursive doubling: one chunk) and the tree */
    const char *staged[] = {"rd", "tree", "rhd", "hier"};
    for (int a = 0; a < 4; a++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = staged[a], .deadline_s = 200,
                                .ranks_per_host = a == 3 ? 2 : 0};
        RUN_RANKS(a == 3 ? 4 : 3, &o, big, NULL);
    }
}

/* A rank killed before the collective: every survivor's algorithm returns PEER or TIMEOUT
 * within the deadline, never hangs, and the message names a rank. */
static void one_dies(shoal_comm *c, void *arg)
{
    if (c->rank == 2) raise(SIGKILL);
    size_t count = 1 << 16;
    float *v = calloc(count, 4);
    sh_coll op = {SH_COLL_ALLREDUCE, v, v, count, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    uint64_t t0 = sh_now_ns();
    shoal_result rc = sh_select_algo_run(c, &op);
    double s = (double)(sh_now_ns() - t0) / 1e9;
    CHECK(rc == SHOAL_ERR_PEER || rc == SHOAL_ERR_TIMEOUT, "%s: rank %d got %s", algos[c->algo], c->rank,
          shoal_result_name(rc));
    CHECK(s < 8, "%s: rank %d took %.1f s to notice", algos[c->algo], c->rank, s);
    CHECK(strstr(shoal_last_error_message(), "rank ") != NULL, "%s: %s", algos[c->algo], shoal_last_error_message());
    free(v);
}

static void t_survivors_fail_fast_when_a_rank_dies(void)
{
    for (int a = 1; a < NALGOS; a++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = algos[a], .timeout_ms = 3000,
                                .dying_mask = 1u << 2, .ranks_per_host = a == 5 ? 2 : 0, .deadline_s = 60};
        RUN_RANKS(5, &o, one_dies, NULL);
    }
}

/* SHOAL_ALGO=mpi: float16/bfloat16 (no MPI type) take shoal's own algorithms; in a build
 * without MPI the others get the one-line "rebuild with make MPI=1". */
static void algo_mpi(shoal_comm *c, void *arg)
{
    uint16_t h[5];
    for (int i = 0; i < 5; i++) h[i] = sh_f32_to_f16((float)(c->rank + i));
    sh_coll op = {SH_COLL_ALLREDUCE, h, h, 5, SHOAL_FLOAT16, SHOAL_SUM, 0, NULL, NULL, NULL};
    CHECK_OK(sh_select_algo_run(c, &op));
    int n = c->world, bad = 0;
    for (int i = 0; i < 5; i++) bad += sh_f16_to_f32(h[i]) != (float)(n * (n - 1) / 2 + n * i);
    CHECK(bad == 0, "float16 allreduce under SHOAL_ALGO=mpi: %d wrong", bad);
#if !SHOAL_HAVE_MPI
    float f = 1;
    sh_coll fo = {SH_COLL_ALLREDUCE, &f, &f, 1, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    CHECK_RC(sh_select_algo_run(c, &fo), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "make MPI=1") != NULL, "%s", shoal_last_error_message());
#endif
}

static void t_algo_mpi_falls_back_for_16_bit_floats(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .algo = "mpi"};
#if SHOAL_HAVE_MPI
    return; /* the MPI path itself is proved under mpirun by test_mpi_transport */
#endif
    RUN_RANKS(3, &o, algo_mpi, NULL);
}

/* The choice: forced algorithms that cannot do a collective fall back to the default. */
static void t_forced_algorithm_falls_back_when_it_cannot(void)
{
    shoal_comm *c = NULL;
    CHECK_OK(sh_comm_alloc(0, 6, &c));
    if (!c) return;
    for (int r = 0; r < 6; r++) c->host_of[r] = r / 2;
    sh_comm_index_hosts(c);
    sh_coll ar = {SH_COLL_ALLREDUCE, NULL, NULL, 1 << 20, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    sh_coll ag = {SH_COLL_ALLGATHER, NULL, NULL, 16, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    sh_coll a2a = {SH_COLL_ALLTOALL, NULL, NULL, 16, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    sh_coll rs = {SH_COLL_REDUCE_SCATTER, NULL, NULL, 16, SHOAL_FLOAT32, SHOAL_SUM, 0, NULL, NULL, NULL};
    for (int a = 1; a <= 5; a++) {
        c->algo = (sh_algo_kind)a;
        CHECK(sh_select_choose(c, &ar) == (sh_algo_kind)a, "allreduce forced %s chose %s", algos[a],
              sh_algo_name(sh_select_choose(c, &ar)));
        CHECK(sh_select_choose(c, &rs) == SH_ALGO_RING, "reduce_scatter forced %s", algos[a]);
        CHECK(sh_select_choose(c, &a2a) == SH_ALGO_AUTO, "alltoall forced %s", algos[a]);
    }
    c->algo = SH_ALGO_RD; /* 6 ranks: not a power of two */
    CHECK(sh_select_choose(c, &ag) == SH_ALGO_RING, "rd allgather on 6 ranks chose %s", sh_algo_name(sh_select_choose(c, &ag)));
    c->algo = SH_ALGO_AUTO;
    CHECK(sh_select_choose(c, &ar) == SH_ALGO_HIER, "auto on 3 hosts x 2 chose %s", sh_algo_name(sh_select_choose(c, &ar)));
    ar.count = 4;
    CHECK(sh_select_choose(c, &ar) == SH_ALGO_RD, "auto for 16 bytes chose %s", sh_algo_name(sh_select_choose(c, &ar)));
    for (int r = 0; r < 6; r++) c->host_of[r] = 0; /* one host: no hierarchy */
    sh_comm_index_hosts(c);
    c->algo = SH_ALGO_HIER;
    ar.count = 1 << 20;
    CHECK(sh_select_choose(c, &ar) != SH_ALGO_HIER, "hier on one host was kept");
    c->algo = SH_ALGO_AUTO;
    ar.count = 64 << 20;
    CHECK(sh_select_choose(c, &ar) == SH_ALGO_RING, "auto for 256 MiB chose %s", sh_algo_name(sh_select_choose(c, &ar)));
    sh_comm_free(c);
    /* 4 ranks, 4 MiB: halving-doubling inside a host, the ring across hosts (one rank each) */
    CHECK_OK(sh_comm_alloc(0, 4, &c));
    if (!c) return;
    ar.count = 1 << 20;
    for (int r = 0; r < 4; r++) c->host_of[r] = 0;
    sh_comm_index_hosts(c);
    CHECK(sh_select_choose(c, &ar) == SH_ALGO_RHD, "4 ranks on one host chose %s", sh_algo_name(sh_select_choose(c, &ar)));
    for (int r = 0; r < 4; r++) c->host_of[r] = r;
    sh_comm_index_hosts(c);
    CHECK(sh_select_choose(c, &ar) == SH_ALGO_RING, "4 ranks on 4 hosts chose %s", sh_algo_name(sh_select_choose(c, &ar)));
    sh_comm_free(c);
}

int main(void)
{
    check_begin("test_algo", 580);
    RUN(t_forced_algorithm_falls_back_when_it_cannot);
    RUN(t_algorithms_run_on_subgroups_side_by_side);
    RUN(t_hier_allreduce_on_even_and_uneven_hosts);
    RUN(t_float_results_are_bitwise_equal_on_every_rank);
    RUN(t_forced_algorithms_match_expectations);
    RUN(t_forced_algorithms_over_shm);
    RUN(t_16mib_with_bounded_staging);
    RUN(t_survivors_fail_fast_when_a_rank_dies);
    RUN(t_algo_mpi_falls_back_for_16_bit_floats);
    return check_end();
}
