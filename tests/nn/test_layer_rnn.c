/* test_layer_rnn.c — proves src/nn/layer_rnn.c, layer_gru.c, layer_gru_darknet.c,
 * layer_lstm.c and recurrent.c:
 * gradients through time equal central finite differences (weights, biases, inputs, with a
 * non-zero starting state; dense and one-hot input rows), two threads agree with one (and
 * both ways of sharing the time loop, by columns and by streams, bit for bit), the state
 * carried from one batch to the next makes two batches of T steps equal one batch of 2T
 * steps, and bad keys are refused with file:line. The comparison with PyTorch is tests/nn/test_rnn_torch.c. */
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "nn/recurrent.h"
#include "nn_check.h"

static const char *const kinds[] = {"lstm", "gru", "rnn"};

static void layer_cfg(char *text, size_t nbytes, const char *kind, int in, int streams,
                      int steps, int h, const char *extra)
{
    if (!strcmp(kind, "rnn"))
        snprintf(text, nbytes,
                 "[net]\ninputs=%d\nbatch=%d\ntime_steps=%d\n"
                 "[rnn]\nhidden=%d\noutput=%d\n%s\n"
                 "[connected]\noutput=4\nactivation=linear\n[softmax]\n",
                 in, streams, steps, h, h + 1, extra);
    else
        snprintf(text, nbytes,
                 "[net]\ninputs=%d\nbatch=%d\ntime_steps=%d\n"
                 "[%s]\noutput=%d\n%s\n"
                 "[connected]\noutput=4\nactivation=linear\n[softmax]\n",
                 in, streams, steps, kind, h, extra);
}

/* Loss from a fixed starting state (each forward moves the state on). */
static double loss_from(sh_net *n, const float *state0, const float *x, int rows,
                        const int32_t *labels)
{
    size_t ns = 0;
    float *st = sh_net_state(n, &ns);
    memcpy(st, state0, ns * sizeof *st);
    CHECK_OK(sh_net_forward(n, x, rows, 1));
    return sh_net_loss(n, labels);
}

/* onehot: each input row a single 1 (the layers' lookup path; the perturbed inputs of the
 * finite differences take the product path). */
static void gradcheck_x(const char *what, const char *text, int streams, int steps, int onehot)
{
    test_net t;
    if (!tn_build(&t, text, streams, 5)) return;
    sh_net *n = t.net;
    int rows = streams * steps, in = sh_net_input_count(n);
    CHECK(sh_net_batch(n) == rows, "%s: batch %d rows, want %d", what, sh_net_batch(n), rows);
    size_t ns = 0, np = sh_net_nparams(n);
    (void)sh_net_state(n, &ns);
    float *s0 = malloc(ns * sizeof *s0), *x = malloc((size_t)rows * in * sizeof *x);
    int32_t *y = malloc((size_t)rows * sizeof *y);
    tn_random(s0, ns, 3, -0.8f, 0.8f);
    tn_random(x, (size_t)rows * in, 4, -1.0f, 1.0f);
    if (onehot) {
        memset(x, 0, (size_t)rows * in * sizeof *x);
        for (int r = 0; r < rows; r++) x[(size_t)r * in + (r * 2) % in] = 1.0f;
    }
    for (int i = 0; i < rows; i++) y[i] = (i * 5 + 1) % 4;
    float *p = sh_net_params(n);
    for (size_t i = 0; i < np; i++) p[i] *= 1.5f; /* larger weights: state matters more */
    sh_net_want_input_delta(n, 1);
    (void)loss_from(n, s0, x, rows, y);
    CHECK_OK(sh_net_backward(n, NULL, NULL));
    float *g = malloc(np * sizeof *g), *gx = malloc((size_t)rows * in * sizeof *gx);
    memcpy(g, sh_net_grads(n), np * sizeof *g);
    memcpy(gx, sh_net_input_delta(n), (size_t)rows * in * sizeof *gx);
    const double eps = 1e-3;
    int bad = 0, checked = 0;
    size_t off = 0, stride = np > 800 ? np / 400 : 1; /* every layer's parameters */
    for (size_t i = 0; i < np; i += stride) {
        float keep = p[i];
        p[i] = keep + (float)eps;
        double lp = loss_from(n, s0, x, rows, y);
        p[i] = keep - (float)eps;
        double lm = loss_from(n, s0, x, rows, y);
        p[i] = keep;
        double fd = (lp - lm) / (2 * eps);
        checked++;
        if (!tn_close(g[i], fd, 3e-4, 3e-2) && bad++ < 5)
            CHECK(0, "%s: param %zu: backward %.6g, finite difference %.6g", what, i - off, g[i], fd);
    }
    for (int i = 0; i < rows * in; i++) {
        float keep = x[i];
        x[i] = keep + (float)eps;
        double lp = loss_from(n, s0, x, rows, y);
        x[i] = keep - (float)eps;
        double lm = loss_from(n, s0, x, rows, y);
        x[i] = keep;
        double fd = (lp - lm) / (2 * eps);
        checked++;
        if (!tn_close(gx[i], fd, 3e-4, 3e-2) && bad++ < 5)
            CHECK(0, "%s: input %d: backward %.6g, finite difference %.6g", what, i, gx[i], fd);
    }
    CHECK(bad == 0, "%s: %d of %d gradients differ from finite differences", what, bad, checked);
    free(g);
    free(gx);
    free(s0);
    free(x);
    free(y);
    tn_free(&t);
}

