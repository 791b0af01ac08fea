/* test_reduce.c — proves src/comm/reduce.c: every kernel set the CPU has (scalar, AVX2,
 * AVX-512) x every dtype x op, in place and three-operand, at every length 0..300 and at
 * byte-misaligned starts, bit for bit against a reference written here (its own half and
 * bfloat16 conversions through double arithmetic); float16/bfloat16 conversions exhaustive
 * over all 65536 values and every rounding tie, subnormals, inf, NaN, against F16C too;
 * integer wrap; NaN min/max; avg's final division; names; the streaming copy at every
 * alignment of both ends, leaving the bytes around the destination alone. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "comm/reduce.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_X86 1
/* The F16C instructions themselves, for comparison (called only where the CPU has them). */
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
#endif

/* ---- reference conversions, independent of reduce.c: exact arithmetic in double ---- */

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float ref_f16_to_f32(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? bitsf(((uint32_t)(h & 0x8000) << 16) | 0x7f800000u | (uint32_t)m << 13)
                          : (float)(s * INFINITY);
    if (e == 0) return (float)(s * ldexp(m, -24));
    return (float)(s * ldexp(1024 + m, e - 25));
}

/* Nearest representable with `mbits` mantissa bits, exponent bias `bias`, ties to even
 * (nearbyint in the default rounding mode); NaN quiet with its top payload bits. */
static uint16_t ref_narrow(float f, int mbits, int ebits)
{
    uint32_t u = fbits(f), sign = (u >> 31) << (mbits + ebits);
    int bias = (1 << (ebits - 1)) - 1, emax_field = (1 << ebits) - 1;
    uint32_t inf = (uint32_t)emax_field << mbits;
    if (isnan(f)) return (uint16_t)(sign | inf | (1u << (mbits - 1)) | ((u & 0x7fffff) >> (23 - mbits)));
    double a = fabs((double)f);
    if (isinf(f)) return (uint16_t)(sign | inf);
    int emin = 1 - bias;
    if (a < ldexp(1, emin)) { /* subnormal in the narrow type (may round up to the smallest normal) */
        double q = nearbyint(ldexp(a, mbits - emin));
        return (uint16_t)(sign | (uint32_t)q);
    }
    int ex;
    frexp(a, &ex);
    int E = ex - 1;
    double q = nearbyint(ldexp(a, mbits - E));
    if (q == ldexp(1, mbits + 1)) {
        q = ldexp(1, mbits);
        E++;
    }
    if (E > bias) return (uint16_t)(sign | inf);
    return (uint16_t)(sign | (uint32_t)(E + bias) << mbits | ((uint32_t)q - (1u << mbits)));
}

static uint16_t ref_f32_to_f16(float f) { return ref_narrow(f, 10, 5); }
static uint16_t ref_f32_to_bf16(float f) { return ref_narrow(f, 7, 8); }
static float ref_bf16_to_f32(uint16_t h) { return bitsf((uint32_t)h << 16); }

/* ---- reference element operation, reading and writing through memcpy (misaligned ok) ---- */

static float fop(float x, float y, shoal_op op)
{
    switch (op) {
    case SHOAL_PROD: return x * y;
    case SHOAL_MIN: return isnan(x) ? x : isnan(y) ? y : x < y ? x : y;
    case SHOAL_MAX: return isnan(x) ? x : isnan(y) ? y : x > y ? x : y;
    default: return x + y;
    }
}

static double dop(double x, double y, shoal_op op)
{
    switch (op) {
    case SHOAL_PROD: return x * y;
    case SHOAL_MIN: return isnan(x) ? x : isnan(y) ? y : x < y ? x : y;
    case SHOAL_MAX: return isnan(x) ? x : isnan(y) ? y : x > y ? x : y;
    default: return x + y;
    }
}

/* Signed integers as int64, results wrapped to `bits` bits (two's complement). */
static int64_t iop(int64_t x, int64_t y, shoal_op op, int bits, int is_unsigned)
{
    uint64_t u;
    switch (op) {
    case SHOAL_PROD: u = (uint64_t)x * (uint64_t)y; break;
    case SHOAL_MIN: return x < y ? x : y;
    case SHOAL_MAX: return x > y ? x : y;
    default: u = (uint64_t)x + (uint64_t)y; break;
    }
    if (bits == 64) return (int64_t)u;
    u &= (1ull << bits) - 1;
    if (!is_unsigned && (u >> (bits - 1))) return (int64_t)(u - (1ull << bits));
    return (int64_t)u;
}

