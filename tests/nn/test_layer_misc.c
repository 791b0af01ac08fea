/* test_layer_misc.c — proves layer_shortcut.c, layer_route.c, layer_dropout.c and
 * layer_softmax.c: residual add and concatenation forward and backward (finite differences,
 * including a layer whose delta two consumers add into), dropout with a fixed mask
 * (scaled at training, identity at inference), softmax cross-entropy's value and gradient,
 * and clear errors for mismatched shapes and unsupported costs. */
#include <stdio.h>

#include "nn_check.h"

static void shortcut_adds_and_backward_matches_finite_differences(void)
{
    const char *text = "[net]\nbatch=2\nchannels=2\nheight=4\nwidth=4\n"
                       "[convolutional]\nfilters=3\nsize=3\npad=1\nactivation=tanh\n"
                       "[convolutional]\nfilters=3\nsize=3\npad=1\nactivation=linear\n"
                       "[shortcut]\nfrom=-2\nactivation=leaky\n"
                       "[connected]\noutput=4\nactivation=linear\n[softmax]\n";
    test_net t;
    if (!tn_build(&t, text, 2, 1)) return;
    float x[64];
    tn_random(x, 64, 1, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, 2, 0));
    const float *a = sh_net_layer(t.net, 0)->out, *b = sh_net_layer(t.net, 1)->out;
    const float *y = sh_net_layer(t.net, 2)->out;
    double worst = 0;
    for (int i = 0; i < 96; i++) {
        float s = a[i] + b[i];
        worst = fmax(worst, fabs(y[i] - (s > 0 ? s : 0.1f * s)));
    }
    CHECK(worst < 1e-6, "shortcut forward error %g", worst);
    tn_free(&t);
    tn_gradcheck_cfg("shortcut", text, 2, 12, 1e-2, 3e-4, 2e-2);
}

static void route_concatenates_channels_and_backward_matches(void)
{
    const char *text = "[net]\nbatch=2\nchannels=1\nheight=5\nwidth=5\n"
                       "[convolutional]\nfilters=2\nsize=3\npad=1\nactivation=tanh\n"
                       "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n"
                       "[route]\nlayers=-1,-2\n"
                       "[convolutional]\nfilters=2\nsize=3\nstride=2\npad=1\nactivation=linear\n"
                       "[connected]\noutput=3\nactivation=linear\n[softmax]\n";
    test_net t;
    if (!tn_build(&t, text, 2, 1)) return;
    int c, h, w;
    sh_net_layer_shape(t.net, 2, &c, &h, &w);
    CHECK(c == 5 && h == 5 && w == 5, "route shape %dx%dx%d", c, h, w);
    float x[50];
    tn_random(x, 50, 1, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, 2, 0));
    const float *l0 = sh_net_layer(t.net, 0)->out, *l1 = sh_net_layer(t.net, 1)->out;
    const float *y = sh_net_layer(t.net, 2)->out;
    int bad = 0;
    for (int n = 0; n < 2; n++) {
        bad += memcmp(y + n * 125, l1 + n * 75, 75 * 4) != 0;
        bad += memcmp(y + n * 125 + 75, l0 + n * 50, 50 * 4) != 0;
    }
    CHECK(bad == 0, "route output is not [layer 1, layer 0] per image");
    tn_free(&t);
    tn_gradcheck_cfg("route", text, 2, 12, 1e-2, 3e-4, 2e-2);
}

static void shortcut_and_route_shape_mismatch_name_file_and_line(void)
{
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=8\nwidth=8\n"
                          "[convolutional]\nfilters=2\nsize=3\npad=1\n"
                          "[convolutional]\nfilters=2\nsize=3\nstride=3\npad=1\n"
                          "[shortcut]\nfrom=-2\n[softmax]\n", "sc.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "sc.cfg:15") != NULL &&
              strstr(shoal_last_error(), "2x8x8") != NULL,
          "message: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=8\nwidth=8\n"
                          "[convolutional]\nfilters=2\nsize=3\npad=1\n"
                          "[maxpool]\nsize=2\nstride=2\n"
                          "[route]\nlayers=-1,-2\n[softmax]\n", "rt.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "rt.cfg:13") != NULL &&
              strstr(shoal_last_error(), "H x W") != NULL,
          "message: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=8\nwidth=8\n"
                          "[convolutional]\nfilters=2\nsize=3\npad=1\n"
                          "[shortcut]\nfrom=3\n[softmax]\n", "fw.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "fw.cfg:10") != NULL &&
              strstr(shoal_last_error(), "earlier layer") != NULL,
          "message: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
}

