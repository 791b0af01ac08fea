/* test_layer_zoo.c — proves the layers Darknet's model zoo needs: grouped convolutions
 * (layer_conv.c: forward equals a direct per-group loop, gradients equal finite differences,
 * 2 threads equal 1), [shortcut] between different shapes (layer_shortcut.c: Darknet's
 * shortcut_cpu written out here), [reorg] (layer_reorg.c: Darknet's reorg_cpu, reverse,
 * extra), [crop] (layer_crop.c: centre crop at inference, scaled to [-1, 1]), the ramp
 * activation, nets without a final softmax, and the clear errors for what shoal refuses. */
#include <stdio.h>

#include "nn_check.h"

static float *forward_out(test_net *t, const float *x, int nimg, int training)
{
    CHECK_OK(sh_net_forward(t->net, x, nimg, training));
    return (float *)sh_net_output(t->net);
}

/* The first layer's output after a forward. */
static const float *layer_out(sh_net *n, int i) { return sh_net_layer(n, i)->out; }

static void grouped_conv_forward_equals_direct_loop(void)
{
    /* C=6, G=3, F=6: each group of 2 channels feeds 2 filters; pad 1, stride 2 and 1x1 */
    const char *shapes[] = {"size=3\nstride=2\npad=1", "size=1\nstride=1", "size=3\nstride=1\npad=1"};
    for (int k = 0; k < 3; k++) {
        char text[512];
        snprintf(text, sizeof text,
                 "[net]\nbatch=2\nchannels=6\nheight=7\nwidth=7\n[convolutional]\nfilters=6\n"
                 "groups=3\n%s\nactivation=linear\n[softmax]\n", shapes[k]);
        test_net t;
        if (!tn_build(&t, text, 2, 3)) continue;
        sh_layer *l = sh_net_layer(t.net, 0);
        float *p = sh_net_params(t.net);
        tn_random(p + l->b_off, l->b_count, 5, -1, 1);
        size_t nin = 2 * 6 * 49;
        float *x = malloc(nin * sizeof *x);
        tn_random(x, nin, 4, -1, 1);
        CHECK_OK(sh_net_forward(t.net, x, 2, 0));
        const float *y = layer_out(t.net, 0);
        int oh = l->out_shape.h, ow = l->out_shape.w, s = l->size, st = l->stride, pad = l->pad;
        int bad = 0;
        for (int n = 0; n < 2; n++)
            for (int f = 0; f < 6; f++)
                for (int oy = 0; oy < oh; oy++)
                    for (int ox = 0; ox < ow; ox++) {
                        int g = f / 2;
                        double sum = p[l->b_off + f];
                        for (int ic = 0; ic < 2; ic++)
                            for (int ky = 0; ky < s; ky++)
                                for (int kx = 0; kx < s; kx++) {
                                    int iy = oy * st - pad + ky, ix = ox * st - pad + kx;
                                    if (iy < 0 || iy >= 7 || ix < 0 || ix >= 7) continue;
                                    sum += (double)p[l->w_off + ((size_t)(f * 2 + ic) * s + ky) * s + kx] *
                                           x[(size_t)n * 294 + (size_t)((g * 2 + ic) * 7 + iy) * 7 + ix];
                                }
                        float got = y[(size_t)n * l->outputs + (size_t)(f * oh + oy) * ow + ox];
                        if (!tn_close(got, sum, 1e-5, 1e-5) && bad++ < 3)
                            CHECK(0, "%s: image %d filter %d (%d,%d): %g, direct loop %g", shapes[k],
                                  n, f, oy, ox, got, sum);
                    }
        CHECK(bad == 0, "%s: %d outputs differ from the direct grouped convolution", shapes[k], bad);
        CHECK(l->w_count == 6 * 2 * (size_t)s * s, "weights %zu, want F*C/G*S*S = %d", l->w_count,
              6 * 2 * s * s);
        free(x);
        tn_free(&t);
    }
}

