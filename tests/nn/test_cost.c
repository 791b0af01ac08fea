/* test_cost.c — proves src/nn/net_unlabelled.c's regression losses and the [cost] section of
 * src/nn/layer_softmax.c: type=sse, L1 and smooth (scale=) give PyTorch's loss (1/2 MSE, L1,
 * SmoothL1 with beta 1, summed per image, mean over images) and gradient; the input itself as
 * the target (an autoencoder) trains its loss down; nets without labels count no correct
 * answers; wrong targets, a missing target, and a regression type after [softmax] are
 * refused, each naming what to do. Without torch the comparison says so in one line. */
#include "nn_check.h"
#include "ref_check.h"

#include "nn/optim.h"

static const char *const type_names[] = {"", "sse", "L1", "smooth"};

enum { N = 4, K = 7 };

/* One type's case: the net, its loss and the reference case queued. */
typedef struct {
    int kind;
    float scale, loss;
    sh_net *net;
    ref_case rc;
} cost_case;

static void queue_type(cost_case *c, int kind, float scale, int i)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->scale = scale;
    char text[256];
    snprintf(text, sizeof text, "[net]\nbatch=%d\ninputs=%d\n[connected]\noutput=%d\nactivation=linear\n"
             "[cost]\ntype=%s\nscale=%g\n", N, 5, K, type_names[kind], (double)scale);
    sh_net *n = c->net = ref_net(text, N, 3);
    if (!n) return;
    CHECK(sh_net_is_regression(n) && !sh_net_has_labels(n), "%s is a regression", type_names[kind]);
    float x[N * 5], t[N * K];
    ref_random(x, N * 5, 1, -2, 2);
    ref_random(t, N * K, 2, -2, 2);
    ref_random(sh_net_params(n), sh_net_nparams(n), 3, -1, 1);
    CHECK_OK(sh_net_set_target(n, t));
    CHECK_OK(sh_net_forward(n, x, N, 1));
    c->loss = sh_net_loss(n, NULL);
    int words[3] = {N * K, N, kind};
    char name[32];
    snprintf(name, sizeof name, "cost-%d", i);
    if (!ref_open(&c->rc, name, words, 3)) return;
    ref_put(&c->rc, &scale, 1);
    ref_put(&c->rc, sh_net_output(n), N * K);
    ref_put(&c->rc, t, N * K);
    ref_queue(&c->rc, "cost");
}

static void check_type(cost_case *c)
{
    sh_net *n = c->net;
    if (!n) return;
    size_t got = 0;
    float *ref = ref_result(&c->rc, &got);
    if (ref && got == 1 + N * K) {
        char what[64];
        snprintf(what, sizeof what, "type=%s scale=%g: loss", type_names[c->kind], (double)c->scale);
        ref_compare(what, &c->loss, ref, 1, 1e-6);
        ref_compare("dL/d(output)", sh_net_layer(n, 0)->delta, ref + 1, N * K, 1e-6);
    }
    CHECK(sh_net_correct(n, NULL) == 0, "a regression counts no correct answers");
    free(ref);
    sh_net_destroy(n);
}

static void losses_match_pytorch(void)
{
    if (!ref_have_python("torch")) {
        printf("test_cost: /usr/bin/python3 has no torch; comparison with PyTorch skipped\n");
        return;
    }
    enum { NTYPES = SH_COST_SMOOTH - SH_COST_SSE + 1 };
    cost_case c[2 * NTYPES];
    for (int k = 0; k < NTYPES; k++) {
        queue_type(&c[2 * k], SH_COST_SSE + k, 1.0f, 2 * k);
        queue_type(&c[2 * k + 1], SH_COST_SSE + k, 0.25f, 2 * k + 1);
    }
    ref_run_queued();
    for (int i = 0; i < 2 * NTYPES; i++) check_type(&c[i]);
}

static void regression_gradients_match_finite_differences(void)
{
    const char *cfg = "[net]\nbatch=3\nchannels=1\nheight=4\nwidth=4\n"
                      "[convolutional]\nfilters=3\nsize=3\nstride=2\npad=1\nactivation=tanh\n"
                      "[deconvolutional]\nfilters=1\nsize=4\nstride=2\npadding=1\nactivation=logistic\n[cost]\n";
    test_net tn;
    if (!tn_build(&tn, cfg, 3, 5)) return;
    float x[48], t[48];
    tn_random(x, 48, 9, 0, 1);
    tn_random(t, 48, 10, 0, 1);
    CHECK_OK(sh_net_set_target(tn.net, t));
    tn_gradcheck("regression sse", tn.net, x, 3, NULL, 10, 1e-2, 1e-4, 2e-2);
    /* the input itself as the target: the loss against a copy of it */
    CHECK_OK(sh_net_forward(tn.net, x, 3, 1));
    float with_copy = sh_net_loss(tn.net, NULL);
    CHECK_OK(sh_net_set_target(tn.net, NULL));
    memcpy(t, x, sizeof t);
    CHECK_OK(sh_net_forward(tn.net, x, 3, 1));
    float with_input = sh_net_loss(tn.net, NULL);
    CHECK_OK(sh_net_set_target(tn.net, t));
    CHECK_OK(sh_net_forward(tn.net, x, 3, 1));
    CHECK(with_input == sh_net_loss(tn.net, NULL) && with_input != with_copy, "input as target: %g, copy %g",
          with_input, sh_net_loss(tn.net, NULL));
    tn_free(&tn);
}

