/* net_unlabelled.c — the nets that learn without labels: a regression (the net ends in [cost]
 * type=sse|L1|smooth after a layer other than [softmax]) against targets, the input itself or
 * the caller's; and the net that pretrains one [rbm] (layers [0, rbm], CD-k on the last).
 * Not here: the [rbm]'s arithmetic (layer_rbm.c), the stack's order (src/train/pretrain.c).
 * Proved by tests/nn/test_cost.c and tests/nn/test_layer_rbm.c. */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "base/util.h"
#include "nn/net_internal.h"
#include "nn/rbm.h"

/* The pretraining net runs the layers below the [rbm] as a fixed feature extractor, its own
 * update CD-k with the [rbm]'s learning rate, momentum and decay. Losses are means over the
 * batch of per-image sums, as the cross-entropy's. Regression losses per output d = y - t:
 * sse 1/2 d^2 (gradient d: Darknet's delta, which Darknet prints as d^2), L1 |d| (sign d),
 * smooth 1/2 d^2 below |d| = 1 and |d| - 1/2 above (Huber; Darknet's CPU smooth_l1 steps the
 * other way past 1), all times scale=. */

int sh_net_has_labels(const sh_net *n) { return n->has_softmax && n->pretrain < 0 && n->cost_layer < 0; }
int sh_net_is_regression(const sh_net *n) { return n->cost_layer >= 0 && n->pretrain < 0; }
int sh_net_pretraining(const sh_net *n) { return n->pretrain; }

shoal_result sh_net_set_target(sh_net *n, const float *target)
{
    if (!sh_net_is_regression(n))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: targets are for a net that ends in [cost] type=sse, L1 or "
                       "smooth after a layer other than [softmax]; this one learns from labels",
                       sh_cfg_path(n->cfg));
    size_t in = sh_shape_count(&n->input), out = n->layers[n->softmax].outputs;
    if (!target && (in != out || n->lo != 0))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s:%d: the net outputs %zu values per image but takes %zu: the input "
                       "itself cannot be its target; make the last layer before [cost] output %zu "
                       "(or give targets of %zu values)", sh_cfg_path(n->cfg), n->layers[n->softmax].line, out,
                       in, in, out);
    n->target = target;
    n->has_target = 1;
    return SHOAL_OK;
}

static float regression_loss(sh_net *n)
{
    const sh_layer *cost = &n->layers[n->cost_layer];
    sh_layer *out = &n->layers[n->softmax];
    if (!n->has_target) {
        SH_LOG_E("nn", "loss: %s ends in [cost] type=%s but no targets were given (sh_net_set_target)",
                 sh_cfg_path(n->cfg), cost->cost == SH_COST_L1 ? "L1" : cost->cost == SH_COST_SMOOTH ? "smooth" : "sse");
        return NAN;
    }
    const float *t = n->target ? n->target : n->x;
    size_t count = (size_t)n->nimg * out->outputs;
    float g_scale = cost->scale / (float)n->nimg;
    double loss = 0;
    for (size_t i = 0; i < count; i++) {
        float d = out->out[i] - t[i], a = fabsf(d), g;
        if (cost->cost == SH_COST_SSE || (cost->cost == SH_COST_SMOOTH && a < 1.0f)) {
            loss += 0.5 * (double)d * d;
            g = d;
        } else {
            loss += cost->cost == SH_COST_L1 ? (double)a : (double)a - 0.5;
            g = d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : 0.0f;
        }
        out->delta[i] = g * g_scale;
    }
    return (float)(cost->scale * loss / n->nimg);
}

float sh_net_loss_unlabelled(sh_net *n)
{
    n->have_loss = 1;
    if (n->pretrain >= 0) return sh_rbm_loss(&n->layers[n->pretrain], &n->exec);
    return regression_loss(n);
}

/* Only the [rbm]'s slice moves: the layers below it get zero gradients (and no decay: the
 * net's ranges name only the [rbm]'s). */
shoal_result sh_net_backward_pretrain(sh_net *n, sh_grad_ready_fn ready, void *ctx)
{
    sh_layer *l = &n->layers[n->pretrain];
    sh_net_fill_exec(n);
    memset(n->grads, 0, l->param_off * sizeof(float));
    uint64_t t0 = sh_now_ns();
    sh_rbm_cd(l, &n->exec);
    l->bwd_ms = (double)(sh_now_ns() - t0) * 1e-6;
    for (int i = n->hi - 1; i >= n->lo; i--)
        if (n->layers[i].param_count && ready) ready(ctx, i, n->layers[i].param_off, n->layers[i].param_count);
    return SHOAL_OK;
}

int sh_net_rbm_layers(const sh_net *n, int *layers)
{
    int count = 0;
    for (int i = 0; i < n->nlayers; i++)
        if (n->layers[i].ops == &sh_rbm_ops) {
            if (layers) layers[count] = i;
            count++;
        }
    return count;
}

shoal_result sh_net_create_pretrain(sh_cfg *cfg, int batch, uint64_t seed, int layer, sh_net **out)
{
    sh_net *n = NULL;
    *out = NULL;
    if (layer < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s: layer %d is not an [rbm]", sh_cfg_path(cfg), layer);
    SH_TRY(sh_net_build(cfg, batch, 0, seed, 0, layer + 1, 0, 1, NULL, &n));
    if (n->layers[layer].ops != &sh_rbm_ops) {
        shoal_result rc = SH_FAIL(SHOAL_ERR_INVALID, "%s: layer %d is not an [rbm]; pretraining trains "
                                  "the [rbm] layers, one at a time", sh_cfg_path(cfg), layer);
        sh_net_destroy(n);
        return rc;
    }
    sh_layer *l = &n->layers[layer];
    n->pretrain = layer;
    l->pretraining = 1;
    /* its own update: SGD at a constant rate, the [rbm]'s momentum and decay */
    sh_net_config *c = &n->config;
    memset(&c->lr, 0, sizeof c->lr);
    c->lr.kind = SH_LR_CONSTANT;
    c->lr.base_lr = l->rbm.learning_rate;
    c->lr.scale = c->lr.gamma = 1;
    c->max_batches = 0;
    memset(&c->optim, 0, sizeof c->optim);
    c->optim.kind = SH_OPTIM_SGD;
    c->optim.momentum = l->rbm.momentum;
    c->optim.decay = l->rbm.decay;
    n->nranges = 0; /* lay_out_blocks made room for at least these two */
    n->ranges[n->nranges++] = (sh_param_range){l->w_off, l->w_count, 1};
    n->ranges[n->nranges++] = (sh_param_range){l->b_off, l->b_count + l->inputs, 0};
    *out = n;
    return SHOAL_OK;
}
