/* test_layer_lrn.c — proves src/nn/layer_lrn.c: [normalization] forward and the input's
 * gradient against PyTorch's LocalResponseNorm (tests/nn/lrn_torch.py, in double) for odd and
 * even sizes, windows wider than the channels and kappa != 1; backward against finite
 * differences inside a net; the [lrn] alias and a bad key's error. Without torch the
 * PyTorch comparison says so in one line and the rest still runs. */
#include <stdio.h>
#include <unistd.h>

#include "lib/run.h"
#include "nn_check.h"

static int have_torch(void)
{
    char out[64];
    return sh_test_run("/usr/bin/python3 -c 'import torch' 2>/dev/null && echo yes", out, sizeof out) == 0 &&
           strncmp(out, "yes", 3) == 0;
}

/* One shape and parameter set: shoal's net [normalization] + [softmax] against PyTorch. */
static void compare_with_torch(int n, int c, int h, int w, int size, float alpha, float beta, float kappa)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nchannels=%d\nheight=%d\nwidth=%d\n"
             "[normalization]\nsize=%d\nalpha=%.9g\nbeta=%.9g\nkappa=%.9g\n[softmax]\n",
             n, c, h, w, size, (double)alpha, (double)beta, (double)kappa);
    test_net t;
    if (!tn_build(&t, text, n, 1)) return;
    sh_net_set_threads(t.net, 2);
    size_t count = (size_t)n * c * h * w;
    float *x = malloc(count * sizeof *x), *ref = malloc(2 * count * sizeof *ref);
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    tn_random(x, count, 5 + (uint64_t)size, -3.0f, 3.0f); /* large values: s far from kappa */
    for (int i = 0; i < n; i++) labels[i] = (i * 5 + 2) % (c * h * w);
    char in_path[] = "/tmp/shoal_lrn_in_XXXXXX", out_path[] = "/tmp/shoal_lrn_out_XXXXXX";
    int fi = mkstemp(in_path), fo = mkstemp(out_path);
    CHECK(fi >= 0 && fo >= 0, "temporary files");
    FILE *f = fdopen(fi, "wb");
    fwrite(x, sizeof *x, count, f);
    fwrite(labels, sizeof *labels, (size_t)n, f);
    fclose(f);
    close(fo);
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/nn/lrn_torch.py %s %s %d %d %d %d %d %.9g %.9g %.9g 2>&1",
             in_path, out_path, n, c, h, w, size, (double)alpha, (double)beta, (double)kappa);
    int code = sh_test_run(cmd, out, sizeof out);
    CHECK(code == 0, "lrn_torch.py failed: %s", out);
    f = fopen(out_path, "rb");
    size_t got = f ? fread(ref, sizeof *ref, 2 * count, f) : 0;
    if (f) fclose(f);
    CHECK(got == 2 * count, "reference has %zu of %zu values", got, 2 * count);
    if (code == 0 && got == 2 * count) {
        sh_net_want_input_delta(t.net, 1);
        CHECK_OK(sh_net_forward(t.net, x, n, 1));
        const float *y = sh_net_layer(t.net, 0)->out;
        double worst = 0, worst_g = 0, scale_g = 0;
        for (size_t i = 0; i < count; i++) worst = fmax(worst, fabs(y[i] - ref[i]) / (1.0 + fabs(ref[i])));
        (void)sh_net_loss(t.net, labels);
        CHECK_OK(sh_net_backward(t.net, NULL, NULL));
        const float *gx = sh_net_input_delta(t.net);
        for (size_t i = 0; i < count; i++) {
            worst_g = fmax(worst_g, fabs(gx[i] - ref[count + i]));
            scale_g = fmax(scale_g, fabs(ref[count + i]));
        }
        CHECK(worst < 1e-5, "size %d c %d: forward differs from PyTorch by %g", size, c, worst);
        CHECK(scale_g > 0 && worst_g < 1e-5 * (1.0 + scale_g),
              "size %d c %d: input gradient differs from PyTorch by %g (largest %g)", size, c, worst_g, scale_g);
    }
    unlink(in_path);
    unlink(out_path);
    free(x);
    free(ref);
    free(labels);
    tn_free(&t);
}

static void lrn_matches_pytorch_local_response_norm(void)
{
    if (!have_torch()) {
        printf("test_layer_lrn: /usr/bin/python3 has no torch; comparison with PyTorch skipped\n");
        return;
    }
    compare_with_torch(3, 7, 3, 4, 5, 0.0001f * 50, 0.75f, 1.0f); /* AlexNet's, alpha raised to matter */
    compare_with_torch(2, 6, 2, 3, 4, 0.01f, 0.6f, 2.0f);         /* even size: lopsided window */
    compare_with_torch(2, 3, 3, 3, 7, 0.02f, 0.75f, 1.5f);        /* window wider than the channels */
    compare_with_torch(2, 5, 1, 1, 1, 0.05f, 1.0f, 1.0f);         /* size 1: each channel alone */
}

static void lrn_backward_matches_finite_differences(void)
{
    tn_gradcheck_cfg("lrn", "[net]\nbatch=2\nchannels=2\nheight=4\nwidth=4\n"
                            "[convolutional]\nfilters=6\nsize=3\npad=1\nactivation=tanh\n"
                            "[normalization]\nsize=3\nalpha=0.2\nbeta=0.75\nkappa=1\n"
                            "[connected]\noutput=4\nactivation=linear\n[softmax]\n",
                     2, 12, 1e-2, 3e-4, 2e-2);
}

static void lrn_alias_and_bad_key(void)
{
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nbatch=1\nchannels=4\nheight=2\nwidth=2\n[lrn]\n[softmax]\n", "a.cfg", &cfg));
    CHECK_OK(sh_net_create(cfg, 1, 1, &net));
    CHECK(net && strcmp(sh_net_layer_name(net, 0), "lrn 0") == 0, "[lrn] builds layer %s",
          net ? sh_net_layer_name(net, 0) : "(none)");
    sh_net_destroy(net);
    sh_cfg_destroy(cfg);
    net = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nbatch=1\nchannels=4\nheight=2\nwidth=2\n[normalization]\nalpah=1\n[softmax]\n",
                          "b.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "b.cfg:7") && strstr(shoal_last_error(), "alpha"),
          "error names the line and the near key: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_layer_lrn", 120);
    RUN(lrn_matches_pytorch_local_response_norm);
    RUN(lrn_backward_matches_finite_differences);
    RUN(lrn_alias_and_bad_key);
    return check_end();
}
