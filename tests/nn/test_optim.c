/* test_optim.c — proves src/nn/optim.c: SGD (momentum, decay ranges), Adagrad and Adam
 * against a double-precision reference written here, state save/restore giving the same
 * bits, and argument checks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"
#include "check.h"
#include "nn/optim.h"

/* 1500 parameters: more than two 512-float blocks plus a tail. Decay on [0,600) and
 * [900,1490); [600,700) without; [700,900) and [1490,1500) are gaps (no decay). */
#define COUNT 1500
static const sh_param_range ranges[] = {{900, 590, 1}, {0, 600, 1}, {600, 100, 0}};
#define NRANGES 3

static int decays_at(size_t i) { return i < 600 || (i >= 900 && i < 1490); }

static void fill(float *x, size_t n, uint64_t seed, float scale)
{
    sh_rng r;
    sh_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = scale * sh_rng_normal(&r);
}

static sh_optim_config config(sh_optim_kind kind)
{
    sh_optim_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.momentum = 0.9f;
    c.decay = 0.01f;
    c.beta1 = 0.9f;
    c.beta2 = 0.999f;
    c.eps = kind == SH_OPTIM_ADAM ? 1e-7f : 1e-10f;
    return c;
}

/* The update rules in double, one parameter at a time, straight from their definitions. */
static void reference(const sh_optim_config *c, double *w, double *s1, double *s2, int t,
                      const float *g, double lr)
{
    for (size_t i = 0; i < COUNT; i++) {
        double gd = (double)g[i] + (decays_at(i) ? (double)c->decay * w[i] : 0.0);
        if (c->kind == SH_OPTIM_SGD) {
            s1[i] = (double)c->momentum * s1[i] + gd;
            w[i] -= lr * s1[i];
        } else if (c->kind == SH_OPTIM_ADAGRAD) {
            s1[i] += gd * gd;
            w[i] -= lr * gd / (sqrt(s1[i]) + (double)c->eps);
        } else {
            double b1 = c->beta1, b2 = c->beta2;
            s1[i] = b1 * s1[i] + (1 - b1) * gd;
            s2[i] = b2 * s2[i] + (1 - b2) * gd * gd;
            double mhat = s1[i] / (1 - pow(b1, t)), vhat = s2[i] / (1 - pow(b2, t));
            w[i] -= lr * mhat / (sqrt(vhat) + (double)c->eps);
        }
    }
}

static void matches_reference(sh_optim_kind kind, const char *name)
{
    sh_optim_config c = config(kind);
    sh_optim *o = NULL;
    CHECK_OK(sh_optim_create(&c, COUNT, ranges, NRANGES, &o));
    if (!o) return;
    static float w[COUNT], g[COUNT];
    static double wd[COUNT], s1[COUNT], s2[COUNT];
    fill(w, COUNT, 1, 0.5f);
    for (size_t i = 0; i < COUNT; i++) wd[i] = w[i], s1[i] = 0, s2[i] = 0;
    double worst = 0;
    for (int t = 1; t <= 8; t++) {
        float lr = 0.05f / (float)t;
        fill(g, COUNT, 100 + (uint64_t)t, 0.3f);
        sh_optim_step(o, w, g, lr);
        reference(&c, wd, s1, s2, t, g, lr);
        for (size_t i = 0; i < COUNT; i++) {
            double err = fabs((double)w[i] - wd[i]) / (fabs(wd[i]) + 1e-3);
            if (err > worst) worst = err;
        }
    }
    CHECK(worst < 2e-5, "%s: worst relative error %g after 8 steps", name, worst);
    size_t n = 0;
    float *state = sh_optim_state(o, &n);
    size_t want = kind == SH_OPTIM_ADAM ? 2 * COUNT + 1 : COUNT;
    CHECK(state != NULL && n == want, "%s: state of %zu floats, want %zu", name, n, want);
    if (kind == SH_OPTIM_ADAM) CHECK(state[2 * COUNT] == 8.0f, "adam counts t=%g", (double)state[2 * COUNT]);
    sh_optim_destroy(o);
}

static void sgd_matches_double_reference_with_momentum_and_decay_ranges(void)
{
    matches_reference(SH_OPTIM_SGD, "sgd");
}

static void adagrad_matches_double_reference(void) { matches_reference(SH_OPTIM_ADAGRAD, "adagrad"); }

static void adam_matches_double_reference_with_bias_correction(void)
{
    matches_reference(SH_OPTIM_ADAM, "adam");
}

static void plain_sgd_is_w_minus_lr_g_exactly(void)
{
    sh_optim_config c = config(SH_OPTIM_SGD);
    c.momentum = 0;
    c.decay = 0;
    sh_optim *o = NULL;
    CHECK_OK(sh_optim_create(&c, 100, NULL, 0, &o));
    if (!o) return;
    float w[100], g[100], want[100];
    fill(w, 100, 3, 1);
    fill(g, 100, 4, 1);
    for (int i = 0; i < 100; i++) want[i] = w[i] - 0.1f * g[i];
    sh_optim_step(o, w, g, 0.1f);
    CHECK(memcmp(w, want, sizeof w) == 0, "bitwise w - lr*g");
    sh_optim_destroy(o);
}

