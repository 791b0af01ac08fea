/* codec.c — the codecs of the compressed allreduce: parsing their names, the compressor
 * (error-feedback residual, lowrank's warm-started Q, staging), 1-bit quantisation with
 * per-row means (Seide et al., "1-bit stochastic gradient descent", Interspeech 2014, as in
 * CNTK), top-k selection, and the small matrix products of PowerSGD (Vogels et al. 2019).
 * Not here: moving payloads between ranks and summing them (allreduce.c).
 * Proved by tests/comm/test_compress.c. */
#include "comm/compress/codec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "comm/compress/half.h"
#include "comm/reduce.h"

void shoal_codec_opts_default(shoal_codec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->codec = SHOAL_CODEC_NONE;
    o->error_feedback = 1;
    o->seed = 1;
}

static const char *const codec_names[SHOAL_CODEC_COUNT] = {"none", "fp16", "bf16", "1bit", "topk", "lowrank"};

shoal_result shoal_codec_parse(const char *spec, shoal_codec_opts *o)
{
    static const char accepted[] = "none, fp16, bf16, 1bit, topk:F (0 < F <= 1) or lowrank:R (R >= 1)";
    if (!spec || !o) return SH_FAIL(SHOAL_ERR_INVALID, "codec: spec or options is NULL");
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    int kind = -1;
    for (int i = 0; i < SHOAL_CODEC_COUNT; i++)
        if (strlen(codec_names[i]) == len && !strncmp(spec, codec_names[i], len)) kind = i;
    if (kind < 0) return SH_FAIL(SHOAL_ERR_INVALID, "unknown compression \"%s\"; use %s", spec, accepted);
    int wants_arg = kind == SHOAL_CODEC_TOPK || kind == SHOAL_CODEC_LOWRANK;
    if (!wants_arg && colon)
        return SH_FAIL(SHOAL_ERR_INVALID, "compression \"%s\": %s takes no parameter; use %s", spec,
                       codec_names[kind], accepted);
    if (wants_arg && (!colon || !colon[1]))
        return SH_FAIL(SHOAL_ERR_INVALID, "compression \"%s\": %s needs a parameter, e.g. %s", spec,
                       codec_names[kind], kind == SHOAL_CODEC_TOPK ? "topk:0.01" : "lowrank:4");
    char *end = NULL;
    if (kind == SHOAL_CODEC_TOPK) {
        double f = strtod(colon + 1, &end);
        if (*end || !(f > 0 && f <= 1))
            return SH_FAIL(SHOAL_ERR_INVALID, "compression \"%s\": the fraction of entries kept must be a "
                           "number in (0, 1], e.g. topk:0.01", spec);
        o->topk_fraction = f;
    } else if (kind == SHOAL_CODEC_LOWRANK) {
        long r = strtol(colon + 1, &end, 10);
        if (*end || r < 1 || r > 1024)
            return SH_FAIL(SHOAL_ERR_INVALID, "compression \"%s\": the rank must be a whole number from 1 "
                           "to 1024, e.g. lowrank:4", spec);
        o->rank = (int)r;
    }
    o->codec = (shoal_codec)kind;
    return SHOAL_OK;
}

const char *shoal_codec_format(const shoal_codec_opts *o, char *buf, size_t cap)
{
    if (!buf || !cap) return buf;
    if (!o || (unsigned)o->codec >= SHOAL_CODEC_COUNT) snprintf(buf, cap, "?");
    else if (o->codec == SHOAL_CODEC_TOPK) snprintf(buf, cap, "topk:%g", o->topk_fraction);
    else if (o->codec == SHOAL_CODEC_LOWRANK) snprintf(buf, cap, "lowrank:%d", o->rank);
    else snprintf(buf, cap, "%s", codec_names[o->codec]);
    return buf;
}

/* ---- the compressor ---- */

static int has_feedback(const shoal_compressor *z)
{
    return z->o.error_feedback && (z->o.codec == SHOAL_CODEC_1BIT || z->o.codec == SHOAL_CODEC_TOPK ||
                                   (z->o.codec == SHOAL_CODEC_LOWRANK && !z->lowrank_dense));
}

