/* test_compress_train.c — proves src/train/dp/compress.c on real nets and real ranks:
 * sufficient-factor broadcasting gives the float32 mean of the gradients (each rank's
 * dY^T X, gathered and summed) on 1-4 ranks, with the same bits on every rank, while a
 * connected layer where factors would not pay and the other layers fall back to the codec;
 * 1bit through the per-layer compressors matches shoal_allreduce_compressed on the same
 * slices; the state round-trips; --sfb on a net with no connected layer is refused;
 * top-k with SGD momentum exchanges velocities (momentum correction): bit for bit a
 * hand-written reference over several steps, and at topk:1 the uncompressed momentum SGD. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lib/ranks.h"
#include "nn/cfg.h"
#include "nn/net.h"
#include "shoal/comm.h"
#include "nn/optim.h"
#include "train/dp/compress.h"

/* input 8x8: the first connected layer (64 -> 48) pays with factors at batch 4
 * (4 x 112 < 3072), the last (48 -> 4: 4 x 52 > 192) does not */
static const char model[] =
    "[net]\nbatch=4\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\n"
    "\n[connected]\noutput=48\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static const char conv_only[] =
    "[net]\nbatch=4\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\n"
    "\n[convolutional]\nfilters=2\nsize=3\nstride=1\npad=1\nactivation=relu\n"
    "\n[avgpool]\n\n[softmax]\n\n[cost]\n";

/* the same with momentum and decay, for the momentum correction */
static const char with_momentum[] =
    "[net]\nbatch=4\nwidth=8\nheight=8\nchannels=1\nlearning_rate=0.01\nmomentum=0.9\ndecay=0.01\n"
    "\n[connected]\noutput=48\nactivation=relu\n"
    "\n[connected]\noutput=4\nactivation=linear\n"
    "\n[softmax]\n\n[cost]\n";

static shoal_result make_net(const char *text, sh_net **out)
{
    sh_cfg *cfg = NULL;
    shoal_result rc = sh_cfg_parse(text, "model.cfg", &cfg);
    return rc == SHOAL_OK ? sh_net_create_owning(cfg, 0, 3, out) : rc;
}

static void ready(void *ctx, int layer, size_t off, size_t count)
{
    (void)off, (void)count;
    sh_gradx_layer_ready(ctx, layer);
}

/* forward and backward this rank's own batch, telling g */
static void step(sh_net *net, int rank, sh_gradx *g)
{
    float x[4 * 64];
    int32_t y[4];
    for (int i = 0; i < 4 * 64; i++) x[i] = (float)((i * 37 + rank * 101) % 29) / 29.0f - 0.3f;
    for (int i = 0; i < 4; i++) y[i] = (i + rank) % 4;
    CHECK(sh_net_forward(net, x, 4, 1) == SHOAL_OK, "forward");
    sh_net_loss(net, y);
    CHECK(sh_net_backward(net, ready, g) == SHOAL_OK, "backward");
}

static void sfb_is_the_float32_mean(shoal_comm *c, void *arg)
{
    (void)arg;
    int me = shoal_comm_rank(c);
    sh_net *net = NULL;
    CHECK(make_net(model, &net) == SHOAL_OK, "net: %s", shoal_last_error());
    if (!net) return;
    sh_gradx_opts o = {{0}, 1, "model.cfg", 0, 0};
    shoal_codec_opts_default(&o.codec);
    sh_gradx *g = NULL;
    CHECK(sh_gradx_create(c, net, &o, &g) == SHOAL_OK, "gradx: %s", shoal_last_error());
    if (!g) return;
    sh_gradx_stats st;
    sh_gradx_get_stats(g, &st);
    CHECK(st.sfb_layers == 1, "one connected layer sends factors, %d", st.sfb_layers);
    step(net, me, g);
    size_t n = sh_net_nparams(net);
    float *plain = malloc(n * sizeof *plain), *grads = sh_net_grads(net);
    memcpy(plain, grads, n * sizeof *plain);
    CHECK(shoal_allreduce(c, plain, plain, n, SHOAL_FLOAT32, SHOAL_AVG) == SHOAL_OK, "allreduce");
    CHECK(sh_gradx_reduce(g, grads) == SHOAL_OK, "reduce: %s", shoal_last_error());
    int bad = 0;
    double big = 0;
    for (size_t i = 0; i < n; i++) {
        bad += fabs((double)grads[i] - plain[i]) > 1e-5 * (1 + fabs((double)plain[i]));
        big = fmax(big, fabs((double)plain[i]));
    }
    CHECK(!bad && big > 1e-4, "%d of %zu gradients differ from the float32 mean (largest %g)", bad, n, big);
    /* the same bits everywhere */
    uint32_t h = 2166136261u;
    const unsigned char *b = (const unsigned char *)grads;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 16777619u;
    uint32_t all[4];
    CHECK(shoal_allgather(c, &h, all, 1, SHOAL_INT32) == SHOAL_OK, "allgather");
    for (int r = 1; r < shoal_comm_world(c); r++) CHECK(all[r] == all[0], "rank %d's gradients differ", r);
    sh_gradx_get_stats(g, &st);
    int w = shoal_comm_world(c);
    CHECK(w == 1 ? st.wire_nbytes == 0 : (st.wire_nbytes > 0 && st.wire_nbytes < st.dense_nbytes),
          "factors send less: %g of %g", st.wire_nbytes, st.dense_nbytes);
    free(plain);
    sh_gradx_destroy(g);
    sh_net_destroy(net);
}

