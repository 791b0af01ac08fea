/* test_grad_rows.c — proves sh_net_set_grad_rows (src/nn/net.c, layer_dense.c): backward
 * offers each connected layer's weight gradient in blocks of rows (on the packed products,
 * 64 rows or more; whole on OpenBLAS's), in order, each final when offered and before the
 * layer's input gradient is written (on OpenBLAS's after it), then the rest of the layer's
 * slice; that weights changed as soon as they are offered (as data parallelism's in-place
 * update does) change no gradient (dX read W before); and every gradient
 * equals the whole-layer backward's bit for bit, on one thread and two, for block sizes that
 * do and do not divide the rows. Without it each layer is offered once, as before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_check.h"

enum { IN = 40, MAXCALLS = 256, BATCH = 64 };

static const char text[] = "[net]\nbatch=64\nchannels=1\nheight=1\nwidth=40\n"
                           "[connected]\noutput=77\nactivation=leaky\n"
                           "[connected]\noutput=53\nactivation=relu\n"
                           "[connected]\noutput=10\nactivation=linear\n[softmax]\n[cost]\n";

typedef struct {
    sh_net *net;
    const float *want; /* the whole backward's gradients */
    int n, layer[MAXCALLS];
    size_t off[MAXCALLS], count[MAXCALLS];
    int stale_bad, early_bad; /* offered slices not final; blocks offered after the layer's dX */
    int packed;               /* the packed products (blocks before dX), else OpenBLAS's (dX first) */
} recorder;

static const float SENTINEL = -12345.0f;

static void record(void *ctx, int layer, size_t offset, size_t count)
{
    recorder *r = ctx;
    if (r->n >= MAXCALLS) return;
    r->layer[r->n] = layer;
    r->off[r->n] = offset;
    r->count[r->n] = count;
    r->n++;
    if (memcmp(sh_net_grads(r->net) + offset, r->want + offset, count * sizeof(float)) != 0) r->stale_bad++;
    /* a block of weight rows (not the layer's last call): on the packed products the
     * layer's dX, the layer below's delta, is still the sentinel written before backward; on
     * OpenBLAS's dX reads W itself, so it is done first */
    size_t poff, pcount;
    sh_net_layer_params(r->net, layer, &poff, &pcount);
    (void)pcount;
    sh_layer *l = sh_net_layer(r->net, layer);
    if (layer > 0 && offset + count <= poff + l->w_count) {
        const float *below = sh_net_layer(r->net, layer - 1)->delta;
        if ((below[0] != SENTINEL) == r->packed) r->early_bad++;
    }
    /* an offered block's weights may be updated at once (data parallelism's optimizer rides
     * on the exchange): spoil them, so that a dX still reading them changes the gradients
     * below */
    if (offset + count <= poff + l->w_count)
        for (size_t i = 0; i < count; i++) sh_net_params(r->net)[offset + i] += 1.0f;
}