size_t sh_codec_payload_nbytes(const shoal_compressor *z)
{
    switch (z->o.codec) {
    case SHOAL_CODEC_1BIT: return 2 * sizeof(float) * z->rows + (z->count + 7) / 8;
    case SHOAL_CODEC_TOPK: return z->k * (sizeof(uint32_t) + sizeof(float));
    case SHOAL_CODEC_LOWRANK:
        return z->lowrank_dense ? z->count * sizeof(float) : (size_t)z->rank * (z->rows + z->cols) * sizeof(float);
    default: return z->count * sizeof(float);
    }
}

/* splitmix64: lowrank's first Q, the same on every rank for one seed */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void shoal_compressor_reset(shoal_compressor *z)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC) return;
    memset(z->state, 0, z->state_count * sizeof(float));
    if (z->o.codec == SHOAL_CODEC_LOWRANK && !z->lowrank_dense) {
        uint64_t s = z->o.seed;
        float *q = z->state + z->count;
        for (size_t i = 0; i < z->cols * (size_t)z->rank; i++)
            q[i] = (float)((double)(splitmix(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0); /* uniform [-1, 1) */
    }
    z->residual_norm = 0;
}

void shoal_compressor_destroy(shoal_compressor *z)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC) return;
    z->magic = 0;
    free(z->state);
    free(z->work);
    free(z->mags);
    free(z->hist);
    free(z->pq);
    free(z->mine);
    free(z->all);
    free(z);
}

shoal_result shoal_compressor_create(const shoal_codec_opts *o, size_t count, shoal_compressor **out)
{
    if (!out) return SH_FAIL(SHOAL_ERR_INVALID, "compressor: out is NULL");
    *out = NULL;
    if (!o || (unsigned)o->codec >= SHOAL_CODEC_COUNT)
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor: no options or an unknown codec");
    char spec[48];
    shoal_codec_format(o, spec, sizeof spec);
    if (o->codec == SHOAL_CODEC_TOPK && !(o->topk_fraction > 0 && o->topk_fraction <= 1))
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor: topk fraction %g is not in (0, 1]", o->topk_fraction);
    if (o->codec == SHOAL_CODEC_LOWRANK && o->rank < 1)
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor: lowrank rank %d is below 1", o->rank);
    if (count > UINT32_MAX)
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor %s: count %zu is above 2^32 - 1; compress smaller buffers",
                       spec, count);
    size_t cols = o->cols && o->cols < count ? o->cols : count;
    if (o->codec == SHOAL_CODEC_LOWRANK && count && count % cols)
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor %s: count %zu is not a whole number of rows of %zu columns",
                       spec, count, cols);
    shoal_compressor *z = calloc(1, sizeof *z);
    if (!z) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    z->magic = SH_COMPRESSOR_MAGIC;
    z->o = *o;
    z->count = count;
    z->cols = cols ? cols : 1;
    z->rows = count ? (count + z->cols - 1) / z->cols : 0;
    if (o->codec == SHOAL_CODEC_TOPK) {
        double k = ceil(o->topk_fraction * (double)count);
        z->k = k < 1 ? 1 : k > (double)count ? count : (size_t)k;
        if (!count) z->k = 0;
    }
    if (o->codec == SHOAL_CODEC_LOWRANK) {
        size_t r = (size_t)o->rank;
        if (r > z->rows) r = z->rows;
        if (r > z->cols) r = z->cols;
        z->rank = (int)r;
        z->lowrank_dense = !count || r * (z->rows + z->cols) >= count;
    }
    z->state_count = count + (o->codec == SHOAL_CODEC_LOWRANK && !z->lowrank_dense ? z->cols * (size_t)z->rank : 0);
    size_t n = count ? count : 1;
    z->state = calloc(z->state_count ? z->state_count : 1, sizeof(float));
    z->work = o->codec == SHOAL_CODEC_1BIT ? NULL : malloc(n * sizeof(float)); /* 1bit works in place */
    /* lowrank: the approximation a point-to-point receiver decodes; topk: the histogram */
    z->mags = o->codec == SHOAL_CODEC_LOWRANK ? malloc(n * sizeof(float)) : NULL;
    z->hist = o->codec == SHOAL_CODEC_TOPK ? malloc(65536 * sizeof(uint32_t)) : NULL;
    z->pq = o->codec == SHOAL_CODEC_LOWRANK ? malloc(((z->rows + z->cols) * (size_t)(z->rank ? z->rank : 1) + 1) *
                                                    sizeof(float))
                                            : NULL;
    z->mine = malloc(sh_codec_payload_nbytes(z) + 16);
    if (!z->state || (o->codec != SHOAL_CODEC_1BIT && !z->work) || (o->codec == SHOAL_CODEC_LOWRANK && !z->mags) || (o->codec == SHOAL_CODEC_TOPK && !z->hist) ||
        (o->codec == SHOAL_CODEC_LOWRANK && !z->pq) || !z->mine) {
        shoal_compressor_destroy(z);
        return SH_FAIL(SHOAL_ERR_NOMEM, "compressor %s: out of memory for %zu elements", spec, count);
    }
    shoal_compressor_reset(z);
    (void)has_feedback;
    *out = z;
    return SHOAL_OK;
}

