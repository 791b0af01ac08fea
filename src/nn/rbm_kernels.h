/* rbm_kernels.h — the element-wise loops of an [rbm]'s training pass, vectorized: the logistic
 * function, Bernoulli draws from a row's own seed, and the sum of softplus differences behind
 * the pseudo-likelihood. exp and log1p are polynomials good to a few float ulps.
 * Not here: the products and the chain's order (layer_rbm.c).
 * Proved by tests/nn/test_rbm_kernels.c. */
#ifndef SH_RBM_KERNELS_H
#define SH_RBM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* x = 1 / (1 + exp(-x)), in place. */
void sh_rbm_kernels_sigmoid(float *x, size_t count);
/* p = 1 where a uniform draw in [0, 1) falls below p, else 0: the draws of 16 xoshiro128+
 * streams seeded from seed, the same whatever the CPU. */
void sh_rbm_kernels_sample(float *p, size_t count, uint64_t seed);
/* sum_j softplus(a_j + d_j) - softplus(a_j), softplus(x) = log(1 + exp(x)). */
double sh_rbm_kernels_softplus_diff(const float *a, const float *d, size_t count);

#endif
