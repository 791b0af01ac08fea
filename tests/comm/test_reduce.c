/* test_reduce.c — proves src/comm/reduce.c: every dtype x op against a reference written
 * here element by element, at every length 0..300 and misaligned starts (the vector loops'
 * tails); float16 conversion exhaustively (all 65536 values round-trip) and rounding to
 * nearest even; bfloat16 rounding; integer sums wrap; avg's final division; names. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "comm/reduce.h"

static double get(const void *b, size_t i, shoal_dtype dt)
{
    switch (dt) {
    case SHOAL_INT8: return ((const int8_t *)b)[i];
    case SHOAL_UINT8: return ((const uint8_t *)b)[i];
    case SHOAL_INT32: return ((const int32_t *)b)[i];
    case SHOAL_INT64: return (double)((const int64_t *)b)[i];
    case SHOAL_FLOAT16: return sh_f16_to_f32(((const uint16_t *)b)[i]);
    case SHOAL_BFLOAT16: return sh_bf16_to_f32(((const uint16_t *)b)[i]);
    case SHOAL_FLOAT32: return ((const float *)b)[i];
    default: return ((const double *)b)[i];
    }
}

/* Reference result of a OP b for one element, rounded to the dtype as the kernels must. */
static double ref(double x, double y, shoal_dtype dt, shoal_op op)
{
    double r;
    if (dt == SHOAL_FLOAT16 || dt == SHOAL_BFLOAT16 || dt == SHOAL_FLOAT32) {
        float fx = (float)x, fy = (float)y, fr;
        switch (op) {
        case SHOAL_PROD: fr = fx * fy; break;
        case SHOAL_MIN: fr = fx < fy ? fx : fy; break;
        case SHOAL_MAX: fr = fx > fy ? fx : fy; break;
        default: fr = fx + fy; break;
        }
        if (dt == SHOAL_FLOAT16) return sh_f16_to_f32(sh_f32_to_f16(fr));
        if (dt == SHOAL_BFLOAT16) return sh_bf16_to_f32(sh_f32_to_bf16(fr));
        return fr;
    }
    if (dt == SHOAL_FLOAT64) {
        switch (op) {
        case SHOAL_PROD: r = x * y; break;
        case SHOAL_MIN: r = x < y ? x : y; break;
        case SHOAL_MAX: r = x > y ? x : y; break;
        default: r = x + y; break;
        }
        return r;
    }
    /* integers: exact in int64 here (the values fit), wrapping as two's complement */
    int64_t ix = (int64_t)x, iy = (int64_t)y;
    uint64_t u;
    switch (op) {
    case SHOAL_PROD: u = (uint64_t)ix * (uint64_t)iy; break;
    case SHOAL_MIN: u = (uint64_t)(ix < iy ? ix : iy); break;
    case SHOAL_MAX: u = (uint64_t)(ix > iy ? ix : iy); break;
    default: u = (uint64_t)ix + (uint64_t)iy; break;
    }
    switch (dt) {
    case SHOAL_INT8: return (double)(int8_t)(uint8_t)u;
    case SHOAL_UINT8: return (double)(uint8_t)u;
    case SHOAL_INT32: return (double)(int32_t)(uint32_t)u;
    default: return (double)(int64_t)u;
    }
}

static void fill(void *b, size_t n, shoal_dtype dt, sh_rng *g)
{
    for (size_t i = 0; i < n; i++) {
        double v = (double)(int64_t)(sh_rng_below(g, 401)) - 200.0 + sh_rng_float(g) * (dt >= SHOAL_FLOAT16 ? 1 : 0);
        switch (dt) {
        case SHOAL_INT8: ((int8_t *)b)[i] = (int8_t)(int64_t)v; break;
        case SHOAL_UINT8: ((uint8_t *)b)[i] = (uint8_t)(int64_t)v; break;
        case SHOAL_INT32: ((int32_t *)b)[i] = (int32_t)(v * 1e7); break;
        case SHOAL_INT64: ((int64_t *)b)[i] = (int64_t)(v * 1e12); break;
        case SHOAL_FLOAT16: ((uint16_t *)b)[i] = sh_f32_to_f16((float)v); break;
        case SHOAL_BFLOAT16: ((uint16_t *)b)[i] = sh_f32_to_bf16((float)v); break;
        case SHOAL_FLOAT32: ((float *)b)[i] = (float)v; break;
        default: ((double *)b)[i] = v; break;
        }
    }
}