/* A tiny autoencoder, 100 steps of SGD on 16 random images: the reconstruction error falls. */
static void an_autoencoder_learns_its_input(void)
{
    const char *cfg = "[net]\nbatch=16\nchannels=1\nheight=8\nwidth=8\nmomentum=0.9\n"
                      "[convolutional]\nfilters=8\nsize=3\nstride=2\npad=1\nactivation=relu\n"
                      "[upsample]\nstride=2\n"
                      "[deconvolutional]\nfilters=1\nsize=3\nstride=1\npad=1\nactivation=logistic\n[cost]\n";
    sh_net *n = ref_net(cfg, 16, 2);
    if (!n) return;
    float x[16 * 64];
    for (int i = 0; i < 16 * 64; i++) x[i] = ((i / 64 + i % 64 / 8) % 3 == 0) ? 0.9f : 0.1f;
    CHECK_OK(sh_net_set_target(n, NULL));
    sh_optim *o = NULL;
    int nr = 0;
    const sh_param_range *r = sh_net_param_ranges(n, &nr);
    CHECK_OK(sh_optim_create(&sh_net_get_config(n)->optim, sh_net_nparams(n), r, nr, &o));
    float first = 0, last = 0;
    for (int step = 0; o && step < 100; step++) {
        CHECK_OK(sh_net_forward(n, x, 16, 1));
        last = sh_net_loss(n, NULL);
        if (step == 0) first = last;
        CHECK_OK(sh_net_backward(n, NULL, NULL));
        sh_optim_step(o, sh_net_params(n), sh_net_grads(n), 0.05f);
    }
    CHECK(last < 0.5f * first, "reconstruction error %g -> %g", first, last);
    sh_optim_destroy(o);
    sh_net_destroy(n);
}

static void wrong_or_missing_targets_are_refused(void)
{
    sh_net *n = ref_net("[net]\nbatch=2\ninputs=6\n[connected]\noutput=4\n[cost]\ntype=L1\n", 2, 1);
    if (!n) return;
    CHECK_RC(sh_net_set_target(n, NULL), SHOAL_ERR_INVALID);
    CHECK(strstr(shoal_last_error(), "ref.cfg:4: the net outputs 4 values per image but takes 6") != NULL,
          "error: %s", shoal_last_error());
    float x[12] = {0};
    CHECK_OK(sh_net_forward(n, x, 2, 1));
    CHECK(isnan(sh_net_loss(n, NULL)), "no targets: no loss");
    CHECK_OK(sh_net_check_trainable(n));
    sh_net_destroy(n);
    n = ref_net("[net]\nbatch=2\ninputs=6\n[connected]\noutput=4\n[softmax]\n", 2, 1);
    if (n) {
        CHECK_RC(sh_net_set_target(n, NULL), SHOAL_ERR_INVALID);
        CHECK(strstr(shoal_last_error(), "learns from labels") != NULL, "error: %s", shoal_last_error());
        CHECK(sh_net_has_labels(n) && !sh_net_is_regression(n), "a softmax net has labels");
    }
    sh_net_destroy(n);
    sh_cfg *cfg = NULL;
    CHECK_OK(sh_cfg_parse("[net]\ninputs=6\n[connected]\noutput=4\n[softmax]\n[cost]\ntype=L1\n", "soft.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "soft.cfg:7: [cost] type=L1 is not supported") != NULL, "error: %s",
          shoal_last_error());
    sh_cfg_destroy(cfg);
    CHECK_OK(sh_cfg_parse("[net]\ninputs=6\n[connected]\noutput=4\n[cost]\ntype=masked\n", "mask.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "type=masked is not supported after [connected]; use sse, L1 or smooth"),
          "error: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
    CHECK_OK(sh_cfg_parse("[net]\ninputs=6\n[connected]\noutput=4\n", "none.cfg", &cfg));
    CHECK_OK(sh_net_create(cfg, 1, 1, &n));
    CHECK_RC(sh_net_check_trainable(n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "end it with [cost] type=sse, L1 or smooth") != NULL, "error: %s",
          shoal_last_error());
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_cost", 120);
    ref_begin();
    RUN(losses_match_pytorch);
    RUN(regression_gradients_match_finite_differences);
    RUN(an_autoencoder_learns_its_input);
    RUN(wrong_or_missing_targets_are_refused);
    ref_end();
    return check_end();
}