static void t_sfb(void)
{
    for (int n = 1; n <= 4; n++) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 60};
        CHECK(RUN_RANKS(n, &o, sfb_is_the_float32_mean, NULL) == 0, "%d ranks", n);
    }
}

/* 1bit through the layers' compressors equals the collective on each slice (weights as
 * rows x cols, the biases one row), and the state holds every residual. */
static void onebit_per_layer(shoal_comm *c, void *arg)
{
    (void)arg;
    sh_net *net = NULL;
    CHECK(make_net(model, &net) == SHOAL_OK, "net");
    if (!net) return;
    sh_gradx_opts o;
    memset(&o, 0, sizeof o);
    shoal_codec_opts_default(&o.codec);
    CHECK(shoal_codec_parse("1bit", &o.codec) == SHOAL_OK, "parse");
    sh_gradx *g = NULL;
    CHECK(sh_gradx_create(c, net, &o, &g) == SHOAL_OK, "gradx: %s", shoal_last_error());
    if (!g) return;
    step(net, shoal_comm_rank(c), g);
    size_t n = sh_net_nparams(net);
    float *want = malloc(n * sizeof *want), *grads = sh_net_grads(net);
    memcpy(want, grads, n * sizeof *want);
    size_t res_count = 0;
    for (int i = sh_net_nlayers(net) - 1; i >= 0; i--) {
        size_t off, count, w_off, rows, cols;
        sh_net_layer_params(net, i, &off, &count);
        if (!count) continue;
        sh_net_layer_weights(net, i, &w_off, &rows, &cols);
        size_t parts[2][3] = {{w_off, rows * cols, cols}, {w_off + rows * cols, count - rows * cols, 0}};
        for (int p = 0; p < 2; p++) {
            shoal_codec_opts co = o.codec;
            co.cols = parts[p][2];
            shoal_compressor *z = NULL;
            CHECK(shoal_compressor_create(&co, parts[p][1], &z) == SHOAL_OK, "compressor");
            float *s = want + parts[p][0];
            CHECK(shoal_allreduce_compressed(c, z, s, s, parts[p][1], SHOAL_AVG) == SHOAL_OK, "collective");
            res_count += parts[p][1];
            shoal_compressor_destroy(z);
        }
    }
    CHECK(sh_gradx_reduce(g, grads) == SHOAL_OK, "reduce");
    CHECK(!memcmp(want, grads, n * sizeof *want), "per-layer 1bit equals the collective on each slice");
    CHECK(sh_gradx_state_count(g) == res_count, "state: %zu floats, %zu expected", sh_gradx_state_count(g), res_count);
    float *st = malloc(res_count * sizeof *st), *st2 = malloc(res_count * sizeof *st2);
    sh_gradx_state_get(g, st);
    double norm = 0;
    for (size_t i = 0; i < res_count; i++) norm += (double)st[i] * st[i];
    sh_gradx_stats stats;
    sh_gradx_get_stats(g, &stats);
    CHECK(norm > 0 && fabs(sqrt(norm) - stats.residual_norm) < 1e-4 * (1 + sqrt(norm)), "residual norm %g vs %g",
          sqrt(norm), stats.residual_norm);
    sh_gradx_state_reset(g);
    sh_gradx_state_get(g, st2);
    int zero = 1;
    for (size_t i = 0; i < res_count; i++) zero &= st2[i] == 0;
    CHECK(zero, "reset zeroes the residuals");
    sh_gradx_state_set(g, st);
    sh_gradx_state_get(g, st2);
    CHECK(!memcmp(st, st2, res_count * sizeof *st), "state set and get round-trip");
    free(st), free(st2), free(want);
    sh_gradx_destroy(g);
    sh_net_destroy(net);
}

