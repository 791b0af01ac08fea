/* test_layer_pool.c — proves src/nn/layer_maxpool.c and layer_avgpool.c: Darknet's output
 * size and padding rules with odd sizes, forward against a plain loop, backward against
 * finite differences. */
#include <float.h>
#include <stdio.h>

#include "nn_check.h"

static void check_maxpool(int c, int h, int w, const char *keys, int size, int stride, int padding)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=2\nchannels=%d\nheight=%d\nwidth=%d\n[maxpool]\n%s\n[softmax]\n", c,
             h, w, keys);
    test_net t;
    if (!tn_build(&t, text, 2, 1)) return;
    int oh = (h + padding - size) / stride + 1, ow = (w + padding - size) / stride + 1;
    int oc, ohh, oww;
    sh_net_layer_shape(t.net, 0, &oc, &ohh, &oww);
    CHECK(oc == c && ohh == oh && oww == ow, "%s: shape %dx%dx%d, want %dx%dx%d", keys, oc, ohh,
          oww, c, oh, ow);
    size_t nin = (size_t)2 * c * h * w;
    float *x = malloc(nin * 4);
    tn_random(x, nin, 5, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, 2, 0));
    const float *y = sh_net_layer(t.net, 0)->out;
    int bad = 0;
    for (int n = 0; n < 2; n++)
        for (int ch = 0; ch < c; ch++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    float best = -FLT_MAX;
                    for (int ky = 0; ky < size; ky++)
                        for (int kx = 0; kx < size; kx++) {
                            int iy = oy * stride - padding / 2 + ky, ix = ox * stride - padding / 2 + kx;
                            if (iy < 0 || ix < 0 || iy >= h || ix >= w) continue;
                            float v = x[((n * c + ch) * h + iy) * w + ix];
                            best = v > best ? v : best;
                        }
                    bad += y[((n * c + ch) * oh + oy) * ow + ox] != best;
                }
    CHECK(bad == 0, "%s: %d outputs differ from the plain loop", keys, bad);
    free(x);
    tn_free(&t);
}

static void maxpool_forward_matches_loop_with_darknet_sizes(void)
{
    check_maxpool(2, 7, 9, "size=2\nstride=2", 2, 2, 1);    /* default padding size-1 */
    check_maxpool(3, 5, 5, "size=3\nstride=2", 3, 2, 2);
    check_maxpool(1, 6, 7, "size=3\nstride=1", 3, 1, 2);    /* same-size output */
    check_maxpool(2, 8, 8, "size=2\nstride=2\npadding=0", 2, 2, 0);
    check_maxpool(2, 9, 5, "stride=3", 3, 3, 2);             /* size defaults to stride */
}

static void maxpool_backward_matches_finite_differences(void)
{
    tn_gradcheck_cfg("maxpool 3/2 odd",
                     "[net]\nbatch=2\nchannels=2\nheight=7\nwidth=5\n"
                     "[maxpool]\nsize=3\nstride=2\n"
                     "[connected]\noutput=4\nactivation=linear\n[softmax]\n",
                     2, 16, 1e-3, 3e-4, 2e-2);
    tn_gradcheck_cfg("conv then maxpool 2/2",
                     "[net]\nbatch=2\nchannels=1\nheight=9\nwidth=9\n"
                     "[convolutional]\nfilters=3\nsize=3\npad=1\nactivation=linear\n"
                     "[maxpool]\nsize=2\nstride=2\n"
                     "[connected]\noutput=3\nactivation=linear\n[softmax]\n",
                     2, 16, 1e-3, 3e-4, 2e-2);
}

static void avgpool_is_global_mean_and_backward_matches(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=2\nchannels=3\nheight=3\nwidth=5\n[avgpool]\n[softmax]\n", 2,
                  1)) return;
    float x[90];
    tn_random(x, 90, 2, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, 2, 0));
    const float *y = sh_net_layer(t.net, 0)->out;
    for (int i = 0; i < 6; i++) {
        double s = 0;
        for (int j = 0; j < 15; j++) s += x[i * 15 + j];
        CHECK_NEAR(y[i], s / 15, 1e-6);
    }
    tn_free(&t);
    tn_gradcheck_cfg("avgpool",
                     "[net]\nbatch=2\nchannels=3\nheight=3\nwidth=5\n"
                     "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=linear\n"
                     "[avgpool]\n[softmax]\n",
                     2, 12, 1e-2, 2e-4, 2e-2);
}

int main(void)
{
    check_begin("test_layer_pool", 60);
    RUN(maxpool_forward_matches_loop_with_darknet_sizes);
    RUN(maxpool_backward_matches_finite_differences);
    RUN(avgpool_is_global_mean_and_backward_matches);
    return check_end();
}
