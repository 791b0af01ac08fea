/* allreduce.c — shoal_allreduce_compressed: each rank's contribution travels encoded, and every
 * rank ends with the same bits; the ranks first agree on a descriptor, so all fail alike.
 * Not here: the codecs (codec.c), the collectives used (comm.c and coll/).
 * Proved by tests/comm/test_compress.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "comm/compress/codec.h"
#include "comm/compress/half.h"
#include "comm/reduce.h"

/* 1bit, topk, lowrank: each rank adds its residual, encodes, and the payloads are allgathered;
 * every rank then decodes them and sums in rank order (so the sum, and its rounding, is the same
 * everywhere). Bytes sent per rank: (ranks - 1) x payload. lowrank (PowerSGD, Vogels et al.
 * 2019) does it twice: P = M Q is gathered and summed, orthonormalised, then Q = M^T P is
 * gathered and summed; the result is P Q^T, and Q is kept to start the next call (warm start).
 * fp16, bf16: the vector is cut into one block per rank; an alltoall hands each rank the 16-bit
 * copies of its block from everyone, it sums them in float32 in rank order and rounds once, and
 * an allgather spreads the 16-bit blocks: the ring allreduce's bytes at half the width.
 * Before any payload moves the ranks swap a descriptor (codec, parameter, count, columns, error
 * feedback) and compare it with rank 0's: all of them see the same table, so all fail alike on a
 * mismatch and the communicator stays usable. */

enum { DESC_WORDS = 6 };
#define DESC_MAGIC 0x7a637368ULL /* "hscz" */

static void describe(const uint64_t *d, char *out, size_t cap)
{
    shoal_codec_opts o;
    shoal_codec_opts_default(&o);
    o.codec = (shoal_codec)d[1];
    double f;
    memcpy(&f, &d[4], sizeof f);
    o.topk_fraction = f;
    o.rank = (int)d[4];
    char spec[48];
    shoal_codec_format(&o, spec, sizeof spec);
    snprintf(out, cap, "%s (count %llu, %llu columns, error feedback %s)", spec, (unsigned long long)d[2],
             (unsigned long long)d[3], d[5] ? "on" : "off");
}

static shoal_result check_same(shoal_comm *c, const shoal_compressor *z, size_t count, uint64_t *all)
{
    uint64_t me[DESC_WORDS] = {DESC_MAGIC, (uint64_t)z->o.codec, count, z->cols, 0, (uint64_t)z->o.error_feedback};
    if (z->o.codec == SHOAL_CODEC_TOPK) memcpy(&me[4], &z->o.topk_fraction, sizeof(double));
    if (z->o.codec == SHOAL_CODEC_LOWRANK) me[4] = (uint64_t)z->o.rank;
    SH_TRY(shoal_allgather(c, me, all, DESC_WORDS, SHOAL_INT64));
    int world = shoal_comm_world(c);
    for (int r = 1; r < world; r++) {
        if (!memcmp(all, all + (size_t)r * DESC_WORDS, sizeof me)) continue;
        char a[160], b[160];
        describe(all + (size_t)r * DESC_WORDS, a, sizeof a);
        describe(all, b, sizeof b);
        const char *host = shoal_comm_host(c, r);
        return SH_FAIL(SHOAL_ERR_MISMATCH,
                       "allreduce_compressed: rank %d (%s) compresses with %s but rank 0 with %s; every "
                       "rank must use the same codec (--compress) and the same buffers",
                       r, host ? host : "?", a, b);
    }
    return SHOAL_OK;
}

/* Staging for every rank's payload: kept by the compressor, grown on the first call. */
static shoal_result all_payloads(shoal_compressor *z, size_t nbytes)
{
    if (z->all_cap >= nbytes) return SHOAL_OK;
    uint8_t *p = realloc(z->all, nbytes);
    if (!p) return SH_FAIL(SHOAL_ERR_NOMEM, "allreduce_compressed: out of memory for %zu bytes of payloads", nbytes);
    z->all = p;
    z->all_cap = nbytes;
    return SHOAL_OK;
}

