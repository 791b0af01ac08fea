/* test_lr_policy.c — proves src/nn/lr_policy.c: every policy against its formula, computed
 * here independently in double precision at several batches, with and without burn_in. */
#include <math.h>
#include <string.h>

#include "base/err.h"
#include "check.h"
#include "nn/optim.h"

static const int64_t batches[] = {0, 1, 2, 99, 100, 101, 999, 1000, 1001, 2500, 3999, 4684};
#define NB (int)(sizeof batches / sizeof batches[0])

static sh_lr_policy base(sh_lr_kind kind)
{
    sh_lr_policy p;
    memset(&p, 0, sizeof p);
    p.kind = kind;
    p.base_lr = 0.01f;
    p.power = 4;
    p.max_batches = 4685;
    return p;
}

/* relative tolerance: the library works in float */
#define CHECK_REL(got, want)                                                              \
    CHECK(fabs((double)(got) - (want)) <= 1e-6 * fabs(want) + 1e-12, "batch %lld: got %.9g want %.9g", \
          (long long)b, (double)(got), (double)(want))

static void constant_is_base_rate(void)
{
    sh_lr_policy p = base(SH_LR_CONSTANT);
    for (int i = 0; i < NB; i++) {
        int64_t b = batches[i];
        CHECK_REL(sh_lr_at(&p, b), 0.01);
    }
}

static void step_multiplies_scale_every_step_batches(void)
{
    sh_lr_policy p = base(SH_LR_STEP);
    p.step = 1000;
    p.scale = 0.5f;
    for (int i = 0; i < NB; i++) {
        int64_t b = batches[i];
        CHECK_REL(sh_lr_at(&p, b), 0.01 * pow(0.5, (double)(b / 1000)));
    }
    int64_t b = 999;
    CHECK_REL(sh_lr_at(&p, b), 0.01);
    b = 1000;
    CHECK_REL(sh_lr_at(&p, b), 0.005);
}

static void steps_multiply_scales_of_passed_steps(void)
{
    sh_lr_policy p = base(SH_LR_STEPS);
    int steps[] = {-1, 100, 1000, 4000};
    float scales[] = {0.1f, 10.0f, 0.1f, 0.5f};
    p.nsteps = 4;
    memcpy(p.steps, steps, sizeof steps);
    memcpy(p.scales, scales, sizeof scales);
    for (int i = 0; i < NB; i++) {
        int64_t b = batches[i];
        double want = 0.01;
        for (int k = 0; k < 4 && steps[k] <= b; k++) want *= scales[k];
        CHECK_REL(sh_lr_at(&p, b), want);
    }
    /* at the step itself the new rate applies (Darknet: steps[i] > batch keeps the old) */
    int64_t b = 1000;
    CHECK_REL(sh_lr_at(&p, b), 0.01 * 0.1 * 10 * 0.1);
    b = 99;
    CHECK_REL(sh_lr_at(&p, b), 0.001);
}

static void exp_poly_inv_sigmoid_follow_their_formulas(void)
{
    sh_lr_policy e = base(SH_LR_EXP), po = base(SH_LR_POLY), in = base(SH_LR_INV);
    sh_lr_policy sg = base(SH_LR_SIGMOID);
    e.gamma = 0.999f;
    po.power = 2;
    in.gamma = 0.0001f;
    in.power = 0.75f;
    sg.gamma = 0.01f;
    sg.step = 1000;
    for (int i = 0; i < NB; i++) {
        int64_t b = batches[i];
        CHECK_REL(sh_lr_at(&e, b), 0.01 * pow((double)0.999f, (double)b));
        CHECK_REL(sh_lr_at(&po, b), 0.01 * pow(1.0 - (double)b / 4685.0, 2.0));
        CHECK_REL(sh_lr_at(&in, b), 0.01 * pow(1.0 + (double)0.0001f * (double)b, -0.75));
        CHECK_REL(sh_lr_at(&sg, b), 0.01 / (1.0 + exp((double)0.01f * (double)(b - 1000))));
    }
    /* sigmoid is half the rate at its step, and near the full rate well before it */
    int64_t b = 1000;
    CHECK_REL(sh_lr_at(&sg, b), 0.005);
    CHECK(sh_lr_at(&sg, 0) > 0.0099f, "before the step: %g", (double)sh_lr_at(&sg, 0));
    /* poly reaches 0 at max_batches and stays there instead of going negative */
    CHECK(sh_lr_at(&po, 4685) == 0.0f && sh_lr_at(&po, 9000) == 0.0f, "poly end");
}

static void burn_in_ramps_up_with_power_then_hands_over(void)
{
    sh_lr_policy p = base(SH_LR_STEPS);
    p.burn_in = 1000;
    p.power = 4;
    p.nsteps = 1;
    p.steps[0] = 2500;
    p.scales[0] = 0.1f;
    for (int i = 0; i < NB; i++) {
        int64_t b = batches[i];
        double want = b < 1000 ? 0.01 * pow((double)b / 1000.0, 4.0) : (b < 2500 ? 0.01 : 0.001);
        CHECK_REL(sh_lr_at(&p, b), want);
    }
    CHECK(sh_lr_at(&p, 0) == 0.0f, "burn-in starts at 0");
    /* burn_in uses the same power as poly, as in Darknet */
    sh_lr_policy q = base(SH_LR_POLY);
    q.burn_in = 100;
    q.power = 2;
    int64_t b = 50;
    CHECK_REL(sh_lr_at(&q, b), 0.01 * 0.25);
    b = 100;
    CHECK_REL(sh_lr_at(&q, b), 0.01 * pow(1.0 - 100.0 / 4685.0, 2.0));
}

int main(void)
{
    check_begin("test_lr_policy", 10);
    RUN(constant_is_base_rate);
    RUN(step_multiplies_scale_every_step_batches);
    RUN(steps_multiply_scales_of_passed_steps);
    RUN(exp_poly_inv_sigmoid_follow_their_formulas);
    RUN(burn_in_ramps_up_with_power_then_hands_over);
    return check_end();
}
