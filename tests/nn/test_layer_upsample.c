/* test_layer_upsample.c — proves src/nn/layer_upsample.c: [upsample]'s output, loss and input
 * gradient equal PyTorch's nn.Upsample (nearest) times scale=, and its reverse form
 * (stride=-S) a block sum, through a regression [cost]; finite differences behind other
 * layers; Darknet's shapes for the same cfg; a reverse stride that does not tile the input is
 * refused naming the key. Without torch or darknet those parts say so. */
#include "nn_check.h"
#include "ref_check.h"

typedef struct {
    int nimg, c, h, w, stride;
    float scale;
} up_case;

/* The case's net, its input x and target t drawn (malloc'd); NULL with a failed check. */
static sh_net *case_net(const up_case *k, float **x, float **t, size_t *nx, size_t *ny)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nchannels=%d\nheight=%d\nwidth=%d\n[upsample]\nstride=%d\nscale=%g\n[cost]\n",
             k->nimg, k->c, k->h, k->w, k->stride, (double)k->scale);
    sh_net *n = ref_net(text, k->nimg, 3);
    if (!n) return NULL;
    int oc, oh, ow;
    sh_net_layer_shape(n, 0, &oc, &oh, &ow);
    *nx = (size_t)k->nimg * k->c * k->h * k->w;
    *ny = (size_t)k->nimg * oc * oh * ow;
    *x = malloc(*nx * 4);
    *t = malloc(*ny * 4);
    ref_random(*x, *nx, 1, -1, 1);
    ref_random(*t, *ny, 2, -1, 1);
    return n;
}

static void queue_case(ref_case *rc, const up_case *k, int i)
{
    float *x, *t;
    size_t nx, ny;
    sh_net *n = case_net(k, &x, &t, &nx, &ny);
    if (!n) return;
    int words[5] = {k->nimg, k->c, k->h, k->w, k->stride};
    char name[32];
    snprintf(name, sizeof name, "upsample-%d", i);
    if (ref_open(rc, name, words, 5)) {
        ref_put(rc, &k->scale, 1);
        ref_put(rc, x, nx);
        ref_put(rc, t, ny);
        ref_queue(rc, "upsample");
    }
    free(x);
    free(t);
    sh_net_destroy(n);
}

/* The reference's floats against shoal's on one thread and on two. */
static void check_case(const ref_case *rc, const up_case *k)
{
    size_t got = 0;
    float *ref = ref_result(rc, &got);
    for (int threads = 1; threads <= 2; threads++) {
        float *x, *t;
        size_t nx, ny;
        sh_net *n = case_net(k, &x, &t, &nx, &ny);
        if (!n) break;
        sh_net_set_threads(n, threads);
        if (threads == 1) CHECK(got == ny + 1 + nx, "reference gave %zu floats", got);
        CHECK_OK(sh_net_set_target(n, t));
        sh_net_want_input_delta(n, 1);
        CHECK_OK(sh_net_forward(n, x, k->nimg, 1));
        float loss = sh_net_loss(n, NULL);
        CHECK_OK(sh_net_backward(n, NULL, NULL));
        if (ref && got == ny + 1 + nx) {
            char what[96];
            snprintf(what, sizeof what, "stride=%d scale=%g, %d thread(s): output", k->stride, (double)k->scale,
                     threads);
            ref_compare(what, sh_net_output(n), ref, ny, 1e-6);
            ref_compare("loss", &loss, ref + ny, 1, 1e-6);
            ref_compare("input gradient", sh_net_input_delta(n), ref + ny + 1, nx, 1e-6);
        }
        free(x);
        free(t);
        sh_net_destroy(n);
    }
    free(ref);
}

static void matches_pytorch_upsample_and_block_sums(void)
{
    if (!ref_have_python("torch")) {
        printf("test_layer_upsample: /usr/bin/python3 has no torch; comparison with PyTorch skipped\n");
        return;
    }
    static const up_case cases[] = {
        {3, 2, 4, 5, 2, 1.0f}, {2, 3, 3, 2, 3, 0.5f}, {4, 1, 1, 1, 4, 2.0f}, {3, 2, 6, 4, -2, 1.0f}, {2, 3, 9, 6, -3, 0.25f},
    };
    enum { NCASES = sizeof cases / sizeof cases[0] };
    ref_case rc[NCASES];
    memset(rc, 0, sizeof rc);
    for (int i = 0; i < NCASES; i++) queue_case(&rc[i], &cases[i], i);
    ref_run_queued(); /* one python for every case: torch's import takes seconds */
    for (int i = 0; i < NCASES; i++) check_case(&rc[i], &cases[i]);
}

static void gradients_behind_other_layers_match_finite_differences(void)
{
    tn_gradcheck_cfg("upsample", "[net]\nbatch=3\nchannels=2\nheight=3\nwidth=3\n"
                     "[convolutional]\nfilters=3\nsize=3\npad=1\nactivation=tanh\n[upsample]\nstride=2\nscale=0.5\n"
                     "[convolutional]\nfilters=2\nsize=3\nstride=2\npad=1\nactivation=tanh\n[upsample]\nstride=-3\n"
                     "[connected]\noutput=3\nactivation=linear\n[softmax]\n", 3, 8, 1e-2, 1e-3, 2e-2);
}

static void darknet_shapes(void)
{
    if (!ref_have_darknet()) printf("test_layer_upsample: %s missing: Darknet comparison skipped\n", REF_DARKNET);
    ref_darknet_agrees("upsample", "[net]\nbatch=1\nchannels=3\nheight=6\nwidth=8\n"
                       "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=leaky\n[upsample]\nstride=2\n"
                       "[upsample]\nstride=-4\n[upsample]\nstride=3\nscale=0.5\n[convolutional]\nfilters=2\nsize=1\n");
}

static void reverse_stride_must_tile_the_input(void)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=5\nwidth=4\n[upsample]\nstride=-2\n", "bad.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "bad.cfg:6: [upsample] stride=-2 sums 2x2 blocks") != NULL, "error: %s",
          shoal_last_error());
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_layer_upsample", 120);
    ref_begin();
    RUN(matches_pytorch_upsample_and_block_sums);
    RUN(gradients_behind_other_layers_match_finite_differences);
    RUN(darknet_shapes);
    RUN(reverse_stride_must_tile_the_input);
    ref_end();
    return check_end();
}