float *shoal_compressor_state(shoal_compressor *z, size_t *count)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC) {
        if (count) *count = 0;
        return NULL;
    }
    if (count) *count = z->state_count;
    return z->state;
}

double shoal_compressor_residual_norm(const shoal_compressor *z)
{
    return z && z->magic == SH_COMPRESSOR_MAGIC ? z->residual_norm : 0;
}

double shoal_compressor_wire_nbytes(const shoal_compressor *z, int world)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC || world < 2) return 0;
    double others = (double)(world - 1);
    switch (z->o.codec) {
    case SHOAL_CODEC_NONE: /* ring: reduce-scatter then allgather */
        return 2.0 * others / world * (double)z->count * sizeof(float);
    case SHOAL_CODEC_FP16:
    case SHOAL_CODEC_BF16: { /* alltoall, then allgather, of blocks of ceil(count / world) */
        double block = (double)((z->count + (size_t)world - 1) / (size_t)world);
        return 2.0 * others * block * sizeof(uint16_t);
    }
    default: /* an allgather of every rank's payload */
        return others * (double)sh_codec_payload_nbytes(z);
    }
}

/* ---- 1bit ----
 * Payload: per row (group of cols entries) the two reconstruction values, mean of the
 * non-negative entries then of the negative ones (0 for an empty side), then one bit per
 * entry, entry i at bit i % 8 of byte i / 8, 1 for >= 0. Each mean's sum is accumulated
 * in double in SH_1BIT_LANES interleaved partial sums (entry lo + i of a row into sum
 * i % SH_1BIT_LANES), added lane 0 first at the end of the row: the order of the
 * reference in tests/comm/test_compress.c, and one the vector units can keep. */
enum { SH_1BIT_LANES = 8 };

/* Eight lanes as GCC/clang vector extensions (lowered to the target's registers; the same
 * IEEE operations as scalar code, so the same bits): entries as float, sums as double. */
typedef float sh_vf8 __attribute__((vector_size(32), aligned(4)));
typedef int32_t sh_vi8 __attribute__((vector_size(32), aligned(4)));
typedef double sh_vd8 __attribute__((vector_size(64)));
typedef int64_t sh_vl8 __attribute__((vector_size(64)));

/* bit q of the result: lane q is >= 0 (ge is -1 or 0 per lane) */
static unsigned sign_byte(sh_vi8 ge)
{
#ifdef __AVX__
    typedef float vf8_aligned __attribute__((vector_size(32)));
    return (unsigned)__builtin_ia32_movmskps256((vf8_aligned)ge);
#else
    unsigned b = 0;
    for (int q = 0; q < 8; q++) b |= (unsigned)(ge[q] & 1) << q;
    return b;
#endif
}

/* Rows are short enough (a layer's inputs) for one row of send, residual and sums to stay
 * in the L1 cache: each row is read from memory once, summed and packed, then corrected
 * from the cache. */
