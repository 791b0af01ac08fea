/* dp/compress.c — a net's gradients through shoal_allreduce_compressed, layer by layer as
 * backward finishes them, on a thread of its own; sufficient factors for connected layers;
 * topk's momentum correction; the per-rank state a checkpoint keeps.
 * Not here: the codecs (src/comm/compress/), when the exchange runs (dp/allreduce.c, mp/mp.c).
 * Proved by tests/train/test_compress_train.c and tests/cli/test_train_compress.c. */

/* Each layer's weights are a rows x cols matrix (outputs x inputs per output) for the codecs
 * that care (1bit's groups are its rows, lowrank approximates it), its biases and scales one
 * more buffer.
 * Sufficient-factor broadcasting (Xie et al., "Distributed machine learning via sufficient
 * factor broadcasting", 2015; Poseidon): a connected layer's weight gradient is dY^T X over
 * the batch, so where N (I + K) < I K each rank sends its dY (N, K) and X (N, I) instead
 * (an allgather), and every rank computes the mean sum_r dY_r^T X_r / ranks itself, in rank
 * order: exact, the same bits everywhere, and no residual.
 * Momentum correction (Lin et al., "Deep gradient compression", 2018): top-k with SGD and
 * momentum m sends, in place of each rank's gradient g, its local velocity
 * u = m u + g + decay w, so that what top-k holds back keeps its momentum; the exchanged
 * mean is then applied as w -= lr * mean with no further momentum. At topk:1 this is the
 * uncompressed momentum SGD, up to rounding; without it the optimizer's momentum acts on the
 * sparse, delayed updates, and accuracy suffers at high sparsity. */
#include "train/dp/compress.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    float *vel;               /* momentum correction: this rank's velocity, else NULL */
} unit;

/* The exchange overlaps backward: a thread of its own runs the units in order as backward
 * hands over their layers (the communicator is then used by that thread alone until
 * sh_gradx_reduce returns: backward never calls it). */
struct sh_gradx {
    shoal_comm *c;
    sh_net *net;
    sh_gradx_opts o;
    unit *u;
    int nu;
    int *first_unit_of_layer; /* [nlayers]: -1 or the layer's first unit */
    float momentum;           /* momentum correction's m (0: off) */
    float decay;              /* and the L2 decay folded into the velocity */
    const float *params;      /* the weights decay reads */
    const sh_param_range *ranges;
    int nranges;
    sh_gradx_stats st;
    size_t state_count;
    pthread_t thread;
    int has_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;                /* units backward has finished this step */
    int done;                 /* units the thread has exchanged this step */
    int stop;
    float *grads;             /* this step's gradient block */
    shoal_result failed;      /* the thread's first error this step */
    char failed_msg[768];     /* its message (errors are per thread) */
    double busy_s;            /* the thread's time exchanging, summed */
};

static shoal_result run_unit(sh_gradx *g, unit *u, float *grads);

static void *exchange_thread(void *arg)
{
    sh_gradx *g = arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->stop && g->done >= g->ready) pthread_cond_wait(&g->cv, &g->mu);
        if (g->stop) break;
        int k = g->done;
        float *grads = g->grads;
        int skip = g->failed != SHOAL_OK;
        pthread_mutex_unlock(&g->mu);
        shoal_result rc = SHOAL_OK;
        if (!skip) {
            struct timespec a, b;
            clock_gettime(CLOCK_MONOTONIC, &a);
            rc = run_unit(g, &g->u[k], grads);
            clock_gettime(CLOCK_MONOTONIC, &b);
            g->busy_s += (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
        }
        pthread_mutex_lock(&g->mu);
        if (rc != SHOAL_OK && g->failed == SHOAL_OK) {
            g->failed = rc;
            snprintf(g->failed_msg, sizeof g->failed_msg, "%s", shoal_last_error_message());
        }
        g->done++;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

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
    if (g->momentum > 0) {
        u->vel = calloc(count, sizeof(float));
        if (!u->vel) return SH_FAIL(SHOAL_ERR_NOMEM, "out of memory for the momentum correction's velocity");
        g->state_count += count;
    }
    return SHOAL_OK;
}

