/* test_compress.c — proves shoal_allreduce_compressed (src/comm/compress/): fp16 and bf16
 * round trips against a reference rounding written here (nearest of the representable
 * neighbours, ties to even), 1bit, topk and lowrank against straightforward reference
 * implementations over several steps of error feedback on 1-4 ranks, the same bits on every
 * rank, the codec names, and the mismatch of two ranks that compress differently. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/ranks.h"
#include "shoal/comm.h"

/* ---- inputs: every rank can compute every rank's gradient ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* ties: values on a grid of 1/64 (many equal magnitudes, for topk's tie rule) */
static float grad(int rank, int step, size_t i, int ties)
{
    uint64_t h = mix(((uint64_t)rank << 48) ^ ((uint64_t)step << 32) ^ i);
    if (ties) return (float)((int)(h % 257) - 128) / 64.0f;
    return (float)(((double)(h >> 11) * 0x1.0p-53 * 2.0 - 1.0) * (1.0 + (double)(i % 7)));
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* every rank holds the same bits: compare a hash of them across ranks */
static void check_same_bits(shoal_comm *c, const float *v, size_t n, const char *what)
{
    uint64_t h = fnv(v, n * sizeof(float)), all[8];
    int world = shoal_comm_world(c);
    CHECK(shoal_allgather(c, &h, all, 1, SHOAL_INT64) == SHOAL_OK, "%s: allgather of hashes", what);
    for (int r = 1; r < world; r++) CHECK(all[r] == all[0], "%s: rank %d's result differs from rank 0's", what, r);
}

/* ---- reference conversions ---- */

static double half_value(uint16_t h) /* finite positive halves only */
{
    int e = (h >> 10) & 31, m = h & 1023;
    return e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
}

/* the nearest half to x, ties to the even one; above the largest finite, infinity as 65536 */
static uint16_t ref_f16(float x)
{
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double a = fabs((double)x);
    if (isnan(x)) return 0x7e00;
    uint16_t lo = 0, hi = 0x7c00; /* find lo <= a < hi among 0..0x7c00 (0x7c00 = 65536) */
    if (a >= 65536.0) return sign | 0x7c00;
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        double v = mid == 0x7c00 ? 65536.0 : half_value(mid);
        if (v <= a) lo = mid;
        else hi = mid;
    }
    double vl = half_value(lo), vh = hi == 0x7c00 ? 65536.0 : half_value(hi);
    uint16_t pick = a - vl < vh - a ? lo : a - vl > vh - a ? hi : (lo & 1 ? hi : lo);
    return sign | pick;
}

static float ref_f16_to_f32(uint16_t h)
{
    double v = (h & 0x7fff) >= 0x7c00 ? INFINITY : half_value(h & 0x7fff);
    return (float)(h & 0x8000 ? -v : v);
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t ref_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1); /* truncation and the next away from 0 */
    double a = fabs((double)x), vl = fabs((double)bits_f((uint32_t)lo << 16)), vh = fabs((double)bits_f((uint32_t)hi << 16));
    if ((hi & 0x7fff) == 0x7f80) vh = ldexp(1.0, 128); /* rounding up overflows to infinity */
    if (a - vl < vh - a) return lo;
    if (a - vl > vh - a) return hi;
    return lo & 1 ? hi : lo;
}

static float ref_bf16_to_f32(uint16_t h) { return bits_f((uint32_t)h << 16); }

/* ---- reference codecs (one rank's encode; dec is what the others decode) ---- */

/* CNTK's 1-bit quantisation, row by row: each entry decodes as the mean of its row's
 * non-negative entries or of its negative ones. Each mean's sum is kept in double in eight
 * partial sums, entry lo + i in sum i % 8, added from sum 0 at the end (the codec's order). */