void sh_codec_1bit_encode(shoal_compressor *z, const float *send, uint8_t *out)
{
    enum { L = SH_1BIT_LANES };
    float *means = (float *)(void *)out;
    uint8_t *bits = out + 2 * sizeof(float) * z->rows;
    int ef = z->o.error_feedback;
    sh_vd8 norm = {0};
    memset(bits, 0, (z->count + 7) / 8);
    for (size_t r = 0; r < z->rows; r++) {
        size_t lo = r * z->cols, n = lo + z->cols < z->count ? z->cols : z->count - lo, i = 0;
        const float *x = send + lo;
        float *m = z->state + lo; /* m = send + residual, in place of the residual */
        int whole_bytes = lo % 8 == 0; /* the row's bits start a byte: pack them here */
        sh_vd8 pos = {0}, neg = {0};
        sh_vi8 nneg8 = {0};
        for (; i + L <= n; i += L) {
            sh_vf8 v, xv;
            memcpy(&xv, x + i, sizeof xv);
            memcpy(&v, m + i, sizeof v);
            v = xv + v;
            memcpy(m + i, &v, sizeof v);
            sh_vi8 ge = v >= 0.0f;
            sh_vl8 ge64 = __builtin_convertvector(ge, sh_vl8);
            sh_vl8 d = (sh_vl8)__builtin_convertvector(v, sh_vd8);
            pos += (sh_vd8)(d & ge64); /* v or +0.0, which leaves a sum as it is */
            neg += (sh_vd8)(d & ~ge64);
            nneg8 += ge + 1;
            if (whole_bytes) bits[(lo + i) / 8] = (uint8_t)sign_byte(ge);
        }
        size_t packed = whole_bytes ? i : 0;
        for (int q = 0; i < n; i++, q++) {
            float v = x[i] + m[i];
            m[i] = v;
            pos[q] += v >= 0 ? (double)v : 0.0;
            neg[q] += v >= 0 ? 0.0 : (double)v;
            nneg8[q] += !(v >= 0);
        }
        /* the rest entry by entry: a row that does not start a byte, the row's last byte */
        for (size_t k = packed; k < n; k++) bits[(lo + k) / 8] |= (uint8_t)((unsigned)(m[k] >= 0) << ((lo + k) % 8));
        double ps = 0, ns = 0;
        size_t nneg = 0;
        for (int q = 0; q < L; q++) ps += pos[q], ns += neg[q], nneg += (size_t)nneg8[q];
        size_t npos = n - nneg;
        float mp = npos ? (float)(ps / (double)npos) : 0.0f, mn = nneg ? (float)(ns / (double)nneg) : 0.0f;
        memcpy(&means[2 * r], &mp, sizeof mp);
        memcpy(&means[2 * r + 1], &mn, sizeof mn);
        if (!ef) {
            memset(m, 0, n * sizeof *m);
            continue;
        }
        /* what the others decode is lost here: carry it */
        int32_t ump, umn;
        memcpy(&ump, &mp, sizeof ump);
        memcpy(&umn, &mn, sizeof umn);
        sh_vi8 up = (sh_vi8){0} + ump, un = (sh_vi8){0} + umn;
        for (i = 0; i + L <= n; i += L) {
            sh_vf8 v;
            memcpy(&v, m + i, sizeof v);
            sh_vi8 ge = v >= 0.0f;
            sh_vf8 e = v - (sh_vf8)((up & ge) | (un & ~ge));
            memcpy(m + i, &e, sizeof e);
            sh_vd8 ed = __builtin_convertvector(e, sh_vd8);
            norm += ed * ed;
        }
        for (; i < n; i++) {
            float e = m[i] - (m[i] >= 0 ? mp : mn);
            m[i] = e;
            norm[0] += (double)e * e;
        }
    }
    double sq = 0;
    for (int q = 0; q < L; q++) sq += norm[q];
    z->residual_norm = sqrt(sq);
}

/* acc[rows r0 .. r1) += decode(payload) */
static void accumulate_rows(const shoal_compressor *z, const uint8_t *payload, float *acc, size_t r0, size_t r1)
{
    const uint8_t *bits = payload + 2 * sizeof(float) * z->rows;
    const sh_vi8 lane_bit = {1, 2, 4, 8, 16, 32, 64, 128};
    for (size_t r = r0; r < r1; r++) {
        float v[2];
        memcpy(v, payload + 2 * sizeof(float) * r, sizeof v);
        size_t lo = r * z->cols, hi = lo + z->cols < z->count ? lo + z->cols : z->count, i = lo;
        for (; i < hi && i % 8; i++) acc[i] += (bits[i / 8] >> (i % 8)) & 1 ? v[0] : v[1];
        int32_t u0, u1;
        memcpy(&u0, &v[0], sizeof u0);
        memcpy(&u1, &v[1], sizeof u1);
        sh_vi8 p0 = (sh_vi8){0} + u0, p1 = (sh_vi8){0} + u1;
        for (; i + 8 <= hi; i += 8) { /* a whole byte: eight entries, picked by masks */
            sh_vi8 set = (((sh_vi8){0} + bits[i / 8]) & lane_bit) != 0;
            sh_vf8 a;
            memcpy(&a, acc + i, sizeof a);
            a += (sh_vf8)((p0 & set) | (p1 & ~set));
            memcpy(acc + i, &a, sizeof a);
        }
        for (; i < hi; i++) acc[i] += (bits[i / 8] >> (i % 8)) & 1 ? v[0] : v[1];
    }
}