int sh_gradx_sends_factors(sh_net *net, int layer, size_t *w_off, size_t *wn)
{
    size_t rows, cols;
    const float *x, *dy;
    int in = 0, k = 0, batch = sh_net_batch(net);
    sh_net_layer_weights(net, layer, w_off, &rows, &cols);
    *wn = rows * cols;
    return sh_net_layer_factors(net, layer, &x, &dy, &in, &k) && rows && (double)batch * (in + k) < (double)in * k;
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
    const sh_optim_config *oc = &sh_net_get_config(net)->optim;
    if (o->codec.codec == SHOAL_CODEC_TOPK && oc->kind == SH_OPTIM_SGD && oc->momentum > 0) {
        g->momentum = oc->momentum;
        g->decay = oc->decay;
        g->params = sh_net_params(net);
        g->ranges = sh_net_param_ranges(net, &g->nranges);
    }
    g->u = calloc(2 * (size_t)nl + 1, sizeof *g->u);
    g->first_unit_of_layer = malloc(sizeof(int) * (size_t)(nl ? nl : 1));
    shoal_result rc = g->u && g->first_unit_of_layer ? SHOAL_OK : SH_FAIL(SHOAL_ERR_NOMEM, "out of memory");
    int fallback = 0, lo = 0, hi = nl;
    sh_net_part(net, &lo, &hi); /* a part (pipeline stage, hybrid's convolutional layers) */
    for (int i = 0; rc == SHOAL_OK && i < nl; i++) g->first_unit_of_layer[i] = -1;
    for (int i = hi - 1; rc == SHOAL_OK && i >= lo; i--) {
        size_t off, count, w_off, rows, cols;
        sh_net_layer_params(net, i, &off, &count);
        if (!count) continue;
        g->first_unit_of_layer[i] = g->nu;
        sh_net_layer_weights(net, i, &w_off, &rows, &cols);
        size_t wn = rows * cols;
        const float *x, *dy;
        int in = 0, k = 0;
        int is_fc = sh_net_layer_factors(net, i, &x, &dy, &in, &k);
        size_t f_off, fn;
        if (o->sfb && sh_gradx_sends_factors(net, i, &f_off, &fn)) {
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
            if (rows && !o->sfb_only) rc = add_compressed(g, i, w_off, wn, cols);
        }
        if (rc == SHOAL_OK && count > wn && !o->sfb_only)
            rc = add_compressed(g, i, off + (rows ? wn : 0), count - (rows ? wn : 0), 0);
        if (g->first_unit_of_layer[i] == g->nu) g->first_unit_of_layer[i] = -1; /* nothing of it here */
    }
    if (rc == SHOAL_OK) {
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
        g->has_thread = pthread_create(&g->thread, NULL, exchange_thread, g) == 0;
        if (!g->has_thread) rc = SH_FAIL(SHOAL_ERR_IO, "cannot start the gradient exchange's thread");
    }
    if (rc != SHOAL_OK) {
        sh_gradx_destroy(g);
        return rc;
    }
    char spec[48];
    shoal_codec_format(&o->codec, spec, sizeof spec);
    if (g->momentum > 0)
        SH_LOG_I("train", "%s with momentum correction: each rank sends its velocity (momentum %g) and "
                 "the mean is applied without momentum", spec, (double)g->momentum);
    if (o->sfb)
        SH_LOG_I("train", "sufficient factors for %d of %d connected layers (batch %d); %d fall back to %s",
                 g->st.sfb_layers, connected, batch, fallback, o->sfb_only ? "the parameter servers" : spec);
    *out = g;
    return SHOAL_OK;
}

void sh_gradx_destroy(sh_gradx *g)
{
    if (!g) return;
    if (g->has_thread) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
    }
    for (int i = 0; g->u && i < g->nu; i++) {
        shoal_compressor_destroy(g->u[i].z);
        free(g->u[i].mine);
        free(g->u[i].all);
        free(g->u[i].vel);
    }
    free(g->u);
    free(g->first_unit_of_layer);
    free(g);
}

void sh_gradx_begin(sh_gradx *g, float *grads)
{
    pthread_mutex_lock(&g->mu);
    g->ready = 0;
    g->done = 0;
    g->grads = grads;
    g->failed = SHOAL_OK;
    g->st.wire_nbytes = 0;
    pthread_mutex_unlock(&g->mu);
}