static void ref_1bit(const float *m, size_t n, size_t cols, float *dec)
{
    for (size_t lo = 0; lo < n; lo += cols) {
        size_t hi = lo + cols < n ? lo + cols : n;
        double ps8[8] = {0}, ns8[8] = {0};
        size_t np = 0, nn = 0;
        for (size_t i = lo; i < hi; i++) {
            if (m[i] >= 0) ps8[(i - lo) % 8] += m[i], np++;
            else ns8[(i - lo) % 8] += m[i], nn++;
        }
        double ps = 0, ns = 0;
        for (int j = 0; j < 8; j++) ps += ps8[j], ns += ns8[j];
        float mp = np ? (float)(ps / (double)np) : 0, mn = nn ? (float)(ns / (double)nn) : 0;
        for (size_t i = lo; i < hi; i++) dec[i] = m[i] >= 0 ? mp : mn;
    }
}

static const float *sort_keys;
static int by_magnitude(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    float x = fabsf(sort_keys[i]), y = fabsf(sort_keys[j]);
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : 1;
}

static void ref_topk(const float *m, size_t n, size_t k, float *dec)
{
    size_t *ix = malloc(n * sizeof *ix);
    for (size_t i = 0; i < n; i++) ix[i] = i, dec[i] = 0;
    sort_keys = m;
    qsort(ix, n, sizeof *ix, by_magnitude);
    for (size_t j = 0; j < k; j++) dec[ix[j]] = m[ix[j]];
    free(ix);
}

/* ---- the multi-rank cases ---- */

typedef struct {
    const char *spec;
    size_t count, cols;
    int steps;
    int ties;
    shoal_op op;
    int error_feedback;
} case_t;

