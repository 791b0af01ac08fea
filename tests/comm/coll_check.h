/* coll_check.h — the exhaustive collective check shared by the comm tests: every
 * collective x dtype x op, in place and out of place, for given counts, with expected
 * values computed here from (rank, index) and never from the code under test. */
#ifndef SH_COLL_CHECK_H
#define SH_COLL_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm/reduce.h"
#include "shoal/comm.h"

/* Small integers so every dtype (int8 .. bfloat16) holds every sum exactly. */
static int64_t cc_val(int rank, size_t i, shoal_op op)
{
    if (op == SHOAL_PROD) return (int64_t)((rank + i) % 2) + 1;
    return (int64_t)(((size_t)(rank + 1) * (i % 7 + 1) + i / 7) % 5) + 1;
}

/* The reduction of cc_val over all ranks at index i. */
static double cc_expect(int world, size_t i, shoal_op op, shoal_dtype dt)
{
    int64_t acc = cc_val(0, i, op);
    for (int r = 1; r < world; r++) {
        int64_t v = cc_val(r, i, op);
        switch (op) {
        case SHOAL_PROD: acc *= v; break;
        case SHOAL_MIN: acc = v < acc ? v : acc; break;
        case SHOAL_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == SHOAL_AVG) {
        int is_int = dt == SHOAL_INT8 || dt == SHOAL_UINT8 || dt == SHOAL_INT32 || dt == SHOAL_INT64;
        if (is_int) return (double)(acc / world);
        double q = (double)acc / world;
        if (dt == SHOAL_FLOAT16) return sh_f16_to_f32(sh_f32_to_f16((float)q));
        if (dt == SHOAL_BFLOAT16) return sh_bf16_to_f32(sh_f32_to_bf16((float)q));
        if (dt == SHOAL_FLOAT32) return (float)q;
        return q;
    }
    return (double)acc;
}

/* Run one collective in every form for `count` and check every element; returns the
 * number of wrong elements (also reported through CHECK with the first bad index). */
static long cc_run(shoal_comm *c, int kind, shoal_dtype dt, shoal_op op, size_t count, int inplace)
{
    static const char *names[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                                  "alltoall"};
    int r = shoal_comm_rank(c), n = shoal_comm_world(c);
    size_t es = shoal_dtype_nbytes(dt);
    size_t send_n = count, recv_n = count;
    if (kind == 3) recv_n = count * (size_t)n;            /* allgather */
    if (kind == 4) send_n = count * (size_t)n;            /* reduce_scatter */
    if (kind == 5) send_n = recv_n = count * (size_t)n;   /* alltoall */
    size_t buf_n = send_n > recv_n ? send_n : recv_n;
    unsigned char *send = malloc(buf_n * es + 1), *recv = malloc(buf_n * es + 1);
    memset(recv, 0xEE, buf_n * es + 1);
    int root = n > 1 ? (int)(count % (size_t)n) : 0;
    for (size_t i = 0; i < send_n; i++) sh_reduce_elem_put(send, i, dt, cc_val(r, i, op));
    if (kind == 5)  /* alltoall: block p carries (r, p) */
        for (size_t i = 0; i < send_n; i++) sh_reduce_elem_put(send, i, dt, (int64_t)((r * 7 + (int)(i / (count ? count : 1)) * 3 + (int)(i % 5)) % 100));
    const void *sp = send;
    void *rp = recv;
    if (inplace) {
        if (kind == 3) {  /* allgather in place: our block of recv */
            memcpy(recv + (size_t)r * count * es, send, count * es);
            sp = recv + (size_t)r * count * es;
        } else {
            memcpy(recv, send, send_n * es);
            sp = recv;
        }
    }
    shoal_result rc = SHOAL_OK;
    switch (kind) {
    case 0: rc = shoal_allreduce(c, sp, rp, count, dt, op); break;
    case 1: rc = shoal_broadcast(c, sp, rp, count, dt, root); break;
    case 2: rc = shoal_reduce(c, sp, rp, count, dt, op, root); break;
    case 3: rc = shoal_allgather(c, sp, rp, count, dt); break;
    case 4: rc = shoal_reduce_scatter(c, sp, rp, count, dt, op); break;
    case 5: rc = shoal_alltoall(c, sp, rp, count, dt); break;
    }
    CHECK(rc == SHOAL_OK, "%s(%zu, %s, %s, %s) on rank %d: %s", names[kind], count, shoal_dtype_name(dt),
          shoal_op_name(op), inplace ? "in place" : "out of place", r, shoal_last_error_message());
    long bad = 0;
    size_t first = 0;
    double got = 0, want = 0;
    for (size_t i = 0; rc == SHOAL_OK && i < recv_n; i++) {
        double e;
        switch (kind) {
        case 0: e = cc_expect(n, i, op, dt); break;
        case 1: e = (double)cc_val(root, i, op); break;
        case 2: if (r != root) { i = recv_n; continue; } e = cc_expect(n, i, op, dt); break;
        case 3: e = (double)cc_val((int)(i / count), i % count, op); break;
        case 4: e = cc_expect(n, (size_t)r * count + i, op, dt); break;
        default: { int p = (int)(i / count); size_t j = (size_t)r * count + i % count;
                   e = (double)((p * 7 + (int)(j / count) * 3 + (int)(j % 5)) % 100); break; }
        }
        double g = sh_reduce_elem_get(recv, i, dt);
        if (g != e) {
            if (!bad) first = i, got = g, want = e;
            bad++;
        }
    }
    CHECK(bad == 0, "%s(count %zu, %s, %s, %s) rank %d of %d: %ld wrong, first at %zu: %g, want %g",
          names[kind], count, shoal_dtype_name(dt), shoal_op_name(op), inplace ? "in place" : "out of place",
          r, n, bad, first, got, want);
    free(send);
    free(recv);
    return bad;
}

/* Every collective x dtype x op x placement for each count. */
static void cc_matrix(shoal_comm *c, const size_t *counts, int ncounts, int all_dtypes)
{
    int n = shoal_comm_world(c);
    for (int k = 0; k < 6; k++)
        for (int d = 0; d < SHOAL_DTYPE_COUNT; d++) {
            if (!all_dtypes && d != SHOAL_FLOAT32 && d != SHOAL_INT8 && d != SHOAL_BFLOAT16) continue;
            int reduces = k == 0 || k == 2 || k == 4;
            for (int o = 0; o < (reduces ? SHOAL_OP_COUNT : 1); o++) {
                if (o == SHOAL_PROD && n > 6) continue; /* 2^n must fit int8 */
                for (int ip = 0; ip < 2; ip++)
                    for (int ci = 0; ci < ncounts; ci++)
                        cc_run(c, k, (shoal_dtype)d, (shoal_op)o, counts[ci], ip);
            }
        }
    CHECK(shoal_barrier(c) == SHOAL_OK, "barrier: %s", shoal_last_error_message());
}

#endif
