/* test_layer_conv.c — proves src/nn/layer_conv.c, im2col.c and layer_batchnorm.c: forward
 * equals a direct convolution loop (stride, padding, 1x1), backward equals central finite
 * differences for parameters and input (stride 2 with padding, batch norm in training mode),
 * inference batch norm uses the rolling statistics, and Darknet's pad/padding rules; 3x3
 * stride-1 pad-1 layers through Winograd (conv_winograd.c) give the im2col path's outputs
 * and gradients (odd sizes, several blocks, an accumulated input delta, 2 threads). */
#include <stdio.h>

#include "nn_check.h"

/* Direct convolution of one image: out (F, OH, OW). */
static void direct_conv(const float *im, int c, int h, int w, const float *wt, const float *b,
                        int f, int size, int stride, int pad, int oh, int ow, float *out)
{
    for (int of = 0; of < f; of++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                double s = b[of];
                for (int ic = 0; ic < c; ic++)
                    for (int ky = 0; ky < size; ky++)
                        for (int kx = 0; kx < size; kx++) {
                            int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                            s += (double)wt[((of * c + ic) * size + ky) * size + kx] *
                                 im[(ic * h + iy) * w + ix];
                        }
                out[(of * oh + oy) * ow + ox] = (float)s;
            }
}

static void check_forward(int c, int h, int w, int f, int size, int stride, const char *padkey,
                          int pad_px)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=3\nchannels=%d\nheight=%d\nwidth=%d\n"
             "[convolutional]\nfilters=%d\nsize=%d\nstride=%d\n%s\nactivation=linear\n"
             "[softmax]\n", c, h, w, f, size, stride, padkey);
    test_net t;
    if (!tn_build(&t, text, 3, 1)) return;
    int oh = (h + 2 * pad_px - size) / stride + 1, ow = (w + 2 * pad_px - size) / stride + 1;
    int oc, ohh, oww;
    sh_net_layer_shape(t.net, 0, &oc, &ohh, &oww);
    CHECK(oc == f && ohh == oh && oww == ow, "%s: shape %dx%dx%d, want %dx%dx%d", text, oc, ohh,
          oww, f, oh, ow);
    size_t nin = (size_t)3 * c * h * w;
    float *x = malloc(nin * 4), *want = malloc((size_t)f * oh * ow * 4);
    tn_random(x, nin, 3, -1, 1);
    float *p = sh_net_params(t.net);
    for (int i = 0; i < f; i++) p[(size_t)f * c * size * size + i] = 0.1f * (float)i; /* biases */
    CHECK_OK(sh_net_forward(t.net, x, 3, 0));
    const float *out = sh_net_layer(t.net, 0)->out;
    double worst = 0;
    for (int n = 0; n < 3; n++) {
        direct_conv(x + (size_t)n * c * h * w, c, h, w, p, p + (size_t)f * c * size * size, f,
                    size, stride, pad_px, oh, ow, want);
        for (int i = 0; i < f * oh * ow; i++) {
            double d = fabs(out[(size_t)n * f * oh * ow + i] - want[i]);
            worst = d > worst ? d : worst;
        }
    }
    CHECK(worst < 1e-4, "conv %dx%dx%d f=%d size=%d stride=%d %s: max error %g", c, h, w, f, size,
          stride, padkey, worst);
    free(x);
    free(want);
    tn_free(&t);
}

static void forward_matches_direct_convolution_loop(void)
{
    check_forward(3, 9, 7, 4, 3, 1, "pad=1", 1);
    check_forward(3, 9, 7, 4, 3, 2, "pad=1", 1);
    check_forward(2, 8, 8, 5, 5, 1, "pad=0", 0);
    check_forward(2, 11, 10, 3, 3, 2, "padding=2", 2);
    check_forward(4, 5, 6, 6, 1, 1, "pad=0", 0);    /* 1x1: no im2col */
    check_forward(4, 5, 6, 6, 1, 2, "pad=0", 0);    /* 1x1 stride 2 */
    check_forward(1, 7, 7, 2, 4, 3, "pad=1", 2);    /* even size: pad=1 means size/2 */
    /* big images: one image per product (no unrolled group), also for 1x1 */
    check_forward(3, 120, 100, 2, 3, 1, "pad=1", 1);
    check_forward(8, 100, 100, 3, 1, 1, "pad=0", 0);
}