static void ref_elem(unsigned char *d, const unsigned char *a, const unsigned char *b,
                     shoal_dtype dt, shoal_op op)
{
    switch (dt) {
    case SHOAL_INT8: {
        int8_t x, y, r;
        memcpy(&x, a, 1), memcpy(&y, b, 1);
        r = (int8_t)iop(x, y, op, 8, 0);
        memcpy(d, &r, 1);
        break;
    }
    case SHOAL_UINT8: {
        uint8_t x = *a, y = *b;
        *d = (uint8_t)iop(x, y, op, 8, 1);
        break;
    }
    case SHOAL_INT32: {
        int32_t x, y, r;
        memcpy(&x, a, 4), memcpy(&y, b, 4);
        r = (int32_t)iop(x, y, op, 32, 0);
        memcpy(d, &r, 4);
        break;
    }
    case SHOAL_INT64: {
        int64_t x, y, r;
        memcpy(&x, a, 8), memcpy(&y, b, 8);
        r = iop(x, y, op, 64, 0);
        memcpy(d, &r, 8);
        break;
    }
    case SHOAL_FLOAT16:
    case SHOAL_BFLOAT16: {
        uint16_t x, y, r;
        memcpy(&x, a, 2), memcpy(&y, b, 2);
        if (dt == SHOAL_FLOAT16)
            r = ref_f32_to_f16(fop(ref_f16_to_f32(x), ref_f16_to_f32(y), op));
        else
            r = ref_f32_to_bf16(fop(ref_bf16_to_f32(x), ref_bf16_to_f32(y), op));
        memcpy(d, &r, 2);
        break;
    }
    case SHOAL_FLOAT32: {
        float x, y, r;
        memcpy(&x, a, 4), memcpy(&y, b, 4);
        r = fop(x, y, op);
        memcpy(d, &r, 4);
        break;
    }
    default: {
        double x, y, r;
        memcpy(&x, a, 8), memcpy(&y, b, 8);
        r = dop(x, y, op);
        memcpy(d, &r, 8);
        break;
    }
    }
}

/* Random values: integers over their whole range (so sums and products wrap), floats of
 * mixed magnitudes and signs (products of halves overflow and underflow to subnormals). */
static void fill(unsigned char *p, size_t n, shoal_dtype dt, sh_rng *g)
{
    size_t es = shoal_dtype_nbytes(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = sh_rng_u64(g);
        double v = (sh_rng_float(g) * 2 - 1) * ldexp(1, (int)(r % 24) - 12);
        switch (dt) {
        case SHOAL_FLOAT16: {
            uint16_t h = ref_f32_to_f16((float)v);
            memcpy(p + i * es, &h, 2);
            break;
        }
        case SHOAL_BFLOAT16: {
            uint16_t h = ref_f32_to_bf16((float)(v * 1e6));
            memcpy(p + i * es, &h, 2);
            break;
        }
        case SHOAL_FLOAT32: {
            float f = (float)v;
            memcpy(p + i * es, &f, 4);
            break;
        }
        case SHOAL_FLOAT64: memcpy(p + i * es, &v, 8); break;
        default: memcpy(p + i * es, &r, es); break;
        }
    }
}

static int nan_bits(const unsigned char *p, shoal_dtype dt)
{
    switch (dt) {
    case SHOAL_FLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    }
    case SHOAL_BFLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    }
    case SHOAL_FLOAT32: {
        float f;
        memcpy(&f, p, 4);
        return isnan(f);
    }
    case SHOAL_FLOAT64: {
        double f;
        memcpy(&f, p, 8);
        return isnan(f);
    }
    default: return 0;
    }
}

/* Elements equal bit for bit, or both NaN when `nan_any` (the payload of a NaN made by
 * arithmetic on two NaNs is the hardware's choice). */
