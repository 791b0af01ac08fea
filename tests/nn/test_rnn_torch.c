/* test_rnn_torch.c — proves src/nn/layer_lstm.c and layer_gru.c against PyTorch's nn.LSTM
 * and nn.GRU, and layer_rnn.c against Darknet's [rnn] equations written in torch ops, with
 * the same weights, input, labels and starting state: the softmax output, the final state
 * and every gradient (weights, biases, input) within 1e-5, on one thread with dense input
 * and on two with one-hot rows (the layers' lookup path). The reference runs in double
 * (tests/nn/rnn_torch.py under /usr/bin/python3); without torch the test says so in one line
 * and passes. */
#include <stdio.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/run.h"
#include "nn/net.h"
#include "nn/recurrent.h"

static void fill_random(float *x, size_t count, uint64_t seed, float lo, float hi)
{
    sh_rng r;
    sh_rng_seed(&r, seed);
    for (size_t i = 0; i < count; i++) x[i] = lo + (hi - lo) * sh_rng_float(&r);
}

#define TOL 1e-5

enum { IN = 5, H = 20, K = 6, T = 4, B = 3 };

static int have_torch(void)
{
    char out[256];
    return sh_test_run("/usr/bin/python3 -c 'import torch' 2>/dev/null && echo yes", out,
                       sizeof out) == 0 && strncmp(out, "yes", 3) == 0;
}

typedef struct {
    float *v;
    size_t n, cap;
} fbuf;

static void put(fbuf *b, const float *v, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n);
        b->v = realloc(b->v, b->cap * sizeof *b->v);
    }
    memcpy(b->v + b->n, v, n * sizeof *v);
    b->n += n;
}

/* rows of a fused gate matrix in PyTorch's order (gate q, unit j at row q*H + j) */
static void put_gates(fbuf *b, const float *w, int ng, int cols)
{
    for (int q = 0; q < ng; q++)
        for (int j = 0; j < H; j++) put(b, w + (size_t)sh_rnn_gate_col(H, ng, q, j) * cols, (size_t)cols);
}

static double worst_gates(const float *ours, const float *ref, int ng, int cols)
{
    double worst = 0;
    for (int q = 0; q < ng; q++)
        for (int j = 0; j < H; j++)
            for (int c = 0; c < cols; c++)
                worst = fmax(worst, fabs(ours[(size_t)sh_rnn_gate_col(H, ng, q, j) * cols + c] -
                                         ref[((size_t)q * H + j) * cols + c]));
    return worst;
}

static double worst_plain(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    return worst;
}

typedef struct {
    int kind, nthreads;
    sh_net *n;
    float loss;
    char in_path[64], out_path[64];
} run;

/* Build the net, write the reference's input file, and run shoal's forward and backward. */
static void prepare(run *rn, int kind, int nthreads)
{
    rn->kind = kind;
    rn->nthreads = nthreads;
    rn->n = NULL;
    static const char *names[] = {"lstm", "gru", "rnn"};
    char text[512];
    if (kind == 2)
        snprintf(text, sizeof text, "[net]\ninputs=%d\nbatch=%d\ntime_steps=%d\n[rnn]\nhidden=%d\n"
                 "output=%d\nactivation=tanh\n[softmax]\n", IN, B, T, H, K);
    else
        snprintf(text, sizeof text, "[net]\ninputs=%d\nbatch=%d\ntime_steps=%d\n[%s]\noutput=%d\n"
                 "[softmax]\n", IN, B, T, names[kind], H);
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_parse(text, "test.cfg", &cfg));
    if (!cfg) return;
    CHECK_OK(sh_net_create_owning(cfg, B, 13 + (uint64_t)kind, &n));
    if (!n) return;
    sh_net_set_threads(n, nthreads);
    int rows = T * B, nout = kind == 2 ? K : H, ng = kind == 0 ? 4 : 3;
    float x[T * B * IN];
    int32_t y[T * B];
    fill_random(x, sizeof x / sizeof x[0], 21, -1, 1);
    if (nthreads == 2) { /* one-hot rows: the layers' lookup path instead of the product */
        memset(x, 0, sizeof x);
        for (int r = 0; r < T * B; r++) x[r * IN + (r * 3) % IN] = 1.0f;
    }
    for (int i = 0; i < rows; i++) y[i] = (i * 7 + 2) % nout;
    size_t ns = 0;
    float *state = sh_net_state(n, &ns);
    fill_random(state, ns, 22, -0.9f, 0.9f);
    float *p = sh_net_params(n);
    size_t np = sh_net_nparams(n);
    for (size_t i = 0; i < np; i++) p[i] *= 2.0f; /* beyond PyTorch's init: saturating gates too */

    fbuf b = {0};
    int hdr[6] = {kind, IN, H, K, T, B};
    put(&b, (const float *)hdr, 6); /* the header is six int32s, passed as bytes */
    put(&b, x, sizeof x / sizeof x[0]);
    for (int i = 0; i < rows; i++) {
        float f = (float)y[i];
        put(&b, &f, 1);
    }
    if (kind < 2) {
        size_t g = (size_t)ng * H;
        put_gates(&b, p, ng, IN);
        put_gates(&b, p + g * IN, ng, H);
        put_gates(&b, p + g * IN + g * H, ng, 1);
        put_gates(&b, p + g * IN + g * H + g, ng, 1);
        put(&b, state, (size_t)B * H);
        if (kind == 0) put(&b, state + (size_t)B * H, (size_t)B * H);
    } else {
        put(&b, p, np); /* Darknet's layout is the one shoal keeps */
        put(&b, state, (size_t)B * H);
    }
    snprintf(rn->in_path, sizeof rn->in_path, "/tmp/shoal_rnn_torch_in_XXXXXX");
    snprintf(rn->out_path, sizeof rn->out_path, "/tmp/shoal_rnn_torch_out_XXXXXX");
    int fd_in = mkstemp(rn->in_path), fd_out = mkstemp(rn->out_path);
    CHECK(fd_in >= 0 && fd_out >= 0, "mkstemp");
    if (fd_in >= 0) {
        CHECK(write(fd_in, b.v, b.n * sizeof(float)) == (ssize_t)(b.n * sizeof(float)), "write");
        close(fd_in);
    }
    if (fd_out >= 0) close(fd_out);
    free(b.v);

    sh_net_want_input_delta(n, 1);
    CHECK_OK(sh_net_forward(n, x, rows, 1));
    rn->loss = sh_net_loss(n, y);
    CHECK_OK(sh_net_backward(n, NULL, NULL));
    rn->n = n;
}

