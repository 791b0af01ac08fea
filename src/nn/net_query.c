/* net_query.c — what a built net tells and lends: its sizes and blocks (and taking the
 * caller's blocks instead), each layer's name, shape, slices, factors and times, the dropout
 * stream, the part's input and output buffers, the thread count.
 * Not here: building and the passes (net.c), parts (net_cut.c, net_part.c), shares (net_tensor.c).
 * Proved by tests/nn/test_net.c and tests/train/test_pipeline.c. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "nn/layer.h"
#include "nn/net_internal.h"

const sh_net_config *sh_net_get_config(const sh_net *n) { return &n->config; }
int sh_net_batch(const sh_net *n) { return n->batch; }
int sh_net_time_steps(const sh_net *n) { return n->steps; }

float *sh_net_state(sh_net *n, size_t *count)
{
    if (count) *count = n->nstate;
    return n->state;
}

void sh_net_reset_state(sh_net *n)
{
    if (n->nstate) memset(n->state, 0, n->nstate * sizeof(float));
}

int sh_net_input_count(const sh_net *n) { return (int)sh_shape_count(&n->input); }
int sh_net_nclasses(const sh_net *n) { return n->nclasses; }
int sh_net_has_softmax(const sh_net *n) { return n->has_softmax; }

shoal_result sh_net_check_trainable(const sh_net *n)
{
    const sh_layer *l = &n->layers[n->softmax];
    if (n->has_softmax && l->tree_groups)
        return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: [softmax] tree=: shoal runs Darknet's "
                       "hierarchical softmax forward (`shoal time`) but cannot train or test it "
                       "(its loss needs the WordTree's labels); remove tree= to train a plain "
                       "softmax", sh_cfg_path(n->cfg), l->line);
    if (n->has_softmax || n->cost_layer >= 0 || n->pretrain >= 0) return SHOAL_OK;
    return SH_FAIL(SHOAL_ERR_FORMAT, "%s:%d: the network ends with [%s]; shoal trains and tests "
                   "with softmax cross-entropy (end it with [softmax], optionally then [cost]) or "
                   "against targets (end it with [cost] type=sse, L1 or smooth); `shoal time` runs "
                   "it as it is", sh_cfg_path(n->cfg), l->line, l->ops->cfg_name);
}
/* a pretraining net's differs by its [rbm]'s index (net_unlabelled.c) */
uint64_t sh_net_cfg_hash(const sh_net *n)
{
    uint64_t h = sh_cfg_hash(n->cfg);
    return n->pretrain < 0 ? h : h ^ (0x9e3779b97f4a7c15ull * (uint64_t)(n->pretrain + 1));
}
size_t sh_net_nparams(const sh_net *n) { return n->nparams; }
float *sh_net_params(sh_net *n) { return n->params; }
float *sh_net_grads(sh_net *n) { return n->grads; }

void sh_net_use_blocks(sh_net *n, float *params, float *grads, int copy_params)
{
    if (copy_params && n->nparams) memcpy(params, n->params, n->nparams * sizeof(float));
    if (n->nparams) memcpy(grads, n->grads, n->nparams * sizeof(float));
    if (!n->foreign_blocks) {
        sh_free_aligned(n->params);
        sh_free_aligned(n->grads);
    }
    n->params = params;
    n->grads = grads;
    n->foreign_blocks = 1;
    if (n->grad_ptrs) n->grad_ptrs[0] = grads;
}

void sh_net_use_stats(sh_net *n, float *stats)
{
    if (!n->foreign_stats) sh_free_aligned(n->stats);
    n->stats = stats;
    n->foreign_stats = 1;
}

float *sh_net_stats(sh_net *n, size_t *count)
{
    if (count) *count = n->nstats;
    return n->stats;
}

const sh_param_range *sh_net_param_ranges(const sh_net *n, int *nranges)
{
    *nranges = n->nranges;
    return n->ranges;
}

int sh_net_nlayers(const sh_net *n) { return n->nlayers; }
const char *sh_net_layer_name(const sh_net *n, int i) { return n->layers[i].name; }

void sh_net_layer_params(const sh_net *n, int i, size_t *offset, size_t *count)
{
    *offset = n->layers[i].param_off;
    *count = n->layers[i].param_count;
}

void sh_net_layer_weights(const sh_net *n, int i, size_t *w_off, size_t *rows, size_t *cols)
{
    const sh_layer *l = &n->layers[i];
    size_t k = l->w_count && l->out_shape.c > 0 ? (size_t)l->out_shape.c : 0;
    *w_off = l->w_off;
    *rows = k && l->w_count % k == 0 ? k : 0;
    *cols = *rows ? l->w_count / k : 0;
}

int sh_net_layer_factors(const sh_net *n, int i, const float **x, const float **dy, int *inputs, int *outputs)
{
    const sh_layer *l = &n->layers[i];
    if (!sh_layer_can(l, SH_LAYER_FACTORS)) return 0;
    *x = l->in[0];
    *dy = l->delta;
    *inputs = (int)l->inputs;
    *outputs = l->out_shape.c;
    return 1;
}

void sh_net_layer_shape(const sh_net *n, int i, int *c, int *h, int *w)
{
    *c = n->layers[i].out_shape.c;
    *h = n->layers[i].out_shape.h;
    *w = n->layers[i].out_shape.w;
}

double sh_net_layer_flops(const sh_net *n, int i) { return n->layers[i].flops; }

void sh_net_layer_times(const sh_net *n, int i, double *forward_ms, double *backward_ms)
{
    *forward_ms = n->layers[i].fwd_ms;
    *backward_ms = n->layers[i].bwd_ms;
}

void sh_net_rng_get(const sh_net *n, uint64_t state[4]) { memcpy(state, n->rng.s, sizeof n->rng.s); }
void sh_net_rng_set(sh_net *n, const uint64_t state[4]) { memcpy(n->rng.s, state, sizeof n->rng.s); }

sh_layer *sh_net_layer(sh_net *n, int i) { return &n->layers[i]; }

void sh_net_part(const sh_net *n, int *lo, int *hi)
{
    *lo = n->lo;
    *hi = n->hi;
}
int sh_net_layer_stage(const sh_net *n, int i) { return n->layers[i].stage; }
int sh_net_layer_line(const sh_net *n, int i) { return n->layers[i].line; }
int sh_net_threads(const sh_net *n) { return n->nthreads; }
const char *sh_net_cfg_path(const sh_net *n) { return sh_cfg_path(n->cfg); }
size_t sh_net_part_input_count(const sh_net *n) { return n->part_in_count; }
size_t sh_net_part_output_count(const sh_net *n) { return n->layers[n->hi - 1].outputs; }
const float *sh_net_part_output(const sh_net *n) { return n->layers[n->hi - 1].out; }
float *sh_net_part_output_delta(sh_net *n) { return n->layers[n->hi - 1].delta; }
void sh_net_want_input_delta(sh_net *n, int on) { n->want_input_delta = on; }
const float *sh_net_input_delta(const sh_net *n) { return n->input_delta; }