static void gradcheck(const char *what, const char *text, int streams, int steps)
{
    gradcheck_x(what, text, streams, steps, 0);
}

static void gradients_through_time_match_finite_differences(void)
{
    char text[512], what[64];
    for (int k = 0; k < 3; k++) {
        /* 7 units: one partial gate block; 20: a full block and a partial one */
        const int hs[] = {7, 20};
        for (int hi = 0; hi < 2; hi++) {
            layer_cfg(text, sizeof text, kinds[k], 5, 2, 4, hs[hi],
                      !strcmp(kinds[k], "rnn") ? "activation=tanh" : "");
            snprintf(what, sizeof what, "%s H=%d", kinds[k], hs[hi]);
            gradcheck(what, text, 2, 4);
        }
    }
    /* Darknet's GRU (form=darknet): the logistic candidate, and tanh=1 */
    for (int hi = 0; hi < 2; hi++) {
        const int hs[] = {7, 20};
        layer_cfg(text, sizeof text, "gru", 5, 2, 4, hs[hi], hi ? "form=darknet\ntanh=1" : "form=darknet");
        snprintf(what, sizeof what, "gru form=darknet%s H=%d", hi ? " tanh=1" : "", hs[hi]);
        gradcheck(what, text, 2, 4);
    }
    layer_cfg(text, sizeof text, "rnn", 3, 3, 3, 6, "activation=leaky");
    gradcheck("rnn leaky", text, 3, 3);
    layer_cfg(text, sizeof text, "rnn", 3, 4, 3, 6, "batch_normalize=1\nactivation=tanh");
    gradcheck("rnn batch_normalize", text, 4, 3);
    layer_cfg(text, sizeof text, "rnn", 3, 5, 2, 20, "batch_normalize=1\nactivation=logistic");
    gradcheck("rnn batch_normalize logistic", text, 5, 2);
    /* one-hot rows: [rnn] reads its activated input part from Win^T, or with batch norm
     * copies it into each step's rows */
    layer_cfg(text, sizeof text, "rnn", 5, 3, 3, 20, "activation=tanh");
    gradcheck_x("rnn one-hot", text, 3, 3, 1);
    layer_cfg(text, sizeof text, "rnn", 5, 3, 3, 20, "batch_normalize=1\nactivation=tanh");
    gradcheck_x("rnn one-hot batch_normalize", text, 3, 3, 1);
    layer_cfg(text, sizeof text, "rnn", 3, 1, 5, 6, "");
    gradcheck("rnn logistic (Darknet's default), one stream", text, 1, 5);
    gradcheck("crnn", "[net]\nwidth=4\nheight=3\nchannels=2\nbatch=2\ntime_steps=3\n"
                      "[crnn]\noutput=3\nhidden=4\nactivation=tanh\n"
                      "[connected]\noutput=4\nactivation=linear\n[softmax]\n", 2, 3);
    gradcheck("crnn after a layer, Darknet's default logistic",
              "[net]\nwidth=3\nheight=3\nchannels=1\nbatch=2\ntime_steps=2\n"
              "[convolutional]\nfilters=2\nsize=1\nactivation=linear\n"
              "[crnn]\noutput=2\nhidden=3\n[connected]\noutput=4\nactivation=linear\n"
              "[softmax]\n", 2, 2);
    /* feed-forward layers see time_steps x batch rows as a plain batch */
    tn_gradcheck_cfg("connected under time_steps",
                     "[net]\ninputs=5\nbatch=2\ntime_steps=3\n[connected]\noutput=4\n"
                     "activation=tanh\n[softmax]\n", 6, 10, 1e-2, 3e-4, 2e-2);
}

