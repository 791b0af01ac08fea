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

#endif
