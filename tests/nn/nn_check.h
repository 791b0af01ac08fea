/* nn_check.h — helpers shared by the nn layer tests: build a network from cfg text, and
 * compare backward's gradients (parameters and input) with central finite differences of
 * the loss. Static functions only; included by tests/nn/test_layer_*.c and test_net.c. */
#ifndef SH_NN_CHECK_H
#define SH_NN_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "check.h"
#include "nn/cfg.h"
#include "nn/layer.h"
#include "nn/net.h"

typedef struct {
    sh_cfg *cfg;
    sh_net *net;
} test_net;

static int tn_build(test_net *t, const char *text, int batch, uint64_t seed)
{
    t->cfg = NULL;
    t->net = NULL;
    shoal_result rc = sh_cfg_parse(text, "test.cfg", &t->cfg);
    if (rc == SHOAL_OK) rc = sh_net_create(t->cfg, batch, seed, &t->net);
    CHECK(rc == SHOAL_OK, "building net: %s", shoal_last_error());
    if (rc != SHOAL_OK) {
        sh_cfg_destroy(t->cfg);
        t->cfg = NULL;
        return 0;
    }
    return 1;
}

static void tn_free(test_net *t)
{
    sh_net_destroy(t->net);
    sh_cfg_destroy(t->cfg);
    t->net = NULL;
    t->cfg = NULL;
}

static void tn_random(float *x, size_t count, uint64_t seed, float lo, float hi)
{
    sh_rng r;
    sh_rng_seed(&r, seed);
    for (size_t i = 0; i < count; i++) x[i] = lo + (hi - lo) * sh_rng_float(&r);
}

static double tn_loss(sh_net *n, const float *x, int nimg, const int32_t *labels,
                      const uint64_t rng_state[4])
{
    sh_net_rng_set(n, rng_state);
    CHECK_OK(sh_net_forward(n, x, nimg, 1));
    return sh_net_loss(n, labels);
}

/* |a - b| <= atol + rtol * max(|a|, |b|) */
static int tn_close(double a, double b, double atol, double rtol)
{
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return fabs(a - b) <= atol + rtol * m;
}

/* Check up to per_layer sampled parameters of every layer and per_layer input values. */
static void tn_gradcheck(const char *what, sh_net *n, float *x, int nimg, const int32_t *labels,
                         int per_layer, double eps, double atol, double rtol)
{
    uint64_t st[4];
    sh_net_rng_get(n, st);
    sh_net_want_input_delta(n, 1);
    (void)tn_loss(n, x, nimg, labels, st);
    CHECK_OK(sh_net_backward(n, NULL, NULL));
    size_t np = sh_net_nparams(n);
    size_t nin = (size_t)nimg * (size_t)sh_net_input_count(n);
    float *g = malloc((np + 1) * sizeof *g), *gx = malloc(nin * sizeof *gx);
    memcpy(g, sh_net_grads(n), np * sizeof *g);
    memcpy(gx, sh_net_input_delta(n), nin * sizeof *gx);
    float *p = sh_net_params(n);
    sh_rng r;
    sh_rng_seed(&r, 99);
    int bad = 0, checked = 0;
    for (int li = 0; li < sh_net_nlayers(n); li++) {
        size_t off, cnt;
        sh_net_layer_params(n, li, &off, &cnt);
        for (int s = 0; s < per_layer && cnt; s++) {
            size_t i = off + (s < 2 ? (s == 0 ? 0 : cnt - 1) : sh_rng_below(&r, cnt));
            float keep = p[i];
            p[i] = keep + (float)eps;
            double lp = tn_loss(n, x, nimg, labels, st);
            p[i] = keep - (float)eps;
            double lm = tn_loss(n, x, nimg, labels, st);
            p[i] = keep;
            double fd = (lp - lm) / (2 * eps);
            checked++;
            if (!tn_close(g[i], fd, atol, rtol) && bad++ < 5)
                CHECK(0, "%s: layer %d (%s) param %zu: backward %.6g, finite difference %.6g",
                      what, li, sh_net_layer_name(n, li), i - off, g[i], fd);
        }
    }
    for (int s = 0; s < per_layer; s++) {
        size_t i = sh_rng_below(&r, nin);
        float keep = x[i];
        x[i] = keep + (float)eps;
        double lp = tn_loss(n, x, nimg, labels, st);
        x[i] = keep - (float)eps;
        double lm = tn_loss(n, x, nimg, labels, st);
        x[i] = keep;
        double fd = (lp - lm) / (2 * eps);
        checked++;
        if (!tn_close(gx[i], fd, atol, rtol) && bad++ < 5)
            CHECK(0, "%s: input %zu: backward %.6g, finite difference %.6g", what, i, gx[i], fd);
    }
    CHECK(bad == 0, "%s: %d of %d gradients differ from finite differences", what, bad, checked);
    sh_net_want_input_delta(n, 0);
    free(g);
    free(gx);
}

/* Build from text, random input and labels, and run tn_gradcheck. */
static inline void tn_gradcheck_cfg(const char *what, const char *text, int nimg, int per_layer,
                             double eps, double atol, double rtol)
{
    test_net t;
    if (!tn_build(&t, text, nimg, 7)) return;
    sh_net_set_threads(t.net, 1);
    size_t nin = (size_t)nimg * (size_t)sh_net_input_count(t.net);
    float *x = malloc(nin * sizeof *x);
    int32_t *labels = malloc((size_t)nimg * sizeof *labels);
    tn_random(x, nin, 11, -1.0f, 1.0f);
    for (int i = 0; i < nimg; i++) labels[i] = (i * 7 + 3) % sh_net_nclasses(t.net);
    tn_gradcheck(what, t.net, x, nimg, labels, per_layer, eps, atol, rtol);
    free(x);
    free(labels);
    tn_free(&t);
}

#endif
