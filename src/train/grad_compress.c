/* grad_compress.c — a net's gradients through shoal_allreduce_compressed, layer by layer
 * (last first, as backward finishes them): each layer's weights are a rows x cols matrix
 * (outputs x inputs per output) for the codecs that care (1bit's groups are its rows,
 * lowrank approximates it), its biases and scales one more buffer.
 * Sufficient-factor broadcasting (Xie et al., "Distributed machine learning via sufficient
 * factor broadcasting", 2015; Poseidon): a connected layer's weight gradient is dY^T X over
 * the batch, so where N (I + K) < I K each rank sends its dY (N, K) and X (N, I) instead
 * (an allgather), and every rank computes the mean sum_r dY_r^T X_r / ranks itself, in rank
 * order: exact, the same bits everywhere, and no residual.
 * Not here: the codecs (src/comm/compress/), the strategy's hooks (strategy_allreduce.c).
 * Proved by tests/train/test_compress_train.c and tests/cli/test_train_compress.c. */
#include "train/grad_compress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "nn/gemm.h"

typedef struct {
    int layer;
    size_t off, count;        /* slice of the gradient block */
    shoal_compressor *z;      /* NULL for a factor unit */
    /* sufficient factors: this rank's X then dY, and every rank's after the allgather */
    int sfb, inputs, outputs, batch;
    float *mine, *all;
} unit;

struct sh_gradx {
    shoal_comm *c;
    sh_net *net;
    sh_gradx_opts o;
    unit *u;
    int nu;
    int *first_unit_of_layer; /* [nlayers]: -1 or the layer's first unit */
    sh_gradx_stats st;
    size_t state_count;
};

static shoal_result add_compressed(sh_gradx *g, int layer, size_t off, size_t count, size_t cols)
{
    unit *u = &g->u[g->nu];
    memset(u, 0, sizeof *u);
    u->layer = layer;
    u->off = off;
    u->count = count;
    shoal_codec_opts co = g->o.codec;
    co.cols = cols;
    co.seed = g->o.codec.seed + (uint64_t)g->nu; /* lowrank: another first Q per unit */
    SH_TRY(shoal_compressor_create(&co, count, &u->z));
    size_t n = 0;
    (void)shoal_compressor_state(u->z, &n);
    g->state_count += n;
    g->nu++;
    return SHOAL_OK;
}

shoal_result sh_gradx_create(shoal_comm *c, sh_net *net, const sh_gradx_opts *o, sh_gradx **out)
{
    *out = NULL;
    int nl = sh_net_nlayers(net), world = shoal_comm_world(c), batch = sh_net_batch(net);
    int connected = 0;
    for (int i = 0; i < nl; i++) {
        const float *x, *dy;
        int in, k;
        connected += sh_net_layer_factors(net, i, &x, &dy, &in, &k);
    }
    if (o->sfb && !connected)
        return SH_FAIL(SHOAL_ERR_INVALID, "--sfb: %s has no [connected] layer, so it has no sufficient factors "
                       "to send; leave out --sfb (or use --compress)", o->model ? o->model : "the model");
    sh_gradx *g = calloc(1, sizeof *g);
    if (!g) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    g->c = c;
    g->net = net;
    g->o = *o;
    g->u = calloc(2 * (size_t)nl + 1, sizeof *g->u);
    g->first_unit_of_layer = malloc(sizeof(int) * (size_t)(nl ? nl : 1));
    shoal_result rc = g->u && g->first_unit_of_layer ? SHOAL_OK : SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    int fallback = 0;
    for (int i = nl - 1; rc == SHOAL_OK && i >= 0; i--) {
        size_t off, count, w_off, rows, cols;
        sh_net_layer_params(net, i, &off, &count);
        g->first_unit_of_layer[i] = -1;
        if (!count) continue;
        g->first_unit_of_layer[i] = g->nu;
        sh_net_layer_weights(net, i, &w_off, &rows, &cols);
        size_t wn = rows * cols;
        const float *x, *dy;
        int in = 0, k = 0;
        int is_fc = sh_net_layer_factors(net, i, &x, &dy, &in, &k);
        if (o->sfb && is_fc && rows && (double)batch * (in + k) < (double)in * k) {
            unit *u = &g->u[g->nu++];
            u->layer = i, u->off = w_off, u->count = wn, u->sfb = 1;
            u->inputs = in, u->outputs = k, u->batch = batch;
            size_t per = (size_t)batch * (size_t)(in + k);
            u->mine = malloc(per * sizeof(float));
            u->all = malloc(per * (size_t)world * sizeof(float));
            if (!u->mine || !u->all) rc = SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for sufficient factors");
            g->st.sfb_layers++;
        } else {
            if (o->sfb && is_fc) fallback++;
            if (rows) rc = add_compressed(g, i, w_off, wn, cols);
        }
        if (rc == SHOAL_OK && count > wn) rc = add_compressed(g, i, off + (rows ? wn : 0), count - (rows ? wn : 0), 0);
    }
    if (rc != SHOAL_OK) {
        sh_gradx_destroy(g);
        return rc;
    }
    char spec[48];
    shoal_codec_format(&o->codec, spec, sizeof spec);
    if (o->sfb)
        SH_LOG_I("train", "sufficient factors for %d of %d connected layers (batch %d); %d fall back to %s",
                 g->st.sfb_layers, connected, batch, fallback, spec);
    *out = g;
    return SHOAL_OK;
}