static void run_case(shoal_comm *c, const case_t *k)
{
    int world = shoal_comm_world(c), me = shoal_comm_rank(c);
    size_t n = k->count;
    shoal_codec_opts o;
    shoal_codec_opts_default(&o);
    CHECK(shoal_codec_parse(k->spec, &o) == SHOAL_OK, "parse %s: %s", k->spec, shoal_last_error());
    o.cols = k->cols;
    o.error_feedback = k->error_feedback;
    shoal_compressor *z = NULL;
    CHECK(shoal_compressor_create(&o, n, &z) == SHOAL_OK, "create %s: %s", k->spec, shoal_last_error());
    if (!z) return;
    size_t cols = k->cols ? k->cols : n, rows = (n + cols - 1) / cols;
    int r = o.rank < (int)rows ? o.rank : (int)rows;
    if (r > (int)cols) r = (int)cols;
    int lowrank = o.codec == SHOAL_CODEC_LOWRANK && (size_t)r * (rows + cols) < n;
    float *x = malloc(n * sizeof *x), *out = malloc(n * sizeof *out), *ref = malloc(n * sizeof *ref);
    float *res = calloc((size_t)world * n, sizeof *res), *m = malloc(n * sizeof *m), *dec = malloc(n * sizeof *dec);
    float *q = NULL, *p = NULL, *qs = NULL, *ps = NULL;
    if (lowrank) { /* the first Q is the compressor's seed-made one, after the residual */
        size_t sc = 0;
        float *st = shoal_compressor_state(z, &sc);
        CHECK(sc == n + cols * (size_t)r, "lowrank state %zu floats", sc);
        q = malloc(cols * (size_t)r * sizeof *q);
        memcpy(q, st + n, cols * (size_t)r * sizeof *q);
        p = malloc(rows * (size_t)r * sizeof *p), ps = malloc(rows * (size_t)r * sizeof *ps);
        qs = malloc(cols * (size_t)r * sizeof *qs);
    }
    double tol_rel = lowrank ? 1e-4 : 0;
    size_t topk_k = (size_t)fmax(1, fmin((double)n, ceil(o.topk_fraction * (double)n)));
    for (int step = 0; step < k->steps; step++) {
        for (size_t i = 0; i < n; i++) x[i] = grad(me, step, i, k->ties);
        shoal_result rc = shoal_allreduce_compressed(c, z, x, out, n, k->op);
        CHECK(rc == SHOAL_OK, "%s step %d: %s", k->spec, step, shoal_last_error());
        /* the reference: every rank's encoding, summed in rank order */
        memset(ref, 0, n * sizeof *ref);
        if (lowrank) memset(ps, 0, rows * (size_t)r * sizeof *ps), memset(qs, 0, cols * (size_t)r * sizeof *qs);
        for (int pass = 0; pass < (lowrank ? 2 : 1); pass++)
            for (int rr = 0; rr < world; rr++) {
                float *rs = res + (size_t)rr * n;
                for (size_t i = 0; i < n; i++) m[i] = grad(rr, step, i, k->ties) + rs[i];
                if (o.codec == SHOAL_CODEC_FP16 || o.codec == SHOAL_CODEC_BF16) {
                    for (size_t i = 0; i < n; i++)
                    {
                        float v = o.codec == SHOAL_CODEC_FP16 ? ref_f16_to_f32(ref_f16(m[i])) : ref_bf16_to_f32(ref_bf16(m[i]));
                        ref[i] = rr ? ref[i] + v : v;
                    }
                    continue;
                }
                if (o.codec == SHOAL_CODEC_1BIT) ref_1bit(m, n, cols, dec);
                else if (o.codec == SHOAL_CODEC_TOPK) ref_topk(m, n, topk_k, dec);
                else if (!lowrank) memcpy(dec, m, n * sizeof *m);
                else if (pass == 0) { /* P_r = M_r Q, summed */
                    for (size_t i = 0; i < rows; i++)
                        for (int j = 0; j < r; j++) {
                            double s = 0;
                            for (size_t l = 0; l < cols; l++) s += (double)m[i * cols + l] * q[l * (size_t)r + (size_t)j];
                            ps[i * (size_t)r + (size_t)j] += (float)s;
                        }
                    if (rr == world - 1) /* Gram-Schmidt on the sum */
                        for (int j = 0; j < r; j++) {
                            for (int l = 0; l < j; l++) {
                                double d = 0;
                                for (size_t i = 0; i < rows; i++) d += (double)ps[i * (size_t)r + (size_t)j] * ps[i * (size_t)r + (size_t)l];
                                for (size_t i = 0; i < rows; i++) ps[i * (size_t)r + (size_t)j] -= (float)(d * ps[i * (size_t)r + (size_t)l]);
                            }
                            double nn = 0;
                            for (size_t i = 0; i < rows; i++) nn += (double)ps[i * (size_t)r + (size_t)j] * ps[i * (size_t)r + (size_t)j];
                            for (size_t i = 0; i < rows; i++) ps[i * (size_t)r + (size_t)j] = nn > 1e-30 ? (float)(ps[i * (size_t)r + (size_t)j] / sqrt(nn)) : 0;
                        }
                    continue;
                } else { /* Q_r = M_r^T P, summed */
                    for (size_t l = 0; l < cols; l++)
                        for (int j = 0; j < r; j++) {
                            double s = 0;
                            for (size_t i = 0; i < rows; i++) s += (double)m[i * cols + l] * ps[i * (size_t)r + (size_t)j];
                            qs[l * (size_t)r + (size_t)j] += (float)s;
                        }
                    if (rr < world - 1) continue;
                    memcpy(q, qs, cols * (size_t)r * sizeof *q);
                    for (size_t i = 0; i < rows; i++) /* the approximation of the sum */
                        for (size_t l = 0; l < cols; l++) {
                            double s = 0;
                            for (int j = 0; j < r; j++) s += (double)ps[i * (size_t)r + (size_t)j] * qs[l * (size_t)r + (size_t)j];
                            ref[i * cols + l] = (float)s;
                        }
                    for (int r2 = 0; r2 < world; r2++) { /* each rank's residual against its share */
                        float *rs2 = res + (size_t)r2 * n;
                        for (size_t i = 0; i < n; i++) {
                            float m2 = grad(r2, step, i, k->ties) + rs2[i];
                            rs2[i] = k->error_feedback ? m2 - ref[i] / (float)world : 0;
                        }
                    }
                    continue;
                }
                for (size_t i = 0; i < n; i++) {
                    ref[i] += dec[i];
                    if (o.codec == SHOAL_CODEC_1BIT || o.codec == SHOAL_CODEC_TOPK)
                        rs[i] = k->error_feedback ? m[i] - dec[i] : 0;
                }
            }
        if (o.codec == SHOAL_CODEC_FP16 || o.codec == SHOAL_CODEC_BF16) {
            /* the owner's float32 sum rounds once more to 16 bits */
            for (size_t i = 0; i < n; i++) {
                float s = k->op == SHOAL_AVG ? ref[i] / (float)world : ref[i];
                ref[i] = o.codec == SHOAL_CODEC_FP16 ? ref_f16_to_f32(ref_f16(s)) : ref_bf16_to_f32(ref_bf16(s));
            }
        } else if (k->op == SHOAL_AVG) {
            for (size_t i = 0; i < n; i++) ref[i] /= (float)world;
        }
        int bad = 0;
        size_t first = 0;
        for (size_t i = 0; i < n; i++) {
            int ok = tol_rel ? fabs((double)out[i] - ref[i]) <= tol_rel * (1 + fabs((double)ref[i]))
                             : memcmp(&out[i], &ref[i], sizeof(float)) == 0;
            if (!ok && !bad++) first = i;
        }
        CHECK(!bad, "%s on %d ranks, step %d: %d of %zu entries differ from the reference, first [%zu] %.9g vs %.9g",
              k->spec, world, step, bad, n, first, bad ? out[first] : 0.0, bad ? ref[first] : 0.0);
        check_same_bits(c, out, n, k->spec);
    }
    /* the residual this rank carries is the reference's */
    size_t sc = 0;
    float *st = shoal_compressor_state(z, &sc);
    int bad = 0;
    double rn = 0;
    for (size_t i = 0; i < n; i++) {
        float want = res[(size_t)me * n + i];
        rn += (double)want * want;
        bad += tol_rel ? fabs((double)st[i] - want) > tol_rel * 10 * (1 + fabs((double)want)) : memcmp(&st[i], &want, sizeof want) != 0;
    }
    CHECK(!bad, "%s on %d ranks: %d residual entries differ from the reference", k->spec, world, bad);
    if (o.codec != SHOAL_CODEC_FP16 && o.codec != SHOAL_CODEC_BF16)
        CHECK_NEAR(shoal_compressor_residual_norm(z), sqrt(rn), 1e-3 * (1 + sqrt(rn)));
    if (k->error_feedback && (o.codec == SHOAL_CODEC_1BIT || (o.codec == SHOAL_CODEC_TOPK && topk_k < n) || lowrank))
        CHECK(rn > 0, "%s: error feedback left no residual", k->spec);
    free(x), free(out), free(ref), free(res), free(m), free(dec), free(q), free(p), free(ps), free(qs);
    shoal_compressor_destroy(z);
}