static size_t count_diff(const unsigned char *got, const unsigned char *want, size_t n,
                         shoal_dtype dt, int nan_any, size_t *first)
{
    size_t es = shoal_dtype_nbytes(dt), bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(got + i * es, want + i * es, es)) continue;
        if (nan_any && nan_bits(got + i * es, dt) && nan_bits(want + i * es, dt)) continue;
        if (!bad) *first = i;
        bad++;
    }
    return bad;
}

#define MAXN 300
static void every_set_dtype_op_length_alignment(void)
{
    sh_rng g;
    sh_rng_seed(&g, 42);
    size_t step_small = check_under_san() ? 3 : 1;
    unsigned char *a = malloc(MAXN * 8 + 16), *b = malloc(MAXN * 8 + 16);
    unsigned char *out = malloc(MAXN * 8 + 16), *want = malloc(MAXN * 8 + 16);
    long cases = 0, bad_cases = 0;
    for (int s = 0; s < SH_ISA_COUNT; s++) {
        sh_reduce_isa isa = (sh_reduce_isa)s;
        if (!sh_reduce_isa_supported(isa)) {
            printf("test_reduce: kernel set %s not supported by this CPU, skipped\n",
                   sh_reduce_isa_name(isa));
            continue;
        }
        for (int d = 0; d < SHOAL_DTYPE_COUNT; d++)
            for (int o = 0; o < SHOAL_OP_COUNT; o++)
                for (size_t n = 0; n <= MAXN; n += (n < 140 ? step_small : 7)) {
                    shoal_dtype dt = (shoal_dtype)d;
                    shoal_op op = (shoal_op)o;
                    size_t es = shoal_dtype_nbytes(dt), nb = n * es;
                    size_t off = (size_t)(n % 8); /* byte misalignment of a, b, dst: 0..7 */
                    unsigned char *pa = a + off, *pb = b + (off * 3) % 8, *po = out + (off * 5) % 8;
                    fill(pa, n, dt, &g);
                    fill(pb, n, dt, &g);
                    for (size_t i = 0; i < n; i++)
                        ref_elem(want + i * es, pa + i * es, pb + i * es, dt, op);
                    /* guard bytes after the end must survive */
                    memset(po, 0xa5, nb + 8);
                    sh_reduce3_isa(isa, po, pa, pb, n, dt, op);
                    size_t first = 0, bad = count_diff(po, want, n, dt, 0, &first);
                    int guard_ok = 1;
                    for (size_t i = 0; i < 8; i++) guard_ok &= po[nb + i] == 0xa5;
                    /* in place: dst == a */
                    unsigned char *pi = malloc(nb + 1);
                    memcpy(pi, pa, nb);
                    sh_reduce3_isa(isa, pi, pi, pb, n, dt, op);
                    size_t first2 = 0, bad2 = count_diff(pi, want, n, dt, 0, &first2);
                    free(pi);
                    cases++;
                    if (bad || bad2 || !guard_ok) {
                        if (bad_cases++ < 5)
                            fprintf(stderr, "  %s %s %s n=%zu: %zu wrong (first %zu), in place %zu "
                                    "wrong (first %zu), guard %s\n",
                                    sh_reduce_isa_name(isa), shoal_dtype_name(dt),
                                    shoal_op_name(op), n, bad, first, bad2, first2,
                                    guard_ok ? "ok" : "overwritten");
                    }
                }
    }
    CHECK(bad_cases == 0, "%ld of %ld (set, dtype, op, length) cases differ from the reference",
          bad_cases, cases);
    /* the dispatched entry points use the best set */
    sh_reduce_isa best = sh_reduce_isa_best();
    CHECK(sh_reduce_isa_supported(best), "best set %s unsupported", sh_reduce_isa_name(best));
    fill(a, MAXN, SHOAL_FLOAT32, &g);
    fill(b, MAXN, SHOAL_FLOAT32, &g);
    sh_reduce3_isa(SH_ISA_SCALAR, want, a, b, MAXN, SHOAL_FLOAT32, SHOAL_SUM);
    memcpy(out, a, MAXN * 4);
    sh_reduce(out, b, MAXN, SHOAL_FLOAT32, SHOAL_SUM);
    CHECK(!memcmp(out, want, MAXN * 4), "sh_reduce differs from the scalar set");
    free(a);
    free(b);
    free(out);
    free(want);
}

