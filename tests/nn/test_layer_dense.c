/* test_layer_dense.c — proves src/nn/layer_dense.c, dense_gemm.c, dense_rules.c and
 * activation.c: forward equals a plain loop, backward equals finite differences through every activation, Darknet's
 * defaults (activation logistic), unsupported activations are refused with file:line, and
 * deferred weight gradients (a pipeline stage's) equal backward's, a batch norm layer's not
 * deferred; the same again through the layer's own packed weights, whose Y, dX and dW equal
 * plain double loops; and a pass of few rows through gemm_small.c's turned-around products
 * (Y and dX the same bits as those products, within 1e-5 of double loops, at 1 and 2
 * threads); the machine's rules (by its L2 and maker: the windows, own packing, a pipeline's
 * unpacked micro-batches). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/gemm.h"
#include "nn/gemm_packed.h"
#include "nn/gemm_small.h"
#include "nn_check.h"

static void forward_matches_plain_loop(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=3\nchannels=2\nheight=2\nwidth=3\n"
                      "[connected]\noutput=5\nactivation=leaky\n[softmax]\n", 3, 2)) return;
    float x[36];
    tn_random(x, 36, 8, -1, 1);
    float *p = sh_net_params(t.net);
    for (int j = 0; j < 5; j++) p[60 + j] = 0.05f * (float)(j - 2);
    CHECK_OK(sh_net_forward(t.net, x, 3, 0));
    const float *y = sh_net_layer(t.net, 0)->out;
    double worst = 0;
    for (int n = 0; n < 3; n++)
        for (int j = 0; j < 5; j++) {
            double s = p[60 + j];
            for (int i = 0; i < 12; i++) s += (double)p[j * 12 + i] * x[n * 12 + i];
            s = s > 0 ? s : 0.1 * s;
            worst = fmax(worst, fabs(s - y[n * 5 + j]));
        }
    CHECK(worst < 1e-5, "max error %g", worst);
    /* the softmax output sums to one per image */
    const float *o = sh_net_output(t.net);
    for (int n = 0; n < 3; n++) {
        double s = 0;
        for (int j = 0; j < 5; j++) s += o[n * 5 + j];
        CHECK_NEAR(s, 1.0, 1e-6);
    }
    tn_free(&t);
}

static void backward_matches_finite_differences_for_each_activation(void)
{
    static const char *acts[] = {"linear", "leaky", "relu", "logistic", "tanh"};
    for (int a = 0; a < 5; a++) {
        char text[512];
        snprintf(text, sizeof text,
                 "[net]\nbatch=4\nchannels=1\nheight=1\nwidth=7\n"
                 "[connected]\noutput=6\nactivation=%s\n"
                 "[connected]\noutput=3\nactivation=linear\n[softmax]\n[cost]\n", acts[a]);
        /* relu/leaky have a kink at 0: a small step keeps the sign of almost every input */
        tn_gradcheck_cfg(acts[a], text, 4, 14, 1e-3, 5e-4, 2e-2);
    }
}

static void default_activation_is_logistic_as_darknet(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=1\nchannels=1\nheight=1\nwidth=2\n"
                      "[connected]\noutput=2\n[softmax]\n", 1, 2)) return;
    CHECK(sh_net_layer(t.net, 0)->act == SH_ACT_LOGISTIC, "act %d", sh_net_layer(t.net, 0)->act);
    tn_free(&t);
}

static void unsupported_activation_names_file_line_and_choices(void)
{
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=1\nwidth=2\n[connected]\noutput=2\n"
                          "activation=mish\n[softmax]\n", "act.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "act.cfg:7") != NULL &&
              strstr(shoal_last_error(), "leaky") != NULL,
          "message: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
}

/* Backward with deferral leaves the connected layers' gradients alone (batch norm's are still
 * written); the weights hook over the kept factors then writes what plain backward writes. */
