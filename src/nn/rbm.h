/* rbm.h — the restricted Boltzmann machine of [rbm] (layer_rbm.c) beyond the layer table: its
 * two conditionals, the free energy and scikit-learn's pseudo-likelihood, CD-k's gradient and
 * the pretraining loss, for the pretraining net (net_unlabelled.c) and `shoal sample`.
 * Vocabulary: v visible (rows, I), h hidden (rows, K), W (K, I) as [connected] stores it, b the
 * hidden biases (K), c the visible biases (I); a = v W^T + b the hidden units' input.
 * Not here: the greedy stack of RBMs (src/train/pretrain.c), sampling images (src/cli).
 * Proved by tests/nn/test_layer_rbm.c. */
#ifndef SH_RBM_H
#define SH_RBM_H

#include <stddef.h>

#include "nn/layer.h"

/* Offset of c in the parameter block: after W and b (the layer's slice ends with it). */
size_t sh_rbm_visible_off(const sh_layer *l);
/* h = sigmoid(v W^T + b), rows at a time, on the calling thread. */
void sh_rbm_hidden_mean(const sh_layer *l, const float *params, const float *v, int rows, float *h);
/* v = sigmoid(h W + c) for Bernoulli visible units, h W + c for Gaussian ones. */
void sh_rbm_visible_mean(const sh_layer *l, const float *params, const float *h, int rows, float *v);
/* F(v) = -v.c - sum_k softplus(a_k) (Bernoulli), |v - c|^2 / 2 - sum_k softplus(a_k) (Gaussian). */
void sh_rbm_free_energy(const sh_layer *l, const float *params, const float *v, int rows, double *fe);
/* scikit-learn's BernoulliRBM.score_samples: I log sigmoid(F(v') - F(v)), v' being v with unit
 * flip[r] of row r set to 1 - v; flip NULL: sh_rbm_flip_unit of each row. */
void sh_rbm_pseudo_likelihood(const sh_layer *l, const float *params, const float *v, int rows,
                              const int *flip, double *pl);
/* The unit a row's pseudo-likelihood flips when none is given: a hash of its values, so one
 * image flips the same unit on every rank, run and thread count. */
int sh_rbm_flip_unit(const float *v, size_t count);
/* The loss of a pretraining net's last forward, mean over its rows: minus the
 * pseudo-likelihood for Bernoulli visible units, the squared error of the mean-field
 * reconstruction (sum over units) for Gaussian ones. */
float sh_rbm_loss(sh_layer *l, sh_exec *x);
/* CD-k (persistent CD with rbm.persistent) from the last forward: the gradient of the
 * negative log-likelihood's estimate, (h_k^T v_k - h_0^T v_0) / N for W and the means of
 * h_k - h_0 and v_k - v_0 for b and c, plus the sparsity term, into x->grad[0]. Draws from
 * x->rng (one number a pass: each row then has its own stream, so any thread count draws
 * alike). */
void sh_rbm_cd(sh_layer *l, sh_exec *x);

#endif