/* One forward + backward; returns the loss, leaves grads in g. */
static double step(sh_net *n, const float *x, int rows, const int32_t *y, float *g)
{
    CHECK_OK(sh_net_forward(n, x, rows, 1));
    double loss = sh_net_loss(n, y);
    CHECK_OK(sh_net_backward(n, NULL, NULL));
    memcpy(g, sh_net_grads(n), sh_net_nparams(n) * sizeof *g);
    return loss;
}

static void two_threads_agree_with_one(void)
{
    char text[512];
    double keep = sh_rnn_split_min_macs;
    sh_rnn_split_min_macs = 0; /* split every step, however small */
    /* 3: [rnn] with batch norm; 4: [crnn]; 5, 6: [gru] form=darknet (logistic, tanh) */
    static const char *const extra[] = {"", "", "", "batch_normalize=1", "", "form=darknet",
                                        "form=darknet\ntanh=1"};
    for (int k = 0; k < 7; k++) {
        const char *kind = k == 4 ? "crnn" : k >= 5 ? "gru" : kinds[k == 3 ? 2 : k];
        layer_cfg(text, sizeof text, kind, 9, 6, 5, 40, extra[k]);
        test_net a, b;
        if (!tn_build(&a, text, 6, 9)) return;
        if (!tn_build(&b, text, 6, 9)) return;
        sh_net_set_threads(b.net, 2);
        int rows = 30;
        size_t np = sh_net_nparams(a.net);
        float *x = malloc((size_t)rows * 9 * sizeof *x), *ga = malloc(np * 4), *gb = malloc(np * 4);
        int32_t y[30];
        for (int i = 0; i < rows; i++) y[i] = i % 4;
        double worst = 0;
        for (int it = 0; it < 2; it++) { /* the second batch starts from the carried state */
            tn_random(x, (size_t)rows * 9, 20 + it, -1, 1);
            double la = step(a.net, x, rows, y, ga), lb = step(b.net, x, rows, y, gb);
            CHECK(fabs(la - lb) < 1e-5, "%s: loss %.8g with 1 thread, %.8g with 2", kind, la, lb);
            for (size_t i = 0; i < np; i++) worst = fmax(worst, fabs(ga[i] - gb[i]));
        }
        CHECK(worst < 1e-5, "%s %s: gradients differ by %g between 1 and 2 threads", kind,
              extra[k], worst);
        free(x);
        free(ga);
        free(gb);
        tn_free(&a);
        tn_free(&b);
    }
    sh_rnn_split_min_macs = keep;
}