static const case_t cases[] = {
    {"fp16", 1009, 0, 2, 0, SHOAL_SUM, 1},
    {"bf16", 1009, 0, 2, 0, SHOAL_AVG, 1},
    {"1bit", 1000, 100, 4, 0, SHOAL_AVG, 1},
    {"1bit", 997, 64, 3, 1, SHOAL_SUM, 1},
    {"1bit", 300, 0, 2, 0, SHOAL_SUM, 0},
    {"1bit", 13, 3, 2, 0, SHOAL_AVG, 1},     /* rows shorter than a byte's eight entries */
    {"1bit", 9001, 17, 2, 0, SHOAL_AVG, 1},  /* several blocks of rows in the sum */
    {"1bit", 10007, 5000, 2, 1, SHOAL_SUM, 1}, /* rows longer than a block */
    {"topk:0.05", 1000, 0, 4, 0, SHOAL_AVG, 1},
    {"topk:0.1", 513, 0, 4, 1, SHOAL_SUM, 1},
    {"topk:1", 50, 0, 2, 0, SHOAL_SUM, 1}, /* everything sent: no residual */
    {"lowrank:2", 40 * 30, 30, 4, 0, SHOAL_AVG, 1},
    {"lowrank:3", 64 * 16, 16, 3, 0, SHOAL_SUM, 1},
    {"lowrank:4", 12, 4, 2, 0, SHOAL_SUM, 1}, /* too small to pay: float32, exact */
};