static void deferred_weight_grads_equal_backward(void)
{
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=6\nchannels=1\nheight=1\nwidth=9\n"
                      "[connected]\noutput=8\nactivation=relu\n"
                      "[connected]\noutput=7\nbatch_normalize=1\nactivation=leaky\n"
                      "[connected]\noutput=4\nactivation=linear\n[softmax]\n[cost]\n", 6, 3)) return;
    sh_net_set_threads(t.net, 2);
    float x[54];
    int32_t labels[6] = {0, 3, 1, 2, 3, 0};
    tn_random(x, 54, 5, -1, 1);
    size_t np = sh_net_nparams(t.net);
    float *want = malloc(np * sizeof *want), *g = sh_net_grads(t.net);
    CHECK_OK(sh_net_forward(t.net, x, 6, 1));
    sh_net_loss(t.net, labels);
    CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    memcpy(want, g, np * sizeof *want);
    CHECK(!sh_net_layer_defers(t.net, 1) && sh_net_layer_defers(t.net, 0) && sh_net_layer_defers(t.net, 2),
          "defers: %d %d %d", sh_net_layer_defers(t.net, 0), sh_net_layer_defers(t.net, 1),
          sh_net_layer_defers(t.net, 2));
    for (size_t i = 0; i < np; i++) g[i] = 7.0f;
    sh_net_defer_weights(t.net, 1);
    CHECK_OK(sh_net_forward(t.net, x, 6, 1));
    sh_net_loss(t.net, labels);
    CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    int untouched = 1, written = 1, same = 1;
    for (int i = 0; i < 3; i++) {
        size_t off, count;
        sh_net_layer_params(t.net, i, &off, &count);
        for (size_t k = off; k < off + count; k++) {
            if (sh_net_layer_defers(t.net, i)) untouched &= g[k] == 7.0f;
            else written &= g[k] == want[k];
        }
        if (!sh_net_layer_defers(t.net, i)) continue;
        const float *in, *dy;
        int nin, nout;
        CHECK(sh_net_layer_factors(t.net, i, &in, &dy, &nin, &nout), "layer %d factors", i);
        sh_net_layer_weight_grads(t.net, i, in, dy, 6, 0);
        for (size_t k = off; k < off + count; k++) same &= g[k] == want[k];
    }
    CHECK(untouched, "a deferred layer's gradient was written by backward");
    CHECK(written, "batch norm's layer differs from plain backward");
    CHECK(same, "deferred weight gradients differ from plain backward's");
    free(want);
    tn_free(&t);
}

/* The layer's own packed path (taken from sh_dense_self_pack_min_rows rows) gives what a
 * plain double loop gives: Y, dX and dW of a layer of 37 inputs and 21 outputs (panels
 * partly filled) over 70 rows, one and two threads. */
static void self_packed_path_matches_plain_loops(void)
{
    enum { N = 70, I = 37, K = 21 };
    for (int th = 1; th <= 2; th++) {
        test_net t;
        if (!tn_build(&t, "[net]\nbatch=70\nchannels=1\nheight=1\nwidth=5\n"
                          "[connected]\noutput=37\nactivation=tanh\n"
                          "[connected]\noutput=21\nactivation=linear\n[softmax]\n[cost]\n", N, 4))
            return;
        sh_net_set_threads(t.net, th);
        static float x[N * 5], dy[N * K];
        int32_t labels[N];
        for (int n = 0; n < N; n++) labels[n] = (n * 7) % K;
        tn_random(x, N * 5, 11, -1, 1);
        CHECK_OK(sh_net_forward(t.net, x, N, 1));
        sh_net_loss(t.net, labels);
        const sh_layer *l = sh_net_layer(t.net, 1);
        CHECK_OK(sh_net_backward(t.net, NULL, NULL));
        memcpy(dy, l->delta, sizeof dy); /* dY (a linear layer's: the softmax's gradient) */
        const float *p = sh_net_params(t.net), *g = sh_net_grads(t.net), *in = l->in[0];
        size_t off, count;
        sh_net_layer_params(t.net, 1, &off, &count);
        const float *w = p + off, *gw = g + off;
        double ey = 0, edx = 0, edw = 0;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double s = w[K * I + k];
                for (int i = 0; i < I; i++) s += (double)w[k * I + i] * in[n * I + i];
                ey = fmax(ey, fabs(s - l->out[n * K + k]));
            }
        for (int n = 0; n < N; n++)
            for (int i = 0; i < I; i++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += (double)dy[n * K + k] * w[k * I + i];
                edx = fmax(edx, fabs(s - sh_net_layer(t.net, 0)->delta[n * I + i] /
                                          (1.0 - (double)in[n * I + i] * in[n * I + i])));
            }
        for (int k = 0; k < K; k++)
            for (int i = 0; i < I; i++) {
                double s = 0;
                for (int n = 0; n < N; n++) s += (double)dy[n * K + k] * in[n * I + i];
                edw = fmax(edw, fabs(s - gw[k * I + i]));
            }
        CHECK(ey < 1e-5 && edx < 1e-5 && edw < 1e-5, "%d threads: max error Y %g dX %g dW %g",
              th, ey, edx, edw);
        tn_free(&t);
    }
}

/* 1 on an AMD CPU with AVX-512 whose L2 is known, worked out here on its own (from
 * /proc/cpuinfo, where the library asks the CPU). */