static void t_onebit(void)
{
    for (int n = 1; n <= 3; n += 2) {
        sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 60};
        CHECK(RUN_RANKS(n, &o, onebit_per_layer, NULL) == 0, "%d ranks", n);
    }
}

static void no_ready(void *ctx, int layer, size_t off, size_t count) { (void)ctx, (void)layer, (void)off, (void)count; }

/* forward and backward this rank's batch of step k (no gradx) */
static void plain_step(sh_net *net, int rank, int k)
{
    float x[4 * 64];
    int32_t y[4];
    for (int i = 0; i < 4 * 64; i++) x[i] = (float)((i * 37 + rank * 101 + k * 13) % 29) / 29.0f - 0.3f;
    for (int i = 0; i < 4; i++) y[i] = (i + rank + k) % 4;
    CHECK(sh_net_forward(net, x, 4, 1) == SHOAL_OK, "forward");
    sh_net_loss(net, y);
    CHECK(sh_net_backward(net, no_ready, NULL) == SHOAL_OK, "backward");
}

/* arg: the top-k fraction. Trains one net through sh_gradx (which must take over the
 * update) and another by the definition, 6 steps each on the same batches:
 *   v = 0.9 v + g + decay w (decay on the weights' ranges), in that order of roundings;
 *   the mean of top-k(v) with error feedback, one compressor per slice (weights, biases);
 *   w -= lr * mean.
 * At fraction 1 the net must also follow the uncompressed momentum SGD of the optimizer
 * on the float32 mean (within rounding). */
static void momentum_correction(shoal_comm *c, void *arg)
{
    double frac = *(const double *)arg;
    int me = shoal_comm_rank(c);
    sh_net *net = NULL, *ref = NULL, *sgd = NULL;
    CHECK(make_net(with_momentum, &net) == SHOAL_OK && make_net(with_momentum, &ref) == SHOAL_OK &&
          make_net(with_momentum, &sgd) == SHOAL_OK, "nets: %s", shoal_last_error());
    if (!net || !ref || !sgd) return;
    char spec[32];
    snprintf(spec, sizeof spec, "topk:%g", frac);
    sh_gradx_opts o;
    memset(&o, 0, sizeof o);
    shoal_codec_opts_default(&o.codec);
    CHECK(shoal_codec_parse(spec, &o.codec) == SHOAL_OK, "parse");
    sh_gradx *g = NULL;
    CHECK(sh_gradx_create(c, net, &o, &g) == SHOAL_OK, "gradx: %s", shoal_last_error());
    if (!g) return;
    CHECK(sh_gradx_applies_update(g), "%s with momentum: the exchange applies the update", spec);
    size_t n = sh_net_nparams(net);
    int nr = 0;
    const sh_param_range *rg = sh_net_param_ranges(ref, &nr);
    const sh_net_config *cfg = sh_net_get_config(ref);
    float m = cfg->optim.momentum, decay = cfg->optim.decay, lr = 0.01f;
    sh_optim *opt = NULL, *plain = NULL;
    CHECK(sh_optim_create(&cfg->optim, n, rg, nr, &opt) == SHOAL_OK &&
          sh_optim_create(&cfg->optim, n, rg, nr, &plain) == SHOAL_OK, "optimizers");
    /* the reference's slices and compressors, as the layers split them */
    size_t sl[8][3];
    shoal_compressor *z[8] = {0};
    int ns = 0;
    for (int i = sh_net_nlayers(ref) - 1; i >= 0; i--) {
        size_t off, count, w_off, rows, cols;
        sh_net_layer_params(ref, i, &off, &count);
        if (!count) continue;
        sh_net_layer_weights(ref, i, &w_off, &rows, &cols);
        size_t parts[2][3] = {{w_off, rows * cols, cols}, {w_off + rows * cols, count - rows * cols, 0}};
        for (int p = 0; p < 2 && ns < 8; p++, ns++) {
            memcpy(sl[ns], parts[p], sizeof sl[ns]);
            shoal_codec_opts co = o.codec;
            co.cols = parts[p][2];
            CHECK(shoal_compressor_create(&co, parts[p][1], &z[ns]) == SHOAL_OK, "compressor");
        }
    }
    float *v = calloc(n, sizeof *v), *send = malloc(n * sizeof *send), *mean = malloc(n * sizeof *mean);
    float *w = sh_net_params(ref), *gr = sh_net_grads(ref);
    for (int k = 0; k < 6; k++) {
        plain_step(net, me, k); /* the same batches as the reference's */
        sh_gradx_begin(g, sh_net_grads(net));
        CHECK(sh_gradx_reduce(g, sh_net_grads(net)) == SHOAL_OK, "reduce: %s", shoal_last_error());
        sh_gradx_apply(g, opt, sh_net_params(net), sh_net_grads(net), n, lr);

        plain_step(ref, me, k);
        for (size_t i = 0; i < n; i++) v[i] = m * v[i] + gr[i];
        for (int r = 0; r < nr; r++)
            for (size_t i = rg[r].offset; rg[r].decay && i < rg[r].offset + rg[r].count; i++) v[i] += decay * w[i];
        memcpy(send, v, n * sizeof *v);
        for (int s = 0; s < ns; s++)
            CHECK(shoal_allreduce_compressed(c, z[s], send + sl[s][0], mean + sl[s][0], sl[s][1], SHOAL_AVG) == SHOAL_OK,
                  "collective");
        for (size_t i = 0; i < n; i++) w[i] -= lr * mean[i];

        plain_step(sgd, me, k);
        CHECK(shoal_allreduce(c, sh_net_grads(sgd), sh_net_grads(sgd), n, SHOAL_FLOAT32, SHOAL_AVG) == SHOAL_OK, "sum");
        sh_optim_step(plain, sh_net_params(sgd), sh_net_grads(sgd), lr);
    }
    CHECK(!memcmp(sh_net_params(net), w, n * sizeof *w), "%s on %d ranks: the weights equal the reference's bit for bit",
          spec, shoal_comm_world(c));
    const float *a = sh_net_params(net), *b = sh_net_params(sgd);
    int far = 0, moved = 0;
    for (size_t i = 0; i < n; i++) {
        far += fabs((double)a[i] - b[i]) > 1e-5 * (1 + fabs((double)b[i]));
        moved += a[i] != b[i];
    }
    if (frac >= 1) CHECK(far == 0, "topk:1 follows momentum SGD: %d of %zu weights differ", far, n);
    else CHECK(moved > 0, "%s differs from uncompressed SGD", spec);
    /* the velocity is state: count, round trip, and reset zeroes it */
    size_t sc = sh_gradx_state_count(g), want = 0;
    for (int s = 0; s < ns; s++) {
        size_t k = 0;
        (void)shoal_compressor_state(z[s], &k);
        want += k + sl[s][1];
    }
    CHECK(sc == want, "state holds residuals and velocities: %zu floats, %zu expected", sc, want);
    float *st = malloc(sc * sizeof *st);
    sh_gradx_state_get(g, st);
    /* after the first slice's residual comes its velocity: the reference's v there */
    size_t r0 = 0;
    (void)shoal_compressor_state(z[0], &r0);
    CHECK(!memcmp(st + r0, v + sl[0][0], sl[0][1] * sizeof *v), "the first slice's velocity is in the state");
    free(st), free(v), free(send), free(mean);
    for (int s = 0; s < ns; s++) shoal_compressor_destroy(z[s]);
    sh_optim_destroy(opt), sh_optim_destroy(plain);
    sh_gradx_destroy(g);
    sh_net_destroy(net), sh_net_destroy(ref), sh_net_destroy(sgd);
}