void sh_codec_1bit_accumulate(const shoal_compressor *z, const uint8_t *payload, float *acc)
{
    accumulate_rows(z, payload, acc, 0, z->rows);
}

/* A block of rows at a time (about 16 KiB of sums, or one longer row), so the sum stays in
 * the L1 cache while every rank's payload is added to it: memory sees recv written once. */
void sh_codec_1bit_sum(const shoal_compressor *z, const uint8_t *all, size_t nbytes, int world, int mean,
                       float *recv)
{
    enum { BLOCK_COUNT = 4096 };
    size_t block_rows = z->cols < BLOCK_COUNT ? BLOCK_COUNT / z->cols : 1;
    for (size_t r0 = 0; r0 < z->rows; r0 += block_rows) {
        size_t r1 = r0 + block_rows < z->rows ? r0 + block_rows : z->rows;
        size_t lo = r0 * z->cols, hi = r1 * z->cols < z->count ? r1 * z->cols : z->count;
        memset(recv + lo, 0, (hi - lo) * sizeof *recv);
        for (int k = 0; k < world; k++) accumulate_rows(z, all + (size_t)k * nbytes, recv, r0, r1);
        if (mean)
            for (size_t i = lo; i < hi; i++) recv[i] /= (float)world;
    }
}

/* ---- topk ---- */

/* A float's magnitude as an unsigned integer: ordered as the magnitudes are (NaNs above
 * infinity), so the k-th largest is found by counting, not sorting. */
static uint32_t mag_key(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7fffffffu;
}

/* The k-th largest key of x[0..n) (1 <= k <= n): a histogram of the top 15 bits finds its
 * bin, a histogram of the low 16 bits inside that bin finds it exactly. Two passes. */
static uint32_t kth_largest_key(const float *x, size_t n, size_t k, uint32_t *hist /* 65536 */)
{
    memset(hist, 0, 32768 * sizeof *hist);
    for (size_t i = 0; i < n; i++) hist[mag_key(x[i]) >> 16]++;
    size_t above = 0;
    uint32_t hi = 32767;
    for (;; hi--) {
        if (above + hist[hi] >= k || hi == 0) break;
        above += hist[hi];
    }
    memset(hist, 0, 65536 * sizeof *hist);
    for (size_t i = 0; i < n; i++) {
        uint32_t key = mag_key(x[i]);
        if (key >> 16 == hi) hist[key & 0xffffu]++;
    }
    uint32_t lo = 65535;
    for (;; lo--) {
        if (above + hist[lo] >= k || lo == 0) break;
        above += hist[lo];
    }
    return hi << 16 | lo;
}

void sh_codec_topk_encode(shoal_compressor *z, float *x, uint8_t *out)
{
    size_t k = z->k, n = z->count;
    uint32_t *idx = (uint32_t *)(void *)out;
    float *val = (float *)(void *)(out + k * sizeof(uint32_t));
    if (!k) return;
    uint32_t t = kth_largest_key(x, n, k, z->hist);
    size_t above = 0;
    for (size_t i = 0; i < n; i++) above += mag_key(x[i]) > t;
    size_t ties = k - above, j = 0; /* entries at the threshold that are kept: the first ones */
    for (size_t i = 0; i < n && j < k; i++) {
        uint32_t m = mag_key(x[i]);
        if (m > t || (m == t && ties && ties--)) {
            uint32_t ii = (uint32_t)i;
            memcpy(&idx[j], &ii, sizeof ii);
            memcpy(&val[j], &x[i], sizeof(float));
            j++;
            x[i] = 0;
        }
    }
}