static void grouped_conv_gradients_match_finite_differences(void)
{
    tn_gradcheck_cfg("groups=2 3x3 stride 2",
                     "[net]\nbatch=2\nchannels=4\nheight=6\nwidth=6\n[convolutional]\nfilters=6\n"
                     "groups=2\nsize=3\nstride=2\npad=1\nactivation=leaky\n[convolutional]\n"
                     "filters=4\ngroups=2\nsize=1\nactivation=linear\n[softmax]\n",
                     2, 12, 1e-3, 2e-3, 2e-2);
    tn_gradcheck_cfg("groups=4 batch_normalize",
                     "[net]\nbatch=3\nchannels=4\nheight=5\nwidth=5\n[convolutional]\nfilters=8\n"
                     "groups=4\nsize=3\npad=1\nbatch_normalize=1\nactivation=ramp\n[avgpool]\n"
                     "[softmax]\n",
                     3, 12, 1e-3, 2e-3, 2e-2);
}

/* Backward on 1 and 2 threads: the same gradients (the slots sum in a fixed order). */
static void grouped_conv_two_threads_equal_one(void)
{
    const char *text = "[net]\nbatch=8\nchannels=4\nheight=6\nwidth=6\n[convolutional]\nfilters=8\n"
                       "groups=2\nsize=3\npad=1\nactivation=leaky\n[softmax]\n";
    test_net a, b;
    if (!tn_build(&a, text, 8, 1)) return;
    if (!tn_build(&b, text, 8, 1)) { tn_free(&a); return; }
    sh_net_set_threads(b.net, 2);
    size_t nin = 8 * 144;
    float *x = malloc(nin * sizeof *x);
    int32_t y[8];
    tn_random(x, nin, 2, -1, 1);
    for (int i = 0; i < 8; i++) y[i] = i % 8;
    CHECK_OK(sh_net_forward(a.net, x, 8, 1));
    (void)sh_net_loss(a.net, y);
    CHECK_OK(sh_net_backward(a.net, NULL, NULL));
    CHECK_OK(sh_net_forward(b.net, x, 8, 1));
    (void)sh_net_loss(b.net, y);
    CHECK_OK(sh_net_backward(b.net, NULL, NULL));
    size_t np = sh_net_nparams(a.net), bad = 0;
    for (size_t i = 0; i < np; i++)
        bad += !tn_close(sh_net_grads(a.net)[i], sh_net_grads(b.net)[i], 1e-6, 1e-5);
    CHECK(bad == 0, "%zu of %zu gradients differ between 1 and 2 threads", bad, np);
    free(x);
    tn_free(&a);
    tn_free(&b);
}

/* Darknet's shortcut_cpu (blas.c), out = prev then += from over the shared region. */
static void darknet_shortcut(int w1, int h1, int c1, const float *add, int w2, int h2, int c2,
                             float *out)
{
    int stride = w1 / w2, sample = w2 / w1;
    if (stride < 1) stride = 1;
    if (sample < 1) sample = 1;
    int minw = w1 < w2 ? w1 : w2, minh = h1 < h2 ? h1 : h2, minc = c1 < c2 ? c1 : c2;
    for (int k = 0; k < minc; k++)
        for (int j = 0; j < minh; j++)
            for (int i = 0; i < minw; i++)
                out[i * sample + w2 * (j * sample + h2 * k)] += add[i * stride + w1 * (j * stride + h1 * k)];
}