/* Compare shoal's results with the reference's output file. */
static void check_run(run *rn)
{
    static const char *names[] = {"lstm", "gru", "rnn"};
    char what[64];
    int kind = rn->kind, nout = kind == 2 ? K : H, ng = kind == 0 ? 4 : 3, rows = T * B;
    snprintf(what, sizeof what, "%s, %d thread%s", names[kind], rn->nthreads,
             rn->nthreads > 1 ? "s" : "");
    sh_net *n = rn->n;
    size_t ns = 0, np = sh_net_nparams(n);
    float *state = sh_net_state(n, &ns);
    float loss = rn->loss;
    FILE *f = fopen(rn->out_path, "rb");
    size_t nref = 1 + (size_t)rows * nout + ns + np + (size_t)rows * IN;
    float *ref = calloc(nref + 1, sizeof *ref);
    size_t got = f ? fread(ref, sizeof *ref, nref + 1, f) : 0;
    if (f) fclose(f);
    unlink(rn->in_path);
    unlink(rn->out_path);
    CHECK(got == nref, "%s: reference holds %zu floats, want %zu", what, got, nref);
    if (got == nref) {
        const float *r = ref;
        CHECK(fabs(loss - r[0]) < TOL, "%s: loss %.8g, torch %.8g", what, loss, r[0]);
        r += 1;
        double w = worst_plain(sh_net_output(n), r, (size_t)rows * nout);
        CHECK(w < TOL, "%s: softmax output differs by %g", what, w);
        r += (size_t)rows * nout;
        w = worst_plain(state, r, ns);
        CHECK(w < TOL, "%s: final state differs by %g", what, w);
        r += ns;
        const float *g = sh_net_grads(n);
        if (kind < 2) {
            size_t gg = (size_t)ng * H;
            w = worst_gates(g, r, ng, IN);
            CHECK(w < TOL, "%s: d weight_ih differs by %g", what, w);
            w = worst_gates(g + gg * IN, r + gg * IN, ng, H);
            CHECK(w < TOL, "%s: d weight_hh differs by %g", what, w);
            w = worst_gates(g + gg * IN + gg * H, r + gg * IN + gg * H, ng, 1);
            CHECK(w < TOL, "%s: d bias_ih differs by %g", what, w);
            w = worst_gates(g + gg * IN + gg * H + gg, r + gg * IN + gg * H + gg, ng, 1);
            CHECK(w < TOL, "%s: d bias_hh differs by %g", what, w);
        } else {
            w = worst_plain(g, r, np);
            CHECK(w < TOL, "%s: weight and bias gradients differ by %g", what, w);
        }
        r += np;
        w = worst_plain(sh_net_input_delta(n), r, (size_t)rows * IN);
        CHECK(w < TOL, "%s: input gradient differs by %g", what, w);
    }
    free(ref);
    sh_net_destroy(n);
}

static void outputs_and_gradients_match_pytorch(void)
{
    if (!have_torch()) {
        printf("test_rnn_torch: /usr/bin/python3 has no torch; comparison with PyTorch skipped\n");
        CHECK(1, "skipped");
        return;
    }
    sh_rnn_split_min_macs = 0; /* the 2-thread runs split every step */
    run runs[6];
    char cmd[2048], msg[4096];
    int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/nn/rnn_torch.py");
    for (int i = 0; i < 6; i++) {
        prepare(&runs[i], i / 2, 1 + i % 2);
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s %s", runs[i].in_path,
                        runs[i].out_path);
    }
    snprintf(cmd + len, sizeof cmd - (size_t)len, " 2>&1");
    int rc = sh_test_run(cmd, msg, sizeof msg);
    CHECK(rc == 0, "rnn_torch.py failed: %s", msg);
    for (int i = 0; i < 6; i++)
        if (runs[i].n) check_run(&runs[i]);
}

int main(void)
{
    check_begin("test_rnn_torch", 120);
    RUN(outputs_and_gradients_match_pytorch);
    return check_end();
}