static void all_cases(shoal_comm *c, void *arg)
{
    (void)arg;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(c, &cases[i]);
}

static void t_codecs_on_1_to_4_ranks(void)
{
    for (int n = 1; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 60};
        CHECK(RUN_RANKS(n, &o, all_cases, NULL) == 0, "%d ranks", n);
    }
}

static void t_codecs_real_transports(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_REAL, .deadline_s = 60};
    CHECK(RUN_RANKS(3, &o, all_cases, NULL) == 0, "3 ranks, shared memory");
    sh_test_ranks_opts t = {.links = SH_TEST_REAL, .transport = "tcp", .deadline_s = 60};
    CHECK(RUN_RANKS(2, &t, all_cases, NULL) == 0, "2 ranks, tcp");
}

/* fp16/bf16 conversion of single values through one rank: the reference's rounding */
static void t_half_round_trip(void)
{
    static const float special[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                                    -3.14159f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 3.4e38f, 1e-40f};
    size_t n = 4000 + sizeof special / sizeof special[0];
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        uint64_t h = mix(i);
        x[i] = i < sizeof special / sizeof special[0] ? special[i]
                                                      : (float)ldexp((double)(h >> 11) * 0x1.0p-53 - 0.5, (int)(h % 50) - 30);
    }
    const char *codecs[] = {"fp16", "bf16"};
    for (int c = 0; c < 2; c++) {
        shoal_codec_opts o;
        shoal_codec_opts_default(&o);
        CHECK(shoal_codec_parse(codecs[c], &o) == SHOAL_OK, "parse");
        shoal_compressor *z = NULL;
        CHECK(shoal_compressor_create(&o, n, &z) == SHOAL_OK, "create");
        /* a world of one, made without a launcher */
        shoal_comm_opts co;
        shoal_comm_opts_default(&co);
        co.rank = 0, co.world = 1, co.master_addr = "127.0.0.1", co.job_key = "test_compress";
        shoal_comm *comm = NULL;
        CHECK(shoal_comm_create(&co, &comm) == SHOAL_OK, "comm: %s", shoal_last_error());
        if (!comm || !z) return;
        CHECK(shoal_allreduce_compressed(comm, z, x, y, n, SHOAL_SUM) == SHOAL_OK, "%s", shoal_last_error());
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = c == 0 ? ref_f16_to_f32(ref_f16(x[i])) : ref_bf16_to_f32(ref_bf16(x[i]));
            if (memcmp(&want, &y[i], sizeof want) && !bad++)
                fprintf(stderr, "  %s(%.9g): %.9g, reference %.9g\n", codecs[c], x[i], y[i], want);
        }
        CHECK(!bad, "%s: %d of %zu round trips differ from the reference", codecs[c], bad, n);
        if (c == 0) CHECK(isinf(y[5]) && !isinf(y[4]), "fp16: 65520 rounds to infinity, 65519.99 to 65504");
        shoal_compressor_destroy(z);
        shoal_comm_destroy(comm);
    }
    free(x), free(y);
}