/* Special values through every set: NaN, inf, -0, subnormals, as both operands. */
static void special_values_every_set(void)
{
    const float fv[] = {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, -NAN,
                        bitsf(0x7f800001u), 1e-40f, -1e-45f, 3.4e38f, 65504.0f, 65520.0f,
                        6e-8f, 2.9e-8f, 1.5f, 0.1f};
    enum { NV = sizeof fv / sizeof fv[0], N = NV * NV };
    float fa[N], fb[N];
    double da[N], db[N];
    uint16_t ha[N], hb[N], ba[N], bb[N];
    for (int i = 0; i < NV; i++)
        for (int j = 0; j < NV; j++) {
            fa[i * NV + j] = fv[i], fb[i * NV + j] = fv[j];
            da[i * NV + j] = fv[i], db[i * NV + j] = fv[j];
            ha[i * NV + j] = ref_f32_to_f16(fv[i]), hb[i * NV + j] = ref_f32_to_f16(fv[j]);
            ba[i * NV + j] = ref_f32_to_bf16(fv[i]), bb[i * NV + j] = ref_f32_to_bf16(fv[j]);
        }
    struct {
        shoal_dtype dt;
        const void *x, *y;
    } sets[] = {{SHOAL_FLOAT32, fa, fb}, {SHOAL_FLOAT64, da, db}, {SHOAL_FLOAT16, ha, hb},
                {SHOAL_BFLOAT16, ba, bb}};
    unsigned char got[N * 8], want[N * 8];
    int bad = 0;
    for (int s = 0; s < SH_ISA_COUNT; s++) {
        if (!sh_reduce_isa_supported((sh_reduce_isa)s)) continue;
        for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++)
            for (int o = 0; o < SHOAL_OP_COUNT; o++) {
                size_t es = shoal_dtype_nbytes(sets[k].dt);
                for (int i = 0; i < N; i++)
                    ref_elem(want + i * es, (const unsigned char *)sets[k].x + i * es,
                             (const unsigned char *)sets[k].y + i * es, sets[k].dt, (shoal_op)o);
                sh_reduce3_isa((sh_reduce_isa)s, got, sets[k].x, sets[k].y, N, sets[k].dt,
                               (shoal_op)o);
                /* min/max pass a NaN through untouched: exact; arithmetic: any NaN */
                int nan_any = o == SHOAL_SUM || o == SHOAL_PROD || o == SHOAL_AVG;
                size_t first = 0, nbad = count_diff(got, want, N, sets[k].dt, nan_any, &first);
                if (nbad && bad++ < 5)
                    fprintf(stderr, "  %s %s %s: %zu wrong, first a=%g b=%g\n",
                            sh_reduce_isa_name((sh_reduce_isa)s), shoal_dtype_name(sets[k].dt),
                            shoal_op_name((shoal_op)o), nbad, fv[first / NV], fv[first % NV]);
            }
    }
    CHECK(bad == 0, "%d (set, dtype, op) special-value cases wrong", bad);
    /* the documented NaN rule, spelled out */
    float x[4] = {NAN, 1.0f, -0.0f, 2.0f}, y[4] = {1.0f, NAN, 0.0f, NAN}, r[4];
    sh_reduce3(r, x, y, 4, SHOAL_FLOAT32, SHOAL_MIN);
    CHECK(isnan(r[0]) && isnan(r[1]) && r[2] == 0.0f && !signbit(r[2]),
          "min(NaN,1)=%g min(1,NaN)=%g min(-0,+0)=%g (want NaN NaN +0)", r[0], r[1], r[2]);
    sh_reduce3(r, x, y, 4, SHOAL_FLOAT32, SHOAL_MAX);
    CHECK(isnan(r[0]) && isnan(r[1]) && isnan(r[3]), "max with NaN: %g %g %g", r[0], r[1], r[3]);
}