static void backward_matches_finite_differences_with_stride_and_pad(void)
{
    tn_gradcheck_cfg("conv s2 p1 leaky",
                     "[net]\nbatch=2\nchannels=3\nheight=7\nwidth=6\n"
                     "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\nactivation=tanh\n"
                     "[connected]\noutput=5\nactivation=linear\n[softmax]\n",
                     2, 12, 1e-2, 2e-4, 2e-2);
    tn_gradcheck_cfg("conv 1x1 then conv 3x3 padding=2",
                     "[net]\nbatch=3\nchannels=2\nheight=5\nwidth=5\n"
                     "[convolutional]\nfilters=3\nsize=1\nstride=1\nactivation=logistic\n"
                     "[convolutional]\nfilters=2\nsize=3\nstride=1\npadding=2\nactivation=linear\n"
                     "[softmax]\n",
                     3, 12, 1e-2, 2e-4, 2e-2);
}

/* Stride 1 without padding has its own im2col/col2im (im2col.c): rows of 3, 6, 8 and 13
 * floats cover its short, overlapping and whole-vector moves. */
static void backward_matches_finite_differences_without_padding(void)
{
    const int widths[][2] = {{7, 3}, {12, 6}, {12, 8}, {17, 13}}; /* input width, output */
    for (int i = 0; i < 4; i++) {
        char text[512], what[64];
        int size = widths[i][0] - widths[i][1] + 1;
        snprintf(text, sizeof text,
                 "[net]\nbatch=2\nchannels=2\nheight=%d\nwidth=%d\n"
                 "[convolutional]\nfilters=3\nsize=%d\nstride=1\npad=0\nactivation=tanh\n"
                 "[connected]\noutput=4\nactivation=linear\n[softmax]\n",
                 size + 2, widths[i][0], size);
        snprintf(what, sizeof what, "conv %dx%d s1 p0 (rows of %d)", size, size, widths[i][1]);
        tn_gradcheck_cfg(what, text, 2, 16, 1e-2, 2e-4, 2e-2);
        check_forward(2, size + 2, widths[i][0], 3, size, 1, "pad=0", 0);
    }
}

static void backward_matches_finite_differences_one_image_per_product(void)
{
    /* 3*3*3 x 100*100 columns exceed one group: the per-image path */
    tn_gradcheck_cfg("conv big image",
                     "[net]\nbatch=2\nchannels=3\nheight=100\nwidth=100\n"
                     "[convolutional]\nfilters=2\nsize=3\nstride=1\npad=1\nactivation=tanh\n"
                     "[convolutional]\nfilters=2\nsize=1\nstride=1\nactivation=linear\n"
                     "[avgpool]\n[softmax]\n",
                     2, 8, 1e-2, 2e-4, 2e-2);
}

static void batchnorm_backward_matches_finite_differences_in_training(void)
{
    tn_gradcheck_cfg("conv bn",
                     "[net]\nbatch=3\nchannels=2\nheight=6\nwidth=5\n"
                     "[convolutional]\nbatch_normalize=1\nfilters=3\nsize=3\nstride=1\npad=1\n"
                     "activation=tanh\n"
                     "[connected]\noutput=4\nactivation=linear\n[softmax]\n",
                     3, 12, 1e-2, 3e-4, 3e-2);
    tn_gradcheck_cfg("connected bn",
                     "[net]\nbatch=4\nchannels=1\nheight=3\nwidth=3\n"
                     "[connected]\nbatch_normalize=1\noutput=6\nactivation=logistic\n"
                     "[connected]\noutput=3\nactivation=linear\n[softmax]\n",
                     4, 12, 1e-2, 3e-4, 3e-2);
}

