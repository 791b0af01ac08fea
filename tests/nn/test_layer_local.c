/* test_layer_local.c — proves src/nn/layer_local.c: [local]'s output, loss and every gradient
 * equal PyTorch's (unfold, then each location's own filters: einsum) with the same weights,
 * padded and not, strided and not, on one thread and two; activations against finite
 * differences; Darknet's shapes and .weights size, a bitwise .weights round trip, and Darknet
 * itself (`darknet classifier fout`) gives the probabilities shoal gives for one image through
 * [local] and [upsample] layers with the same weights; a pad Darknet would misplace is refused
 * naming the key. Without torch or darknet those parts say so. */
#include "nn_check.h"
#include "ref_check.h"

typedef struct {
    int n, c, h, w, f, s, stride, pad;
} local_case;

/* W (L, F, C*S*S) then b (F, OH, OW), which the reference reads. */
static void queue_case(ref_layer *l, const local_case *k, int i)
{
    char text[512];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nchannels=%d\nheight=%d\nwidth=%d\n"
             "[local]\nfilters=%d\nsize=%d\nstride=%d\npad=%d\nactivation=linear\n[cost]\n",
             k->n, k->c, k->h, k->w, k->f, k->s, k->stride, k->pad);
    int words[8] = {k->n, k->c, k->h, k->w, k->f, k->s, k->stride, k->pad};
    ref_layer_queue(l, "local", text, words, i);
}

static void matches_pytorch_unfold(void)
{
    if (!ref_have_python("torch")) {
        printf("test_layer_local: /usr/bin/python3 has no torch; comparison with PyTorch skipped\n");
        return;
    }
    static const local_case cases[] = {
        {2, 3, 5, 4, 4, 3, 1, 1}, {3, 2, 6, 6, 3, 3, 2, 0}, {2, 2, 7, 5, 2, 5, 2, 2}, {4, 3, 3, 3, 5, 1, 1, 0},
    };
    enum { NCASES = sizeof cases / sizeof cases[0] };
    ref_layer l[NCASES];
    for (int i = 0; i < NCASES; i++) queue_case(&l[i], &cases[i], i);
    ref_run_queued();
    for (int i = 0; i < NCASES; i++) {
        int shape[3];
        ref_layer_check(&l[i], shape);
    }
}

static void activations_match_finite_differences(void)
{
    tn_gradcheck_cfg("local", "[net]\nbatch=3\nchannels=2\nheight=4\nwidth=4\n"
                     "[local]\nfilters=3\nsize=3\npad=1\nactivation=logistic\n"
                     "[local]\nfilters=2\nsize=2\nstride=2\nactivation=tanh\n"
                     "[connected]\noutput=3\nactivation=linear\n[softmax]\n", 3, 12, 1e-2, 1e-3, 2e-2);
}

static const char dn_cfg[] =
    "[net]\nbatch=1\nchannels=3\nheight=16\nwidth=16\n"
    "[convolutional]\nfilters=4\nsize=5\nstride=1\npad=1\nactivation=leaky\n"
    "[local]\nfilters=3\nsize=3\nstride=1\npad=1\nactivation=leaky\n"
    "[upsample]\nstride=2\n"
    "[local]\nfilters=2\nsize=3\nstride=2\nactivation=tanh\n"
    "[connected]\noutput=10\nactivation=linear\n"
    "[softmax]\n";

/* Darknet sizes a [local] layer's workspace in floats but allocates it in bytes: the 5x5
 * convolution before keeps the shared workspace large enough for it. */

/* A 16x16 PPM of random bytes and shoal's input for it: planes R, G, B of byte / 255. */
static void write_image(const char *path, float *x)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fprintf(f, "P6\n16 16\n255\n");
    sh_rng r;
    sh_rng_seed(&r, 77);
    for (int p = 0; p < 256; p++)
        for (int c = 0; c < 3; c++) {
            unsigned char b = (unsigned char)sh_rng_below(&r, 256);
            fputc(b, f);
            x[c * 256 + p] = (float)b / 255.0f;
        }
    fclose(f);
}

static void darknet_agrees(void)
{
    if (!ref_have_darknet()) {
        printf("test_layer_local: %s missing: Darknet comparisons skipped\n", REF_DARKNET);
        return;
    }
    ref_darknet_agrees("local", dn_cfg);
    ref_weights_round_trip("local", dn_cfg);
    /* Darknet's classifier on weights shoal writes gives shoal's probabilities */
    sh_net *n = ref_net(dn_cfg, 1, 1);
    if (!n) return;
    ref_random(sh_net_params(n), sh_net_nparams(n), 21, -0.5f, 0.5f);
    char cfg_path[512], w[512], img[512], cmd[2048], out[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/local.cfg", ref_dir);
    snprintf(w, sizeof w, "%s/classify.weights", ref_dir);
    snprintf(img, sizeof img, "%s/img.ppm", ref_dir);
    float x[768], dn[10];
    write_image(img, x);
    CHECK_OK(sh_darknet_weights_save(n, w, 0));
    snprintf(cmd, sizeof cmd, "cd %s && printf 'classes=10\\n' > d.data && echo %s > list.txt && "
             "%s classifier fout d.data %s %s list.txt 2>/dev/null", ref_dir, img, REF_DARKNET, cfg_path, w);
    int rc = sh_test_run(cmd, out, sizeof out);
    const char *p = strchr(out, '\t');
    int got = 0;
    while (rc == 0 && p && got < 10) {
        dn[got++] = strtof(p + 1, NULL);
        p = strchr(p + 1, '\t');
    }
    CHECK(rc == 0 && got == 10, "darknet classifier fout: exit %d, %d values: %s", rc, got, out);
    CHECK_OK(sh_net_forward(n, x, 1, 0));
    float lo = 1, hi = 0;
    for (int k = 0; got == 10 && k < 10; k++) {
        float mine = sh_net_output(n)[k];
        CHECK(fabsf(mine - dn[k]) <= 1e-4f, "class %d: shoal %.6f, darknet %.6f", k, mine, dn[k]);
        lo = mine < lo ? mine : lo;
        hi = mine > hi ? mine : hi;
    }
    CHECK(got != 10 || hi - lo > 0.02f, "the probabilities %g..%g are too even to tell nets apart", lo, hi);
    sh_net_destroy(n);
}

static void misplaced_padding_is_refused(void)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=8\nwidth=8\n[local]\nsize=3\npad=2\n", "bad.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &n), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "bad.cfg:7: [local] pad=2 with size=3") && strstr(shoal_last_error(), "pad=1"),
          "error: %s", shoal_last_error());
    sh_net_destroy(n);
    sh_cfg_destroy(cfg);
}

int main(void)
{
    check_begin("test_layer_local", 120);
    ref_begin();
    RUN(matches_pytorch_unfold);
    RUN(activations_match_finite_differences);
    RUN(darknet_agrees);
    RUN(misplaced_padding_is_refused);
    ref_end();
    return check_end();
}