static void t_parse(void)
{
    shoal_codec_opts o;
    shoal_codec_opts_default(&o);
    CHECK(o.codec == SHOAL_CODEC_NONE && o.error_feedback == 1, "defaults");
    CHECK(shoal_codec_parse("topk:0.01", &o) == SHOAL_OK && o.codec == SHOAL_CODEC_TOPK && o.topk_fraction == 0.01, "topk");
    CHECK(shoal_codec_parse("lowrank:4", &o) == SHOAL_OK && o.codec == SHOAL_CODEC_LOWRANK && o.rank == 4, "lowrank");
    char buf[32];
    CHECK(!strcmp(shoal_codec_format(&o, buf, sizeof buf), "lowrank:4"), "format %s", buf);
    const char *bad[] = {"topk:0", "lowrank:0", "gzip", "fp16:2", "topk", "topk:1.5", "lowrank:x", "1bit:", ""};
    const char *want[] = {"(0, 1]", "whole number", "unknown compression \"gzip\"", "takes no parameter",
                          "needs a parameter", "(0, 1]", "whole number", "takes no parameter", "unknown"};
    for (int i = 0; i < 9; i++) {
        shoal_result rc = shoal_codec_parse(bad[i], &o);
        CHECK(rc == SHOAL_ERR_INVALID, "\"%s\" refused", bad[i]);
        CHECK(strstr(shoal_last_error(), want[i]) != NULL, "\"%s\": %s", bad[i], shoal_last_error());
    }
    shoal_codec_opts_default(&o);
    o.codec = SHOAL_CODEC_LOWRANK, o.rank = 2, o.cols = 7;
    shoal_compressor *z = NULL;
    CHECK(shoal_compressor_create(&o, 20, &z) == SHOAL_ERR_INVALID && !z, "20 is not rows of 7: refused");
    CHECK(strstr(shoal_last_error(), "not a whole number of rows") != NULL, "%s", shoal_last_error());
}

/* rank 1 compresses with another codec: every rank fails naming it, and goes on */
static void mismatched(shoal_comm *c, void *arg)
{
    (void)arg;
    int me = shoal_comm_rank(c);
    shoal_codec_opts o;
    shoal_codec_opts_default(&o);
    CHECK(shoal_codec_parse(me == 1 ? "topk:0.1" : "1bit", &o) == SHOAL_OK, "parse");
    shoal_compressor *z = NULL;
    CHECK(shoal_compressor_create(&o, 100, &z) == SHOAL_OK, "create");
    float x[100] = {0}, y[100];
    shoal_result rc = shoal_allreduce_compressed(c, z, x, y, 100, SHOAL_SUM);
    CHECK(rc == SHOAL_ERR_MISMATCH, "rank %d: got %d", me, (int)rc);
    CHECK(strstr(shoal_last_error(), "rank 1") && strstr(shoal_last_error(), "topk:0.1") &&
              strstr(shoal_last_error(), "1bit"), "rank %d: %s", me, shoal_last_error());
    CHECK(shoal_allreduce_compressed(c, z, x, y, 99, SHOAL_SUM) == SHOAL_ERR_INVALID, "count other than the compressor's");
    CHECK(shoal_allreduce_compressed(c, z, x, y, 100, SHOAL_MAX) == SHOAL_ERR_INVALID, "max cannot be compressed");
    double v = 1;
    CHECK(shoal_allreduce(c, &v, &v, 1, SHOAL_FLOAT64, SHOAL_SUM) == SHOAL_OK && v == shoal_comm_world(c),
          "the communicator still works: %s", shoal_last_error());
    shoal_compressor_destroy(z);
}

static void t_mismatch(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 30};
    CHECK(RUN_RANKS(3, &o, mismatched, NULL) == 0, "3 ranks");
}

/* theoretical bytes: 1bit sends 1/32 of float32 plus two floats a row */
static void t_wire_bytes(void)
{
    shoal_codec_opts o;
    shoal_codec_opts_default(&o);
    shoal_compressor *z = NULL;
    o.codec = SHOAL_CODEC_1BIT, o.cols = 1000;
    CHECK(shoal_compressor_create(&o, 100000, &z) == SHOAL_OK, "create");
    CHECK_NEAR(shoal_compressor_wire_nbytes(z, 2), 100000 / 8 + 100 * 8, 0);
    CHECK_NEAR(shoal_compressor_wire_nbytes(z, 1), 0, 0);
    shoal_compressor_destroy(z);
    o.codec = SHOAL_CODEC_NONE;
    CHECK(shoal_compressor_create(&o, 100000, &z) == SHOAL_OK, "create");
    CHECK_NEAR(shoal_compressor_wire_nbytes(z, 2), 400000, 0);
    shoal_compressor_destroy(z);
}