/* One case: nimg images, threads, rows per block; 0 rows: the whole layers. */
static void one_case(int nimg, int threads, int rows)
{
    test_net t;
    if (!tn_build(&t, text, BATCH, 5)) return;
    sh_net_set_threads(t.net, threads);
    float x[BATCH * IN];
    int32_t y[BATCH];
    tn_random(x, BATCH * IN, 17, -1, 1);
    for (int i = 0; i < BATCH; i++) y[i] = (i * 7) % 10;
    size_t np = sh_net_nparams(t.net);
    float *want = malloc(np * sizeof(float));
    recorder *r = calloc(1, sizeof *r);
    if (!want || !r) {
        CHECK(0, "out of memory");
        free(want);
        free(r);
        tn_free(&t);
        return;
    }
    /* the whole-layer backward, as every strategy but data parallelism across hosts runs it */
    CHECK_OK(sh_net_forward(t.net, x, nimg, 1));
    sh_net_loss(t.net, y);
    CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    memcpy(want, sh_net_grads(t.net), np * sizeof(float));

    sh_net_set_grad_rows(t.net, rows);
    CHECK_OK(sh_net_forward(t.net, x, nimg, 1));
    sh_net_loss(t.net, y);
    memset(sh_net_grads(t.net), 0xff, np * sizeof(float)); /* NaNs: nothing left over */
    for (int i = 0; i < 2; i++) { /* the deltas the upper layers' dX write */
        float *d = sh_net_layer(t.net, i)->delta;
        for (size_t k = 0; k < (size_t)nimg * sh_net_layer(t.net, i)->outputs; k++) d[k] = SENTINEL;
    }
    r->net = t.net;
    r->packed = nimg >= sh_dense_self_pack_min_rows;
    r->want = want;
    CHECK_OK(sh_net_backward(t.net, record, r));
    CHECK(memcmp(sh_net_grads(t.net), want, np * sizeof(float)) == 0,
          "nimg %d, %d threads, %d rows: gradients differ from the whole backward's", nimg, threads, rows);
    CHECK(r->stale_bad == 0, "nimg %d, %d threads, %d rows: %d slices offered before they were final", nimg,
          threads, rows, r->stale_bad);
    CHECK(r->early_bad == 0, "nimg %d, %d threads, %d rows: %d blocks offered %s the layer's input gradient",
          nimg, threads, rows, r->early_bad, r->packed ? "after" : "before");
    /* the calls: layers last to first, each layer's slices in order covering it; a block per
     * `rows` rows and then the bias */
    int c = 0;
    for (int layer = 2; layer >= 0; layer--) {
        size_t off, count;
        sh_net_layer_params(t.net, layer, &off, &count);
        int k = sh_net_layer(t.net, layer)->out_shape.c, in = (int)sh_net_layer(t.net, layer)->inputs;
        int per = nimg >= 64 ? rows : k; /* OpenBLAS's products (under 64 rows) go whole */
        int want_calls = rows > 0 ? (k + per - 1) / per + 1 : 1;
        size_t at = off;
        int calls = 0;
        for (; c < r->n && r->layer[c] == layer; c++, calls++) {
            CHECK(r->off[c] == at, "layer %d call %d: offset %zu, expected %zu", layer, calls, r->off[c], at);
            if (rows > 0 && calls + 1 < want_calls) {
                int rr = k - calls * per < per ? k - calls * per : per;
                CHECK(r->count[c] == (size_t)rr * in, "layer %d block %d: %zu floats, expected %d rows of %d",
                      layer, calls, r->count[c], rr, in);
            }
            at = r->off[c] + r->count[c];
        }
        CHECK(calls == want_calls, "nimg %d, %d threads, %d rows: layer %d offered in %d calls, expected %d",
              nimg, threads, rows, layer, calls, want_calls);
        CHECK(at == off + count, "layer %d: the slices end at %zu, the layer at %zu", layer, at, off + count);
    }
    CHECK(c == r->n, "%d calls, %d expected", r->n, c);
    free(want);
    free(r);
    tn_free(&t);
}

static void blocks_are_offered_early_and_change_no_bit(void)
{
    static const int nimgs[2] = {BATCH, 20}; /* the packed products (>= 64 rows), OpenBLAS's */
    static const int rows[3] = {8, 5, 128};
    for (int a = 0; a < 2; a++)
        for (int th = 1; th <= 2; th++)
            for (int b = 0; b < 3; b++) one_case(nimgs[a], th, rows[b]);
}

static void without_it_each_layer_is_offered_once(void)
{
    one_case(BATCH, 1, 0);
    one_case(20, 2, 0);
}

/* The reference itself: the whole backward of this model agrees with finite differences. */
static void the_model_backward_is_right(void)
{
    tn_gradcheck_cfg("three connected", "[net]\nbatch=4\nchannels=1\nheight=1\nwidth=6\n"
                     "[connected]\noutput=7\nactivation=leaky\n[connected]\noutput=5\nactivation=relu\n"
                     "[connected]\noutput=3\nactivation=linear\n[softmax]\n[cost]\n", 4, 14, 1e-3, 5e-4, 2e-2);
}

int main(void)
{
    check_begin("test_grad_rows", 60);
    RUN(the_model_backward_is_right);
    RUN(blocks_are_offered_early_and_change_no_bit);
    RUN(without_it_each_layer_is_offered_once);
    return check_end();
}