void sh_codec_topk_accumulate(const shoal_compressor *z, const uint8_t *payload, float *acc)
{
    size_t k = z->k;
    for (size_t j = 0; j < k; j++) {
        uint32_t i;
        float v;
        memcpy(&i, payload + j * sizeof(uint32_t), sizeof i);
        memcpy(&v, payload + k * sizeof(uint32_t) + j * sizeof(float), sizeof v);
        acc[i] += v;
    }
}

/* ---- lowrank's matrix products ---- */

void sh_codec_mat_mq(const float *m, const float *q, float *p, size_t rows, size_t cols, int r)
{
    for (size_t i = 0; i < rows; i++)
        for (int j = 0; j < r; j++) {
            double s = 0;
            for (size_t k = 0; k < cols; k++) s += (double)m[i * cols + k] * q[k * (size_t)r + (size_t)j];
            p[i * (size_t)r + (size_t)j] = (float)s;
        }
}

void sh_codec_mat_mtp(const float *m, const float *p, float *q, size_t rows, size_t cols, int r)
{
    double acc[64];
    for (size_t k = 0; k < cols; k++)
        for (int j0 = 0; j0 < r; j0 += 64) {
            int nj = r - j0 < 64 ? r - j0 : 64;
            for (int j = 0; j < nj; j++) acc[j] = 0;
            for (size_t i = 0; i < rows; i++) {
                double mv = m[i * cols + k];
                for (int j = 0; j < nj; j++) acc[j] += mv * p[i * (size_t)r + (size_t)(j0 + j)];
            }
            for (int j = 0; j < nj; j++) q[k * (size_t)r + (size_t)(j0 + j)] = (float)acc[j];
        }
}

void sh_codec_mat_pqt(const float *p, const float *q, float *m, size_t rows, size_t cols, int r)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t k = 0; k < cols; k++) {
            double s = 0;
            for (int j = 0; j < r; j++) s += (double)p[i * (size_t)r + (size_t)j] * q[k * (size_t)r + (size_t)j];
            m[i * cols + k] = (float)s;
        }
}

void sh_codec_orthonormalize(float *p, size_t rows, int r)
{
    for (int j = 0; j < r; j++) {
        for (int l = 0; l < j; l++) {
            double d = 0;
            for (size_t i = 0; i < rows; i++) d += (double)p[i * (size_t)r + (size_t)j] * p[i * (size_t)r + (size_t)l];
            for (size_t i = 0; i < rows; i++)
                p[i * (size_t)r + (size_t)j] = (float)(p[i * (size_t)r + (size_t)j] - d * p[i * (size_t)r + (size_t)l]);
        }
        double nn = 0;
        for (size_t i = 0; i < rows; i++) nn += (double)p[i * (size_t)r + (size_t)j] * p[i * (size_t)r + (size_t)j];
        double inv = nn > 1e-30 ? 1.0 / sqrt(nn) : 0.0;
        for (size_t i = 0; i < rows; i++) p[i * (size_t)r + (size_t)j] = (float)(p[i * (size_t)r + (size_t)j] * inv);
    }
}

/* ---- point to point ---- */

size_t shoal_compressor_payload_nbytes(const shoal_compressor *z)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC) return 0;
    if (z->o.codec == SHOAL_CODEC_FP16 || z->o.codec == SHOAL_CODEC_BF16) return z->count * sizeof(uint16_t);
    return sh_codec_payload_nbytes(z);
}

