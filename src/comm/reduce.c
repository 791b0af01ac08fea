/* reduce.c — reduction kernels (dst = dst OP src) for every dtype and op; float16 and
 * bfloat16 reduce in float32 and round to nearest even; dtype and op names.
 * Not here: which bytes meet which (algo_*.c).
 * Proved by tests/comm/test_reduce.c. */
#include "comm/reduce.h"

#include <string.h>
#include <strings.h>

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
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 : 0));
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

#define RED_LOOP(T)                                                                         \
    do {                                                                                    \
        T *d = (T *)dst;                                                                    \
        const T *a_ = (const T *)a, *b_ = (const T *)b;                                     \
        switch (op) {                                                                       \
        case SHOAL_SUM:                                                                     \
        case SHOAL_AVG:                                                                     \
            for (size_t i = 0; i < count; i++) d[i] = (T)(a_[i] + b_[i]);                   \
            break;                                                                          \
        case SHOAL_PROD:                                                                    \
            for (size_t i = 0; i < count; i++) d[i] = (T)(a_[i] * b_[i]);                   \
            break;                                                                          \
        case SHOAL_MIN:                                                                     \
            for (size_t i = 0; i < count; i++) d[i] = a_[i] < b_[i] ? a_[i] : b_[i];        \
            break;                                                                          \
        case SHOAL_MAX:                                                                     \
            for (size_t i = 0; i < count; i++) d[i] = a_[i] > b_[i] ? a_[i] : b_[i];        \
            break;                                                                          \
        default: break;                                                                     \
        }                                                                                   \
    } while (0)

#define RED_HALF(TO32, FROM32)                                                              \
    do {                                                                                    \
        uint16_t *d = (uint16_t *)dst;                                                      \
        const uint16_t *a_ = (const uint16_t *)a, *b_ = (const uint16_t *)b;                \
        for (size_t i = 0; i < count; i++) {                                                \
            float x = TO32(a_[i]), y = TO32(b_[i]), r;                                      \
            switch (op) {                                                                   \
            case SHOAL_PROD: r = x * y; break;                                              \
            case SHOAL_MIN: r = x < y ? x : y; break;                                       \
            case SHOAL_MAX: r = x > y ? x : y; break;                                       \
            default: r = x + y; break;                                                      \
            }                                                                               \
            d[i] = FROM32(r);                                                               \
        }                                                                                   \
    } while (0)

/* Integer sums wrap (two's complement), as MPI and NCCL: done in unsigned arithmetic so the
 * wrap is defined behaviour. */
#define RED_INT(T, U)                                                                       \
    do {                                                                                    \
        if (op == SHOAL_SUM || op == SHOAL_AVG || op == SHOAL_PROD) {                       \
            U *d = (U *)dst;                                                                \
            const U *a_ = (const U *)a, *b_ = (const U *)b;                                 \
            if (op == SHOAL_PROD)                                                           \
                for (size_t i = 0; i < count; i++) d[i] = (U)(a_[i] * b_[i]);               \
            else                                                                            \
                for (size_t i = 0; i < count; i++) d[i] = (U)(a_[i] + b_[i]);               \
        } else {                                                                            \
            RED_LOOP(T);                                                                    \
        }                                                                                   \
    } while (0)

void sh_reduce3(void *dst, const void *a, const void *b, size_t count, shoal_dtype dt, shoal_op op)
{
    switch (dt) {
    case SHOAL_INT8: RED_INT(int8_t, uint8_t); break;
    case SHOAL_UINT8: RED_INT(uint8_t, uint8_t); break;
    case SHOAL_INT32: RED_INT(int32_t, uint32_t); break;
    case SHOAL_INT64: RED_INT(int64_t, uint64_t); break;
    case SHOAL_FLOAT16: RED_HALF(sh_f16_to_f32, sh_f32_to_f16); break;
    case SHOAL_BFLOAT16: RED_HALF(sh_bf16_to_f32, sh_f32_to_bf16); break;
    case SHOAL_FLOAT32: RED_LOOP(float); break;
    case SHOAL_FLOAT64: RED_LOOP(double); break;
    default: break;
    }
}

void sh_reduce(void *dst, const void *src, size_t count, shoal_dtype dt, shoal_op op)
{
    sh_reduce3(dst, dst, src, count, dt, op);
}

void sh_reduce_avg_finish(void *dst, size_t count, shoal_dtype dt, int divisor)
{
    switch (dt) {
    case SHOAL_INT8: for (size_t i = 0; i < count; i++) ((int8_t *)dst)[i] = (int8_t)(((int8_t *)dst)[i] / divisor); break;
    case SHOAL_UINT8: for (size_t i = 0; i < count; i++) ((uint8_t *)dst)[i] = (uint8_t)(((uint8_t *)dst)[i] / divisor); break;
    case SHOAL_INT32: for (size_t i = 0; i < count; i++) ((int32_t *)dst)[i] /= divisor; break;
    case SHOAL_INT64: for (size_t i = 0; i < count; i++) ((int64_t *)dst)[i] /= divisor; break;
    case SHOAL_FLOAT16:
        for (size_t i = 0; i < count; i++) {
            uint16_t *d = dst;
            d[i] = sh_f32_to_f16(sh_f16_to_f32(d[i]) / (float)divisor);
        }
        break;
    case SHOAL_BFLOAT16:
        for (size_t i = 0; i < count; i++) {
            uint16_t *d = dst;
            d[i] = sh_f32_to_bf16(sh_bf16_to_f32(d[i]) / (float)divisor);
        }
        break;
    case SHOAL_FLOAT32: for (size_t i = 0; i < count; i++) ((float *)dst)[i] /= (float)divisor; break;
    case SHOAL_FLOAT64: for (size_t i = 0; i < count; i++) ((double *)dst)[i] /= divisor; break;
    default: break;
    }
}
