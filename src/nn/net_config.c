/* net_config.c — the [net] section: batch, input shape, optimizer and learning-rate policy,
 * how pictures become inputs, with Darknet's defaults (parser.c, parse_net_options) and
 * shoal's optimizer=, test_resize=, mean= and std= keys.
 * Not here: the syntax (cfg.c), the layers (net.c, layer_*.c), what the rate does (optim.c).
 * Proved by tests/nn/test_net_config.c. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "nn/cfg.h"
#include "nn/net.h"

/* Darknet's defaults, from parse_net_options; eps for Adagrad is PyTorch's. */
#define DEF_BATCH 1
#define DEF_SUBDIVISIONS 1
#define DEF_LEARNING_RATE 0.001f
#define DEF_MOMENTUM 0.9f
#define DEF_DECAY 0.0001f
#define DEF_POWER 4.0f       /* burn_in's and poly's exponent */
#define DEF_B1 0.9f
#define DEF_B2 0.999f
#define DEF_ADAM_EPS 1e-7f
#define DEF_ADAGRAD_EPS 1e-10f
#define MAX_DIM (1 << 16)    /* pixels per side, channels */

static const char *const policy_names = "constant, step, steps, exp, poly, inv, sigmoid";

static shoal_result parse_input(sh_cfg_section *s, sh_net_config *c)
{
    int inputs = 0;
    SH_TRY(sh_cfg_int(s, "width", 0, 0, MAX_DIM, &c->width));
    SH_TRY(sh_cfg_int(s, "height", 0, 0, MAX_DIM, &c->height));
    SH_TRY(sh_cfg_int(s, "channels", 0, 0, MAX_DIM, &c->channels));
    int has_inputs = sh_cfg_has(s, "inputs");
    SH_TRY(sh_cfg_int(s, "inputs", 0, 1, INT_MAX, &inputs));
    int has_shape = c->width || c->height || c->channels;
    if (has_inputs && !has_shape) {
        /* Darknet's 1-D models (connected layers only): inputs=N, no image shape. */
        c->channels = inputs;
        c->width = c->height = 1;
        return SHOAL_OK;
    }
    if (!c->width || !c->height || !c->channels)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "input shape is width=%d height=%d channels=%d; set all three "
                              "(or inputs=N for a vector input)",
                              c->width, c->height, c->channels);
    long long count = (long long)c->width * c->height * c->channels;
    if (count > INT_MAX)
        return sh_cfg_fail_at(s, "width", SHOAL_ERR_FORMAT,
                              "input of %dx%dx%d is %lld values per image; at most %d",
                              c->width, c->height, c->channels, count, INT_MAX);
    if (has_inputs && inputs != count)
        return sh_cfg_fail_at(s, "inputs", SHOAL_ERR_FORMAT,
                              "inputs=%d but width*height*channels = %lld; remove inputs or make "
                              "them agree",
                              inputs, count);
    return SHOAL_OK;
}

/* mean= / std=: one value for every channel, or one per channel. */
static shoal_result parse_channel_list(sh_cfg_section *s, const char *key, float def, int channels, float *out)
{
    int n = 0;
    for (int i = 0; i < 3; i++) out[i] = def;
    if (!sh_cfg_has(s, key)) return SHOAL_OK;
    float v[3];
    SH_TRY(sh_cfg_float_list(s, key, v, 3, &n));
    if (n != 1 && n != channels)
        return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT, "%s has %d values; give one, or one per channel (%d)",
                              key, n, channels);
    for (int i = 0; i < 3; i++) out[i] = v[n == 1 ? 0 : i < n ? i : 0];
    return SHOAL_OK;
}