static void shortcut_of_different_shapes_follows_darknet(void)
{
    /* layer 2 adds from (layer 0, 4x8x8) to the previous layer's 6x4x4 (stride 2, more
     * channels); layer 5 adds layer 2 (6x4x4) to a 3x8x8 layer (sample 2, fewer channels) */
    const char *text2 = "[net]\nbatch=2\nchannels=2\nheight=8\nwidth=8\n"
                        "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=linear\n"
                        "[convolutional]\nfilters=6\nsize=3\nstride=2\npad=1\nactivation=linear\n"
                        "[shortcut]\nfrom=-2\n"
                        "[convolutional]\nfilters=12\nsize=1\nactivation=linear\n"
                        "[reorg]\nstride=2\nreverse=1\n"
                        "[shortcut]\nfrom=-3\nactivation=leaky\n"
                        "[softmax]\n";
    test_net t;
    if (!tn_build(&t, text2, 2, 3)) return;
    size_t nin = 2 * 2 * 64;
    float *x = malloc(nin * sizeof *x);
    tn_random(x, nin, 8, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, 2, 0));
    sh_layer *s1 = sh_net_layer(t.net, 2), *s2 = sh_net_layer(t.net, 5);
    CHECK(s1->out_shape.c == 6 && s1->out_shape.h == 4, "shortcut 2: %dx%dx%d, want 6x4x4",
          s1->out_shape.c, s1->out_shape.h, s1->out_shape.w);
    CHECK(s2->out_shape.c == 3 && s2->out_shape.h == 8, "shortcut 5: %dx%dx%d, want 3x8x8",
          s2->out_shape.c, s2->out_shape.h, s2->out_shape.w);
    int bad = 0;
    for (int n = 0; n < 2; n++) {
        float want[6 * 16], want2[3 * 64];
        memcpy(want, layer_out(t.net, 1) + n * 96, sizeof want);
        darknet_shortcut(8, 8, 4, layer_out(t.net, 0) + n * 256, 4, 4, 6, want);
        for (int i = 0; i < 96; i++) bad += !tn_close(layer_out(t.net, 2)[n * 96 + i], want[i], 1e-6, 1e-6);
        memcpy(want2, layer_out(t.net, 4) + n * 192, sizeof want2);
        darknet_shortcut(4, 4, 6, layer_out(t.net, 2) + n * 96, 8, 8, 3, want2);
        for (int i = 0; i < 192; i++) {
            float v = want2[i] > 0 ? want2[i] : 0.1f * want2[i];
            bad += !tn_close(layer_out(t.net, 5)[n * 192 + i], v, 1e-6, 1e-6);
        }
    }
    CHECK(bad == 0, "%d shortcut outputs differ from Darknet's shortcut_cpu", bad);
    free(x);
    tn_free(&t);
    tn_gradcheck_cfg("shortcut of different shapes", text2, 2, 10, 1e-3, 2e-3, 2e-2);
}

static void shortcut_refuses_shapes_darknet_cannot_sample(void)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nbatch=1\nchannels=1\nheight=6\nwidth=6\n[convolutional]\n"
                          "filters=2\nsize=3\nstride=2\npad=1\n[maxpool]\nsize=2\nstride=2\n"
                          "[shortcut]\nfrom=-2\n[softmax]\n", "bad.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "bad.cfg:15") && strstr(shoal_last_error(), "from=-2"),
          "error: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
}

/* Darknet's reorg_cpu (blas.c). */
static void darknet_reorg(const float *x, int w, int h, int c, int stride, int forward, float *out)
{
    int out_c = c / (stride * stride);
    for (int k = 0; k < c; k++)
        for (int j = 0; j < h; j++)
            for (int i = 0; i < w; i++) {
                int in_index = i + w * (j + h * k);
                int c2 = k % out_c, offset = k / out_c;
                int w2 = i * stride + offset % stride, h2 = j * stride + offset / stride;
                int out_index = w2 + w * stride * (h2 + h * stride * c2);
                if (forward) out[out_index] = x[in_index];
                else out[in_index] = x[out_index];
            }
}

static void reorg_follows_darknet(void)
{
    for (int reverse = 0; reverse < 2; reverse++) {
        char text[256];
        snprintf(text, sizeof text, "[net]\nbatch=1\nchannels=8\nheight=4\nwidth=6\n[reorg]\n"
                 "stride=2\nreverse=%d\n[softmax]\n", reverse);
        test_net t;
        if (!tn_build(&t, text, 1, 1)) continue;
        sh_layer *l = sh_net_layer(t.net, 0);
        if (reverse)
            CHECK(l->out_shape.c == 2 && l->out_shape.h == 8 && l->out_shape.w == 12,
                  "reverse: %dx%dx%d", l->out_shape.c, l->out_shape.h, l->out_shape.w);
        else
            CHECK(l->out_shape.c == 32 && l->out_shape.h == 2 && l->out_shape.w == 3,
                  "reorg: %dx%dx%d", l->out_shape.c, l->out_shape.h, l->out_shape.w);
        float x[192], want[192];
        tn_random(x, 192, 3, -1, 1);
        CHECK_OK(sh_net_forward(t.net, x, 1, 0));
        darknet_reorg(x, 6, 4, 8, 2, reverse, want);
        int bad = 0;
        for (int i = 0; i < 192; i++) bad += layer_out(t.net, 0)[i] != want[i];
        CHECK(bad == 0, "reverse=%d: %d values differ from Darknet's reorg_cpu", reverse, bad);
        tn_free(&t);
    }
    tn_gradcheck_cfg("reorg", "[net]\nbatch=2\nchannels=2\nheight=4\nwidth=4\n[convolutional]\n"
                     "filters=4\nsize=3\npad=1\nactivation=linear\n[reorg]\nstride=2\n"
                     "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n[avgpool]\n[softmax]\n",
                     2, 10, 1e-3, 2e-3, 2e-2);
}