static void float16_exhaustive(void)
{
    int bad_to = 0, bad_rt = 0, bad_hw = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sh_f16_to_f32((uint16_t)h), r = ref_f16_to_f32((uint16_t)h);
        int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan ? !isnan(f) || signbit(f) != signbit(r) : fbits(f) != fbits(r)) bad_to++;
        uint16_t back = sh_f32_to_f16(f);
        /* a NaN comes back quiet with its payload (the quiet bit set) */
        if (back != (nan ? (uint16_t)(h | 0x200) : (uint16_t)h)) bad_rt++;
#ifdef HAVE_X86
        if (sh_reduce_isa_supported(SH_ISA_AVX2)) {
            float hf = hw_f16_to_f32((uint16_t)h);
            if (nan ? !isnan(hf) || signbit(hf) != signbit(f) : fbits(hf) != fbits(f)) bad_hw++;
        }
#endif
    }
    CHECK(bad_to == 0, "%d halves widen wrongly", bad_to);
    CHECK(bad_rt == 0, "%d halves do not round-trip", bad_rt);
    CHECK(bad_hw == 0, "%d halves widen differently from F16C", bad_hw);
    /* every tie between two neighbouring finite halves, and just either side of it */
    int bad_tie = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int sgn = 0; sgn < 2; sgn++) {
            uint16_t lo = (uint16_t)(h | (sgn ? 0x8000u : 0)), hi = (uint16_t)(lo + 1);
            float mid = (float)(((double)ref_f16_to_f32(lo) + (double)ref_f16_to_f32(hi)) / 2);
            if ((hi & 0x7fff) == 0x7c00) /* past 65504 the next step would be 65536: tie 65520 */
                mid = sgn ? -65520.0f : 65520.0f;
            uint16_t even = (lo & 1) ? hi : lo;
            if (sh_f32_to_f16(mid) != even) bad_tie++;
            if (sh_f32_to_f16(nextafterf(mid, 0.0f)) != lo) bad_tie++;
            if (sh_f32_to_f16(nextafterf(mid, sgn ? -INFINITY : INFINITY)) != hi) bad_tie++;
        }
    }
    CHECK(bad_tie == 0, "%d float16 ties or near-ties round wrongly", bad_tie);
    /* random float bit patterns (every exponent, NaNs included) against the reference and
     * against the F16C instruction */
    sh_rng g;
    sh_rng_seed(&g, 7);
    int bad_rand = 0, bad_f16c = 0, n = check_under_san() ? 100000 : 1000000;
    for (int i = 0; i < n; i++) {
        float f = bitsf((uint32_t)sh_rng_u64(&g));
        if (sh_f32_to_f16(f) != ref_f32_to_f16(f)) bad_rand++;
#ifdef HAVE_X86
        if (sh_reduce_isa_supported(SH_ISA_AVX2)) {
            uint16_t hw = hw_f32_to_f16(f), sw = sh_f32_to_f16(f);
            if (hw != sw && !(isnan(f) && (hw | 0x200) == sw)) bad_f16c++;
        }
#endif
    }
    CHECK(bad_rand == 0, "%d of %d random floats narrow to float16 differently from the "
          "reference", bad_rand, n);
    CHECK(bad_f16c == 0, "%d of %d random floats narrow differently from F16C", bad_f16c, n);
    CHECK(sh_f32_to_f16(65520.0f) == 0x7c00 && sh_f32_to_f16(65519.996f) == 0x7bff,
          "overflow edge");
    CHECK(sh_f32_to_f16(ldexpf(1, -25)) == 0 && sh_f32_to_f16(nextafterf(ldexpf(1, -25), 1)) == 1,
          "smallest subnormal edge (tie at half of it rounds to zero)");
    CHECK(sh_f32_to_f16(1e-40f) == 0 && sh_f32_to_f16(-1e-40f) == 0x8000,
          "float subnormals flush to signed zero in half");
}