static shoal_result parse_pictures(sh_cfg_section *s, sh_net_config *c)
{
    sh_net_pictures *p = &c->pictures;
    int side = c->width > c->height ? c->width : c->height;
    SH_TRY(sh_cfg_int(s, "min_crop", side, 1, MAX_DIM, &p->min_crop));
    SH_TRY(sh_cfg_int(s, "max_crop", p->min_crop, 1, MAX_DIM, &p->max_crop));
    if (p->max_crop < p->min_crop)
        return sh_cfg_fail_at(s, "max_crop", SHOAL_ERR_FORMAT, "max_crop=%d is below min_crop=%d; the shorter "
                              "side is drawn between them", p->max_crop, p->min_crop);
    SH_TRY(sh_cfg_int(s, "test_resize", side, 1, MAX_DIM, &p->test_resize));
    SH_TRY(sh_cfg_int(s, "flip", 1, 0, 1, &p->flip));
    SH_TRY(sh_cfg_float(s, "aspect", 1, 0.01f, 100, &p->aspect));
    SH_TRY(sh_cfg_float(s, "angle", 0, 0, 180, &p->angle));
    SH_TRY(sh_cfg_float(s, "hue", 0, 0, 0.5f, &p->hue));
    SH_TRY(sh_cfg_float(s, "saturation", 1, 0.01f, 100, &p->saturation));
    SH_TRY(sh_cfg_float(s, "exposure", 1, 0.01f, 100, &p->exposure));
    int ch = c->channels < 3 ? c->channels : 3;
    SH_TRY(parse_channel_list(s, "mean", 0, ch, p->mean));
    SH_TRY(parse_channel_list(s, "std", 1, ch, p->std));
    for (int i = 0; i < 3; i++)
        if (!(p->std[i] > 0))
            return sh_cfg_fail_at(s, "std", SHOAL_ERR_FORMAT, "std %g: each must be > 0", (double)p->std[i]);
    return SHOAL_OK;
}

/* A key that belongs to another policy or optimizer: Darknet would skip it silently; we say
 * why it does nothing. */
static shoal_result refuse_unused(sh_cfg_section *s, const char *key, const char *why)
{
    if (!sh_cfg_has(s, key)) return SHOAL_OK;
    return sh_cfg_fail_at(s, key, SHOAL_ERR_FORMAT, "%s is not used %s; remove it", key, why);
}

