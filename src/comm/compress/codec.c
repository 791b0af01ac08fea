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
    z->work = malloc(n * sizeof(float));
    /* lowrank: the approximation a point-to-point receiver decodes; topk: the histogram */
    z->mags = o->codec == SHOAL_CODEC_LOWRANK ? malloc(n * sizeof(float)) : NULL;
    z->hist = o->codec == SHOAL_CODEC_TOPK ? malloc(65536 * sizeof(uint32_t)) : NULL;
    z->pq = o->codec == SHOAL_CODEC_LOWRANK ? malloc(((z->rows + z->cols) * (size_t)(z->rank ? z->rank : 1) + 1) *
                                                    sizeof(float))
                                            : NULL;
    z->mine = malloc(sh_codec_payload_nbytes(z) + 16);
    if (!z->state || !z->work || (o->codec == SHOAL_CODEC_LOWRANK && !z->mags) || (o->codec == SHOAL_CODEC_TOPK && !z->hist) ||
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
 * non-negative entries then of the negative ones (accumulated in double; 0 for an empty
 * side), then one bit per entry, entry i at bit i % 8 of byte i / 8, 1 for >= 0. */
void sh_codec_1bit_encode(shoal_compressor *z, const float *send, uint8_t *out)
{
    float *means = (float *)(void *)out, *m = z->work, *res = z->state;
    uint8_t *bits = out + 2 * sizeof(float) * z->rows;
    int ef = z->o.error_feedback;
    double norm[8] = {0};
    memset(bits, 0, (z->count + 7) / 8);
    /* m = send + residual, vectorized; the bits a byte at a time where eight entries share
     * one (the row's first and last bytes may hold two rows' bits: entry by entry there). */
    for (size_t i = 0; i < z->count; i++) m[i] = send[i] + res[i];
    size_t i = 0;
    for (; i + 8 <= z->count; i += 8) {
        unsigned b = 0;
        for (int k = 0; k < 8; k++) b |= (unsigned)(m[i + k] >= 0) << k;
        bits[i / 8] = (uint8_t)b;
    }
    for (; i < z->count; i++) bits[i / 8] |= (uint8_t)((unsigned)(m[i] >= 0) << (i % 8));
    for (size_t r = 0; r < z->rows; r++) {
        size_t lo = r * z->cols, hi = lo + z->cols < z->count ? lo + z->cols : z->count;
        /* The means in double, entry after entry: the order the reference sums in. */
        double pos = 0, neg = 0;
        size_t npos = 0;
        for (size_t k = lo; k < hi; k++) { /* branch-free: the signs are a coin toss */
            double v = m[k], w = m[k] >= 0; /* v * w and v - v * w are v or 0, exactly */
            pos += v * w;
            neg += v - v * w;
            npos += (size_t)w;
        }
        size_t nneg = (hi - lo) - npos;
        float mp = npos ? (float)(pos / (double)npos) : 0.0f, mn = nneg ? (float)(neg / (double)nneg) : 0.0f;
        memcpy(&means[2 * r], &mp, sizeof mp);
        memcpy(&means[2 * r + 1], &mn, sizeof mn);
        if (!ef) {
            for (size_t k = lo; k < hi; k++) res[k] = 0.0f;
            continue;
        }
        size_t k = lo;
        for (; k + 8 <= hi; k += 8) /* what the others decode is lost here: carry it */
            for (int q = 0; q < 8; q++) {
                float e = m[k + q] - (m[k + q] >= 0 ? mp : mn);
                res[k + q] = e;
                norm[q] += (double)e * e;
            }
        for (; k < hi; k++) {
            float e = m[k] - (m[k] >= 0 ? mp : mn);
            res[k] = e;
            norm[0] += (double)e * e;
        }
    }
    double sq = 0;
    for (int q = 0; q < 8; q++) sq += norm[q];
    z->residual_norm = sqrt(sq);
}

void sh_codec_1bit_accumulate(const shoal_compressor *z, const uint8_t *payload, float *acc)
{
    const uint8_t *bits = payload + 2 * sizeof(float) * z->rows;
    for (size_t r = 0; r < z->rows; r++) {
        float v[2];
        memcpy(v, payload + 2 * sizeof(float) * r, sizeof v);
        size_t lo = r * z->cols, hi = lo + z->cols < z->count ? lo + z->cols : z->count, i = lo;
        for (; i < hi && i % 8; i++) acc[i] += (bits[i / 8] >> (i % 8)) & 1 ? v[0] : v[1];
        uint32_t u0, u1;
        memcpy(&u0, &v[0], sizeof u0);
        memcpy(&u1, &v[1], sizeof u1);
        for (; i + 8 <= hi; i += 8) { /* a whole byte: eight entries, picked by masks (vectorized) */
            uint32_t b = bits[i / 8];
            float pick[8];
            for (int k = 0; k < 8; k++) {
                uint32_t msk = 0u - ((b >> k) & 1u), u = (u0 & msk) | (u1 & ~msk);
                memcpy(&pick[k], &u, sizeof u);
            }
            for (int k = 0; k < 8; k++) acc[i + k] += pick[k];
        }
        for (; i < hi; i++) acc[i] += (bits[i / 8] >> (i % 8)) & 1 ? v[0] : v[1];
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