static void adam_first_step_moves_each_weight_by_about_lr(void)
{
    sh_optim_config c = config(SH_OPTIM_ADAM);
    c.decay = 0;
    sh_optim *o = NULL;
    CHECK_OK(sh_optim_create(&c, 64, NULL, 0, &o));
    if (!o) return;
    float w[64] = {0}, g[64];
    fill(g, 64, 5, 1);
    sh_optim_step(o, w, g, 0.001f);
    int ok = 1;
    for (int i = 0; i < 64; i++)
        if (fabsf(g[i]) > 1e-3f && fabsf(w[i] + 0.001f * (g[i] > 0 ? 1.0f : -1.0f)) > 1e-6f) ok = 0;
    CHECK(ok, "bias-corrected first step is -lr*sign(g)");
    sh_optim_destroy(o);
}

/* Save the state after 3 steps, build a new optimizer, restore: 4 more steps of both give
 * the same bits. */
static void restored_state_continues_bit_identically(void)
{
    for (int k = 0; k < 3; k++) {
        sh_optim_config c = config((sh_optim_kind)k);
        sh_optim *a = NULL, *b = NULL;
        CHECK_OK(sh_optim_create(&c, COUNT, ranges, NRANGES, &a));
        CHECK_OK(sh_optim_create(&c, COUNT, ranges, NRANGES, &b));
        if (!a || !b) {
            sh_optim_destroy(a);
            sh_optim_destroy(b);
            return;
        }
        static float wa[COUNT], wb[COUNT], g[COUNT];
        fill(wa, COUNT, 7, 1);
        for (int t = 0; t < 3; t++) {
            fill(g, COUNT, 200 + (uint64_t)t, 1);
            sh_optim_step(a, wa, g, 0.01f);
        }
        size_t na = 0, nb = 0;
        float *sa = sh_optim_state(a, &na), *sb = sh_optim_state(b, &nb);
        CHECK(na == nb, "same state size");
        float *saved = malloc(na * sizeof *saved);
        memcpy(saved, sa, na * sizeof *saved);
        memcpy(sb, saved, na * sizeof *saved);
        memcpy(wb, wa, sizeof wb);
        for (int t = 3; t < 7; t++) {
            fill(g, COUNT, 200 + (uint64_t)t, 1);
            sh_optim_step(a, wa, g, 0.01f);
            sh_optim_step(b, wb, g, 0.01f);
        }
        CHECK(memcmp(wa, wb, sizeof wa) == 0, "kind %d: params differ after restore", k);
        CHECK(memcmp(sa, sb, na * sizeof *sa) == 0, "kind %d: state differs after restore", k);
        CHECK(memcmp(sa, saved, na * sizeof *sa) != 0, "kind %d: state moved on", k);
        free(saved);
        sh_optim_destroy(a);
        sh_optim_destroy(b);
    }
}

static void bad_ranges_and_hyperparameters_are_refused(void)
{
    sh_optim_config c = config(SH_OPTIM_SGD);
    sh_optim *o = NULL;
    sh_param_range outside[] = {{90, 20, 1}};
    CHECK_RC(sh_optim_create(&c, 100, outside, 1, &o), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "[90, 110)") != NULL, "%s", shoal_last_error_message());
    sh_param_range overlap[] = {{0, 50, 1}, {40, 20, 0}};
    CHECK_RC(sh_optim_create(&c, 100, overlap, 2, &o), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error_message(), "overlaps") != NULL, "%s", shoal_last_error_message());
    c.momentum = 1.5f;
    CHECK_RC(sh_optim_create(&c, 100, NULL, 0, &o), SHOAL_ERR_INVALID);
    c = config(SH_OPTIM_ADAM);
    c.eps = 0;
    CHECK_RC(sh_optim_create(&c, 100, NULL, 0, &o), SHOAL_ERR_INVALID);
    CHECK(o == NULL, "nothing on error");
    c = config(SH_OPTIM_SGD);
    CHECK_OK(sh_optim_create(&c, 0, NULL, 0, &o));
    float w = 1, g = 1;
    if (o) sh_optim_step(o, &w, &g, 0.1f);
    CHECK(w == 1, "zero parameters: nothing moves");
    sh_optim_destroy(o);
    sh_optim_destroy(NULL);
}

int main(void)
{
    check_begin("test_optim", 20);
    RUN(sgd_matches_double_reference_with_momentum_and_decay_ranges);
    RUN(adagrad_matches_double_reference);
    RUN(adam_matches_double_reference_with_bias_correction);
    RUN(plain_sgd_is_w_minus_lr_g_exactly);
    RUN(adam_first_step_moves_each_weight_by_about_lr);
    RUN(restored_state_continues_bit_identically);
    RUN(bad_ranges_and_hyperparameters_are_refused);
    return check_end();
}
