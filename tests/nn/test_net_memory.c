/* test_net_memory.c — proves the arena's savings in src/nn/net.c and src/nn/layer_batchnorm.c:
 * deltas pooled by liveness give bitwise the gradients one delta per layer gives (route,
 * shortcut, several threads, partial batches), batch norm's recovered x_hat gives the kept
 * one's within rounding and matches finite differences, and both make the arena smaller. */
#include <stdio.h>

#include "nn/net_internal.h"
#include "nn_check.h"

/* A residual block (shortcut), a route of two layers, batch norm after leaky and linear. */
static const char *resnetish =
    "[net]\nbatch=6\nchannels=3\nheight=8\nwidth=8\n"
    "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\npad=1\nactivation=leaky\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=1\nactivation=leaky\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=leaky\n"
    "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=1\nactivation=linear\n"
    "[shortcut]\nfrom=-4\nactivation=leaky\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=leaky\n"
    "[route]\nlayers=-1,-2\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=5\nsize=1\nactivation=leaky\n"
    "[avgpool]\n"
    "[connected]\noutput=3\nactivation=linear\n"
    "[softmax]\n[cost]\n";

typedef struct {
    float *grads, *dx;
    size_t arena_count;
} run_result;

/* Two training steps (the second on fewer images), keeping the second's gradients. */
static int run(int pool, int recover, int nthreads, int nimg, run_result *r)
{
    sh_net_pool_deltas = pool;
    sh_bn_recover = recover;
    test_net t;
    int ok = tn_build(&t, resnetish, 6, 5);
    sh_net_pool_deltas = 1;
    sh_bn_recover = 1;
    if (!ok) return 0;
    sh_net_set_threads(t.net, nthreads);
    sh_net_want_input_delta(t.net, 1);
    size_t nin = (size_t)sh_net_input_count(t.net), np = sh_net_nparams(t.net);
    float x[6 * 192];
    int32_t y[6] = {0, 1, 2, 2, 1, 0};
    tn_random(x, 6 * nin, 9, -1, 1);
    for (int step = 0; step < 2; step++) {
        int n = step ? nimg : 6;
        CHECK_OK(sh_net_forward(t.net, x, n, 1));
        (void)sh_net_loss(t.net, y);
        CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    }
    r->grads = malloc(np * sizeof *r->grads);
    r->dx = malloc((size_t)nimg * nin * sizeof *r->dx);
    memcpy(r->grads, sh_net_grads(t.net), np * sizeof *r->grads);
    memcpy(r->dx, sh_net_input_delta(t.net), (size_t)nimg * nin * sizeof *r->dx);
    r->arena_count = t.net->arena_count;
    tn_free(&t);
    return 1;
}

static void run_free(run_result *r)
{
    free(r->grads);
    free(r->dx);
}

static void pooled_deltas_give_the_same_gradients_bitwise(void)
{
    static const int cases[][2] = {{1, 6}, {2, 6}, {2, 4}}; /* threads, images */
    for (int c = 0; c < 3; c++) {
        run_result own, pooled;
        if (!run(0, 1, cases[c][0], cases[c][1], &own)) return;
        if (!run(1, 1, cases[c][0], cases[c][1], &pooled)) return;
        size_t np = 0;
        test_net t;
        if (tn_build(&t, resnetish, 6, 5)) {
            np = sh_net_nparams(t.net);
            tn_free(&t);
        }
        size_t nin = 192 * (size_t)cases[c][1];
        CHECK(memcmp(own.grads, pooled.grads, np * sizeof(float)) == 0,
              "%d threads, %d images: parameter gradients differ", cases[c][0], cases[c][1]);
        CHECK(memcmp(own.dx, pooled.dx, nin * sizeof(float)) == 0, "%d threads, %d images: input gradients differ",
              cases[c][0], cases[c][1]);
        /* every delta but the output's and the [connected]'s shares a buffer */
        CHECK(pooled.arena_count < own.arena_count, "arena %zu floats pooled, %zu not", pooled.arena_count,
              own.arena_count);
        run_free(&own);
        run_free(&pooled);
    }
}

static void recovered_x_hat_matches_the_kept_one(void)
{
    run_result kept, recovered;
    if (!run(1, 0, 2, 6, &kept)) return;
    if (!run(1, 1, 2, 6, &recovered)) return;
    test_net t;
    if (!tn_build(&t, resnetish, 6, 5)) return;
    size_t np = sh_net_nparams(t.net);
    tn_free(&t);
    int bad = 0;
    for (size_t i = 0; i < np; i++)
        if (!tn_close(kept.grads[i], recovered.grads[i], 1e-5, 1e-3)) {
            if (bad++ < 5) CHECK(0, "gradient %zu: kept %.9g, recovered %.9g", i, kept.grads[i], recovered.grads[i]);
        }
    CHECK(bad == 0, "%d of %zu gradients differ past rounding", bad, np);
    for (size_t i = 0; i < 6 * 192; i++) bad += !tn_close(kept.dx[i], recovered.dx[i], 1e-5, 1e-3);
    CHECK(bad == 0, "%d input gradients differ past rounding", bad);
    CHECK(recovered.arena_count < kept.arena_count, "arena %zu floats recovering, %zu keeping",
          recovered.arena_count, kept.arena_count);
    run_free(&kept);
    run_free(&recovered);
}

/* Smooth enough for finite differences: no pooling, one leaky kink the steps rarely cross. */
static const char *smooth =
    "[net]\nbatch=4\nchannels=2\nheight=5\nwidth=5\n"
    "[convolutional]\nbatch_normalize=1\nfilters=3\nsize=3\npad=1\nactivation=leaky\n"
    "[convolutional]\nbatch_normalize=1\nfilters=3\nsize=1\nactivation=linear\n"
    "[shortcut]\nfrom=-2\nactivation=linear\n"
    "[route]\nlayers=-1,-3\n"
    "[connected]\noutput=3\nactivation=linear\n"
    "[softmax]\n";

static void pooled_and_recovered_match_finite_differences(void)
{
    test_net t;
    if (!tn_build(&t, smooth, 4, 5)) return;
    sh_net_pool_deltas = 1;
    sh_bn_recover = 1;
    sh_net_set_threads(t.net, 2);
    float x[4 * 50];
    int32_t y[4] = {2, 0, 1, 1};
    tn_random(x, 4 * 50, 13, -1, 1);
    tn_gradcheck("pooled deltas, recovered x_hat", t.net, x, 4, y, 8, 1e-3, 3e-4, 3e-2);
    tn_free(&t);
}

int main(void)
{
    check_begin("test_net_memory", 120);
    RUN(pooled_deltas_give_the_same_gradients_bitwise);
    RUN(recovered_x_hat_matches_the_kept_one);
    RUN(pooled_and_recovered_match_finite_differences);
    return check_end();
}