/* Point to point: a second compressor decodes what the first encodes; the decoded values
 * are the reference codec's, and decoded + new residual = input + old residual (error
 * feedback loses nothing) over several steps. */
static void t_encode_decode(void)
{
    static const char *specs[] = {"fp16", "bf16", "1bit", "topk:0.05", "lowrank:2", "lowrank:8", "none"};
    size_t n = 600, cols = 30;
    for (int c = 0; c < 7; c++) {
        shoal_codec_opts o;
        shoal_codec_opts_default(&o);
        CHECK(shoal_codec_parse(specs[c], &o) == SHOAL_OK, "parse");
        o.cols = cols;
        shoal_compressor *enc = NULL, *dec = NULL;
        CHECK(shoal_compressor_create(&o, n, &enc) == SHOAL_OK && shoal_compressor_create(&o, n, &dec) == SHOAL_OK,
              "create %s", specs[c]);
        if (!enc || !dec) return;
        size_t nb = shoal_compressor_payload_nbytes(enc), sc = 0;
        unsigned char *payload = malloc(nb + 1);
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *old = malloc(n * sizeof *old);
        float *ref = malloc(n * sizeof *ref);
        int bad_identity = 0, bad_ref = 0;
        for (int step = 0; step < 4; step++) {
            float *st = shoal_compressor_state(enc, &sc);
            for (size_t i = 0; i < n; i++) x[i] = grad(0, step, i, 0), old[i] = st[i];
            CHECK(shoal_compressor_encode(enc, x, payload) == SHOAL_OK, "encode");
            CHECK(shoal_compressor_decode(dec, payload, nb, y) == SHOAL_OK, "decode: %s", shoal_last_error());
            for (size_t i = 0; i < n; i++) {
                double lost = (double)x[i] + old[i] - ((double)y[i] + st[i]);
                if (o.codec != SHOAL_CODEC_FP16 && o.codec != SHOAL_CODEC_BF16)
                    bad_identity += fabs(lost) > 1e-5 * (1 + fabs((double)x[i]));
                old[i] = x[i] + old[i];
            }
            if (o.codec == SHOAL_CODEC_1BIT) ref_1bit(old, n, cols, ref);
            else if (o.codec == SHOAL_CODEC_TOPK) ref_topk(old, n, 30, ref);
            else if (o.codec == SHOAL_CODEC_FP16) for (size_t i = 0; i < n; i++) ref[i] = ref_f16_to_f32(ref_f16(x[i]));
            else if (o.codec == SHOAL_CODEC_BF16) for (size_t i = 0; i < n; i++) ref[i] = ref_bf16_to_f32(ref_bf16(x[i]));
            else memcpy(ref, y, n * sizeof *y); /* lowrank: the identity above is the check */
            bad_ref += memcmp(ref, y, n * sizeof *y) != 0;
        }
        CHECK(!bad_identity, "%s: decoded + residual = input + old residual (%d misses)", specs[c], bad_identity);
        CHECK(!bad_ref, "%s: decoded values are the reference codec's (%d steps differ)", specs[c], bad_ref);
        CHECK(shoal_compressor_decode(dec, payload, nb + 1, y) == SHOAL_ERR_INVALID, "%s: a payload of another size", specs[c]);
        if (o.codec == SHOAL_CODEC_1BIT) CHECK(nb == 2 * 4 * (n / cols) + n / 8, "1bit payload %zu bytes", nb);
        if (o.codec == SHOAL_CODEC_LOWRANK && o.rank == 2) CHECK(nb == 2 * (20 + 30) * 4, "lowrank:2 payload %zu", nb);
        free(payload), free(x), free(y), free(old), free(ref);
        shoal_compressor_destroy(enc);
        shoal_compressor_destroy(dec);
    }
}