shoal_result shoal_compressor_encode(shoal_compressor *z, const float *send, void *payload)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC || (z->count && (!send || !payload)))
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor encode: no live compressor, or a NULL buffer");
    size_t n = z->count;
    uint8_t *out = payload;
    float *m = z->work;
    int ef = z->o.error_feedback;
    switch (z->o.codec) {
    case SHOAL_CODEC_FP16:
    case SHOAL_CODEC_BF16:
        if (((uintptr_t)out & 1) == 0) {
            sh_half_encode(z->o.codec == SHOAL_CODEC_BF16, send, (uint16_t *)payload, n);
            return SHOAL_OK;
        }
        for (size_t i = 0; i < n; i++) {
            uint16_t h = z->o.codec == SHOAL_CODEC_BF16 ? sh_f32_to_bf16(send[i]) : sh_f32_to_f16(send[i]);
            memcpy(out + i * sizeof h, &h, sizeof h);
        }
        return SHOAL_OK;
    case SHOAL_CODEC_NONE:
        memcpy(out, send, n * sizeof(float));
        return SHOAL_OK;
    default: break;
    }
    if (z->o.codec == SHOAL_CODEC_1BIT) {
        sh_codec_1bit_encode(z, send, out);
        return SHOAL_OK;
    }
    for (size_t i = 0; i < n; i++) m[i] = send[i] + z->state[i];
    if (z->o.codec == SHOAL_CODEC_TOPK) {
        sh_codec_topk_encode(z, m, out);
        if (ef) memcpy(z->state, m, n * sizeof(float));
    } else if (z->lowrank_dense) {
        memcpy(out, m, n * sizeof(float));
    } else { /* one power iteration from the warm Q on this rank's matrix alone */
        int r = z->rank;
        float *p = z->pq, *q = z->state + n, *qn = z->pq + z->rows * (size_t)r;
        sh_codec_mat_mq(m, q, p, z->rows, z->cols, r);
        sh_codec_orthonormalize(p, z->rows, r);
        sh_codec_mat_mtp(m, p, qn, z->rows, z->cols, r);
        memcpy(q, qn, z->cols * (size_t)r * sizeof(float));
        memcpy(out, p, z->rows * (size_t)r * sizeof(float));
        memcpy(out + z->rows * (size_t)r * sizeof(float), qn, z->cols * (size_t)r * sizeof(float));
        sh_codec_mat_pqt(p, qn, z->mags, z->rows, z->cols, r); /* what the receiver decodes */
        for (size_t i = 0; i < n; i++) z->state[i] = ef ? m[i] - z->mags[i] : 0.0f;
    }
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)z->state[i] * z->state[i];
    z->residual_norm = sqrt(s);
    return SHOAL_OK;
}

shoal_result shoal_compressor_decode(const shoal_compressor *z, const void *payload, size_t nbytes, float *out)
{
    if (!z || z->magic != SH_COMPRESSOR_MAGIC || (z->count && (!payload || !out)))
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor decode: no live compressor, or a NULL buffer");
    if (nbytes != shoal_compressor_payload_nbytes(z))
        return SH_FAIL(SHOAL_ERR_INVALID, "compressor decode: %zu bytes, but this codec sends %zu for %zu values",
                       nbytes, shoal_compressor_payload_nbytes(z), z->count);
    const uint8_t *in = payload;
    size_t n = z->count;
    switch (z->o.codec) {
    case SHOAL_CODEC_FP16:
    case SHOAL_CODEC_BF16:
        if (((uintptr_t)in & 1) == 0) {
            sh_half_decode(z->o.codec == SHOAL_CODEC_BF16, (const uint16_t *)payload, out, n);
            return SHOAL_OK;
        }
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, in + i * sizeof h, sizeof h);
            out[i] = z->o.codec == SHOAL_CODEC_BF16 ? sh_bf16_to_f32(h) : sh_f16_to_f32(h);
        }
        return SHOAL_OK;
    case SHOAL_CODEC_1BIT:
        memset(out, 0, n * sizeof(float));
        sh_codec_1bit_accumulate(z, in, out);
        return SHOAL_OK;
    case SHOAL_CODEC_TOPK:
        memset(out, 0, n * sizeof(float));
        sh_codec_topk_accumulate(z, in, out);
        return SHOAL_OK;
    case SHOAL_CODEC_LOWRANK:
        if (!z->lowrank_dense) {
            int r = z->rank;
            size_t pn = z->rows * (size_t)r, qn = z->cols * (size_t)r;
            float *pq = malloc((pn + qn) * sizeof(float)); /* payloads need not be aligned */
            if (!pq) return SH_FAIL(SHOAL_ERR_NOMEM, "compressor decode: out of memory");
            memcpy(pq, in, (pn + qn) * sizeof(float));
            sh_codec_mat_pqt(pq, pq + pn, out, z->rows, z->cols, r);
            free(pq);
            return SHOAL_OK;
        }
        memcpy(out, in, n * sizeof(float)); /* too small to pay: float32 */
        return SHOAL_OK;
    default:
        memcpy(out, in, n * sizeof(float));
        return SHOAL_OK;
    }
}
