/* cmd_sample.c — `shoal sample CFG --weights FILE -o GRID.png`: what a model learned, as an
 * image grid. A deep belief net ([rbm] layers stacked on the input): Gibbs sampling in its top
 * [rbm] (or --layer's), then one pass down through the [rbm]s below, each hidden layer turned
 * into its visible means (Hinton, Osindero & Teh 2006). An autoencoder (a regression whose
 * output has the input's shape): test images, each row of them above its reconstructions.
 * Not here: the [rbm]'s conditionals (src/nn/layer_rbm.c), the PNG (src/io/image_grid.c).
 * Proved by tests/cli/test_pretrain.c (samples) and tests/cli/test_train_unlabelled.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"
#include "data/data.h"
#include "io/image_grid.h"
#include "nn/layer.h"
#include "nn/rbm.h"

static const char usage_text[] =
    "usage: shoal sample CFG --weights FILE -o GRID.png [options]\n"
    "\n"
    "Write images a trained model makes as a grid (PNG, or SVG by the name's .svg).\n"
    "A net whose first layers are [rbm] (a deep belief net from shoal pretrain, fine-tuned\n"
    "or not): Gibbs sampling in its top [rbm], then one pass down through the [rbm]s below.\n"
    "An autoencoder (ending in [cost] type=sse, L1 or smooth, output shaped as its input):\n"
    "test images from --data, each row of them followed by its row of reconstructions.\n"
    "\n"
    "  --weights FILE     trained weights (a shoal checkpoint, or Darknet's FILE.weights)\n"
    "  -o FILE            the grid: FILE.png or FILE.svg\n"
    "  --samples N        images (default 64)\n"
    "  --gibbs-steps K    Gibbs steps of each chain (default 1000)\n"
    "  --layer L          draw from [rbm] layer L (default: the top one)\n"
    "  --data DIR         the chains start from test images carried up to that [rbm]\n"
    "                     (default: random units); an autoencoder's images (default\n"
    "                     $SHOAL_DATA_DIR, else Fashion-MNIST)\n"
    "  --seed S           the chains' draws and the images picked (default 1)\n"
    "  --threads N        kernel threads (an autoencoder's forward)\n"
    "  --help             this text\n";

typedef struct {
    const char *cfg, *weights, *out, *data;
    int samples, steps, layer, threads;
    int64_t seed;
} sample_opts;

/* n images of the test set, picked from the seed, as floats (n, C*H*W) in [0, 1]. */
static shoal_result test_images(const sample_opts *o, const sh_net *net, int n, float *x)
{
    sh_dataset *d = NULL;
    const char *dir = o->data ? o->data : sh_env_str("SHOAL_DATA_DIR");
    SH_TRY(sh_dataset_open_dir(dir, 0, &d));
    size_t count = (size_t)d->c * d->h * d->w;
    shoal_result rc = SHOAL_OK;
    if ((int)count != sh_net_input_count(net) || d->text)
        rc = SH_FAIL(SHOAL_ERR_INVALID, "%s has %dx%dx%d images but %s takes %d values; give --data of its shape",
                     d->name, d->c, d->h, d->w, o->cfg, sh_net_input_count(net));
    sh_rng r;
    sh_rng_seed(&r, (uint64_t)o->seed);
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
static shoal_result gibbs(const sample_opts *o, sh_net *net, float *images)
{
    int rbms[256], nrbm = sh_net_rbm_layers(net, NULL), top = o->layer;
    if (nrbm == 0 || nrbm > 256)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s has no [rbm] layer%s: shoal sample draws from a deep belief net's "
                       "[rbm] layers, or reconstructs an autoencoder's input (a net ending in [cost] type=sse)",
                       o->cfg, nrbm ? "s it can hold" : "");
    sh_net_rbm_layers(net, rbms);
    if (top < 0) top = rbms[nrbm - 1];
    for (int i = 0; i <= top; i++)
        if (i >= sh_net_nlayers(net) || sh_net_layer(net, i)->ops != &sh_rbm_ops)
            return SH_FAIL(SHOAL_ERR_INVALID, "%s:%d: layer %d (%s) is not an [rbm]: shoal sample draws from [rbm] "
                           "layers stacked on the input, up to --layer %d", o->cfg, sh_net_layer_line(net, i), i,
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
    sh_rng_seed(&r, (uint64_t)o->seed ^ 0x5eed);
    const sh_layer *t = sh_net_layer(net, top);
    if (o->data) { /* test images carried up to the top [rbm]'s visible units */
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
    for (int step = 1; step <= o->steps; step++) {
        sh_rbm_hidden_mean(t, p, v, n, h);
        bernoulli(h, nh, &r);
        sh_rbm_visible_mean(t, p, h, n, v);
        if (step == o->steps) break; /* the last step's means are the sample shown */
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
static shoal_result reconstruct(const sample_opts *o, sh_net *net, float *images, int cols)
{
    int n = o->samples;
    size_t count = (size_t)sh_net_input_count(net);
    if ((size_t)sh_net_nclasses(net) != count)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s outputs %d values per image but takes %zu: its output is no "
                       "reconstruction of its input", o->cfg, sh_net_nclasses(net), count);
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

static shoal_result run_sample(const sample_opts *o)
{
    sh_net *net = NULL;
    float *images = NULL;
    shoal_result rc = SHOAL_OK;
    SH_TRY(sh_net_load(o->cfg, o->samples, 1, &net));
    int c = 0, h = 0, w = 0, recon = sh_net_is_regression(net);
    SH_TRY_GOTO(sh_cli_net_weights(net, o->threads, o->weights), rc, done);
    const sh_net_config *nc = sh_net_get_config(net);
    c = nc->channels, h = nc->height, w = nc->width;
    if (c != 1 && c != 3) { /* a vector input: a square of grey pixels if it is one */
        int side = (int)lround(sqrt((double)sh_net_input_count(net)));
        if (side * side != sh_net_input_count(net))
            rc = SH_FAIL(SHOAL_ERR_INVALID, "%s takes %dx%dx%d inputs: an image grid needs one or three channels (or "
                         "a square vector)", o->cfg, c, h, w);
        c = 1, h = w = side;
    }
    int cols = 1;
    while (cols * cols < o->samples) cols++;
    size_t count = (size_t)sh_net_input_count(net), rows = ((size_t)o->samples + cols - 1) / cols;
    if (rc == SHOAL_OK)
        rc = sh_calloc(rows * cols * (recon ? 2 : 1) * count, sizeof(float), (void **)&images);
    if (rc == SHOAL_OK) rc = recon ? reconstruct(o, net, images, cols) : gibbs(o, net, images);
    if (rc == SHOAL_OK)
        rc = sh_image_grid_save(o->out, images, recon ? (int)(2 * rows * cols) : o->samples, c, h, w, cols);
    if (rc == SHOAL_OK)
        printf("wrote %s: %d %s of %s\n", o->out, o->samples, recon ? "test images and their reconstructions" :
               "samples", o->cfg);
done:
    free(images);
    sh_net_destroy(net);
    return rc;
}

int sh_cmd_sample(int argc, char **argv)
{
    sample_opts o = {.samples = 64, .steps = 1000, .layer = -1, .seed = 1};
    sh_cli_args a = {"sample", argc, argv, 1, 0};
    for (; a.i < argc; a.i++) {
        if (sh_cli_help(&a, usage_text)) return SH_EXIT_OK;
        if (sh_cli_arg_cfg(&a, &o.cfg) || sh_cli_flag_str(&a, "--weights", "a file", &o.weights) ||
            sh_cli_flag_str(&a, "-o", "a file (.png or .svg)", &o.out) ||
            sh_cli_flag_str(&a, "--data", "a directory", &o.data) ||
            sh_cli_flag_int(&a, "--samples", 1, 4096, &o.samples) ||
            sh_cli_flag_int(&a, "--gibbs-steps", 1, 1000000, &o.steps) ||
            sh_cli_flag_int(&a, "--layer", 0, 1 << 20, &o.layer) ||
            sh_cli_flag_int(&a, "--threads", 1, 1024, &o.threads) ||
            sh_cli_flag_i64(&a, "--seed", 0, INT64_MAX, &o.seed)) {
            if (a.bad) return SH_EXIT_USAGE;
            continue;
        }
        return sh_cli_usage_error("sample", "unknown option \"%s\"", argv[a.i]);
    }
    if (!o.cfg) return sh_cli_usage_error("sample", "missing the model file CFG");
    if (!o.weights) return sh_cli_usage_error("sample", "missing --weights FILE: sample from trained weights");
    if (!o.out) return sh_cli_usage_error("sample", "missing -o FILE.png (or .svg)");
    if (!o.threads) o.threads = sh_cli_threads(0);
    shoal_result rc = run_sample(&o);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
