/* lr_policy.c — the learning rate at a given batch, as Darknet's get_current_rate computes
 * it (network.c), with Caffe's "inv" added.
 * Not here: reading the policy from [net] (net_config.c), applying the rate (optim.c).
 * Proved by tests/nn/test_lr_policy.c. */
#include <math.h>

#include "nn/optim.h"

/* batch counts optimizer steps from 0. Darknet mixes float and double here (pow() is double,
 * the result is returned as float); we do the same so that rates match it bit for bit.
 * Two deliberate differences, both where Darknet is broken:
 *  - sigmoid: Darknet computes batch - step in size_t, which wraps before `step` and gives
 *    a rate of 0; we use signed arithmetic, so the curve is the intended logistic.
 *  - poly past max_batches: 1 - batch/max_batches goes negative and pow() gives a negative
 *    rate or NaN; we return 0 there. */
float sh_lr_at(const sh_lr_policy *p, int64_t batch)
{
    float lr = p->base_lr;
    if (batch < 0) batch = 0;
    if (batch < p->burn_in) return (float)(lr * pow((float)batch / p->burn_in, p->power));
    switch (p->kind) {
    case SH_LR_CONSTANT:
        return lr;
    case SH_LR_STEP:
        return (float)(lr * pow(p->scale, (double)(batch / (p->step > 0 ? p->step : 1))));
    case SH_LR_STEPS: {
        float rate = lr;
        for (int i = 0; i < p->nsteps; i++) {
            if (p->steps[i] > batch) return rate;
            rate *= p->scales[i];
        }
        return rate;
    }
    case SH_LR_EXP:
        return (float)(lr * pow(p->gamma, (double)batch));
    case SH_LR_POLY: {
        if (p->max_batches <= 0 || batch >= p->max_batches) return 0.0f;
        return (float)(lr * pow(1 - (float)batch / p->max_batches, p->power));
    }
    case SH_LR_INV:
        return (float)(lr * pow(1.0 + (double)p->gamma * (double)batch, -(double)p->power));
    case SH_LR_SIGMOID:
        return (float)(lr * (1. / (1. + exp(p->gamma * (double)(batch - p->step)))));
    }
    return lr;
}
