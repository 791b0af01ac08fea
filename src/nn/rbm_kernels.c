/* rbm_kernels.c — the element-wise loops of an [rbm]'s training pass, written so that the
 * compiler vectorizes them (plain loops of branch-free code, SH_HOT): sigmoid, Bernoulli draws,
 * the softplus differences of the pseudo-likelihood.
 * Not here: the products and the chain's order (layer_rbm.c).
 * Proved by tests/nn/test_rbm_kernels.c. */
#include "nn/rbm_kernels.h"

#include <string.h>

#include "base/hot.h"

/* GCC keeps a + b * c unfused under -std=c11; the polynomials want fused multiply-adds. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

enum { LANES = 16 };

/* exp(x) for x in [-87, 88] (clamped there): x = k ln 2 + r, |r| <= ln 2 / 2, e^r by Cephes'
 * degree-6 polynomial, 2^k put in the exponent bits. Relative error about 2e-7. */
static inline float exp_poly(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float k = (x * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 * 2^23 */
    float r = x - k * 0.693359375f;
    r = r + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* log(1 + y) for y in [0, 1]: 2 atanh(s), s = y / (2 + y) <= 1/3, its odd series to s^13
 * (the next term is under 1e-8 of the sum); no cancellation for small y. */
static inline float log1p_unit(float y)
{
    float s = y / (2.0f + y), s2 = s * s;
    float p = 1.0f / 13.0f;
    p = p * s2 + 1.0f / 11.0f;
    p = p * s2 + 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    return 2.0f * s * p;
}

/* Past |x| = 40 the results below stop at e^-40 (4e-18) rather than going on down to the
 * subnormal floats, each of which costs a microcode assist in the products that take them
 * (a saturated unit's mean times a weight); the error is under 4e-18. */
enum { TAIL = 40 };

static inline float softplus_poly(float x)
{
    float ax = x < 0 ? -x : x, pos = x > 0 ? x : 0.0f;
    ax = ax > TAIL ? TAIL : ax;
    return pos + log1p_unit(exp_poly(-ax));
}

SH_HOT void sh_rbm_kernels_sigmoid(float *x, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        float a = x[i] < -TAIL ? -TAIL : x[i];
        x[i] = 1.0f / (1.0f + exp_poly(-a));
    }
}

SH_HOT double sh_rbm_kernels_softplus_diff(const float *a, const float *d, size_t count)
{
    float acc[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= count; i += LANES)
        for (int l = 0; l < LANES; l++)
            acc[l] += softplus_poly(a[i + l] + d[i + l]) - softplus_poly(a[i + l]);
    double sum = 0;
    for (; i < count; i++) sum += (double)softplus_poly(a[i] + d[i]) - softplus_poly(a[i]);
    for (int l = 0; l < LANES; l++) sum += acc[l];
    return sum;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* 16 xoshiro128+ streams side by side, one a lane: shifts, xors and adds only. */
typedef struct {
    uint32_t s[4][LANES];
} lanes_rng;

static void lanes_seed(lanes_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int l = 0; l < LANES; l++) {
        uint64_t a = splitmix64(&x), b = splitmix64(&x);
        r->s[0][l] = (uint32_t)a;
        r->s[1][l] = (uint32_t)(a >> 32);
        r->s[2][l] = (uint32_t)b;
        r->s[3][l] = (uint32_t)(b >> 32) | 1u; /* never the all-zero state */
    }
}

/* u = 16 uniform draws in [0, 1), 24 bits each (the sum's high bits). */
static inline void lanes_next(lanes_rng *r, float *u)
{
    uint32_t *s0 = r->s[0], *s1 = r->s[1], *s2 = r->s[2], *s3 = r->s[3];
    for (int l = 0; l < LANES; l++) {
        uint32_t res = s0[l] + s3[l], t = s1[l] << 9;
        s2[l] ^= s0[l];
        s3[l] ^= s1[l];
        s1[l] ^= s2[l];
        s0[l] ^= s3[l];
        s2[l] ^= t;
        s3[l] = (s3[l] << 11) | (s3[l] >> 21);
        u[l] = (float)(res >> 8) * (1.0f / 16777216.0f);
    }
}

SH_HOT void sh_rbm_kernels_sample(float *p, size_t count, uint64_t seed)
{
    lanes_rng r;
    lanes_seed(&r, seed);
    float u[LANES];
    size_t i = 0;
    for (; i + LANES <= count; i += LANES) {
        lanes_next(&r, u);
        for (int l = 0; l < LANES; l++) p[i + l] = u[l] < p[i + l] ? 1.0f : 0.0f;
    }
    if (i == count) return;
    lanes_next(&r, u);
    for (int l = 0; i + (size_t)l < count; l++) p[i + l] = u[l] < p[i + l] ? 1.0f : 0.0f;
}
