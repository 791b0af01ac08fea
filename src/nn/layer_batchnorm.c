/* layer_batchnorm.c — batch normalisation over (N, C, HW) for conv and connected layers:
 * training uses the batch's mean and biased variance and updates rolling statistics (momentum
 * 0.01, rolling variance unbiased, as Darknet); inference uses the rolling ones. Each thread
 * owns whole channels: one summing order, deterministic for any thread count. After a linear
 * or leaky activation x_hat = (x - mean) * invstd is not kept but rebuilt in backward from the
 * output, act^-1(y) = gamma x_hat + beta (in-place activated batch norm).
 * Not here: the convolution or product before it (layer_conv.c, layer_dense.c).
 * Proved by tests/nn/test_layer_conv.c and test_net_memory.c (finite differences, rebuilt x_hat). */
#include <math.h>

#include "nn/layer.h"

#define BN_EPS 1e-5f        /* Darknet's .00001 */
#define BN_MOMENTUM 0.01f   /* Darknet: rolling = .99 rolling + .01 batch */

/* v = f(gamma * x_hat + beta) with x_hat = (v - mu) * is kept in xh (when not NULL), one pass
 * for the activations that fuse (linear, relu, leaky). */
static void normalize(sh_act act, float *restrict v, float *restrict xh, size_t n, float mu,
                      float is, float g, float b)
{
    if (xh) {
        for (size_t i = 0; i < n; i++) {
            float h = (v[i] - mu) * is;
            xh[i] = h;
            v[i] = g * h + b;
        }
    } else {
        for (size_t i = 0; i < n; i++) v[i] = g * ((v[i] - mu) * is) + b;
    }
    if (act == SH_ACT_RELU) {
        for (size_t i = 0; i < n; i++) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
    } else if (act != SH_ACT_LINEAR) {
        sh_act_forward(act, v, n);
    }
}

/* 1 (default): x_hat is recovered from the output where the activation inverts; 0: kept. */
int sh_bn_recover = 1;

static int recovers(const sh_layer *l)
{
    return sh_bn_recover && (l->act == SH_ACT_LINEAR || l->act == SH_ACT_LEAKY);
}

void sh_bn_size(sh_layer *l)
{
    size_t hw = (size_t)l->out_shape.h * l->out_shape.w;
    l->keep_count = recovers(l) ? 0 : sh_shape_count(&l->out_shape);
    if (recovers(l) && l->ws_count < hw) l->ws_count = hw; /* one channel of one image's x_hat */
}

/* xh = (act^-1(y) - beta) / gamma; gamma = 0 leaves nothing to recover: 0. */
static void recover(sh_act act, const float *restrict y, float *restrict xh, size_t n, float g, float b)
{
    float inv = g != 0.0f ? 1.0f / g : 0.0f;
    if (act == SH_ACT_LEAKY)
        for (size_t i = 0; i < n; i++) xh[i] = ((y[i] > 0.0f ? y[i] : y[i] * 10.0f) - b) * inv;
    else
        for (size_t i = 0; i < n; i++) xh[i] = (y[i] - b) * inv;
}