static void batchnorm_inference_uses_rolling_statistics(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=4\nchannels=1\nheight=4\nwidth=4\n"
                      "[convolutional]\nbatch_normalize=1\nfilters=2\nsize=1\nactivation=linear\n"
                      "[softmax]\n", 4, 3)) return;
    float x[64];
    tn_random(x, 64, 4, 2.0f, 3.0f); /* mean far from the rolling mean 0 */
    size_t nstats = 0;
    float *st = sh_net_stats(t.net, &nstats);
    CHECK(nstats == 4, "stats count %zu", nstats);
    CHECK_OK(sh_net_forward(t.net, x, 4, 0));
    float infer0 = sh_net_layer(t.net, 0)->out[0];
    /* rolling mean 0, var 1: output = w * x (gamma 1, beta 0) */
    float w0 = sh_net_params(t.net)[0];
    CHECK_NEAR(infer0, w0 * x[0] / sqrtf(1.0f + 1e-5f), 1e-5);
    CHECK_OK(sh_net_forward(t.net, x, 4, 1));
    /* training normalises: each channel has mean ~0 over the batch */
    const float *out = sh_net_layer(t.net, 0)->out;
    double s = 0;
    for (int n = 0; n < 4; n++)
        for (int i = 0; i < 16; i++) s += out[n * 32 + i];
    CHECK_NEAR(s / 64, 0.0, 1e-5);
    CHECK(st[0] != 0.0f, "rolling mean not updated: %g", st[0]);
    tn_free(&t);
}

static void kernel_larger_than_input_names_file_and_line(void)
{
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=4\nwidth=4\n\n[convolutional]\nsize=7\n"
                          "filters=2\n[softmax]\n", "small.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 2, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "small.cfg:") != NULL &&
              strstr(shoal_last_error(), "size=7") != NULL,
          "message: %s", shoal_last_error());
    CHECK(net == NULL, "net must be NULL on error");
    sh_cfg_destroy(cfg);
}

/* Two threads: the column-cache path (small layers) and the per-thread-partials path. */
static void two_threads_match_finite_differences_on_both_paths(void)
{
    const char *text = "[net]\nbatch=5\nchannels=2\nheight=7\nwidth=6\n"
                       "[convolutional]\nfilters=3\nsize=3\nstride=2\npad=1\nactivation=tanh\n"
                       "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=1\nactivation=linear\n"
                       "[connected]\noutput=3\nactivation=linear\n[softmax]\n";
    for (int cache = 0; cache < 2; cache++) {
        sh_conv_cache_min_threads = cache ? 2 : 1 << 20;
        test_net t;
        if (!tn_build(&t, text, 5, 7)) continue;
        sh_net_set_threads(t.net, 2);
        float x[5 * 84];
        int32_t y[5] = {0, 1, 2, 0, 1};
        tn_random(x, 5 * 84, 11, -1, 1);
        tn_gradcheck(cache ? "2 threads, cached columns" : "2 threads, partial blocks", t.net, x,
                     5, y, 12, 1e-2, 3e-4, 3e-2);
        tn_free(&t);
    }
    sh_conv_cache_min_threads = 4;
}