/* Two recurrent layers (the second's input gradient flows into the first) over 11 streams
 * of 4 steps: 11 is a multiple of no thread count tried, so threads own unequal streams. */
/* Two recurrent layers straight into the softmax: a [connected] layer after them would put
 * OpenBLAS's dW in the comparison, which it splits by outputs per thread, and OpenBLAS's
 * Haswell kernels round a block of 2 rows unlike one of 4 (the recurrent layers' own
 * products are gemm_packed.c's, the same bits for any rows). Returns the outputs a row. */
static int split_cfg(char *text, size_t nbytes, const char *kind, const char *extra, int in)
{
    int rnn = !strcmp(kind, "rnn");
    const char *size = rnn ? "hidden=40\noutput=37" : "output=40";
    snprintf(text, nbytes,
             "[net]\ninputs=%d\nbatch=11\ntime_steps=4\n"
             "[%s]\n%s\n%s\n[%s]\n%s\n%s\n[softmax]\n",
             in, kind, size, extra, kind, size, extra);
    return rnn ? 37 : 40;
}

/* Loss, outputs, weight and input gradients of two batches (the second from the carried
 * state) into out: loss, then the net's output, grads and input delta of each batch. */
static size_t split_run(sh_net *n, const float *x, int rows, int in, int outs, const int32_t *y,
                        float *out)
{
    size_t np = sh_net_nparams(n), no = (size_t)rows * outs, len = 0;
    sh_net_want_input_delta(n, 1);
    for (int it = 0; it < 2; it++) {
        CHECK_OK(sh_net_forward(n, x + (size_t)it * rows * in, rows, 1));
        out[len++] = sh_net_loss(n, y);
        memcpy(out + len, sh_net_output(n), no * sizeof *out);
        len += no;
        CHECK_OK(sh_net_backward(n, NULL, NULL));
        memcpy(out + len, sh_net_grads(n), np * sizeof *out);
        len += np;
        memcpy(out + len, sh_net_input_delta(n), (size_t)rows * in * sizeof *out);
        len += (size_t)rows * in;
    }
    return len;
}

/* Each way sh_rnn_run_loop shares a time loop among threads (by columns, a dispatch per
 * step; by streams, the whole loop per thread) computes every element as one thread does:
 * losses, outputs, weight and input gradients bit for bit, dense and one-hot inputs. */
static void stream_and_column_splits_match_one_thread_bit_for_bit(void)
{
    double keep_macs = sh_rnn_split_min_macs;
    int keep_streams = sh_rnn_rows_min_streams;
    static const struct {
        const char *kind, *extra;
    } cases[] = {{"rnn", "activation=tanh"}, {"rnn", "activation=logistic"},
                 {"gru", ""}, {"lstm", ""}, {"gru", "form=darknet"},
                 {"gru", "form=darknet\ntanh=1"},
                 {"rnn", "batch_normalize=1\nactivation=tanh"}};
    enum { IN = 9, ROWS = 44 };
    char text[768];
    float *x = malloc(2 * ROWS * IN * sizeof *x);
    int32_t y[ROWS];
    for (int i = 0; i < ROWS; i++) y[i] = (i * 3 + 1) % 4;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int onehot = 0; onehot < 2; onehot++) {
            int outs = split_cfg(text, sizeof text, cases[c].kind, cases[c].extra, IN);
            tn_random(x, 2 * ROWS * IN, 30 + c, -1, 1);
            if (onehot) {
                memset(x, 0, 2 * ROWS * IN * sizeof *x);
                for (int r = 0; r < 2 * ROWS; r++) x[(size_t)r * IN + (r * 5) % IN] = 1.0f;
            }
            test_net ref;
            if (!tn_build(&ref, text, 11, 13)) break;
            size_t cap = 2 * (1 + (size_t)ROWS * outs + sh_net_nparams(ref.net) + ROWS * IN);
            float *want = malloc(cap * sizeof *want), *got = malloc(cap * sizeof *got);
            size_t len = split_run(ref.net, x, ROWS, IN, outs, y, want);
            for (int threads = 2; threads <= 3; threads++)
                for (int rows_split = 0; rows_split < 2; rows_split++) {
                    sh_rnn_split_min_macs = 0;
                    sh_rnn_rows_min_streams = rows_split ? 1 : INT_MAX;
                    test_net t;
                    if (!tn_build(&t, text, 11, 13)) break;
                    sh_net_set_threads(t.net, threads);
                    size_t glen = split_run(t.net, x, ROWS, IN, outs, y, got);
                    size_t first = len;
                    for (size_t i = 0; i < len && first == len; i++)
                        if (memcmp(&want[i], &got[i], sizeof *got)) first = i;
                    CHECK(glen == len && first == len,
                          "%s %s%s, %d threads split by %s: differs from 1 thread at value "
                          "%zu of %zu (%.9g, want %.9g)", cases[c].kind, cases[c].extra,
                          onehot ? " one-hot" : "", threads, rows_split ? "streams" : "columns",
                          first, len, first < len ? got[first] : 0.0, first < len ? want[first] : 0.0);
                    tn_free(&t);
                    sh_rnn_split_min_macs = keep_macs;
                    sh_rnn_rows_min_streams = keep_streams;
                }
            free(want);
            free(got);
            tn_free(&ref);
        }
    }
    free(x);
}