/* 1bit on awkward shapes and values, point to point: rows of 1 to 65 entries (starting
 * anywhere in a byte, tails of every length), counts below a byte, rows all >= 0 or all
 * < 0, zeros of both signs, ties at zero. The decoded values are the reference's, the new
 * residual is input + old residual - decoded, bit for bit. */
static void t_1bit_shapes(void)
{
    static const size_t cols_list[] = {1, 3, 7, 8, 9, 16, 17, 64, 65};
    static const size_t count_list[] = {1, 5, 8, 13, 100, 1023};
    int bad_dec = 0, bad_res = 0, cases_run = 0;
    for (size_t a = 0; a < sizeof cols_list / sizeof cols_list[0]; a++)
        for (size_t b = 0; b < sizeof count_list / sizeof count_list[0]; b++) {
            size_t cols = cols_list[a], n = count_list[b];
            shoal_codec_opts o;
            shoal_codec_opts_default(&o);
            o.codec = SHOAL_CODEC_1BIT, o.cols = cols;
            shoal_compressor *enc = NULL, *dec = NULL;
            CHECK(shoal_compressor_create(&o, n, &enc) == SHOAL_OK && shoal_compressor_create(&o, n, &dec) == SHOAL_OK,
                  "create 1bit %zu / %zu", n, cols);
            if (!enc || !dec) return;
            size_t nb = shoal_compressor_payload_nbytes(enc), sc = 0;
            unsigned char *payload = malloc(nb);
            float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *m = malloc(n * sizeof *m);
            float *ref = malloc(n * sizeof *ref);
            for (int step = 0; step < 3; step++) {
                float *st = shoal_compressor_state(enc, &sc);
                for (size_t i = 0; i < n; i++) {
                    uint64_t h = mix(i * 7 + (uint64_t)step);
                    size_t row = i / (cols < n ? cols : n);
                    float v = (float)((int)(h % 9) - 4) / 8.0f;  /* zeros and ties */
                    if (h % 5 == 0) v = -0.0f;
                    if (row % 4 == 1) v = fabsf(v);              /* a row all >= 0 */
                    if (row % 4 == 2) v = -fabsf(v) - 0.5f;      /* a row all < 0 */
                    x[i] = v;
                    m[i] = x[i] + st[i];
                }
                CHECK(shoal_compressor_encode(enc, x, payload) == SHOAL_OK, "encode");
                CHECK(shoal_compressor_decode(dec, payload, nb, y) == SHOAL_OK, "decode: %s", shoal_last_error());
                ref_1bit(m, n, cols, ref);
                bad_dec += memcmp(ref, y, n * sizeof *y) != 0;
                for (size_t i = 0; i < n; i++) {
                    float want = m[i] - ref[i];
                    bad_res += memcmp(&want, &st[i], sizeof want) != 0;
                }
            }
            cases_run++;
            free(payload), free(x), free(y), free(m), free(ref);
            shoal_compressor_destroy(enc);
            shoal_compressor_destroy(dec);
        }
    CHECK(!bad_dec, "1bit: %d of %d shapes' steps decode other than the reference", bad_dec, cases_run * 3);
    CHECK(!bad_res, "1bit: %d residual entries differ from input + old residual - decoded", bad_res);
}

int main(void)
{
    check_begin("test_compress", 120);
    RUN(t_parse);
    RUN(t_half_round_trip);
    RUN(t_codecs_on_1_to_4_ranks);
    RUN(t_codecs_real_transports);
    RUN(t_mismatch);
    RUN(t_wire_bytes);
    RUN(t_encode_decode);
    RUN(t_1bit_shapes);
    return check_end();
}
