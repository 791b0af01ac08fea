/* reduce.c — reduction kernels (dst = dst OP src) for every dtype and op, in a portable,
 * an AVX2 and an AVX-512 set chosen once at run time from the CPU; float16 and bfloat16
 * reduce in float32 and round to nearest even (all sets agree bit for bit); dtype and op
 * names.
 * Not here: which bytes meet which (coll/).
 * Proved by tests/comm/test_reduce.c. */
#include "comm/reduce.h"

#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <strings.h>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "base/err.h"

static const struct {
    const char *name;
    size_t nbytes;
} dtypes[SHOAL_DTYPE_COUNT] = {
    [SHOAL_INT8] = {"int8", 1},         [SHOAL_UINT8] = {"uint8", 1},
    [SHOAL_INT32] = {"int32", 4},       [SHOAL_INT64] = {"int64", 8},
    [SHOAL_FLOAT16] = {"float16", 2},   [SHOAL_BFLOAT16] = {"bfloat16", 2},
    [SHOAL_FLOAT32] = {"float32", 4},   [SHOAL_FLOAT64] = {"float64", 8},
};
static const char *const op_names[SHOAL_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

size_t shoal_dtype_nbytes(shoal_dtype dt)
{
    return (unsigned)dt < SHOAL_DTYPE_COUNT ? dtypes[dt].nbytes : 0;
}

const char *shoal_dtype_name(shoal_dtype dt)
{
    return (unsigned)dt < SHOAL_DTYPE_COUNT ? dtypes[dt].name : "invalid";
}

const char *shoal_op_name(shoal_op op)
{
    return (unsigned)op < SHOAL_OP_COUNT ? op_names[op] : "invalid";
}

shoal_result shoal_dtype_parse(const char *s, shoal_dtype *out)
{
    static const struct {
        const char *alias;
        shoal_dtype dt;
    } aliases[] = {
        {"int8", SHOAL_INT8},       {"char", SHOAL_INT8},         {"i8", SHOAL_INT8},
        {"uint8", SHOAL_UINT8},     {"u8", SHOAL_UINT8},          {"int32", SHOAL_INT32},
        {"int", SHOAL_INT32},       {"i32", SHOAL_INT32},         {"int64", SHOAL_INT64},
        {"long", SHOAL_INT64},      {"i64", SHOAL_INT64},         {"float16", SHOAL_FLOAT16},
        {"half", SHOAL_FLOAT16},    {"f16", SHOAL_FLOAT16},       {"bfloat16", SHOAL_BFLOAT16},
        {"bf16", SHOAL_BFLOAT16},   {"float32", SHOAL_FLOAT32},   {"float", SHOAL_FLOAT32},
        {"f32", SHOAL_FLOAT32},     {"float64", SHOAL_FLOAT64},   {"double", SHOAL_FLOAT64},
        {"f64", SHOAL_FLOAT64},
    };
    for (size_t i = 0; s && i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(s, aliases[i].alias) == 0) {
            *out = aliases[i].dt;
            return SHOAL_OK;
        }
    return SH_FAIL(SHOAL_ERR_INVALID,
                   "unknown data type \"%s\"; use int8, uint8, int32, int64, float16, bfloat16, "
                   "float32 or float64",
                   s ? s : "(null)");
}

shoal_result shoal_op_parse(const char *s, shoal_op *out)
{
    for (int i = 0; s && i < SHOAL_OP_COUNT; i++)
        if (strcasecmp(s, op_names[i]) == 0) {
            *out = (shoal_op)i;
            return SHOAL_OK;
        }
    return SH_FAIL(SHOAL_ERR_INVALID, "unknown reduction \"%s\"; use sum, prod, min, max or avg",
                   s ? s : "(null)");
}

float sh_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t sh_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN: quiet, top payload bits kept (as F16C's vcvtps2ph) */
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to infinity */
    if (a < 0x38800000u) {                                  /* subnormal or zero in half */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* value m * 2^(e-150) in units of 2^-24 */
        uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        uint32_t q = m >> shift;
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = (a - 0x38000000u) >> 13; /* rebias exponent 127 -> 15 */
    uint32_t rem = a & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

float sh_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t sh_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* The element operations every kernel set uses. Integer sums and products run on the
 * unsigned type of the same width, so they wrap (two's complement) with no undefined
 * behaviour. min/max of floats propagate NaN: if either operand is NaN the result is NaN
 * (the first operand's NaN when both are); equal operands (-0 and +0) give the second. */
#define R_ADD(x, y) ((x) + (y))
#define R_MUL(x, y) ((x) * (y))
#define R_IMIN(x, y) ((y) < (x) ? (y) : (x))
#define R_IMAX(x, y) ((y) > (x) ? (y) : (x))
#define R_FMIN(x, y) ((x) < (y) || __builtin_isnan(x) ? (x) : (y))
#define R_FMAX(x, y) ((x) > (y) || __builtin_isnan(x) ? (x) : (y))

/* Portable set: float16 through the scalar conversions above. On x86-64 it is compiled for
 * the baseline (SSE2) so that it runs on any CPU whatever -march the build used. */
#define KSFX scalar
#if defined(__x86_64__)
#define KATTR __attribute__((target("arch=x86-64")))
#else
#define KATTR
#endif
#define KF16_W 16
#define KF16_LOAD(x, h)                                                                    \
    do {                                                                                   \
        uint16_t hh_[16]; /* h may be misaligned */                                        \
        float t_[16];                                                                      \
        memcpy(hh_, (h), sizeof hh_);                                                      \
        for (int k_ = 0; k_ < 16; k_++) t_[k_] = sh_f16_to_f32(hh_[k_]);                   \
        memcpy(&(x), t_, sizeof t_);                                                       \
    } while (0)
#define KF16_STORE(h, x)                                                                   \
    do {                                                                                   \
        uint16_t hh_[16];                                                                  \
        float t_[16];                                                                      \
        memcpy(t_, &(x), sizeof t_);                                                       \
        for (int k_ = 0; k_ < 16; k_++) hh_[k_] = sh_f32_to_f16(t_[k_]);                   \
        memcpy((h), hh_, sizeof hh_);                                                      \
    } while (0)
#include "comm/reduce_kernels.h"
#undef KSFX
#undef KATTR
#undef KF16_W
#undef KF16_LOAD
#undef KF16_STORE

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SH_REDUCE_X86 1
/* AVX2 + F16C (Haswell and later): 256-bit vectors, hardware half conversions. The two
 * vector sets add to the build's own target (a -march=native build may use more). */
#define KSFX avx2
#define KATTR __attribute__((target("avx2,fma,f16c")))
#define KF16_W 8
#define KF16_LOAD(x, h) (x) = (V)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h)))
#define KF16_STORE(h, x)                                                                   \
    _mm_storeu_si128((__m128i *)(h), _mm256_cvtps_ph((__m256)(x), _MM_FROUND_TO_NEAREST_INT))
#include "comm/reduce_kernels.h"
#undef KSFX
#undef KATTR
#undef KF16_W
#undef KF16_LOAD
#undef KF16_STORE

/* AVX-512 (F, BW, VL, DQ; Skylake-SP and later): 512-bit vectors. */
#define KSFX avx512
#if defined(__clang__)
#define KATTR __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#else
#define KATTR                                                                              \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,"              \
                          "prefer-vector-width=512")))
#endif
/* bfloat16 the same way as the generic code, in AVX-512 integer instructions (vpmovdw to
 * narrow): the generic vectors compile to a slower permute here. */
#define KBF16_LOAD(x, h)                                                                   \
    (x) = (V)_mm512_slli_epi32(                                                            \
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h))), 16)
#define KBF16_STORE(h, x)                                                                  \
    do {                                                                                   \
        __m512i u_ = (__m512i)(x);                                                         \
        __m512i hi_ = _mm512_srli_epi32(u_, 16);                                           \
        __m512i rq_ = _mm512_srli_epi32(                                                   \
            _mm512_add_epi32(_mm512_add_epi32(u_, _mm512_set1_epi32(0x7fff)),              \
                             _mm512_and_si512(hi_, _mm512_set1_epi32(1))),                 \
            16);                                                                           \
        __mmask16 nan_ = _mm512_cmpgt_epu32_mask(                                          \
            _mm512_and_si512(u_, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000)); \
        rq_ = _mm512_mask_mov_epi32(rq_, nan_, _mm512_or_si512(hi_, _mm512_set1_epi32(0x40))); \
        _mm256_storeu_si256((__m256i *)(h), _mm512_cvtepi32_epi16(rq_));                   \
    } while (0)