static void float16_vector_conversions_match(void)
{
    /* every half through every set's widen + narrow (max with itself is exact): bit equal,
     * NaNs quietened the same way as the scalar conversion */
    static uint16_t all[65536], out[65536];
    for (uint32_t h = 0; h < 65536; h++) all[h] = (uint16_t)h;
    for (int s = 0; s < SH_ISA_COUNT; s++) {
        if (!sh_reduce_isa_supported((sh_reduce_isa)s)) continue;
        sh_reduce3_isa((sh_reduce_isa)s, out, all, all, 65536, SHOAL_FLOAT16, SHOAL_MAX);
        int bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
            if (out[h] != (nan ? (uint16_t)(h | 0x200) : (uint16_t)h)) bad++;
        }
        CHECK(bad == 0, "set %s: %d halves change through max(h, h)", sh_reduce_isa_name((sh_reduce_isa)s),
              bad);
        sh_reduce3_isa((sh_reduce_isa)s, out, all, all, 65536, SHOAL_BFLOAT16, SHOAL_MIN);
        bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
            if (out[h] != (nan ? (uint16_t)(h | 0x40) : (uint16_t)h)) bad++;
        }
        CHECK(bad == 0, "set %s: %d bfloat16 change through min(h, h)",
              sh_reduce_isa_name((sh_reduce_isa)s), bad);
    }
}

static void bfloat16_exhaustive(void)
{
    int bad = 0, bad_tie = 0, bad_rand = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = sh_bf16_to_f32((uint16_t)h);
        int nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        if (fbits(f) != fbits(ref_bf16_to_f32((uint16_t)h))) bad++;
        if (sh_f32_to_bf16(f) != (nan ? (uint16_t)(h | 0x40) : (uint16_t)h)) bad++;
        if (!nan && (h & 0x7fff) < 0x7f80) { /* ties and near-ties above h */
            uint16_t lo = (uint16_t)h, hi = (uint16_t)(h + 1);
            float mid = bitsf(((uint32_t)lo << 16) | 0x8000u);
            uint16_t even = (lo & 1) ? hi : lo;
            if (sh_f32_to_bf16(mid) != even) bad_tie++;
            if (sh_f32_to_bf16(bitsf(fbits(mid) - 1)) != lo) bad_tie++;
            if (sh_f32_to_bf16(bitsf(fbits(mid) + 1)) != hi) bad_tie++;
        }
    }
    CHECK(bad == 0, "%d bfloat16 values widen or round-trip wrongly", bad);
    CHECK(bad_tie == 0, "%d bfloat16 ties round wrongly", bad_tie);
    sh_rng g;
    sh_rng_seed(&g, 9);
    for (int i = 0; i < 200000; i++) {
        float f = bitsf((uint32_t)sh_rng_u64(&g));
        if (sh_f32_to_bf16(f) != ref_f32_to_bf16(f)) bad_rand++;
    }
    CHECK(bad_rand == 0, "%d random floats narrow to bfloat16 wrongly", bad_rand);
}

static void integer_wrap(void)
{
    for (int s = 0; s < SH_ISA_COUNT; s++) {
        sh_reduce_isa isa = (sh_reduce_isa)s;
        if (!sh_reduce_isa_supported(isa)) continue;
        int8_t a8[3] = {120, -128, 5}, b8[3] = {10, -1, 5};
        sh_reduce3_isa(isa, a8, a8, b8, 3, SHOAL_INT8, SHOAL_SUM);
        CHECK(a8[0] == -126 && a8[1] == 127 && a8[2] == 10, "%s int8 wrap: %d %d %d",
              sh_reduce_isa_name(isa), a8[0], a8[1], a8[2]);
        uint8_t u8[2] = {255, 16}, v8[2] = {1, 16};
        sh_reduce3_isa(isa, u8, u8, v8, 2, SHOAL_UINT8, SHOAL_PROD);
        CHECK(u8[0] == 255 && u8[1] == 0, "%s uint8 prod wrap: %u %u", sh_reduce_isa_name(isa),
              u8[0], u8[1]);
        int32_t a32[2] = {INT32_MAX, INT32_MIN}, b32[2] = {1, -1};
        sh_reduce3_isa(isa, a32, a32, b32, 2, SHOAL_INT32, SHOAL_SUM);
        CHECK(a32[0] == INT32_MIN && a32[1] == INT32_MAX, "%s int32 wrap", sh_reduce_isa_name(isa));
        int64_t a64[2] = {INT64_MAX, INT64_MIN}, b64[2] = {2, -1};
        sh_reduce3_isa(isa, a64, a64, b64, 2, SHOAL_INT64, SHOAL_PROD);
        CHECK(a64[0] == -2 && a64[1] == INT64_MIN, "%s int64 prod wrap: %lld %lld",
              sh_reduce_isa_name(isa), (long long)a64[0], (long long)a64[1]);
    }
}

