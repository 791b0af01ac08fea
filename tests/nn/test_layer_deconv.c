/* test_layer_deconv.c — proves src/nn/layer_deconv.c: [deconvolutional]'s output, loss and
 * every gradient equal PyTorch's ConvTranspose2d with the same weights (through a regression
 * [cost] type=sse, in double there) at several sizes, strides and paddings, on one thread and
 * two; batch norm and activations against finite differences; Darknet's shapes and .weights
 * size for the same cfg (`darknet partial`) and a bitwise .weights round trip; a padding that
 * leaves no output is refused naming the key. Without torch or darknet those parts say so. */
#include "nn_check.h"
#include "ref_check.h"

typedef struct {
    int n, c, h, w, f, s, stride, pad;
} deconv_case;

/* W (C, F, S, S) then b (F): ConvTranspose2d's layout, which the reference reads. */
static void queue_case(ref_layer *l, const deconv_case *k, int i)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nchannels=%d\nheight=%d\nwidth=%d\n"
             "[deconvolutional]\nfilters=%d\nsize=%d\nstride=%d\npadding=%d\nactivation=linear\n"
             "[cost]\ntype=sse\n", k->n, k->c, k->h, k->w, k->f, k->s, k->stride, k->pad);
    int words[8] = {k->n, k->c, k->h, k->w, k->f, k->s, k->stride, k->pad};
    ref_layer_queue(l, "deconv", text, words, i);
}

static void matches_pytorch_conv_transpose(void)
{
    if (!ref_have_python("torch")) {
        printf("test_layer_deconv: /usr/bin/python3 has no torch; comparison with PyTorch skipped\n");
        return;
    }
    static const deconv_case cases[] = {
        {2, 3, 5, 4, 4, 3, 2, 1}, {3, 2, 4, 4, 3, 4, 2, 1}, {2, 4, 3, 5, 2, 2, 2, 0}, {5, 3, 6, 6, 5, 1, 1, 0},
        {2, 1, 7, 7, 1, 3, 1, 1}, {4, 2, 3, 3, 3, 5, 3, 2},
    };
    enum { NCASES = sizeof cases / sizeof cases[0] };
    ref_layer l[NCASES];
    for (int i = 0; i < NCASES; i++) queue_case(&l[i], &cases[i], i);
    ref_run_queued();
    for (int i = 0; i < NCASES; i++) {
        const deconv_case *k = &cases[i];
        int shape[3];
        ref_layer_check(&l[i], shape);
        CHECK(shape[1] == (k->h - 1) * k->stride + k->s - 2 * k->pad &&
              shape[2] == (k->w - 1) * k->stride + k->s - 2 * k->pad, "output %dx%d", shape[1], shape[2]);
    }
}

static void batch_norm_and_activations_match_finite_differences(void)
{
    tn_gradcheck_cfg("deconv tanh", "[net]\nbatch=3\nchannels=2\nheight=4\nwidth=3\n"
                     "[deconvolutional]\nfilters=3\nsize=3\nstride=2\npad=1\nactivation=tanh\n"
                     "[connected]\noutput=4\nactivation=linear\n[softmax]\n", 3, 12, 1e-2, 1e-3, 2e-2);
    tn_gradcheck_cfg("deconv bn logistic", "[net]\nbatch=4\nchannels=2\nheight=3\nwidth=3\n"
                     "[deconvolutional]\nfilters=2\nsize=2\nstride=2\nbatch_normalize=1\n"
                     "[connected]\noutput=3\nactivation=linear\n[softmax]\n", 4, 12, 1e-2, 1e-3, 2e-2);
}

static const char dn_cfg[] =
    "[net]\nbatch=1\nchannels=3\nheight=8\nwidth=6\n"
    "[convolutional]\nfilters=4\nsize=3\nstride=2\npad=1\nactivation=leaky\n"
    "[deconvolutional]\nfilters=5\nsize=4\nstride=2\npad=1\nbatch_normalize=1\nactivation=relu\n"
    "[deconv]\nfilters=2\nsize=3\nstride=1\npadding=0\nactivation=logistic\n";

static void darknet_shapes_sizes_and_weights_round_trip(void)
{
    if (!ref_have_darknet()) printf("test_layer_deconv: %s missing: Darknet comparison skipped\n", REF_DARKNET);
    ref_darknet_agrees("deconv", dn_cfg);
    ref_weights_round_trip("deconv", dn_cfg);
}

static void padding_that_leaves_no_output_is_refused(void)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=1\nwidth=1\n[deconvolutional]\nsize=1\npadding=1\n",
                          "bad.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "bad.cfg:6: [deconvolutional] size=1") != NULL, "error: %s", shoal_last_error());
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_layer_deconv", 120);
    ref_begin();
    RUN(matches_pytorch_conv_transpose);
    RUN(batch_norm_and_activations_match_finite_differences);
    RUN(darknet_shapes_sizes_and_weights_round_trip);
    RUN(padding_that_leaves_no_output_is_refused);
    ref_end();
    return check_end();
}