static void t_momentum_correction(void)
{
    double fracs[] = {0.25, 1.0};
    for (int f = 0; f < 2; f++)
        for (int n = 1; n <= 4; n++) {
            sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 60};
            CHECK(RUN_RANKS(n, &o, momentum_correction, &fracs[f]) == 0, "topk:%g, %d ranks", fracs[f], n);
        }
}

static void refuses(shoal_comm *c, void *arg)
{
    (void)arg;
    sh_net *net = NULL;
    CHECK(make_net(conv_only, &net) == SHOAL_OK, "net: %s", shoal_last_error());
    sh_gradx_opts o;
    memset(&o, 0, sizeof o);
    shoal_codec_opts_default(&o.codec);
    o.sfb = 1;
    o.model = "conv.cfg";
    sh_gradx *g = NULL;
    CHECK(sh_gradx_create(c, net, &o, &g) == SHOAL_ERR_INVALID && !g, "refused");
    CHECK(strstr(shoal_last_error(), "conv.cfg has no [connected] layer") != NULL, "%s", shoal_last_error());
    sh_net_destroy(net);
}

static void t_sfb_needs_connected(void)
{
    sh_test_ranks_opts o = {.links = SH_TEST_SOCKETPAIR, .deadline_s = 30};
    CHECK(RUN_RANKS(2, &o, refuses, NULL) == 0, "2 ranks");
}

int main(void)
{
    check_begin("test_compress_train", 120);
    RUN(t_sfb);
    RUN(t_onebit);
    RUN(t_sfb_needs_connected);
    RUN(t_momentum_correction);
    return check_end();
}