static int amd_avx512(long l2)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[8192];
    int amd = 0, avx512 = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "vendor_id", 9)) amd = strstr(line, "AuthenticAMD") != NULL;
        if (!strncmp(line, "flags", 5)) {
            avx512 = strstr(line, " avx512f ") != NULL || strstr(line, " avx512f\n") != NULL;
            break; /* the first CPU tells */
        }
    }
    fclose(f);
    return amd && avx512 && l2 > 0;
}
/* The rule set dense_rules.c takes: the newer one where L2 is 2 MiB or more or
 * on an AMD CPU with AVX-512, the older one elsewhere. */
static int takes_newer_rules(long l2) { return l2 >= (2L << 20) || amd_avx512(l2); }
/* The rows per product whose dX runs on gemm_small.c by the machine: 12-48 (the older set),
 * 16-128 on AMD's AVX-512 CPUs, none on the others of the newer set (from 2 MiB of L2). */
static int dx_small_by_machine(int rows, long l2)
{
    if (amd_avx512(l2)) return rows >= 16 && rows <= 128;
    if (!takes_newer_rules(l2)) return rows >= 12 && rows <= 48;
    return 0;
}

/* A layer of 80 outputs over 48 rows (24 or 12 per product at 2 threads, within both rules)
 * computes Y and dX with gemm_small.c: the same bits as its products over all the rows (row
 * by row they give what one call gives), which OpenBLAS's would not; within 1e-5 of double
 * loops. Linear layers and zero biases: Y and layer 0's delta are the products themselves.
 * dX's window pinned to 12-48 rows (pinned 1), or the machine's (dx_small_by_machine; one
 * product of 48 rows at 1 thread, four of 12 at 2), elsewhere dX is OpenBLAS's. */
static void dx_window_case(int pinned)
{
    enum { N = 48, I = 50, K = 80 };
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (pinned) sh_dense_small_dx_rows[0] = 12, sh_dense_small_dx_rows[1] = 48;
    for (int th = 1; th <= 2; th++) {
        int small_dx = pinned || dx_small_by_machine(th == 1 ? N : N / 4, l2);
        test_net t;
        if (!tn_build(&t, "[net]\nbatch=48\nchannels=1\nheight=1\nwidth=7\n"
                          "[connected]\noutput=50\nactivation=linear\n"
                          "[connected]\noutput=80\nactivation=linear\n[softmax]\n[cost]\n", N, 6))
            return;
        sh_net_set_threads(t.net, th);
        static float x[N * 7], y[N * K], dx[N * I], ws[1 << 16];
        int32_t labels[N];
        for (int n = 0; n < N; n++) labels[n] = (n * 5) % K;
        tn_random(x, N * 7, 12, -1, 1);
        CHECK_OK(sh_net_forward(t.net, x, N, 1));
        sh_net_loss(t.net, labels);
        CHECK_OK(sh_net_backward(t.net, NULL, NULL));
        const sh_layer *l = sh_net_layer(t.net, 1);
        const float *w = sh_net_params(t.net), *in = l->in[0], *got_dx = sh_net_layer(t.net, 0)->delta;
        size_t off, count;
        sh_net_layer_params(t.net, 1, &off, &count);
        w += off;
        CHECK(sh_small_ws_count(N, I, K) <= sizeof ws / sizeof *ws && sh_small_ws_count(N, K, I) <= sizeof ws / sizeof *ws,
              "scratch");
        sh_small_gemm_nt(N, K, I, in, I, w, I, y, K, ws);
        sh_small_gemm_nn(N, I, K, l->delta, K, w, I, 0, dx, I, ws);
        CHECK(!memcmp(y, l->out, sizeof y), "%d threads: Y not gemm_small.c's product", th);
        CHECK((memcmp(dx, got_dx, sizeof dx) == 0) == small_dx, "%d threads, window %s, L2 %ld: dX %s gemm_small.c's product",
              th, pinned ? "12-48" : "the machine's", l2, small_dx ? "not" : "is");
        double ey = 0, edx = 0;
        for (int n = 0; n < N; n++)
            for (int k = 0; k < K; k++) {
                double s = 0;
                for (int i = 0; i < I; i++) s += (double)w[k * I + i] * in[n * I + i];
                ey = fmax(ey, fabs(s - l->out[n * K + k]));
            }
        for (int n = 0; n < N; n++)
            for (int i = 0; i < I; i++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += (double)l->delta[n * K + k] * w[k * I + i];
                edx = fmax(edx, fabs(s - got_dx[n * I + i]));
            }
        CHECK(ey < 1e-5 && edx < 1e-5, "%d threads: max error Y %g dX %g", th, ey, edx);
        tn_free(&t);
    }
    sh_dense_small_dx_rows[0] = sh_dense_small_dx_rows[1] = -1; /* the machine's again */
}
/* The forward's window and a layer's own packing by the machine (dense_rules.c):
 * the older set forward at 4-96 rows and packing up to 1M weights; the newer (takes_newer_rules)
 * forward at 4-128 rows while rows x inputs floats fit in L2, packing up to L2 / 8 bytes of
 * weights. One thread (a product is the whole pass), own packing off (main). */
