/* test_darknet_gru.c — proves [gru] form=darknet (src/nn/layer_gru_darknet.c) against
 * Darknet's gru_layer.c, and its .weights layout (darknet_weights.c): shoal's file reads back
 * bit for bit and in Darknet's transposed form, and shoal's forward equals Darknet's
 * equations on the file's six sublayers (logistic and tanh=1 candidates). Where
 * /usr/bin/darknet is installed: a file Darknet writes (`darknet partial`) re-saves byte for
 * byte, and `darknet rnn vec` gives shoal's hidden state within 1e-4 on Darknet's file, on
 * one shoal wrote and on one `shoal train --save-darknet` wrote; Darknet's own gru.cfg is
 * refused in one line telling the user to add form=darknet, and with it `shoal generate
 * --sampler darknet` prints what `darknet rnn generate` prints. A [gru] in PyTorch's form
 * is refused for reading and writing. Without darknet those checks print one line and pass. */
#include "base/err.h"
#include "dn_check.h"
#include "train/tiny_data.h"

static char dir[256];

/* Two layers: H = 20 (a full gate block and a partial one), then 7. */
static void two_layer_cfg(char *text, size_t nbytes, int tanh_n)
{
    snprintf(text, nbytes, "[net]\nbatch=6\ninputs=5\ntime_steps=3\n\n"
             "[gru]\noutput=20\nform=darknet\ntanh=%d\n\n[gru]\noutput=7\nform=darknet\ntanh=%d\n",
             tanh_n, tanh_n);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Darknet's forward_gru_layer for one row: w holds the layer's six sublayers as the file
 * does (wz, wr, wh on the state, then uz, ur, uh on the input, each biases then weights);
 * h (hn) moves on one step (a GRU has no c). */
static void dn_gru_row(const float *w, int in, int hn, int tanh_n, const double *x, double *h,
                       double *c)
{
    (void)c;
    const float *sub[6];
    for (int s = 0; s < 6; s++) {
        sub[s] = w;
        w += hn + hn * (s < 3 ? hn : in);
    }
    double pre[6][64], q[64], hp[64];
    memcpy(hp, h, (size_t)hn * sizeof *h);
    for (int s = 0; s < 6; s++) {
        if (s == 2) continue; /* wh: on r h, below */
        int cols = s < 3 ? hn : in;
        const double *v = s < 3 ? hp : x;
        for (int j = 0; j < hn; j++) {
            double a = sub[s][j];
            for (int k = 0; k < cols; k++) a += (double)sub[s][hn + j * cols + k] * v[k];
            pre[s][j] = a;
        }
    }
    for (int j = 0; j < hn; j++) q[j] = sigmoid(pre[4][j] + pre[1][j]) * hp[j];
    for (int j = 0; j < hn; j++) {
        double a = sub[2][j];
        for (int k = 0; k < hn; k++) a += (double)sub[2][hn + j * hn + k] * q[k];
        double z = sigmoid(pre[3][j] + pre[0][j]), act_in = pre[5][j] + a;
        double n = tanh_n ? tanh(act_in) : sigmoid(act_in);
        h[j] = z * hp[j] + (1 - z) * n;
    }
}

static void weights_round_trip_and_darknet_equations(void)
{
    for (int tanh_n = 0; tanh_n < 2; tanh_n++) {
        char text[256], p1[512], p2[512], p3[512];
        two_layer_cfg(text, sizeof text, tanh_n);
        sh_net *a = dn_build(text, 2, 1), *b = build(text, 2), *t = build(text, 3);
        CHECK(a && b && t, "build: %s", shoal_last_error());
        if (!a || !b || !t) return;
        randomize(a, 17);
        snprintf(p1, sizeof p1, "%s/gru.weights", dir);
        snprintf(p2, sizeof p2, "%s/gru2.weights", dir);
        snprintf(p3, sizeof p3, "%s/gru-t.weights", dir);
        CHECK_OK(sh_darknet_weights_save(a, p1, 11));
        CHECK(file_nbytes(p1) == 20 + 4 * (long)sh_net_nparams(a), "%ld bytes for %zu "
              "parameters", file_nbytes(p1), sh_net_nparams(a));
        uint64_t seen = 0;
        CHECK_OK(sh_darknet_weights_load(b, p1, &seen));
        CHECK(seen == 11, "seen %llu", (unsigned long long)seen);
        CHECK(memcmp(sh_net_params(a), sh_net_params(b), sh_net_nparams(a) * 4) == 0,
              "params differ");
        CHECK_OK(sh_darknet_weights_save(b, p2, seen));
        CHECK(files_equal(p1, p2, 0, 0), "re-saved file differs");
        size_t nf = 0;
        float *w = read_floats(p1, &nf);
        CHECK(w && nf == sh_net_nparams(a), "%zu floats", nf);
        if (w && nf == sh_net_nparams(a)) {
            dn_check_transposed(a, t, w, 6, p3);
            dn_check_equations(a, w, 6, dn_gru_row, tanh_n, tanh_n ? "[gru] tanh=1" : "[gru]");
        }
        free(w);
        sh_net_destroy(a);
        sh_net_destroy(b);
        sh_net_destroy(t);
    }
}

/* A character model: 256 inputs, a [gru] of DN_VEC_UNITS units, Darknet's form. */
static void char_cfg(char *text, size_t nbytes, const char *form)
{
    snprintf(text, nbytes, "[net]\ninputs=256\nbatch=1\ntime_steps=1\n\n[gru]\noutput=%d\n%s\n\n"
             "[connected]\noutput=256\nactivation=linear\n\n[softmax]\n", DN_VEC_UNITS, form);
}

static void darknet_agrees_on_gru_weights(void)
{
    if (!have_darknet()) {
        printf("test_darknet_gru: %s missing: Darknet comparisons skipped\n", DARKNET);
        return;
    }
    char text[512];
    char_cfg(text, sizeof text, "form=darknet");
    dn_agrees_on_rnn_weights(dir, text, "gru");
    char_cfg(text, sizeof text, "form=darknet\ntanh=1");
    dn_agrees_on_rnn_weights(dir, text, "gru-tanh");
}

/* PyTorch's form (no form key) is refused for reading and writing, in one line naming the
 * layer and the key to add, before `shoal train --save-darknet` takes a step; with
 * form=darknet the same run writes a file that gives Darknet shoal's hidden state. */
static void pytorch_form_is_refused_and_darknets_trains(void)
{
    char text[512], w[512], cmd[2048], out[256], cfg_path[512], data[2048], ckpt[600], said[4096];
    char_cfg(text, sizeof text, "");
    sh_net *n = build(text, 1);
    CHECK(n != NULL, "build: %s", shoal_last_error());
    if (!n) return;
    snprintf(w, sizeof w, "%s/gru-pt.weights", dir);
    CHECK_RC(sh_darknet_weights_save(n, w, 0), SHOAL_ERR_INVALID);
    const char *e = shoal_last_error(), *nl = strchr(e, '\n'); /* then the breadcrumbs */
    CHECK(strstr(e, "layer 0 (gru 0, cfg line 6)") && strstr(e, "add form=darknet") &&
          (!nl || nl > strstr(e, "add form=darknet")), "refusal: %s", e);
    CHECK(file_nbytes(w) < 0, "the refused save created %s", w);
    for (size_t i = 0; i + 1 < sizeof data; i++) data[i] = "the quick brown fox jumps\n"[i % 26];
    data[sizeof data - 1] = 0;
    tiny_write_file(dir, "gru.txt", data);
    snprintf(ckpt, sizeof ckpt, "%s/gru.ckpt", dir);
    for (int form = 0; form < 2; form++) {
        char_cfg(text, sizeof text, form ? "form=darknet" : "");
        snprintf(cfg_path, sizeof cfg_path, "%s/gru-train%d.cfg", dir, form);
        tiny_write_file(dir, strrchr(cfg_path, '/') + 1, text);
        snprintf(cmd, sizeof cmd, "%s train %s --data %s/gru.txt --max-steps 3 --threads 2 "
                 "--quiet --save %s --save-darknet %s 2>&1", sh_test_shoal_bin(), cfg_path, dir,
                 ckpt, w);
        int rc = sh_test_run(cmd, said, sizeof said);
        if (!form) { /* the checkpoint due at the end is never written */
            CHECK(rc == 1 && strstr(said, "add form=darknet") && file_nbytes(ckpt) < 0 &&
                      file_nbytes(w) < 0, "train --save-darknet with PyTorch's [gru]: exit %d, "
                  "checkpoint %ld bytes: %s", rc, file_nbytes(ckpt), said);
            continue;
        }
        CHECK(rc == 0 && file_nbytes(w) == 20 + 4 * (long)sh_net_nparams(n),
              "train --save-darknet with form=darknet: exit %d, %ld bytes: %s", rc,
              file_nbytes(w), said);
        if (have_darknet()) dn_compare_rnn_vec(text, cfg_path, w, "a trained [gru] form=darknet");
    }
    if (have_darknet()) { /* Darknet's file for the PyTorch-form cfg has the same size */
        snprintf(cmd, sizeof cmd, "%s partial %s/gru-train1.cfg '' %s 1000 >/dev/null 2>&1",
                 DARKNET, dir, w);
        CHECK(sh_test_run(cmd, out, sizeof out) == 0, "darknet partial failed");
        CHECK_RC(sh_darknet_weights_load(n, w, NULL), SHOAL_ERR_INVALID);
        CHECK(strstr(shoal_last_error(), "add form=darknet") != NULL, "load refusal: %s",
              shoal_last_error());
    }
    sh_net_destroy(n);
}

/* Darknet's own gru.cfg (three [gru] of 256): as shipped, a Darknet file for it is refused in
 * one line naming the layer and the key; with form=darknet added to each [gru], shoal
 * generates from that file, byte for byte, what Darknet generates. */
static void darknet_gru_cfg_generates_as_darknet_does(void)
{
    const char *zoo = "/usr/share/darknet/cfg/gru.cfg";
    if (!have_darknet() || access(zoo, R_OK) != 0) {
        printf("test_darknet_gru: no darknet or %s: skipped\n", zoo);
        return;
    }
    char w[512], cfg_path[512], dn[512], sh[512], cmd[3072], out[4096];
    snprintf(w, sizeof w, "%s/gru-zoo.weights", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/gru-zoo.cfg", dir);
    snprintf(dn, sizeof dn, "%s/gru-zoo-darknet.txt", dir);
    snprintf(sh, sizeof sh, "%s/gru-zoo-shoal.txt", dir);
    snprintf(cmd, sizeof cmd, "%s partial %s '' %s 1000 >/dev/null 2>&1", DARKNET, zoo, w);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0, "darknet partial %s failed", zoo);
    snprintf(cmd, sizeof cmd, "%s generate %s --weights %s --length 10 2>&1", sh_test_shoal_bin(),
             zoo, w);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "layer 0 (gru 0, cfg line 15)") &&
              strstr(out, "add form=darknet") && strchr(out, '\n') == out + strlen(out) - 1,
          "gru.cfg as shipped: exit %d, want 1 and one line: %s", rc, out);
    snprintf(cmd, sizeof cmd, "sed 's/^\\[gru\\]$/[gru]\\nform=darknet/' %s > %s", zoo, cfg_path);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0, "sed: %s", out);
    snprintf(cmd, sizeof cmd, "%s rnn generate %s %s -srand 7 -len 200 -seed 'The ' > %s "
             "2>/dev/null", DARKNET, cfg_path, w, dn);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0, "darknet rnn generate failed");
    snprintf(cmd, sizeof cmd, "%s generate %s --weights %s --sampler darknet --sample-seed 7 "
             "--length 200 --seed 'The ' > %s", sh_test_shoal_bin(), cfg_path, w, sh);
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "shoal generate: exit %d: %s", rc, out);
    CHECK(file_nbytes(dn) == 4 + 200 + 1 && files_equal(dn, sh, 0, 0),
          "gru.cfg form=darknet: darknet wrote %ld bytes, shoal %ld, and they differ",
          file_nbytes(dn), file_nbytes(sh));
}

int main(void)
{
    check_begin("test_darknet_gru", 120);
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not make a scratch directory");
        return check_end();
    }
    RUN(weights_round_trip_and_darknet_equations);
    RUN(darknet_agrees_on_gru_weights);
    RUN(pytorch_form_is_refused_and_darknets_trains);
    RUN(darknet_gru_cfg_generates_as_darknet_does);
    tiny_remove_dir(dir);
    return check_end();
}