static shoal_result parse_policy(sh_cfg_section *s, sh_net_config *c)
{
    sh_lr_policy *p = &c->lr;
    const char *name = NULL;
    memset(p, 0, sizeof *p);
    SH_TRY(sh_cfg_float(s, "learning_rate", DEF_LEARNING_RATE, 0, 1e6f, &p->base_lr));
    SH_TRY(sh_cfg_str(s, "policy", "constant", &name));
    SH_TRY(sh_cfg_int(s, "burn_in", 0, 0, INT_MAX, &p->burn_in));
    SH_TRY(sh_cfg_float(s, "power", DEF_POWER, -1e6f, 1e6f, &p->power));
    SH_TRY(sh_cfg_int(s, "max_batches", 0, 0, INT_MAX, &p->max_batches));
    c->max_batches = p->max_batches;
    p->scale = 1;
    p->gamma = 1;
    if (!strcmp(name, "constant")) {
        p->kind = SH_LR_CONSTANT;
    } else if (!strcmp(name, "step")) {
        p->kind = SH_LR_STEP;
        SH_TRY(sh_cfg_int(s, "step", 1, 1, INT_MAX, &p->step));
        SH_TRY(sh_cfg_float(s, "scale", 1, 0, 1e6f, &p->scale));
    } else if (!strcmp(name, "steps")) {
        p->kind = SH_LR_STEPS;
        int ns = 0, nscales = 0;
        SH_TRY(sh_cfg_int_list(s, "steps", p->steps, SH_LR_MAX_STEPS, &ns));
        SH_TRY(sh_cfg_float_list(s, "scales", p->scales, SH_LR_MAX_STEPS, &nscales));
        if (ns == 0 || nscales == 0)
            return sh_cfg_fail_at(s, "policy", SHOAL_ERR_FORMAT,
                                  "policy=steps needs steps= and scales= (e.g. steps=2000,3000 "
                                  "scales=.1,.1)");
        if (ns != nscales)
            return sh_cfg_fail_at(s, "scales", SHOAL_ERR_FORMAT,
                                  "%d steps but %d scales; give one scale per step", ns, nscales);
        for (int i = 1; i < ns; i++)
            if (p->steps[i] < p->steps[i - 1])
                return sh_cfg_fail_at(s, "steps", SHOAL_ERR_FORMAT,
                                      "steps must not decrease (%d comes after %d); list them in "
                                      "order",
                                      p->steps[i], p->steps[i - 1]);
        for (int i = 0; i < ns; i++)
            if (!(p->scales[i] >= 0))
                return sh_cfg_fail_at(s, "scales", SHOAL_ERR_FORMAT,
                                      "scale %d is %g; scales must be >= 0", i + 1,
                                      (double)p->scales[i]);
        p->nsteps = ns;
    } else if (!strcmp(name, "exp")) {
        p->kind = SH_LR_EXP;
        SH_TRY(sh_cfg_float(s, "gamma", 1, 0, 1e6f, &p->gamma));
    } else if (!strcmp(name, "poly")) {
        p->kind = SH_LR_POLY;
        if (p->max_batches <= 0)
            return sh_cfg_fail_at(s, "policy", SHOAL_ERR_FORMAT,
                                  "policy=poly needs max_batches > 0 (the rate reaches 0 there)");
    } else if (!strcmp(name, "inv")) {
        p->kind = SH_LR_INV;
        SH_TRY(sh_cfg_float(s, "gamma", 1, 0, 1e6f, &p->gamma));
    } else if (!strcmp(name, "sigmoid")) {
        p->kind = SH_LR_SIGMOID;
        SH_TRY(sh_cfg_float(s, "gamma", 1, -1e6f, 1e6f, &p->gamma));
        SH_TRY(sh_cfg_int(s, "step", 1, 0, INT_MAX, &p->step));
    } else if (!strcmp(name, "random")) {
        return sh_cfg_fail_at(s, "policy", SHOAL_ERR_FORMAT,
                              "policy=random is not supported: a random rate per step would "
                              "differ between ranks and between runs; use one of %s",
                              policy_names);
    } else {
        return sh_cfg_fail_at(s, "policy", SHOAL_ERR_FORMAT,
                              "unknown policy \"%s\"; use one of %s", name, policy_names);
    }
    /* keys of the other policies: an error naming the policy, not a silent no-op */
    char why[64];
    snprintf(why, sizeof why, "by policy=%s", name);
    if (p->kind != SH_LR_STEP && p->kind != SH_LR_SIGMOID) SH_TRY(refuse_unused(s, "step", why));
    if (p->kind != SH_LR_STEP) SH_TRY(refuse_unused(s, "scale", why));
    if (p->kind != SH_LR_STEPS) {
        SH_TRY(refuse_unused(s, "steps", why));
        SH_TRY(refuse_unused(s, "scales", why));
    }
    if (p->kind != SH_LR_EXP && p->kind != SH_LR_INV && p->kind != SH_LR_SIGMOID)
        SH_TRY(refuse_unused(s, "gamma", why));
    return SHOAL_OK;
}