static void dropout_scales_kept_values_and_is_identity_at_inference(void)
{
    const char *text = "[net]\nbatch=4\nchannels=1\nheight=10\nwidth=10\n"
                       "[dropout]\nprobability=0.3\n"
                       "[connected]\noutput=3\nactivation=linear\n[softmax]\n";
    test_net t;
    if (!tn_build(&t, text, 4, 1)) return;
    float x[400];
    tn_random(x, 400, 1, 0.5f, 1.0f);
    CHECK_OK(sh_net_forward(t.net, x, 4, 0));
    CHECK(memcmp(sh_net_layer(t.net, 0)->out, x, sizeof x) == 0, "inference must be identity");
    CHECK_OK(sh_net_forward(t.net, x, 4, 1));
    const float *y = sh_net_layer(t.net, 0)->out;
    int dropped = 0, bad = 0;
    for (int i = 0; i < 400; i++) {
        if (y[i] == 0.0f)
            dropped++;
        else
            bad += fabsf(y[i] - x[i] / 0.7f) > 1e-6f;
    }
    CHECK(bad == 0, "%d kept values not scaled by 1/(1-p)", bad);
    CHECK(dropped > 80 && dropped < 160, "dropped %d of 400 at p=0.3", dropped);
    /* same generator state, same mask */
    uint64_t st[4];
    sh_net_rng_get(t.net, st);
    CHECK_OK(sh_net_forward(t.net, x, 4, 1));
    float first[400];
    memcpy(first, y, sizeof first);
    sh_net_rng_set(t.net, st);
    CHECK_OK(sh_net_forward(t.net, x, 4, 1));
    CHECK(memcmp(first, y, sizeof first) == 0, "mask must depend only on the generator state");
    tn_free(&t);
    tn_gradcheck_cfg("dropout fixed mask", text, 4, 12, 1e-2, 2e-4, 2e-2);
}

static void softmax_cross_entropy_value_and_gradient(void)
{
    const char *text = "[net]\nbatch=3\nchannels=1\nheight=1\nwidth=4\n"
                       "[connected]\noutput=5\nactivation=linear\n[softmax]\n[cost]\n";
    test_net t;
    if (!tn_build(&t, text, 3, 1)) return;
    float x[12];
    tn_random(x, 12, 9, -2, 2);
    int32_t labels[3] = {4, 0, 2};
    CHECK_OK(sh_net_forward(t.net, x, 3, 1));
    float loss = sh_net_loss(t.net, labels);
    const float *z = sh_net_layer(t.net, 0)->out;
    double want = 0;
    for (int n = 0; n < 3; n++) {
        double mx = -1e30, s = 0;
        for (int j = 0; j < 5; j++) mx = fmax(mx, z[n * 5 + j]);
        for (int j = 0; j < 5; j++) s += exp(z[n * 5 + j] - mx);
        want += -(z[n * 5 + labels[n]] - mx - log(s));
    }
    CHECK_NEAR(loss, want / 3, 1e-5);
    CHECK(sh_net_nclasses(t.net) == 5, "nclasses %d", sh_net_nclasses(t.net));
    int correct = sh_net_correct(t.net, labels);
    CHECK(correct >= 0 && correct <= 3, "correct %d", correct);
    tn_free(&t);
    tn_gradcheck_cfg("softmax xent", text, 3, 10, 1e-2, 1e-4, 1e-2);
    tn_gradcheck_cfg("softmax temperature",
                     "[net]\nbatch=3\nchannels=1\nheight=1\nwidth=4\n"
                     "[connected]\noutput=5\nactivation=linear\n[softmax]\ntemperature=2.5\n",
                     3, 10, 1e-2, 1e-4, 1e-2);
}

static void unsupported_cost_and_missing_softmax_are_refused(void)
{
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=1\nwidth=4\n[connected]\noutput=3\n"
                          "[softmax]\n[cost]\ntype=masked\n", "c.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "c.cfg:9") != NULL &&
              strstr(shoal_last_error(), "masked") != NULL,
          "message: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=1\nwidth=4\n[connected]\noutput=3\n",
                          "ns.cfg", &cfg));
    CHECK_OK(sh_net_create(cfg, 1, 1, &net)); /* runs forward; cannot train */
    if (net) CHECK_RC(sh_net_check_trainable(net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "ns.cfg:5") != NULL &&
              strstr(shoal_last_error(), "[softmax]") != NULL,
          "message: %s", shoal_last_error());
    sh_net_destroy(net);
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_layer_misc", 60);
    RUN(shortcut_adds_and_backward_matches_finite_differences);
    RUN(route_concatenates_channels_and_backward_matches);
    RUN(shortcut_and_route_shape_mismatch_name_file_and_line);
    RUN(dropout_scales_kept_values_and_is_identity_at_inference);
    RUN(softmax_cross_entropy_value_and_gradient);
    RUN(unsupported_cost_and_missing_softmax_are_refused);
    return check_end();
}
