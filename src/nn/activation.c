/* activation.c — activation functions and their derivatives, written as plain loops the
 * compiler vectorises. Leaky uses Darknet's slope 0.1.
 * Not here: choosing the activation per layer (layer parsers call sh_act_parse).
 * Proved by tests/nn/test_layer_dense.c. */
#include "nn/activation.h"

#include <math.h>
#include <string.h>

#include "base/err.h"
#include "base/hot.h"

static const char *const names[] = {"linear", "relu", "leaky", "logistic", "tanh", "ramp"};

const char *sh_act_name(sh_act a) { return names[a]; }

shoal_result sh_act_parse(sh_cfg_section *s, const char *def, sh_act *out)
{
    const char *v = NULL;
    SH_TRY(sh_cfg_str(s, "activation", def, &v));
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(v, names[i]) == 0) {
            *out = (sh_act)i;
            return SHOAL_OK;
        }
    return sh_cfg_fail_at(s, "activation", SHOAL_ERR_FORMAT,
                          "activation=%s is not supported; use linear, relu, leaky, logistic, "
                          "tanh or ramp", v);
}

SH_HOT void sh_act_forward(sh_act a, float *x, size_t count)
{
    switch (a) {
    case SH_ACT_LINEAR: break;
    case SH_ACT_RELU:
        for (size_t i = 0; i < count; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case SH_ACT_LEAKY:
        for (size_t i = 0; i < count; i++) x[i] = x[i] > 0.0f ? x[i] : 0.1f * x[i];
        break;
    case SH_ACT_LOGISTIC:
        for (size_t i = 0; i < count; i++) x[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case SH_ACT_TANH:
        for (size_t i = 0; i < count; i++) x[i] = tanhf(x[i]);
        break;
    case SH_ACT_RAMP: /* Darknet's ramp: x*(x>0) + .1*x */
        for (size_t i = 0; i < count; i++) x[i] = (x[i] > 0.0f ? x[i] : 0.0f) + 0.1f * x[i];
        break;
    }
}

SH_HOT void sh_act_bias_forward(sh_act a, float *x, size_t count, float bias)
{
    switch (a) {
    case SH_ACT_LINEAR:
        for (size_t i = 0; i < count; i++) x[i] += bias;
        break;
    case SH_ACT_RELU:
        for (size_t i = 0; i < count; i++) {
            float v = x[i] + bias;
            x[i] = v > 0.0f ? v : 0.0f;
        }
        break;
    case SH_ACT_LEAKY:
        for (size_t i = 0; i < count; i++) {
            float v = x[i] + bias;
            x[i] = v > 0.0f ? v : 0.1f * v;
        }
        break;
    default:
        for (size_t i = 0; i < count; i++) x[i] += bias;
        sh_act_forward(a, x, count);
        break;
    }
}

SH_HOT void sh_act_backward(sh_act a, const float *y, float *delta, size_t count)
{
    switch (a) {
    case SH_ACT_LINEAR: break;
    case SH_ACT_RELU:
        for (size_t i = 0; i < count; i++) delta[i] = y[i] > 0.0f ? delta[i] : 0.0f;
        break;
    case SH_ACT_LEAKY:
        for (size_t i = 0; i < count; i++) delta[i] *= y[i] > 0.0f ? 1.0f : 0.1f;
        break;
    case SH_ACT_LOGISTIC:
        for (size_t i = 0; i < count; i++) delta[i] *= y[i] * (1.0f - y[i]);
        break;
    case SH_ACT_TANH:
        for (size_t i = 0; i < count; i++) delta[i] *= 1.0f - y[i] * y[i];
        break;
    case SH_ACT_RAMP: /* y > 0 exactly when x > 0 */
        for (size_t i = 0; i < count; i++) delta[i] *= y[i] > 0.0f ? 1.1f : 0.1f;
        break;
    }
}

SH_HOT void sh_act_bias_copy(sh_act a, float *restrict dst, const float *restrict src, size_t count,
                      float bias)
{
    switch (a) {
    case SH_ACT_LINEAR:
        for (size_t i = 0; i < count; i++) dst[i] = src[i] + bias;
        break;
    case SH_ACT_RELU:
        for (size_t i = 0; i < count; i++) {
            float v = src[i] + bias;
            dst[i] = v > 0.0f ? v : 0.0f;
        }
        break;
    case SH_ACT_LEAKY:
        for (size_t i = 0; i < count; i++) {
            float v = src[i] + bias;
            dst[i] = v > 0.0f ? v : 0.1f * v;
        }
        break;
    default:
        for (size_t i = 0; i < count; i++) dst[i] = src[i] + bias;
        sh_act_forward(a, dst, count);
        break;
    }
}