static double norm2(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* fp16 / bf16: alltoall, float32 sum per block, allgather. */
static shoal_result half_allreduce(shoal_comm *c, shoal_compressor *z, const float *send, float *recv,
                                   size_t count, shoal_op op)
{
    int world = shoal_comm_world(c), me = shoal_comm_rank(c);
    int bf = z->o.codec == SHOAL_CODEC_BF16;
    shoal_dtype dt = bf ? SHOAL_BFLOAT16 : SHOAL_FLOAT16;
    size_t block = (count + (size_t)world - 1) / (size_t)world, padded = block * (size_t)world;
    /* all: [0, padded) this rank's encoded vector, [padded, 2 padded) the blocks received,
     * [2 padded, 3 padded) the summed blocks of every rank; then (4-byte aligned) the
     * block's float32 sum and one decoded block */
    size_t halves = (3 * padded + 1) & ~(size_t)1;
    SH_TRY(all_payloads(z, halves * sizeof(uint16_t) + 2 * block * sizeof(float)));
    uint16_t *enc = (uint16_t *)(void *)z->all, *got = enc + padded, *sum = got + padded;
    sh_half_encode(bf, send, enc, count);
    for (size_t i = count; i < padded; i++) enc[i] = 0;
    SH_TRY(shoal_alltoall(c, enc, got, block, dt));
    uint16_t *mine = sum + (size_t)me * block;
    float *s = (float *)(void *)(z->all + halves * sizeof(uint16_t)), *t = s + block;
    sh_half_decode(bf, got, s, block); /* rank 0 first: a -0 alone stays -0 */
    for (int r = 1; r < world; r++) {
        sh_half_decode(bf, got + (size_t)r * block, t, block);
        for (size_t i = 0; i < block; i++) s[i] += t[i];
    }
    if (op == SHOAL_AVG)
        for (size_t i = 0; i < block; i++) s[i] /= (float)world;
    sh_half_encode(bf, s, mine, block);
    SH_TRY(shoal_allgather(c, mine, sum, block, dt));
    sh_half_decode(bf, sum, recv, count);
    z->residual_norm = 0;
    return SHOAL_OK;
}

/* Gather every rank's nbytes of z->mine into z->all (rank order). */
static shoal_result gather(shoal_comm *c, shoal_compressor *z, const void *mine, size_t nbytes)
{
    SH_TRY(all_payloads(z, nbytes * (size_t)shoal_comm_world(c) + 1));
    return shoal_allgather(c, mine, z->all, nbytes, SHOAL_UINT8);
}

static void finish_mean(float *recv, size_t count, shoal_op op, int world)
{
    if (op != SHOAL_AVG) return;
    for (size_t i = 0; i < count; i++) recv[i] /= (float)world;
}

static shoal_result lowrank_allreduce(shoal_comm *c, shoal_compressor *z, float *m, float *recv, size_t count,
                                      shoal_op op)
{
    int world = shoal_comm_world(c), r = z->rank;
    size_t rows = z->rows, cols = z->cols;
    float *q = z->state + count;                 /* warm-started Q (cols x r) */
    float *p = z->pq, *qn = z->pq + rows * (size_t)r;
    size_t pn = rows * (size_t)r * sizeof(float), qnb = cols * (size_t)r * sizeof(float);
    sh_codec_mat_mq(m, q, p, rows, cols, r);
    SH_TRY(gather(c, z, p, pn));
    memset(p, 0, pn);
    for (int k = 0; k < world; k++) {
        const float *pk = (const float *)(void *)(z->all + (size_t)k * pn);
        for (size_t i = 0; i < rows * (size_t)r; i++) p[i] += pk[i];
    }
    sh_codec_orthonormalize(p, rows, r);
    sh_codec_mat_mtp(m, p, qn, rows, cols, r);
    SH_TRY(gather(c, z, qn, qnb));
    memset(q, 0, qnb);
    for (int k = 0; k < world; k++) {
        const float *qk = (const float *)(void *)(z->all + (size_t)k * qnb);
        for (size_t i = 0; i < cols * (size_t)r; i++) q[i] += qk[i];
    }
    sh_codec_mat_pqt(p, q, recv, rows, cols, r); /* the sum over ranks, rank r approximated */
    if (z->o.error_feedback) /* this rank's share of what the approximation missed */
        for (size_t i = 0; i < count; i++) z->state[i] = m[i] - recv[i] / (float)world;
    finish_mean(recv, count, op, world);
    return SHOAL_OK;
}

shoal_result shoal_allreduce_compressed(shoal_comm *c, shoal_compressor *z, const float *send, float *recv,
                                        size_t count, shoal_op op)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC)
        return SH_FAIL(SHOAL_ERR_INVALID, "allreduce_compressed: not a live compressor (NULL, or used after "
                       "shoal_compressor_destroy?)");
    if (count != z->count)
        return SH_FAIL(SHOAL_ERR_INVALID, "allreduce_compressed: count %zu but the compressor was made for %zu",
                       count, z->count);
    if (op != SHOAL_SUM && op != SHOAL_AVG)
        return SH_FAIL(SHOAL_ERR_INVALID, "allreduce_compressed: op %s; only sum and avg can be compressed",
                       shoal_op_name(op));
    if (count && (!send || !recv)) return SH_FAIL(SHOAL_ERR_INVALID, "allreduce_compressed: send or recv is NULL");
    int world = shoal_comm_world(c);
    if (world < 1) return SH_FAIL(SHOAL_ERR_INVALID, "allreduce_compressed: not a live communicator");
    uint64_t stack[DESC_WORDS * 16], *desc = stack;
    if (world > 16 && !(desc = malloc(sizeof(uint64_t) * DESC_WORDS * (size_t)world)))
        return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    shoal_result rc = check_same(c, z, count, desc);
    if (desc != stack) free(desc);
    SH_TRY(rc);
    if (!count) return SHOAL_OK;

    switch (z->o.codec) {
    case SHOAL_CODEC_NONE:
        z->residual_norm = 0;
        return shoal_allreduce(c, send, recv, count, SHOAL_FLOAT32, op);
    case SHOAL_CODEC_FP16:
    case SHOAL_CODEC_BF16:
        return half_allreduce(c, z, send, recv, count, op);
    default: break;
    }

    size_t nb = sh_codec_payload_nbytes(z);
    if (z->o.codec == SHOAL_CODEC_1BIT) { /* it adds the residual and sets the new one itself */
        sh_codec_1bit_encode(z, send, z->mine);
        SH_TRY(gather(c, z, z->mine, nb));
        sh_codec_1bit_sum(z, z->all, nb, world, op == SHOAL_AVG, recv); /* rows stay in cache */
        return SHOAL_OK;
    }
    /* m = send + residual (the residual is zero without error feedback) */
    float *m = z->work;
    for (size_t i = 0; i < count; i++) m[i] = send[i] + z->state[i];
    if (z->o.codec == SHOAL_CODEC_LOWRANK && !z->lowrank_dense) {
        SH_TRY(lowrank_allreduce(c, z, m, recv, count, op));
    } else {
        if (z->o.codec == SHOAL_CODEC_TOPK) {
            sh_codec_topk_encode(z, m, z->mine);               /* m keeps what was not sent */
            if (z->o.error_feedback) memcpy(z->state, m, count * sizeof(float));
        } else { /* lowrank on a matrix too small to pay: float32 */
            memcpy(z->mine, m, nb);
        }
        SH_TRY(gather(c, z, z->mine, nb));
        memset(recv, 0, count * sizeof(float));
        for (int k = 0; k < world; k++) {
            const uint8_t *pk = z->all + (size_t)k * nb;
            if (z->o.codec == SHOAL_CODEC_TOPK) sh_codec_topk_accumulate(z, pk, recv);
            else
                for (size_t i = 0; i < count; i++) {
                    float v;
                    memcpy(&v, pk + i * sizeof(float), sizeof v);
                    recv[i] += v;
                }
        }
        finish_mean(recv, count, op, world);
    }
    z->residual_norm = norm2(z->state, count);
    return SHOAL_OK;
}
