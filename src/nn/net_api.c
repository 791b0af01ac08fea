/* net_api.c — the public network API (shoal/net.h): argument checks and a handle with a
 * magic value around the internal net (nn/net.h); what each layer is (shoal_net_layer).
 * Not here: the network itself (net.c), the thread rule (base/cpus.c), weight files
 * (src/train/net_weights.c).
 * Proved by tests/train/test_api.c and tests/python/test_net.py. */
#include "shoal/net.h"

#include <stdlib.h>
#include <string.h>

#include "base/cpus.h"
#include "base/err.h"
#include "nn/cfg.h"
#include "nn/darknet_weights.h"
#include "nn/net.h"
#include "nn/net_api.h"
#include "nn/net_internal.h"

#define NET_MAGIC 0x5e7a11e7u /* a destroyed handle has 0 here */

struct shoal_net {
    uint32_t magic;
    sh_net *net;
    sh_cfg *cfg;        /* a net built with time_steps borrows its cfg: freed after it */
    int trained_nimg;   /* images of the last forward with training = 1; 0: none since */
};

void shoal_net_opts_default(shoal_net_opts *o)
{
    if (!o) return;
    o->batch = 0;
    o->seed = 1;
    o->threads = 0;
    o->time_steps = 0;
}

static int alive(const shoal_net *n) { return n && n->magic == NET_MAGIC; }