static void state_carries_from_batch_to_batch(void)
{
    char t1[512], t2[512];
    static const char *const all[] = {"lstm", "gru", "rnn", "crnn", "gru"};
    static const char *const extra[] = {"", "", "", "hidden=5", "form=darknet"};
    for (int k = 0; k < 5; k++) {
        const char *kind = all[k];
        layer_cfg(t1, sizeof t1, kind, 4, 1, 3, 8, extra[k]);
        layer_cfg(t2, sizeof t2, kind, 4, 1, 6, 8, extra[k]);
        test_net a, b;
        if (!tn_build(&a, t1, 1, 3)) return;
        if (!tn_build(&b, t2, 1, 3)) return; /* same seed, same parameter count: same weights */
        CHECK(sh_net_nparams(a.net) == sh_net_nparams(b.net), "%s: params differ", kind);
        float x[24];
        tn_random(x, 24, 5, -1, 1);
        CHECK_OK(sh_net_forward(a.net, x, 3, 0));
        float first[3 * 4];
        memcpy(first, sh_net_output(a.net), sizeof first);
        CHECK_OK(sh_net_forward(a.net, x + 12, 3, 0));
        CHECK_OK(sh_net_forward(b.net, x, 6, 0));
        const float *yb = sh_net_output(b.net), *ya = sh_net_output(a.net);
        double worst = 0;
        for (int i = 0; i < 12; i++) {
            worst = fmax(worst, fabs(first[i] - yb[i]));
            worst = fmax(worst, fabs(ya[i] - yb[12 + i]));
        }
        CHECK(worst < 1e-6, "%s: 2 x 3 steps differ from 6 steps by %g", kind, worst);
        /* and a reset state forgets: the second batch alone differs from its carried run */
        sh_net_reset_state(a.net);
        CHECK_OK(sh_net_forward(a.net, x + 12, 3, 0));
        worst = 0;
        for (int i = 0; i < 12; i++) worst = fmax(worst, fabs(sh_net_output(a.net)[i] - yb[12 + i]));
        CHECK(worst > 1e-6, "%s: the state made no difference", kind);
        tn_free(&a);
        tn_free(&b);
    }
}

/* Darknet's own rnn.cfg ([rnn] with batch_normalize=1, hidden unused as in Debian's
 * Darknet) builds, trains a step and infers with the rolling statistics it updated. */
