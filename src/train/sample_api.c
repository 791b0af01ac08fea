/* sample_api.c — shoal_sample_run (shoal/train.h): what a trained model makes, as an image grid:
 * a deep belief net's Gibbs samples passed down its [rbm]s (Hinton, Osindero & Teh 2006), or an
 * autoencoder's test images above their reconstructions.
 * Not here: the [rbm]'s conditionals (src/nn/layer_rbm.c), the PNG (src/io/image_grid.c), flags
 * (src/cli/cmd_sample.c).
 * Proved by tests/cli/test_pretrain.c (samples) and tests/cli/test_train_unlabelled.c. */
#include "shoal/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpus.h"
#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "data/data.h"
#include "io/image_grid.h"
#include "nn/layer.h"
#include "nn/rbm.h"
#include "shoal/comm.h"
#include "train/snapshot.h"

/* n images of the test set, picked from the seed, as floats (n, C*H*W) in [0, 1]. */
static shoal_result test_images(const shoal_sample_opts *o, const sh_net *net, int n, float *x)
{
    sh_dataset *d = NULL;
    const char *dir = o->data_dir ? o->data_dir : sh_env_str("SHOAL_DATA_DIR");
    SH_TRY(sh_dataset_open_dir(dir, 0, &d));
    size_t count = (size_t)d->c * d->h * d->w;
    shoal_result rc = SHOAL_OK;
    if ((int)count != sh_net_input_count(net) || d->text)
        rc = SH_FAIL(SHOAL_ERR_INVALID, "%s has %dx%dx%d images but %s takes %d values; give --data of its shape",
                     d->name, d->c, d->h, d->w, o->cfg_path, sh_net_input_count(net));
    sh_rng r;
    sh_rng_seed(&r, o->seed);
    for (int i = 0; rc == SHOAL_OK && i < n; i++) {
        const uint8_t *src = d->pixels + (size_t)sh_rng_below(&r, (uint64_t)d->count) * count;
        for (size_t p = 0; p < count; p++) x[(size_t)i * count + p] = (float)src[p] / 255.0f;
    }
    sh_dataset_destroy(d);
    return rc;
}

static void bernoulli(float *p, size_t count, sh_rng *r)
{
    for (size_t i = 0; i < count; i++) p[i] = sh_rng_float(r) < p[i] ? 1.0f : 0.0f;
}

/* Gibbs sampling in [rbm] `top` of the chain layers 0..top, then down to the pixels. */
static shoal_result gibbs(const shoal_sample_opts *o, sh_net *net, float *images)
{
    int rbms[256], nrbm = sh_net_rbm_layers(net, NULL), top = o->layer;
    if (nrbm == 0 || nrbm > 256)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s has no [rbm] layer%s: shoal sample draws from a deep belief net's "
                       "[rbm] layers, or reconstructs an autoencoder's input (a net ending in [cost] type=sse)",
                       o->cfg_path, nrbm ? "s it can hold" : "");
    sh_net_rbm_layers(net, rbms);
    if (top < 0) top = rbms[nrbm - 1];
    for (int i = 0; i <= top; i++)
        if (i >= sh_net_nlayers(net) || i >= nrbm || rbms[i] != i) /* rbms ascend: 0..top all [rbm] */
            return SH_FAIL(SHOAL_ERR_INVALID, "%s:%d: layer %d (%s) is not an [rbm]: shoal sample draws from [rbm] "
                           "layers stacked on the input, up to --layer %d", o->cfg_path, sh_net_layer_line(net, i), i,
                           sh_net_layer_name(net, i), top);
    const float *p = sh_net_params(net);
    int n = o->samples;
    size_t widest = (size_t)sh_net_input_count(net);
    for (int i = 0; i <= top; i++)
        if ((size_t)sh_net_layer(net, i)->out_shape.c > widest) widest = (size_t)sh_net_layer(net, i)->out_shape.c;
    float *v = NULL, *h = NULL;
    shoal_result rc = SHOAL_OK;
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * widest * sizeof(float), (void **)&v), rc, done);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * widest * sizeof(float), (void **)&h), rc, done);
    sh_rng r;
    sh_rng_seed(&r, o->seed ^ 0x5eed);
    const sh_layer *t = sh_net_layer(net, top);
    if (o->data_dir) { /* test images carried up to the top [rbm]'s visible units */
        SH_TRY_GOTO(test_images(o, net, n, v), rc, done);
        for (int i = 0; i < top; i++) {
            sh_rbm_hidden_mean(sh_net_layer(net, i), p, v, n, h);
            memcpy(v, h, (size_t)n * sh_net_layer(net, i)->out_shape.c * sizeof(float));
        }
    } else {
        for (size_t i = 0; i < (size_t)n * t->inputs; i++)
            v[i] = t->rbm.gaussian ? sh_rng_normal(&r) : (float)(sh_rng_below(&r, 2));
    }
    size_t nv = (size_t)n * t->inputs, nh = (size_t)n * t->out_shape.c;
    for (int step = 1; step <= o->gibbs_steps; step++) {
        sh_rbm_hidden_mean(t, p, v, n, h);
        bernoulli(h, nh, &r);
        sh_rbm_visible_mean(t, p, h, n, v);
        if (step == o->gibbs_steps) break; /* the last step's means are the sample shown */
        if (t->rbm.gaussian)
            for (size_t i = 0; i < nv; i++) v[i] += sh_rng_normal(&r);
        else
            bernoulli(v, nv, &r);
    }
    for (int i = top - 1; i >= 0; i--) { /* down: each [rbm]'s visible means of the one above's */
        const sh_layer *l = sh_net_layer(net, i);
        memcpy(h, v, (size_t)n * l->out_shape.c * sizeof(float));
        sh_rbm_visible_mean(l, p, h, n, v);
    }
    memcpy(images, v, (size_t)n * sh_net_input_count(net) * sizeof(float));