static void reorg_extra_appends_zero_outputs(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=1\nchannels=1\nheight=3\nwidth=3\n[reorg]\nextra=1\nstride=1\n"
                  "[softmax]\n", 1, 1)) return;
    CHECK(sh_net_nclasses(t.net) == 10, "go.cfg's pass move: %d outputs, want 10",
          sh_net_nclasses(t.net));
    float x[9];
    tn_random(x, 9, 1, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, 1, 0));
    const float *o = layer_out(t.net, 0);
    int bad = o[9] != 0.0f;
    for (int i = 0; i < 9; i++) bad += o[i] != x[i];
    CHECK(bad == 0, "extra=1: the input then one zero");
    tn_free(&t);
}

static void crop_takes_the_centre_scaled_at_inference(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=1\nchannels=2\nheight=6\nwidth=7\n[crop]\ncrop_height=4\n"
                  "crop_width=3\nflip=0\nangle=0\nsaturation=1\nexposure=1\nshift=.2\n[softmax]\n",
                  1, 1)) return;
    float x[84];
    tn_random(x, 84, 1, 0, 1);
    CHECK_OK(sh_net_forward(t.net, x, 1, 0));
    const float *o = layer_out(t.net, 0);
    int bad = 0;
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 3; j++)
                bad += !tn_close(o[(c * 4 + i) * 3 + j], x[(c * 6 + i + 1) * 7 + j + 2] * 2 - 1, 1e-7, 0);
    CHECK(bad == 0, "%d crop outputs are not the centre window times 2 minus 1", bad);
    tn_free(&t);
    tn_gradcheck_cfg("crop (training: random offset and flip)",
                     "[net]\nbatch=2\nchannels=2\nheight=6\nwidth=6\n[crop]\ncrop_height=4\n"
                     "crop_width=4\nflip=1\n[convolutional]\nfilters=3\nsize=3\nactivation=linear\n"
                     "[avgpool]\n[softmax]\n", 2, 8, 1e-3, 2e-3, 2e-2);
}

static void net_without_softmax_runs_forward_but_not_training(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=2\nchannels=1\nheight=4\nwidth=4\n[convolutional]\nfilters=2\n"
                  "size=3\npad=1\nactivation=relu\n[maxpool]\nsize=2\nstride=2\n", 2, 1)) return;
    CHECK(!sh_net_has_softmax(t.net), "no softmax");
    CHECK(sh_net_nclasses(t.net) == 8, "outputs %d, want 2x2x2", sh_net_nclasses(t.net));
    float x[32];
    tn_random(x, 32, 1, -1, 1);
    CHECK(forward_out(&t, x, 2, 1) == layer_out(t.net, 1), "the output is the last layer's");
    sh_net_loss_sum(t.net);
    CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    CHECK_RC(sh_net_check_trainable(t.net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "test.cfg:11") && strstr(shoal_last_error(), "[softmax]"),
          "error names the last layer's line and what to add: %s", shoal_last_error());
    tn_free(&t);
}

/* A WordTree: outputs 0-1 are roots, 2-4 children of 0, 5-6 of 1, 7-9 of 5. */
static const char tree_text[] = "a -1\nb -1\nc 0\nd 0\ne 0\nf 1\ng 1\nh 5\ni 5\nj 5\n";