void sh_gradx_layer_ready(sh_gradx *g, int layer)
{
    int k = g->first_unit_of_layer[layer];
    if (k < 0) return;
    unit *u = &g->u[k];
    if (u->sfb) {
        const float *x, *dy;
        int in, out;
        sh_net_layer_factors(g->net, layer, &x, &dy, &in, &out);
        size_t nx = (size_t)u->batch * (size_t)in;
        memcpy(u->mine, x, nx * sizeof(float));
        memcpy(u->mine + nx, dy, (size_t)u->batch * (size_t)out * sizeof(float));
    }
    int end = k;
    while (end < g->nu && g->u[end].layer == layer) end++;
    pthread_mutex_lock(&g->mu);
    if (g->grads && k == g->ready) { /* layers come last to first, as the units are ordered */
        g->ready = end;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
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
    g->st.wire_nbytes += (double)(world - 1) * (double)per * sizeof(float); /* the thread's, alone */
    return SHOAL_OK;
}

/* u->vel = m u->vel + g + decay w over the unit's slice p (decay where its range has it); the
 * velocity is what the rank sends. */
static void velocity(const sh_gradx *g, unit *u, const float *p)
{
    float m = g->momentum, *v = u->vel;
    for (size_t i = 0; i < u->count; i++) v[i] = m * v[i] + p[i];
    for (int r = 0; r < g->nranges && g->decay > 0; r++) {
        const sh_param_range *rg = &g->ranges[r];
        size_t a = rg->offset > u->off ? rg->offset : u->off;
        size_t b = rg->offset + rg->count < u->off + u->count ? rg->offset + rg->count : u->off + u->count;
        if (!rg->decay || a >= b) continue;
        for (size_t i = a; i < b; i++) v[i - u->off] += g->decay * g->params[i];
    }
}

static shoal_result run_unit(sh_gradx *g, unit *u, float *grads)
{
    if (u->sfb) return reduce_factors(g, u, grads);
    float *p = grads + u->off;
    const float *send = p;
    if (u->vel) {
        velocity(g, u, p);
        send = u->vel;
    }
    SH_TRY(shoal_allreduce_compressed(g->c, u->z, send, p, u->count, g->o.sum ? SHOAL_SUM : SHOAL_AVG));
    g->st.wire_nbytes += shoal_compressor_wire_nbytes(u->z, shoal_comm_world(g->c));
    return SHOAL_OK;
}

shoal_result sh_gradx_reduce(sh_gradx *g, float *grads)
{
    int world = shoal_comm_world(g->c);
    pthread_mutex_lock(&g->mu);
    if (g->grads != grads) { /* no sh_gradx_begin this step: everything is ready now */
        g->done = 0;
        g->grads = grads;
        g->failed = SHOAL_OK;
        g->st.wire_nbytes = 0;
    }
    g->ready = g->nu; /* units whose layers did not report */
    pthread_cond_broadcast(&g->cv);
    while (g->done < g->nu) pthread_cond_wait(&g->cv, &g->mu);
    shoal_result rc = g->failed;
    g->grads = NULL;
    pthread_mutex_unlock(&g->mu);
    if (rc != SHOAL_OK) return SH_FAIL(rc, "%s", g->failed_msg);
    double dense = 0, res2 = 0;
    for (int i = 0; i < g->nu; i++) {
        dense += 2.0 * (world - 1) / world * (double)g->u[i].count * sizeof(float);
        double rn = g->u[i].z ? shoal_compressor_residual_norm(g->u[i].z) : 0;
        res2 += rn * rn;
    }
    g->st.dense_nbytes = dense;
    g->st.residual_norm = sqrt(res2);
    return SHOAL_OK;
}

double sh_gradx_busy_s(const sh_gradx *g) { return g->busy_s; }

void sh_gradx_get_stats(const sh_gradx *g, sh_gradx_stats *out) { *out = g->st; }

int sh_gradx_applies_update(const sh_gradx *g) { return g->momentum > 0; }

void sh_gradx_apply(sh_gradx *g, sh_optim *opt, float *params, const float *grads, size_t nparams, float lr)
{
    sh_optim_begin(opt, lr);
    size_t end = 0;
    for (int i = 0; i < g->nu; i++) {
        const unit *u = &g->u[i];
        float *w = params + u->off;
        const float *d = grads + u->off;
        if (u->vel)
            for (size_t j = 0; j < u->count; j++) w[j] -= lr * d[j];
        else
            sh_optim_apply(opt, params, d, u->off, u->count);
        if (u->off + u->count > end) end = u->off + u->count;
    }
    if (nparams > end) sh_optim_apply(opt, params, grads + end, end, nparams - end);
}

size_t sh_gradx_state_count(const sh_gradx *g) { return g->state_count; }

/* The state, unit by unit: the compressor's (residual, lowrank's Q), then the velocity. */
void sh_gradx_state_get(sh_gradx *g, float *out)
{
    for (int i = 0; i < g->nu; i++) {
        if (!g->u[i].z) continue;
        size_t n = 0;
        const float *s = shoal_compressor_state(g->u[i].z, &n);
        memcpy(out, s, n * sizeof(float));
        out += n;
        if (g->u[i].vel) {
            memcpy(out, g->u[i].vel, g->u[i].count * sizeof(float));
            out += g->u[i].count;
        }
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
        if (g->u[i].vel) {
            memcpy(g->u[i].vel, in, g->u[i].count * sizeof(float));
            in += g->u[i].count;
        }
    }
}

void sh_gradx_state_reset(sh_gradx *g)
{
    for (int i = 0; i < g->nu; i++) {
        shoal_compressor_reset(g->u[i].z);
        if (g->u[i].vel) memset(g->u[i].vel, 0, g->u[i].count * sizeof(float));
    }
}