static void avg_finish(void)
{
    int32_t s[3] = {7, -7, 8};
    sh_reduce_avg_finish(s, 3, SHOAL_INT32, 2);
    CHECK(s[0] == 3 && s[1] == -3 && s[2] == 4, "integer avg truncates: %d %d %d", s[0], s[1], s[2]);
    int8_t s8[2] = {-128, 127};
    sh_reduce_avg_finish(s8, 2, SHOAL_INT8, 3);
    CHECK(s8[0] == -42 && s8[1] == 42, "int8 avg: %d %d", s8[0], s8[1]);
    uint8_t u8[1] = {255};
    sh_reduce_avg_finish(u8, 1, SHOAL_UINT8, 4);
    CHECK(u8[0] == 63, "uint8 avg %u", u8[0]);
    int64_t s64[1] = {INT64_MIN};
    sh_reduce_avg_finish(s64, 1, SHOAL_INT64, 2);
    CHECK(s64[0] == INT64_MIN / 2, "int64 avg");
    float f[2] = {3.0f, -1.0f};
    sh_reduce_avg_finish(f, 2, SHOAL_FLOAT32, 4);
    CHECK(f[0] == 0.75f && f[1] == -0.25f, "float avg %g %g", f[0], f[1]);
    double d[1] = {1.0};
    sh_reduce_avg_finish(d, 1, SHOAL_FLOAT64, 3);
    CHECK(d[0] == 1.0 / 3, "double avg %.17g", d[0]);
    uint16_t h[2] = {ref_f32_to_f16(3.0f), ref_f32_to_f16(1.0f)};
    sh_reduce_avg_finish(h, 2, SHOAL_FLOAT16, 3);
    CHECK(h[0] == ref_f32_to_f16(1.0f) && h[1] == ref_f32_to_f16(1.0f / 3),
          "float16 avg %#x %#x", h[0], h[1]);
    uint16_t bh[1] = {ref_f32_to_bf16(10.0f)};
    sh_reduce_avg_finish(bh, 1, SHOAL_BFLOAT16, 4);
    CHECK(bh[0] == ref_f32_to_bf16(2.5f), "bfloat16 avg %#x", bh[0]);
    /* avg = sum then one division, as an allreduce of 3 ranks does it */
    float r0[2] = {1, 2}, r1[2] = {2, 4}, r2[2] = {3, 6};
    sh_reduce(r0, r1, 2, SHOAL_FLOAT32, SHOAL_AVG);
    sh_reduce(r0, r2, 2, SHOAL_FLOAT32, SHOAL_AVG);
    sh_reduce_avg_finish(r0, 2, SHOAL_FLOAT32, 3);
    CHECK(r0[0] == 2.0f && r0[1] == 4.0f, "avg of 3: %g %g", r0[0], r0[1]);
}

/* avg's division through every set, every float dtype, lengths 0..300, misaligned, against
 * the reference (one IEEE division per element, then rounding to the dtype). */