void sh_gradx_destroy(sh_gradx *g)
{
    if (!g) return;
    for (int i = 0; g->u && i < g->nu; i++) {
        shoal_compressor_destroy(g->u[i].z);
        free(g->u[i].mine);
        free(g->u[i].all);
    }
    free(g->u);
    free(g->first_unit_of_layer);
    free(g);
}

void sh_gradx_layer_ready(sh_gradx *g, int layer)
{
    int k = g->first_unit_of_layer[layer];
    if (k < 0 || !g->u[k].sfb) return;
    unit *u = &g->u[k];
    const float *x, *dy;
    int in, out;
    sh_net_layer_factors(g->net, layer, &x, &dy, &in, &out);
    size_t nx = (size_t)u->batch * (size_t)in;
    memcpy(u->mine, x, nx * sizeof(float));
    memcpy(u->mine + nx, dy, (size_t)u->batch * (size_t)out * sizeof(float));
}

static shoal_result reduce_factors(sh_gradx *g, unit *u, float *grads)
{
    int world = shoal_comm_world(g->c);
    size_t per = (size_t)u->batch * (size_t)(u->inputs + u->outputs), nx = (size_t)u->batch * (size_t)u->inputs;
    SH_TRY(shoal_allgather(g->c, u->mine, u->all, per, SHOAL_FLOAT32));
    /* dW (K, I) = sum_r dY_r^T (K, N) X_r (N, I) / ranks, rank by rank */
    for (int r = 0; r < world; r++) {
        const float *x = u->all + (size_t)r * per, *dy = x + nx;
        sh_gemm(1, 0, u->outputs, u->inputs, u->batch, 1.0f / (float)world, dy, u->outputs, x, u->inputs,
                r ? 1.0f : 0.0f, grads + u->off, u->inputs);
    }
    g->st.wire_nbytes += (double)(world - 1) * (double)per * sizeof(float);
    return SHOAL_OK;
}

shoal_result sh_gradx_reduce(sh_gradx *g, float *grads)
{
    int world = shoal_comm_world(g->c);
    double wire = 0, dense = 0, res2 = 0;
    g->st.wire_nbytes = 0;
    for (int i = 0; i < g->nu; i++) {
        unit *u = &g->u[i];
        dense += 2.0 * (world - 1) / world * (double)u->count * sizeof(float);
        if (u->sfb) {
            SH_TRY(reduce_factors(g, u, grads));
            continue;
        }
        float *p = grads + u->off;
        SH_TRY(shoal_allreduce_compressed(g->c, u->z, p, p, u->count, SHOAL_AVG));
        wire += shoal_compressor_wire_nbytes(u->z, world);
        double rn = shoal_compressor_residual_norm(u->z);
        res2 += rn * rn;
    }
    g->st.wire_nbytes += wire;
    g->st.dense_nbytes = dense;
    g->st.residual_norm = sqrt(res2);
    return SHOAL_OK;
}

void sh_gradx_get_stats(const sh_gradx *g, sh_gradx_stats *out) { *out = g->st; }

size_t sh_gradx_state_count(const sh_gradx *g) { return g->state_count; }

void sh_gradx_state_get(sh_gradx *g, float *out)
{
    for (int i = 0; i < g->nu; i++) {
        if (!g->u[i].z) continue;
        size_t n = 0;
        const float *s = shoal_compressor_state(g->u[i].z, &n);
        memcpy(out, s, n * sizeof(float));
        out += n;
    }
}

void sh_gradx_state_set(sh_gradx *g, const float *in)
{
    for (int i = 0; i < g->nu; i++) {
        if (!g->u[i].z) continue;
        size_t n = 0;
        float *s = shoal_compressor_state(g->u[i].z, &n);
        memcpy(s, in, n * sizeof(float));
        in += n;
    }
}

void sh_gradx_state_reset(sh_gradx *g)
{
    for (int i = 0; i < g->nu; i++) shoal_compressor_reset(g->u[i].z);
}