done:
    sh_free_aligned(v);
    sh_free_aligned(h);
    return rc;
}

/* Rows of `cols` test images, each followed by their reconstructions. */
static shoal_result reconstruct(const shoal_sample_opts *o, sh_net *net, float *images, int cols)
{
    int n = o->samples;
    size_t count = (size_t)sh_net_input_count(net);
    if ((size_t)sh_net_nclasses(net) != count)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s outputs %d values per image but takes %zu: its output is no "
                       "reconstruction of its input", o->cfg_path, sh_net_nclasses(net), count);
    float *x = NULL;
    SH_TRY(sh_alloc_aligned((size_t)n * count * sizeof(float), (void **)&x));
    shoal_result rc = test_images(o, net, n, x);
    if (rc == SHOAL_OK) rc = sh_net_forward(net, x, n, 0);
    for (int i = 0; rc == SHOAL_OK && i < n; i++) {
        int row = i / cols, col = i % cols;
        size_t at = ((size_t)row * 2 * cols + col) * count;
        memcpy(images + at, x + (size_t)i * count, count * sizeof(float));
        memcpy(images + at + (size_t)cols * count, sh_net_output(net) + (size_t)i * count, count * sizeof(float));
    }
    sh_free_aligned(x);
    return rc;
}

void shoal_sample_opts_default(shoal_sample_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->samples = 64;
    o->gibbs_steps = 1000;
    o->layer = -1;
    o->seed = 1;
}

static shoal_result run_sample(const shoal_sample_opts *o, shoal_sample_report *r)
{
    sh_net *net = NULL;
    float *images = NULL;
    shoal_result rc = SHOAL_OK;
    SH_TRY(sh_net_load(o->cfg_path, o->samples, 1, &net));
    int c = 0, h = 0, w = 0, recon = sh_net_is_regression(net);
    shoal_job_env e;
    shoal_job_env_read(&e); /* cannot fail with an argument */
    sh_net_set_threads(net, sh_cpus_threads_per_rank(o->threads, e.local_world, NULL));
    SH_TRY_GOTO(sh_snapshot_load_weights(net, o->weights_path), rc, done);
    const sh_net_config *nc = sh_net_get_config(net);
    c = nc->channels, h = nc->height, w = nc->width;
    if (c != 1 && c != 3) { /* a vector input: a square of grey pixels if it is one */
        int side = (int)lround(sqrt((double)sh_net_input_count(net)));
        if (side * side != sh_net_input_count(net))
            rc = SH_FAIL(SHOAL_ERR_INVALID, "%s takes %dx%dx%d inputs: an image grid needs one or three channels (or "
                         "a square vector)", o->cfg_path, c, h, w);
        c = 1, h = w = side;
    }
    int cols = 1;
    while (cols * cols < o->samples) cols++;
    size_t count = (size_t)sh_net_input_count(net), rows = ((size_t)o->samples + cols - 1) / cols;
    if (rc == SHOAL_OK)
        rc = sh_calloc(rows * cols * (recon ? 2 : 1) * count, sizeof(float), (void **)&images);
    if (rc == SHOAL_OK) rc = recon ? reconstruct(o, net, images, cols) : gibbs(o, net, images);
    if (rc == SHOAL_OK)
        rc = sh_image_grid_save(o->out_path, images, recon ? (int)(2 * rows * cols) : o->samples, c, h, w, cols);
    r->reconstructions = recon;
    r->images = recon ? (int)(2 * rows * cols) : o->samples;
done:
    free(images);
    sh_net_destroy(net);
    return rc;
}

shoal_result shoal_sample_run(const shoal_sample_opts *o, shoal_sample_report *r)
{
    shoal_sample_report scratch;
    if (!r) r = &scratch;
    memset(r, 0, sizeof *r);
    if (!o || !o->cfg_path || !o->weights_path || !o->out_path)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_sample_run: %s", !o ? "o is NULL" : !o->cfg_path ? "no cfg_path"
                       : !o->weights_path ? "no weights_path: sample from trained weights" : "no out_path");
    shoal_sample_opts d = *o;
    if (d.samples < 1 || d.samples > 4096 || d.gibbs_steps < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_sample_run: samples %d (1..4096) and gibbs_steps %d (>= 0)",
                       d.samples, d.gibbs_steps);
    if (!d.gibbs_steps) d.gibbs_steps = 1000;
    return run_sample(&d, r);
}