static void avg_finish_every_set(void)
{
    sh_rng g;
    sh_rng_seed(&g, 11);
    const shoal_dtype dts[] = {SHOAL_FLOAT16, SHOAL_BFLOAT16, SHOAL_FLOAT32, SHOAL_FLOAT64};
    unsigned char *buf = malloc(MAXN * 8 + 16), *want = malloc(MAXN * 8 + 16);
    long bad = 0, cases = 0;
    for (int s = 0; s < SH_ISA_COUNT; s++) {
        if (!sh_reduce_isa_supported((sh_reduce_isa)s)) continue;
        for (size_t k = 0; k < 4; k++)
            for (size_t n = 0; n <= MAXN; n += (n < 70 ? 1 : 11)) {
                shoal_dtype dt = dts[k];
                size_t es = shoal_dtype_nbytes(dt);
                int divisor = 1 + (int)(n % 7);
                unsigned char *p = buf + n % 5;
                fill(p, n, dt, &g);
                for (size_t i = 0; i < n; i++) {
                    unsigned char *e = p + i * es, *w = want + i * es;
                    if (dt == SHOAL_FLOAT16 || dt == SHOAL_BFLOAT16) {
                        uint16_t h;
                        memcpy(&h, e, 2);
                        h = dt == SHOAL_FLOAT16 ? ref_f32_to_f16(ref_f16_to_f32(h) / (float)divisor)
                                                : ref_f32_to_bf16(ref_bf16_to_f32(h) / (float)divisor);
                        memcpy(w, &h, 2);
                    } else if (dt == SHOAL_FLOAT32) {
                        float f;
                        memcpy(&f, e, 4);
                        f /= (float)divisor;
                        memcpy(w, &f, 4);
                    } else {
                        double f;
                        memcpy(&f, e, 8);
                        f /= divisor;
                        memcpy(w, &f, 8);
                    }
                }
                sh_reduce_avg_finish_isa((sh_reduce_isa)s, p, n, dt, divisor);
                size_t first = 0;
                cases++;
                if (count_diff(p, want, n, dt, 0, &first) && bad++ < 5)
                    fprintf(stderr, "  %s %s n=%zu /%d: first wrong at %zu\n",
                            sh_reduce_isa_name((sh_reduce_isa)s), shoal_dtype_name(dt), n, divisor,
                            first);
            }
    }
    CHECK(bad == 0, "%ld of %ld avg divisions differ from the reference", bad, cases);
    free(buf);
    free(want);
}

static void names(void)
{
    shoal_dtype dt;
    shoal_op op;
    CHECK(shoal_dtype_parse("bf16", &dt) == SHOAL_OK && dt == SHOAL_BFLOAT16, "bf16 alias");
    CHECK(shoal_dtype_parse("complex", &dt) == SHOAL_ERR_INVALID, "unknown dtype accepted");
    CHECK(shoal_op_parse("max", &op) == SHOAL_OK && op == SHOAL_MAX, "op");
    CHECK(shoal_op_parse("mean", &op) == SHOAL_ERR_INVALID, "unknown op accepted");
    CHECK(!strcmp(shoal_dtype_name(SHOAL_FLOAT16), "float16") && shoal_dtype_nbytes(SHOAL_INT64) == 8,
          "names");
    CHECK(!strcmp(sh_reduce_isa_name(SH_ISA_AVX512), "avx512") &&
              !strcmp(sh_reduce_isa_name(SH_ISA_COUNT), "invalid"),
          "set names");
    printf("test_reduce: kernel set in use: %s\n", sh_reduce_isa_name(sh_reduce_isa_best()));
}

static void copy_stream_every_alignment(void)
{
    enum { CAP = 4096 + 64 };
    unsigned char *src = malloc(CAP), *dst = malloc(CAP), *want = malloc(CAP);
    for (size_t i = 0; i < CAP; i++) src[i] = (unsigned char)(i * 131u + 7u);
    const size_t lens[] = {0, 1, 15, 63, 255, 256, 257, 1000, 4000};
    int bad = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int da = 0; da < 16; da++)
            for (int sa = 0; sa < 16; sa += 5) {
                memset(dst, 0xA5, CAP);
                memset(want, 0xA5, CAP);
                memcpy(want + da, src + sa, lens[li]);
                sh_copy_stream(dst + da, src + sa, lens[li]);
                if (memcmp(dst, want, CAP) != 0 && bad++ < 3)
                    CHECK(0, "sh_copy_stream(%zu bytes, dst +%d, src +%d) differs from memcpy",
                          lens[li], da, sa);
            }
    CHECK(bad == 0, "%d copies differ", bad);
    free(src);
    free(dst);
    free(want);
}

int main(void)
{
    check_begin("test_reduce", 120);
    RUN(every_set_dtype_op_length_alignment);
    RUN(special_values_every_set);
    RUN(float16_exhaustive);
    RUN(float16_vector_conversions_match);
    RUN(bfloat16_exhaustive);
    RUN(integer_wrap);
    RUN(avg_finish);
    RUN(avg_finish_every_set);
    RUN(names);
    RUN(copy_stream_every_alignment);
    return check_end();
}