shoal_result shoal_net_load(const char *cfg_path, const shoal_net_opts *o, shoal_net **out)
{
    if (out) *out = NULL;
    if (!cfg_path || !out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_load: %s is NULL", cfg_path ? "out" : "cfg_path");
    shoal_net_opts d;
    shoal_net_opts_default(&d);
    if (!o) o = &d;
    if (o->batch < 0 || o->threads < 0 || o->time_steps < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_load: batch %d, threads %d and time_steps %d must be >= 0",
                       o->batch, o->threads, o->time_steps);
    shoal_net *n = calloc(1, sizeof *n);
    if (!n) return SH_FAIL(SHOAL_ERR_NOMEM, "shoal_net_load: out of memory");
    shoal_result rc = SHOAL_OK;
    if (o->time_steps) {
        rc = sh_cfg_load(cfg_path, &n->cfg);
        if (rc == SHOAL_OK) rc = sh_net_create_steps(n->cfg, o->batch, o->time_steps, o->seed, &n->net);
    } else {
        rc = sh_net_load(cfg_path, o->batch, o->seed, &n->net);
    }
    if (rc != SHOAL_OK) {
        sh_cfg_destroy(n->cfg);
        free(n);
        return rc;
    }
    sh_net_set_threads(n->net, sh_cpus_threads_per_rank(o->threads, 1, NULL));
    n->magic = NET_MAGIC;
    *out = n;
    return SHOAL_OK;
}

void shoal_net_destroy(shoal_net *n)
{
    if (!alive(n)) return;
    n->magic = 0;
    sh_net_destroy(n->net);
    sh_cfg_destroy(n->cfg);
    free(n);
}

shoal_result shoal_net_input_shape(const shoal_net *n, int *batch, int *c, int *h, int *w)
{
    if (!alive(n)) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_input_shape: NULL or destroyed net");
    const sh_net_config *cfg = sh_net_get_config(n->net);
    if (batch) *batch = sh_net_batch(n->net);
    if (c) *c = cfg->channels;
    if (h) *h = cfg->height;
    if (w) *w = cfg->width;
    return SHOAL_OK;
}

shoal_result shoal_net_output_shape(const shoal_net *n, int *batch, int *k)
{
    if (!alive(n)) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_output_shape: NULL or destroyed net");
    if (batch) *batch = sh_net_batch(n->net);
    if (k) *k = sh_net_nclasses(n->net);
    return SHOAL_OK;
}

shoal_result shoal_net_forward(shoal_net *n, const float *x, int nimg, int training, const float **probs)
{
    if (probs) *probs = NULL;
    if (!alive(n)) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_forward: NULL or destroyed net");
    if (!x) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_forward: x is NULL");
    if (nimg < 1 || nimg > sh_net_batch(n->net))
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_forward: %d images, the net takes 1..%d (its batch; "
                       "load it with a larger shoal_net_opts.batch)", nimg, sh_net_batch(n->net));
    n->trained_nimg = 0;
    SH_TRY(sh_net_forward(n->net, x, nimg, training ? 1 : 0));
    n->trained_nimg = training ? nimg : 0;
    if (probs) *probs = sh_net_output(n->net);
    return SHOAL_OK;
}

shoal_result shoal_net_backward(shoal_net *n, const int32_t *labels, float *loss)
{
    if (!alive(n)) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_backward: NULL or destroyed net");
    if (!n->trained_nimg)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_backward: no forward with training = 1 before it");
    if (!labels) { /* from the sum of the outputs: no labels, no softmax needed */
        sh_net_loss_sum(n->net);
        SH_TRY(sh_net_backward(n->net, NULL, NULL));
        return SHOAL_OK;
    }
    SH_TRY(sh_net_check_trainable(n->net));
    int k = sh_net_nclasses(n->net);
    for (int i = 0; i < n->trained_nimg; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_backward: label %d of image %d is not a class in "
                           "0..%d", (int)labels[i], i, k - 1);
    float l = sh_net_loss(n->net, labels);
    if (loss) *loss = l;
    SH_TRY(sh_net_backward(n->net, NULL, NULL));
    return SHOAL_OK;
}

float *shoal_net_params(shoal_net *n, size_t *count)
{
    if (count) *count = alive(n) ? sh_net_nparams(n->net) : 0;
    return alive(n) ? sh_net_params(n->net) : NULL;
}

float *shoal_net_grads(shoal_net *n, size_t *count)
{
    if (count) *count = alive(n) ? sh_net_nparams(n->net) : 0;
    return alive(n) ? sh_net_grads(n->net) : NULL;
}

sh_net *sh_net_api_inner(const shoal_net *n) { return alive(n) ? n->net : NULL; }

int shoal_net_nlayers(const shoal_net *n) { return alive(n) ? sh_net_nlayers(n->net) : 0; }

shoal_result shoal_net_layer(const shoal_net *n, int i, shoal_layer_info *out)
{
    if (!alive(n) || !out) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_layer: NULL or destroyed net, or out NULL");
    if (i < 0 || i >= n->net->nlayers)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_layer: layer %d; the net has 0..%d", i, n->net->nlayers - 1);
    const sh_layer *l = &n->net->layers[i];
    memset(out, 0, sizeof *out);
    out->type = l->ops->cfg_name;
    out->form = l->ops->form;
    /* Layers that apply an activation read the key; the others leave 0 (linear) there. */
    if (sh_layer_can(l, SH_LAYER_ACTIVATION)) out->activation = sh_act_name(l->act);
    out->line = l->line;
    out->c = l->out_shape.c;
    out->h = l->out_shape.h;
    out->w = l->out_shape.w;
    out->in_c = l->in_shape.c;
    out->in_h = l->in_shape.h;
    out->in_w = l->in_shape.w;
    out->nsrc = l->nsrc < 8 ? l->nsrc : 8;
    for (int k = 0; k < out->nsrc; k++) out->src[k] = l->src[k];
    out->filters = l->filters;
    out->size = l->size;
    out->stride = l->stride;
    out->pad = l->pad;
    out->groups = sh_layer_can(l, SH_LAYER_SOFTMAX) ? l->tree_groups : l->groups; /* softmax: WordTree groups */
    out->batch_normalize = l->batch_normalize;
    out->hidden = l->hidden;
    out->steps = l->steps;
    out->probability = l->probability;
    out->temperature = l->temperature;
    out->params_offset = l->param_off;
    out->params_count = l->param_count;
    out->weights_offset = l->w_off;
    out->weights_count = l->w_count;
    out->biases_offset = l->b_off;
    out->biases_count = l->b_count;
    out->scales_offset = l->s_off;
    out->scales_count = l->s_count;
    out->stats_offset = l->stat_off;
    out->stats_count = l->stat_count;
    return SHOAL_OK;
}

float *shoal_net_stats(shoal_net *n, size_t *count)
{
    size_t k = 0;
    float *s = alive(n) ? sh_net_stats(n->net, &k) : NULL;
    if (count) *count = k;
    return k ? s : NULL;
}

float *shoal_net_state(shoal_net *n, size_t *count)
{
    size_t k = 0;
    float *s = alive(n) ? sh_net_state(n->net, &k) : NULL;
    if (count) *count = k;
    return k ? s : NULL;
}

void shoal_net_reset_state(shoal_net *n)
{
    if (alive(n)) sh_net_reset_state(n->net);
}

shoal_result shoal_net_layer_times(const shoal_net *n, int i, const char **name, double *forward_ms,
                                   double *backward_ms)
{
    if (!alive(n)) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_layer_times: NULL or destroyed net");
    if (i < 0 || i >= sh_net_nlayers(n->net))
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_net_layer_times: layer %d; the net has 0..%d", i,
                       sh_net_nlayers(n->net) - 1);
    double f = 0, b = 0;
    sh_net_layer_times(n->net, i, &f, &b);
    if (name) *name = sh_net_layer_name(n->net, i);
    if (forward_ms) *forward_ms = f;
    if (backward_ms) *backward_ms = b;
    return SHOAL_OK;
}

int64_t shoal_net_darknet_init_draws(const shoal_net *n) { return alive(n) ? sh_darknet_init_draws(n->net) : -1; }