static int forward_is_small(int rows, int inputs, long l2)
{
    enum { K = 80 };
    char text[256];
    snprintf(text, sizeof text,
             "[net]\nbatch=%d\nchannels=1\nheight=1\nwidth=%d\n[connected]\noutput=%d\nactivation=linear\n"
             "[softmax]\n[cost]\n", rows, inputs, K);
    test_net t;
    if (!tn_build(&t, text, rows, 8)) return -1;
    float *x = malloc((size_t)rows * inputs * sizeof *x), *y = malloc((size_t)rows * K * sizeof *y);
    float *ws = malloc(sh_small_ws_count(rows, inputs, K) * sizeof *ws), *yb = malloc((size_t)rows * K * sizeof *yb);
    tn_random(x, (size_t)rows * inputs, 13, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, rows, 1));
    const sh_layer *l = sh_net_layer(t.net, 0);
    size_t off, count;
    sh_net_layer_params(t.net, 0, &off, &count);
    sh_small_gemm_nt(rows, K, inputs, x, inputs, sh_net_params(t.net) + off, inputs, y, K, ws);
    sh_gemm(0, 1, rows, K, inputs, 1.0f, x, inputs, sh_net_params(t.net) + off, inputs, 0.0f, yb, K);
    CHECK(memcmp(y, yb, (size_t)rows * K * sizeof *y), "%d x %d: OpenBLAS's bits are the product's", rows, inputs);
    int same = !memcmp(y, l->out, (size_t)rows * K * sizeof *y);
    double e = 0;
    for (int i = 0; i < rows * K; i++) e = fmax(e, fabs((double)y[i] - l->out[i]));
    CHECK(e < 1e-4, "%d rows x %d inputs, L2 %ld: Y differs from the product by %g", rows, inputs, l2, e);
    free(x), free(y), free(ws), free(yb);
    tn_free(&t);
    return same;
}
static void the_forward_window_and_own_packing_follow_the_machine(void)
{
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    int big = takes_newer_rules(l2);
    /* 112 rows: past the older set's 96 */
    CHECK(forward_is_small(112, 1000, l2) == big, "L2 %ld: 112 rows %s on gemm_small.c", l2, big ? "not" : "");
    /* 96 rows by 6000 inputs: 2.3 MB of packed rows */
    int fits = !big || (long)(96 * 6000 * sizeof(float)) <= l2;
    CHECK(forward_is_small(96, 6000, l2) == fits, "L2 %ld: 96 x 6000 %s on gemm_small.c", l2, fits ? "not" : "");
    /* own packing: 600 x 512 (307K weights), 256 x 256 (65K), 1024 x 1024 (1M), 1025 x 1024 */
    sh_dense_self_pack_min_rows = 64;
    int packs_307k = !big || 600 * 512 * 8L <= l2, packs_1m = !big || 1024 * 1024 * 8L <= l2;
    CHECK(sh_dense_self_packs(600 * 512, 64, 64) == packs_307k, "L2 %ld: 600 x 512, one product of 64 rows", l2);
    CHECK(sh_dense_self_packs(1024 * 1024, 128, 128) == packs_1m, "L2 %ld: 1024 x 1024, one product of 128 rows", l2);
    CHECK(sh_dense_self_packs(1024 * 1024, 128, 32), "L2 %ld: 1024 x 1024, products of 32 rows", l2);
    CHECK(sh_dense_self_packs(256 * 256, 2048, 2048), "L2 %ld: 256 x 256 over 2048 rows", l2);
    CHECK(!sh_dense_self_packs(256 * 256, 63, 63), "L2 %ld: 256 x 256 over 63 rows", l2);
    CHECK(!sh_dense_self_packs(1025 * 1024, 64, 16), "L2 %ld: past 1M weights", l2);
    sh_dense_self_pack_min_rows = 1 << 30;
    /* the packed copies a pipeline stage keeps for micro-batches of 8, 16, 32, 64, 128 rows */
    int both = SH_PACK_FORWARD | SH_PACK_BACKWARD, want[5] = {both, both, 0, both, both};
    if (big) want[1] = want[2] = want[3] = want[4] = SH_PACK_BACKWARD;
    for (int i = 0; i < 5; i++)
        CHECK(sh_dense_stage_packs(8 << i) == want[i], "L2 %ld: a stage's micro-batches of %d rows keep copies %d, "
              "want %d", l2, 8 << i, sh_dense_stage_packs(8 << i), want[i]);
}
/* A whole layer too large to pack its weights (1030 x 1024, past 1M) computes dW over 64 rows
 * on the packed kernel under the newer rules (dense_rules.c): X packed in its
 * cache (64-byte aligned), dW the bits of sh_packed_gemm_tn; under the older no cache
 * (OpenBLAS's product). Within 1e-4 of double loops either way. (Here OpenBLAS's bits are the same: both
 * sum the 64 rows in order.) */
