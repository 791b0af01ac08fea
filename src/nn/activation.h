/* activation.h — Darknet's activations that shoal supports (linear, relu, leaky 0.1,
 * logistic, tanh, ramp: x > 0 ? 1.1x : 0.1x), applied in place, and their gradients computed from the OUTPUT (as
 * Darknet does: every supported f' is a function of f(x)).
 * Not here: which layer applies them (conv, connected, shortcut).
 * Proved by tests/nn/test_layer_dense.c (finite differences through each activation). */
#ifndef SH_ACTIVATION_H
#define SH_ACTIVATION_H

#include <stddef.h>
#include "nn/cfg.h"
#include "shoal/result.h"

typedef enum { SH_ACT_LINEAR = 0, SH_ACT_RELU, SH_ACT_LEAKY, SH_ACT_LOGISTIC, SH_ACT_TANH,
               SH_ACT_RAMP } sh_act;

/* Read key "activation" (default def, Darknet spelling); an unsupported name is
 * SHOAL_ERR_FORMAT with path:line and the supported list. */
shoal_result sh_act_parse(sh_cfg_section *s, const char *def, sh_act *out);
const char *sh_act_name(sh_act a);
/* x[i] = f(x[i]) for count values. */
void sh_act_forward(sh_act a, float *x, size_t count);
/* delta[i] *= f'(given y[i] = f(x[i])). */
void sh_act_backward(sh_act a, const float *y, float *delta, size_t count);
/* x[i] = f(x[i] + bias) over count values (fused bias and activation of one channel). */
void sh_act_bias_forward(sh_act a, float *x, size_t count, float bias);

/* dst[i] = f(src[i] + bias): copy, bias and activation in one pass. */
void sh_act_bias_copy(sh_act a, float *restrict dst, const float *restrict src, size_t count,
                      float bias);

#endif