static void bn_forward_channels(sh_layer *l, sh_exec *x, int tid, int c0, int c1)
{
    int nchan = l->out_shape.c;
    size_t hw = (size_t)l->out_shape.h * l->out_shape.w;
    const float *gamma = x->params + l->s_off;
    const float *beta = x->params + l->b_off;
    float *rmean = x->stats + l->stat_off;
    float *rvar = rmean + nchan;
    (void)tid;
    float *mean = l->keep + l->keep_count * (size_t)x->batch; /* keep_fixed follows images */
    float *invstd = mean + nchan;
    for (int c = c0; c < c1; c++) {
        float mu, is;
        if (x->training) {
            /* per image in float (vectorised), across images in double */
            double sum = 0.0, sq = 0.0;
            for (int n = 0; n < x->nimg; n++)
                sum += sh_sum(l->out + (size_t)n * l->outputs + (size_t)c * hw, hw);
            double m = (double)x->nimg * (double)hw;
            double dmu = sum / m;
            for (int n = 0; n < x->nimg; n++)
                sq += sh_sumsq_shifted(l->out + (size_t)n * l->outputs + (size_t)c * hw, hw,
                                       (float)dmu);
            double var = sq / m;
            mu = (float)dmu;
            is = (float)(1.0 / sqrt(var + BN_EPS));
            mean[c] = mu;
            invstd[c] = is;
            double unbiased = m > 1.0 ? sq / (m - 1.0) : var;
            rmean[c] = (1.0f - BN_MOMENTUM) * rmean[c] + BN_MOMENTUM * mu;
            rvar[c] = (1.0f - BN_MOMENTUM) * rvar[c] + BN_MOMENTUM * (float)unbiased;
        } else {
            mu = rmean[c];
            is = 1.0f / sqrtf(rvar[c] + BN_EPS);
        }
        for (int n = 0; n < x->nimg; n++) {
            float *v = l->out + (size_t)n * l->outputs + (size_t)c * hw;
            float *xh = x->training && l->keep_count ? l->keep + (size_t)n * l->keep_count + (size_t)c * hw : NULL;
            normalize(l->act, v, xh, hw, mu, is, gamma[c], beta[c]);
        }
    }
}

void sh_bn_forward(sh_layer *l, sh_exec *x, float *raw)
{
    (void)raw; /* the layer's own output holds the pre-normalisation values */
    sh_exec_split(l, x, l->out_shape.c, bn_forward_channels);
}

/* x_hat of image n, channel c: kept, or recovered into scratch. */
static const float *x_hat(const sh_layer *l, const sh_exec *x, float *scratch, int n, int c, size_t hw)
{
    if (l->keep_count) return l->keep + (size_t)n * l->keep_count + (size_t)c * hw;
    recover(l->act, l->out + (size_t)n * l->outputs + (size_t)c * hw, scratch, hw, x->params[l->s_off + c],
            x->params[l->b_off + c]);
    return scratch;
}

static void bn_backward_channels(sh_layer *l, sh_exec *x, int tid, int c0, int c1)
{
    int nchan = l->out_shape.c;
    size_t hw = (size_t)l->out_shape.h * l->out_shape.w;
    const float *gamma = x->params + l->s_off;
    float *gbeta = x->grad[0] + l->b_off;
    float *ggamma = x->grad[0] + l->s_off;
    const float *invstd = l->keep + l->keep_count * (size_t)x->batch + nchan;
    float *scratch = x->work[tid];
    double m = (double)x->nimg * (double)hw;
    for (int c = c0; c < c1; c++) {
        double sum_d = 0.0, sum_dx = 0.0;
        for (int n = 0; n < x->nimg; n++) {
            float *d = l->delta + (size_t)n * l->outputs + (size_t)c * hw;
            const float *y = l->out + (size_t)n * l->outputs + (size_t)c * hw;
            const float *xh = x_hat(l, x, scratch, n, c, hw);
            sh_act_backward(l->act, y, d, hw);
            sum_d += sh_sum(d, hw);
            sum_dx += sh_dot(d, xh, hw);
        }
        gbeta[c] = (float)sum_d;
        ggamma[c] = (float)sum_dx;
        /* dx = gamma * invstd / m * (m dy - sum(dy) - x_hat sum(dy x_hat)) */
        float k = gamma[c] * invstd[c];
        float mean_d = (float)(sum_d / m), mean_dx = (float)(sum_dx / m);
        for (int n = 0; n < x->nimg; n++) {
            float *d = l->delta + (size_t)n * l->outputs + (size_t)c * hw;
            const float *xh = x_hat(l, x, scratch, n, c, hw);
            for (size_t i = 0; i < hw; i++) d[i] = k * (d[i] - mean_d - xh[i] * mean_dx);
        }
    }
}

void sh_bn_backward(sh_layer *l, sh_exec *x)
{
    sh_exec_split(l, x, l->out_shape.c, bn_backward_channels);
}