static void big_layer_dw_follows_the_machine(void)
{
    enum { N = 64, I = 1024, K = 1030 };
    test_net t;
    if (!tn_build(&t, "[net]\nbatch=64\nchannels=1\nheight=1\nwidth=1024\n"
                      "[connected]\noutput=1030\nactivation=linear\n[softmax]\n[cost]\n", N, 4))
        return;
    float *x = malloc(sizeof(float) * N * I), *packed = malloc(sizeof(float) * sh_packed_count(N, I));
    float *mine = malloc(sizeof(float) * (size_t)K * I);
    int32_t labels[N];
    if (!x || !packed || !mine) {
        CHECK(0, "out of memory");
        goto out;
    }
    for (int n = 0; n < N; n++) labels[n] = (n * 37) % K;
    tn_random(x, N * I, 5, -1, 1);
    CHECK_OK(sh_net_forward(t.net, x, N, 1));
    sh_net_loss(t.net, labels);
    CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    const sh_layer *l = sh_net_layer(t.net, 0);
    size_t off, count;
    sh_net_layer_params(t.net, 0, &off, &count);
    const float *gw = sh_net_grads(t.net) + off;
    double err = 0;
    for (int k = 0; k < K; k += 7)
        for (int i = 0; i < I; i += 3) {
            double sum = 0;
            for (int n = 0; n < N; n++) sum += (double)l->delta[n * K + k] * x[n * I + i];
            err = fmax(err, fabs(sum - gw[(size_t)k * I + i]));
        }
    CHECK(err < 1e-4, "dW of 1030 x 1024 over 64 rows: max error %g", err);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    int big = takes_newer_rules(l2);
    CHECK(big ? l->cache_count >= sh_packed_count(N, I) : l->cache_count == 0, "L2 %ld: cache of %zu floats", l2,
          l->cache_count);
    if (big && l->cache_count >= sh_packed_count(N, I)) {
        sh_packed_pack(0, N, I, x, I, 0, sh_packed_npanels(I), packed);
        sh_packed_gemm_tn(K, 0, I, N, l->delta, K, packed, N, 0, mine, I);
        const float *kept = (const float *)(((uintptr_t)l->cache + 63) & ~(uintptr_t)63);
        CHECK(memcmp(kept, packed, sizeof(float) * sh_packed_count(N, I)) == 0, "X is not packed in the cache");
        CHECK(memcmp(gw, mine, sizeof(float) * (size_t)K * I) == 0, "dW is not the packed kernel's");
    }
out:
    free(x);
    free(packed);
    free(mine);
    tn_free(&t);
}
static void few_rows_take_the_turned_around_products(void) { dx_window_case(1); }
static void the_input_gradient_window_follows_the_machine(void) { dx_window_case(0); }

int main(void)
{
    check_begin("test_layer_dense", 60);
    RUN(forward_matches_plain_loop);
    RUN(backward_matches_finite_differences_for_each_activation);
    RUN(default_activation_is_logistic_as_darknet);
    RUN(unsupported_activation_names_file_line_and_choices);
    RUN(deferred_weight_grads_equal_backward);
    /* the same through the layers' own packed weights (layer_dense.c) */
    sh_dense_self_pack_min_rows = 1;
    RUN(forward_matches_plain_loop);
    RUN(backward_matches_finite_differences_for_each_activation);
    RUN(deferred_weight_grads_equal_backward);
    RUN(self_packed_path_matches_plain_loops);
    sh_dense_self_pack_min_rows = 1 << 30; /* OpenBLAS's path */
    RUN(self_packed_path_matches_plain_loops);
    RUN(few_rows_take_the_turned_around_products);
    RUN(the_input_gradient_window_follows_the_machine);
    RUN(the_forward_window_and_own_packing_follow_the_machine);
    RUN(big_layer_dw_follows_the_machine);
    return check_end();
}