static void tree_softmax_normalises_each_group(void)
{
    char path[] = "/tmp/shoal-tree-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    CHECK(write(fd, tree_text, strlen(tree_text)) == (ssize_t)strlen(tree_text), "write");
    close(fd);
    char text[512];
    snprintf(text, sizeof text, "[net]\nbatch=2\nchannels=10\nheight=1\nwidth=1\n[softmax]\n"
             "groups=1\ntree=%s\n[cost]\ntype=masked\n", path);
    test_net t;
    if (tn_build(&t, text, 2, 1)) {
        float x[20];
        tn_random(x, 20, 4, -2, 2);
        CHECK_OK(sh_net_forward(t.net, x, 2, 0));
        const float *p = sh_net_output(t.net);
        int starts[] = {0, 2, 5, 7, 10};
        for (int n = 0; n < 2; n++)
            for (int g = 0; g < 4; g++) {
                double mx = -1e30, sum = 0;
                for (int i = starts[g]; i < starts[g + 1]; i++) mx = fmax(mx, x[n * 10 + i]);
                for (int i = starts[g]; i < starts[g + 1]; i++) sum += exp(x[n * 10 + i] - mx);
                for (int i = starts[g]; i < starts[g + 1]; i++)
                    CHECK_NEAR(p[n * 10 + i], exp(x[n * 10 + i] - mx) / sum, 1e-6);
            }
        CHECK_RC(sh_net_check_trainable(t.net), SHOAL_ERR_FORMAT);
        CHECK(strstr(shoal_last_error(), "test.cfg:6: [softmax] tree=") != NULL, "%s",
              shoal_last_error());
        tn_free(&t);
    }
    snprintf(text, sizeof text, "[net]\nbatch=1\nchannels=9\nheight=1\nwidth=1\n[softmax]\n"
             "tree=%s\n", path);
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse(text, "bad.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "bad.cfg:7: [softmax] tree=") &&
          strstr(shoal_last_error(), "names 10 classes, but the softmax has 9 inputs"), "%s",
          shoal_last_error());
    sh_cfg_destroy(cfg);
    unlink(path);
}

static void refused_keys_name_file_line_and_key(void)
{
    struct {
        const char *text, *want;
    } cases[] = {
        {"[net]\nbatch=1\nchannels=3\nheight=4\nwidth=4\n[convolutional]\nfilters=4\ngroups=2\n"
         "[softmax]\n", "bad.cfg:8: [convolutional] groups=2"},
        {"[net]\nbatch=1\nchannels=4\nheight=4\nwidth=4\n[reorg]\nflatten=1\n[softmax]\n",
         "bad.cfg:7: [reorg] flatten=1"},
        {"[net]\nbatch=1\nchannels=4\nheight=4\nwidth=4\n[softmax]\ngroups=1\ntree=/nonexistent/9k.tree\n",
         "bad.cfg:8: [softmax] tree=/nonexistent/9k.tree: cannot open"},
        {"[net]\nbatch=1\nchannels=4\nheight=4\nwidth=4\n[crop]\ncrop_height=5\ncrop_width=2\n"
         "[softmax]\n", "bad.cfg:7: [crop] the 5x2 crop"},
        {"[net]\nbatch=1\nchannels=4\nheight=4\nwidth=4\n[l2norm]\n[softmax]\n",
         "bad.cfg:6: [l2norm] is a Darknet layer shoal does not support; shoal's layers are "
         "[convolutional], [connected]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sh_cfg *cfg = NULL;
        sh_net *n = NULL;
        CHECK_OK(sh_cfg_parse(cases[i].text, "bad.cfg", &cfg));
        CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
        CHECK(strstr(shoal_last_error(), cases[i].want) != NULL, "want \"%s\" in: %s",
              cases[i].want, shoal_last_error());
        sh_cfg_destroy(cfg);
    }
}

int main(void)
{
    check_begin("test_layer_zoo", 120);
    RUN(grouped_conv_forward_equals_direct_loop);
    RUN(grouped_conv_gradients_match_finite_differences);
    RUN(grouped_conv_two_threads_equal_one);
    RUN(shortcut_of_different_shapes_follows_darknet);
    RUN(shortcut_refuses_shapes_darknet_cannot_sample);
    RUN(reorg_follows_darknet);
    RUN(reorg_extra_appends_zero_outputs);
    RUN(crop_takes_the_centre_scaled_at_inference);
    RUN(net_without_softmax_runs_forward_but_not_training);
    RUN(tree_softmax_normalises_each_group);
    RUN(refused_keys_name_file_line_and_key);
    return check_end();
}