/* Loss, output and every gradient of text's net, with Winograd on or off. */
static void run_net(const char *text, int batch, int threads, int wino, float *out, size_t nout,
                    float **grads, size_t *ngrad, float *loss)
{
    sh_conv_winograd = wino;
    test_net t;
    *grads = NULL;
    if (!tn_build(&t, text, batch, 5)) return;
    sh_net_set_threads(t.net, threads);
    size_t nin = (size_t)batch * (size_t)sh_net_input_count(t.net);
    float *x = malloc(nin * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    tn_random(x, nin, 17, -1, 1);
    for (int i = 0; i < batch; i++) y[i] = i % 7;
    CHECK_OK(sh_net_forward(t.net, x, batch, 1));
    const sh_layer *l1 = sh_net_layer(t.net, 1);
    memcpy(out, l1->out, nout * sizeof *out);
    *loss = sh_net_loss(t.net, y);
    CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    *ngrad = sh_net_nparams(t.net);
    *grads = malloc(*ngrad * sizeof **grads);
    memcpy(*grads, sh_net_grads(t.net), *ngrad * sizeof **grads);
    free(x);
    free(y);
    tn_free(&t);
    sh_conv_winograd = 1;
}

static void winograd_matches_im2col(int c, int h, int w, int f, int batch, int threads)
{
    char text[1024];
    /* layer 0's delta is the sum of the shortcut's and layer 1's input gradient */
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nchannels=3\nheight=%d\nwidth=%d\n"
             "[convolutional]\nfilters=%d\nsize=1\nactivation=logistic\n"
             "[convolutional]\nfilters=%d\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
             "[convolutional]\nbatch_normalize=1\nfilters=%d\nsize=3\nstride=1\npad=1\n"
             "activation=linear\n"
             "[shortcut]\nfrom=0\nactivation=relu\n[avgpool]\n"
             "[connected]\noutput=7\nactivation=linear\n[softmax]\n",
             batch, h, w, c, f, c);
    size_t nout = (size_t)batch * f * h * w;
    float *o[2] = {malloc(nout * 4), malloc(nout * 4)}, *g[2], loss[2];
    size_t ng[2];
    for (int k = 0; k < 2; k++) run_net(text, batch, threads, k, o[k], nout, &g[k], &ng[k], &loss[k]);
    if (!g[0] || !g[1]) goto out;
    CHECK(ng[0] == ng[1], "gradient counts %zu %zu", ng[0], ng[1]);
    double wo = 0, wg = 0, gmax = 0;
    for (size_t i = 0; i < nout; i++) wo = fmax(wo, fabs(o[0][i] - o[1][i]));
    for (size_t i = 0; i < ng[0]; i++) {
        wg = fmax(wg, fabs(g[0][i] - g[1][i]));
        gmax = fmax(gmax, fabs(g[0][i]));
    }
    CHECK(wo < 1e-4, "c=%d %dx%d f=%d batch %d, %d threads: outputs differ by %g", c, h, w, f,
          batch, threads, wo);
    CHECK(wg <= 1e-4 * gmax, "c=%d %dx%d f=%d batch %d, %d threads: gradients differ by %g "
          "(largest %g)", c, h, w, f, batch, threads, wg, gmax);
    CHECK_NEAR(loss[0], loss[1], 1e-5);
out:
    free(o[0]);
    free(o[1]);
    free(g[0]);
    free(g[1]);
}

static void winograd_gives_im2col_outputs_and_gradients(void)
{
    winograd_matches_im2col(5, 7, 6, 4, 3, 1);    /* one tile row per image, even/odd */
    winograd_matches_im2col(20, 13, 11, 18, 6, 1); /* channels not a multiple of 16 */
    winograd_matches_im2col(20, 13, 11, 18, 6, 2); /* images split over threads */
    winograd_matches_im2col(64, 40, 39, 64, 6, 1); /* several blocks, the last partial */
    winograd_matches_im2col(3, 1, 1, 2, 2, 1);     /* 1x1 image: one half-empty tile */
}

int main(void)
{
    check_begin("test_layer_conv", 60);
    RUN(forward_matches_direct_convolution_loop);
    RUN(backward_matches_finite_differences_with_stride_and_pad);
    RUN(backward_matches_finite_differences_without_padding);
    RUN(two_threads_match_finite_differences_on_both_paths);
    RUN(backward_matches_finite_differences_one_image_per_product);
    RUN(batchnorm_backward_matches_finite_differences_in_training);
    RUN(batchnorm_inference_uses_rolling_statistics);
    RUN(kernel_larger_than_input_names_file_and_line);
    RUN(winograd_gives_im2col_outputs_and_gradients);
    return check_end();
}
