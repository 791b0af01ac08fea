/* tensor.h — the shape vocabulary of the network engine: float32 NCHW buffers.
 * Not here: allocation (net.c owns every buffer) or arithmetic (gemm.c, layer_*.c).
 * Proved by tests/nn/test_net.c (shapes of every layer) and tests/nn/test_layer_*.c.
 *
 * Letters, used in every buffer comment:
 *   N  images in a batch            C  channels            H, W  rows, columns
 *   K  outputs of a dense layer     F  filters of a conv   S  kernel side (size)
 * A buffer of shape (N, C, H, W) stores element (n, c, y, x) at ((n*C + c)*H + y)*W + x. */
#ifndef SH_TENSOR_H
#define SH_TENSOR_H

#include <stddef.h>

/* One image's shape; a batch of them is (N, C, H, W). */
typedef struct {
    int c, h, w;
} sh_shape;

static inline size_t sh_shape_count(const sh_shape *s)
{
    return (size_t)s->c * (size_t)s->h * (size_t)s->w;
}

/* Sum of n floats with 16 independent partial sums, added in a fixed order: the compiler
 * vectorises it (a plain `s += v[i]` loop is a serial chain: no vectorising without
 * reassociation), and the result is the same on every run. */
static inline float sh_sum(const float *v, size_t n)
{
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) acc[k] += v[i + k];
    float s = 0.0f;
    for (; i < n; i++) s += v[i];
    for (int k = 0; k < 16; k++) s += acc[k];
    return s;
}

/* Sum of v[i] * u[i], the same way. */
static inline float sh_dot(const float *v, const float *u, size_t n)
{
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) acc[k] += v[i + k] * u[i + k];
    float s = 0.0f;
    for (; i < n; i++) s += v[i] * u[i];
    for (int k = 0; k < 16; k++) s += acc[k];
    return s;
}

/* Sum of (v[i] - shift)^2, the same way. */
static inline float sh_sumsq_shifted(const float *v, size_t n, float shift)
{
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) {
            float d = v[i + k] - shift;
            acc[k] += d * d;
        }
    float s = 0.0f;
    for (; i < n; i++) s += (v[i] - shift) * (v[i] - shift);
    for (int k = 0; k < 16; k++) s += acc[k];
    return s;
}

#endif