static void every_dtype_op_length_alignment(void)
{
    sh_rng g;
    sh_rng_seed(&g, 42);
    long bad = 0, checked = 0;
    for (int d = 0; d < SHOAL_DTYPE_COUNT; d++)
        for (int o = 0; o < SHOAL_OP_COUNT; o++)
            for (size_t n = 0; n <= 300; n += (n < 40 ? 1 : 13))
                for (int shift = 0; shift < 2; shift++) {
                    size_t es = shoal_dtype_nbytes((shoal_dtype)d);
                    unsigned char *a = malloc((n + 2) * es), *b = malloc((n + 2) * es), *out = malloc((n + 2) * es);
                    unsigned char *pa = a + shift * es, *pb = b + shift * es, *po = out + shift * es;
                    fill(pa, n, (shoal_dtype)d, &g);
                    fill(pb, n, (shoal_dtype)d, &g);
                    sh_reduce3(po, pa, pb, n, (shoal_dtype)d, (shoal_op)o);
                    for (size_t i = 0; i < n; i++) {
                        double want = ref(get(pa, i, (shoal_dtype)d), get(pb, i, (shoal_dtype)d), (shoal_dtype)d, (shoal_op)o);
                        double got = get(po, i, (shoal_dtype)d);
                        checked++;
                        if (!(got == want || (isnan(got) && isnan(want)))) {
                            if (bad < 5)
                                fprintf(stderr, "%s %s n=%zu i=%zu: %.9g, want %.9g\n", shoal_dtype_name((shoal_dtype)d),
                                        shoal_op_name((shoal_op)o), n, i, got, want);
                            bad++;
                        }
                    }
                    /* two-operand form equals three-operand form */
                    memcpy(po, pa, n * es);
                    sh_reduce(po, pb, n, (shoal_dtype)d, (shoal_op)o);
                    unsigned char *chk = malloc((n + 1) * es);
                    sh_reduce3(chk, pa, pb, n, (shoal_dtype)d, (shoal_op)o);
                    bad += n && memcmp(chk, po, n * es) != 0;
                    free(chk);
                    free(a);
                    free(b);
                    free(out);
                }
    CHECK(bad == 0, "%ld of %ld elements wrong", bad, checked);
}

static void float16_conversions(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) { /* every half round-trips through float */
        float f = sh_f16_to_f32((uint16_t)h);
        uint16_t back = sh_f32_to_f16(f);
        int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan ? !isnan(f) || (back & 0x7c00) != 0x7c00 || !(back & 0x3ff) : back != h) bad++;
    }
    CHECK(bad == 0, "%d halves do not round-trip", bad);
    CHECK(sh_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "tie rounds to even (down)");
    CHECK(sh_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02, "tie rounds to even (up)");
    CHECK(sh_f32_to_f16(65520.0f) == 0x7c00, "overflow to infinity");
    CHECK(sh_f32_to_f16(5.9604645e-8f) == 0x0001, "smallest subnormal");
    CHECK(sh_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80, "bf16 tie to even (down)");
    CHECK(sh_f32_to_bf16(1.0f + 3.0f / 256) == 0x3f82, "bf16 tie to even (up)");
    CHECK(isnan(sh_bf16_to_f32(sh_f32_to_bf16(NAN))), "bf16 NaN stays NaN");
}

static void wrap_avg_and_names(void)
{
    int8_t a[3] = {120, -128, 5}, b[3] = {10, -1, 5};
    sh_reduce(a, b, 3, SHOAL_INT8, SHOAL_SUM);
    CHECK(a[0] == -126 && a[1] == 127 && a[2] == 10, "int8 sums wrap: %d %d %d", a[0], a[1], a[2]);
    int32_t s[2] = {7, -7};
    sh_reduce_avg_finish(s, 2, SHOAL_INT32, 2);
    CHECK(s[0] == 3 && s[1] == -3, "integer avg truncates: %d %d", s[0], s[1]);
    float f[1] = {3.0f};
    sh_reduce_avg_finish(f, 1, SHOAL_FLOAT32, 4);
    CHECK(f[0] == 0.75f, "float avg %g", f[0]);
    shoal_dtype dt;
    shoal_op op;
    CHECK(shoal_dtype_parse("bf16", &dt) == SHOAL_OK && dt == SHOAL_BFLOAT16, "bf16 alias");
    CHECK(shoal_dtype_parse("complex", &dt) == SHOAL_ERR_INVALID, "unknown dtype accepted");
    CHECK(shoal_op_parse("max", &op) == SHOAL_OK && op == SHOAL_MAX, "op");
    CHECK(!strcmp(shoal_dtype_name(SHOAL_FLOAT16), "float16") && shoal_dtype_nbytes(SHOAL_INT64) == 8, "names");
}

int main(void)
{
    check_begin("test_reduce", 60);
    RUN(every_dtype_op_length_alignment);
    RUN(float16_conversions);
    RUN(wrap_avg_and_names);
    return check_end();
}