static shoal_result parse_optimizer(sh_cfg_section *s, sh_net_config *c)
{
    sh_optim_config *o = &c->optim;
    int adam = 0;
    const char *name = NULL;
    memset(o, 0, sizeof *o);
    SH_TRY(sh_cfg_float(s, "momentum", DEF_MOMENTUM, 0, 0.999999f, &o->momentum));
    SH_TRY(sh_cfg_float(s, "decay", DEF_DECAY, 0, 1e3f, &o->decay));
    SH_TRY(sh_cfg_int(s, "adam", 0, 0, 1, &adam));
    const char *def = adam ? "adam" : "sgd";
    SH_TRY(sh_cfg_str(s, "optimizer", def, &name));
    int has_name = name != def; /* the getter hands back def itself when the key is absent */
    if (!strcmp(name, "sgd")) o->kind = SH_OPTIM_SGD;
    else if (!strcmp(name, "adagrad")) o->kind = SH_OPTIM_ADAGRAD;
    else if (!strcmp(name, "adam")) o->kind = SH_OPTIM_ADAM;
    else
        return sh_cfg_fail_at(s, "optimizer", SHOAL_ERR_FORMAT,
                              "unknown optimizer \"%s\"; use sgd, adagrad or adam", name);
    if (has_name && adam && o->kind != SH_OPTIM_ADAM)
        return sh_cfg_fail_at(s, "adam", SHOAL_ERR_FORMAT,
                              "adam=1 contradicts optimizer=%s; keep one of the two", name);
    o->beta1 = DEF_B1;
    o->beta2 = DEF_B2;
    o->eps = o->kind == SH_OPTIM_ADAM ? DEF_ADAM_EPS : DEF_ADAGRAD_EPS;
    char why[64];
    snprintf(why, sizeof why, "by optimizer=%s", name);
    if (o->kind == SH_OPTIM_ADAM) {
        SH_TRY(sh_cfg_float(s, "B1", DEF_B1, 0, 0.999999f, &o->beta1));
        SH_TRY(sh_cfg_float(s, "B2", DEF_B2, 0, 0.999999f, &o->beta2));
    } else {
        SH_TRY(refuse_unused(s, "B1", why));
        SH_TRY(refuse_unused(s, "B2", why));
    }
    if (o->kind != SH_OPTIM_SGD)
        SH_TRY(sh_cfg_float(s, "eps", o->eps, 1e-30f, 1.0f, &o->eps));
    else
        SH_TRY(refuse_unused(s, "eps", why));
    return SHOAL_OK;
}

shoal_result sh_net_config_parse(sh_cfg_section *s, sh_net_config *out)
{
    sh_net_config c;
    memset(&c, 0, sizeof c);
    if (!s || !out) return SH_FAIL(SHOAL_ERR_INVALID, "sh_net_config_parse: NULL argument");
    const char *name = sh_cfg_section_name(s);
    if (strcmp(name, "net") != 0 && strcmp(name, "network") != 0)
        return sh_cfg_fail_at(s, NULL, SHOAL_ERR_FORMAT,
                              "expected [net] (or [network]) here, the model's first section");
    SH_TRY(sh_cfg_int(s, "batch", DEF_BATCH, 1, 1 << 24, &c.batch));
    SH_TRY(sh_cfg_int(s, "subdivisions", DEF_SUBDIVISIONS, 1, 1 << 24, &c.subdivisions));
    if (c.batch % c.subdivisions != 0)
        return sh_cfg_fail_at(s, "subdivisions", SHOAL_ERR_FORMAT,
                              "batch=%d is not a multiple of subdivisions=%d; each pass takes "
                              "batch/subdivisions images, make it a whole number",
                              c.batch, c.subdivisions);
    SH_TRY(sh_cfg_int(s, "time_steps", 1, 1, 1 << 16, &c.time_steps));
    SH_TRY(parse_input(s, &c));
    SH_TRY(parse_pictures(s, &c));
    SH_TRY(parse_policy(s, &c));
    SH_TRY(parse_optimizer(s, &c));
    SH_TRY(sh_cfg_check_unused(s));
    *out = c;
    return SHOAL_OK;
}

shoal_result sh_net_cfg_batch(const char *cfg_path, int *batch)
{
    sh_cfg *cfg = NULL;
    sh_net_config nc;
    *batch = 0;
    SH_TRY(sh_cfg_load(cfg_path, &cfg)); /* it refuses a file that does not start with [net] */
    shoal_result rc = sh_net_config_parse(sh_cfg_section_at(cfg, 0), &nc);
    if (rc == SHOAL_OK) *batch = nc.batch;
    sh_cfg_destroy(cfg);
    return rc;
}