#define KF16_W 16
#define KF16_LOAD(x, h) (x) = (V)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h)))
#define KF16_STORE(h, x)                                                                   \
    _mm256_storeu_si256((__m256i *)(h), _mm512_cvtps_ph((__m512)(x), _MM_FROUND_TO_NEAREST_INT))
#include "comm/reduce_kernels.h"
#undef KSFX
#undef KATTR
#undef KF16_W
#undef KF16_LOAD
#undef KF16_STORE
#endif

typedef void (*reduce3_fn)(void *, const void *, const void *, size_t, shoal_dtype, shoal_op);
typedef void (*avg_fn)(void *, size_t, shoal_dtype, int);

static const char *const isa_names[SH_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *sh_reduce_isa_name(sh_reduce_isa isa)
{
    return (unsigned)isa < SH_ISA_COUNT ? isa_names[isa] : "invalid";
}

static int cpu_has(sh_reduce_isa isa)
{
    switch (isa) {
    case SH_ISA_SCALAR: return 1;
#ifdef SH_REDUCE_X86
    case SH_ISA_AVX2:
        __builtin_cpu_init();
#if defined(__clang__) /* clang's builtin does not name f16c; every AVX2 CPU has it */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
               __builtin_cpu_supports("fma");
#endif
    case SH_ISA_AVX512:
        __builtin_cpu_init();
        return cpu_has(SH_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq");
#endif
    default: return 0;
    }
}

int sh_reduce_isa_supported(sh_reduce_isa isa)
{
    static int mask = -1; /* bit per set, computed once; every thread computes the same */
    int m = __atomic_load_n(&mask, __ATOMIC_RELAXED);
    if (m < 0) {
        m = 0;
        for (int i = 0; i < SH_ISA_COUNT; i++) m |= cpu_has((sh_reduce_isa)i) << i;
        __atomic_store_n(&mask, m, __ATOMIC_RELAXED);
    }
    return (unsigned)isa < SH_ISA_COUNT && (m >> isa & 1);
}

static reduce3_fn isa_fn(sh_reduce_isa isa)
{
    switch (isa) {
#ifdef SH_REDUCE_X86
    case SH_ISA_AVX2: return reduce3_avx2;
    case SH_ISA_AVX512: return reduce3_avx512;
#endif
    default: return reduce3_scalar;
    }
}

sh_reduce_isa sh_reduce_isa_best(void)
{
    static int best = -1; /* computed once; every thread computes the same value */
    int b = __atomic_load_n(&best, __ATOMIC_RELAXED);
    if (b < 0) {
        b = SH_ISA_SCALAR;
        for (int i = SH_ISA_COUNT - 1; i > SH_ISA_SCALAR; i--)
            if (sh_reduce_isa_supported((sh_reduce_isa)i)) {
                b = i;
                break;
            }
        __atomic_store_n(&best, b, __ATOMIC_RELAXED);
    }
    return (sh_reduce_isa)b;
}

void sh_reduce3_isa(sh_reduce_isa isa, void *dst, const void *a, const void *b, size_t count,
                    shoal_dtype dt, shoal_op op)
{
    if (!sh_reduce_isa_supported(isa)) isa = SH_ISA_SCALAR;
    isa_fn(isa)(dst, a, b, count, dt, op);
}

void sh_reduce3(void *dst, const void *a, const void *b, size_t count, shoal_dtype dt, shoal_op op)
{
    static reduce3_fn fn;
    reduce3_fn f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
    if (!f) {
        f = isa_fn(sh_reduce_isa_best());
        __atomic_store_n(&fn, f, __ATOMIC_RELAXED);
    }
    f(dst, a, b, count, dt, op);
}

void sh_reduce(void *dst, const void *src, size_t count, shoal_dtype dt, shoal_op op)
{
    sh_reduce3(dst, dst, src, count, dt, op);
}

static avg_fn isa_avg_fn(sh_reduce_isa isa)
{
    switch (isa) {
#ifdef SH_REDUCE_X86
    case SH_ISA_AVX2: return avg_finish_avx2;
    case SH_ISA_AVX512: return avg_finish_avx512;
#endif
    default: return avg_finish_scalar;
    }
}

void sh_reduce_avg_finish_isa(sh_reduce_isa isa, void *dst, size_t count, shoal_dtype dt,
                              int divisor)
{
    switch (dt) {
    case SHOAL_INT8:
        for (size_t i = 0; i < count; i++)
            ((int8_t *)dst)[i] = (int8_t)(((int8_t *)dst)[i] / divisor);
        break;
    case SHOAL_UINT8:
        for (size_t i = 0; i < count; i++)
            ((uint8_t *)dst)[i] = (uint8_t)(((uint8_t *)dst)[i] / divisor);
        break;
    case SHOAL_INT32:
        for (size_t i = 0; i < count; i++) ((int32_t *)dst)[i] /= divisor;
        break;
    case SHOAL_INT64:
        for (size_t i = 0; i < count; i++) ((int64_t *)dst)[i] /= divisor;
        break;
    default:
        if (!sh_reduce_isa_supported(isa)) isa = SH_ISA_SCALAR;
        isa_avg_fn(isa)(dst, count, dt, divisor);
        break;
    }
}

void sh_reduce_avg_finish(void *dst, size_t count, shoal_dtype dt, int divisor)
{
    sh_reduce_avg_finish_isa(sh_reduce_isa_best(), dst, count, dt, divisor);
}

void sh_copy_stream(void *dst, const void *src, size_t nbytes)
{
#ifdef __SSE2__
    unsigned char *d = dst;
    const unsigned char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (nbytes < 256) { /* (so head, at most 15, fits) */
        memcpy(d, s, nbytes);
        return;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    nbytes -= head;
    size_t body = nbytes & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
        _mm_stream_si128((__m128i *)(d + i), a);
        _mm_stream_si128((__m128i *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(d + i + 48), e);
    }
    _mm_sfence();
    memcpy(d + body, s + body, nbytes - body);
#else
    memcpy(dst, src, nbytes);
#endif
}

double sh_reduce_elem_get(const void *buf, size_t i, shoal_dtype dt)
{
    switch (dt) {
    case SHOAL_INT8: return ((const int8_t *)buf)[i];
    case SHOAL_UINT8: return ((const uint8_t *)buf)[i];
    case SHOAL_INT32: return ((const int32_t *)buf)[i];
    case SHOAL_INT64: return (double)((const int64_t *)buf)[i];
    case SHOAL_FLOAT16: return sh_f16_to_f32(((const uint16_t *)buf)[i]);
    case SHOAL_BFLOAT16: return sh_bf16_to_f32(((const uint16_t *)buf)[i]);
    case SHOAL_FLOAT32: return ((const float *)buf)[i];
    case SHOAL_FLOAT64: return ((const double *)buf)[i];
    default: return 0;
    }
}

void sh_reduce_elem_put(void *buf, size_t i, shoal_dtype dt, double v)
{
    switch (dt) {
    case SHOAL_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case SHOAL_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case SHOAL_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case SHOAL_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case SHOAL_FLOAT16: ((uint16_t *)buf)[i] = sh_f32_to_f16((float)v); break;
    case SHOAL_BFLOAT16: ((uint16_t *)buf)[i] = sh_f32_to_bf16((float)v); break;
    case SHOAL_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case SHOAL_FLOAT64: ((double *)buf)[i] = v; break;
    default: break;
    }
}