static void darknet_rnn_cfg_runs(void)
{
    const char *path = "/usr/share/darknet/cfg/rnn.cfg";
    if (access(path, R_OK) != 0) {
        printf("test_layer_rnn: no %s (darknet not installed); skipped\n", path);
        return;
    }
    sh_net *n = NULL;
    CHECK_OK(sh_net_load(path, 2, 1, &n));
    if (!n) return;
    CHECK(sh_net_nlayers(n) == 5, "%d layers", sh_net_nlayers(n));
    float x[2 * 256] = {0};
    x['a'] = 1.0f;
    x[256 + 'b'] = 1.0f;
    int32_t y[2] = {'b', 'c'};
    CHECK_OK(sh_net_forward(n, x, 2, 1));
    float loss = sh_net_loss(n, y);
    CHECK(isfinite(loss) && loss > 0, "loss %g", loss);
    CHECK_OK(sh_net_backward(n, NULL, NULL));
    size_t nstats = 0;
    float *st = sh_net_stats(n, &nstats);
    double moved = 0;
    for (size_t i = 0; i < nstats; i++) moved += fabs(st[i] - (i % 2 ? 1.0 : 0.0));
    CHECK(nstats > 0 && moved > 0, "rolling statistics did not move (%zu)", nstats);
    CHECK_OK(sh_net_forward(n, x, 2, 0));
    int finite = 1;
    for (int i = 0; i < 2 * 256; i++) finite &= isfinite(sh_net_output(n)[i]);
    CHECK(finite, "inference output is not finite");
    sh_net_destroy(n);
}

static void bad_keys_are_refused_with_line(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"[net]\ninputs=4\n[lstm]\noutputs=3\n[softmax]\n", "test.cfg:4"},
        {"[net]\ninputs=4\n[gru]\noutput=3\nbatch_normalize=1\n[softmax]\n", "batch_normalize"},
        {"[net]\ninputs=4\n[rnn]\nhidden=3\noutput=2\nshortcut=1\n[softmax]\n", "shortcut"},
        {"[net]\ninputs=4\ntime_steps=0\n[lstm]\noutput=3\n[softmax]\n", "time_steps"},
        {"[net]\ninputs=4\n[rnn]\nhidden=3\nactivation=swish\n[softmax]\n", "swish"},
        {"[net]\ninputs=4\n[gru]\noutput=3\nform=keras\n[softmax]\n", "test.cfg:5: [gru] form=keras"},
        {"[net]\ninputs=4\n[gru]\noutput=3\ntanh=1\n[softmax]\n", "add form=darknet"},
        {"[net]\ninputs=4\n[gru]\nform=darknet\ntanh=2\n[softmax]\n", "tanh"},
        {"[net]\ninputs=4\n[gru]\nform=darknet\nbatch_normalize=1\n[softmax]\n", "batch_normalize"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sh_cfg *cfg = NULL;
        sh_net *n = NULL;
        shoal_result rc = sh_cfg_parse(cases[i].text, "test.cfg", &cfg);
        if (rc == SHOAL_OK) rc = sh_net_create(cfg, 0, 1, &n);
        CHECK(rc == SHOAL_ERR_FORMAT, "case %zu: %s", i, shoal_result_name(rc));
        CHECK(strstr(shoal_last_error(), cases[i].want) != NULL, "case %zu: error \"%s\" lacks %s",
              i, shoal_last_error(), cases[i].want);
        sh_net_destroy(n);
        sh_cfg_destroy(cfg);
    }
}

int main(void)
{
    check_begin("test_layer_rnn", 120);
    RUN(gradients_through_time_match_finite_differences);
    RUN(two_threads_agree_with_one);
    RUN(stream_and_column_splits_match_one_thread_bit_for_bit);
    RUN(state_carries_from_batch_to_batch);
    RUN(darknet_rnn_cfg_runs);
    RUN(bad_keys_are_refused_with_line);
    return check_end();
}
