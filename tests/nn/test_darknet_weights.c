/* test_darknet_weights.c — proves src/nn/darknet_weights.c and the --weights/--save-darknet
 * flags: a save/load round trip is bitwise; Darknet's older header (int32 images seen) and
 * its transposed connected weights are read; short, long and missing files are refused
 * naming the file and the layer. Where /usr/bin/darknet is installed, against Darknet
 * itself: weights shoal writes give, through `darknet classifier fout`, the probabilities
 * shoal's forward gives for the same image (within 1e-4), and weights Darknet writes
 * (`darknet partial`) load into shoal, give Darknet's outputs, and save back byte for byte.
 * [lstm]: shoal's forward equals Darknet's equations on the file's eight sublayers, and
 * `darknet rnn vec` gives shoal's hidden state on Darknet's file and on shoal's ([gru]:
 * test_darknet_gru.c); `shoal generate --sampler darknet` prints what `darknet rnn generate`
 * prints. Without darknet those checks print one line and pass. */
#include <math.h>
#include <stdio.h>

#include "base/err.h"
#include "base/util.h"
#include "dn_check.h"
#include "lib/run.h"
#include "nn/layer.h"
#include "train/tiny_data.h"

static char dir[256];

/* conv+BN, maxpool, grouped conv+BN, shortcut of different shapes (stride 2), 1x1 conv,
 * reorg, connected+BN, connected, softmax: every layout a classifier's weights use. */
static const char cls_cfg[] =
    "[net]\nbatch=1\nchannels=3\nheight=16\nwidth=16\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nbatch_normalize=1\nactivation=leaky\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=8\nsize=3\npad=1\ngroups=2\nbatch_normalize=1\nactivation=leaky\n"
    "[shortcut]\nfrom=-3\nactivation=linear\n"
    "[convolutional]\nfilters=16\nsize=1\nactivation=leaky\n"
    "[reorg]\nstride=2\n"
    "[connected]\noutput=12\nbatch_normalize=1\nactivation=leaky\n"
    "[connected]\noutput=10\nactivation=linear\n"
    "[softmax]\n";

/* Without batch norm: Darknet's own random initialisation leaves rolling variances at 0,
 * which its CPU batch norm divides by sqrt(0) + 1e-6 and shoal by sqrt(0 + 1e-5). */
static const char plain_cfg[] =
    "[net]\nbatch=1\nchannels=3\nheight=16\nwidth=16\n"
    "[convolutional]\nfilters=8\nsize=3\nstride=2\npad=1\nactivation=leaky\n"
    "[convolutional]\nfilters=8\nsize=3\npad=1\ngroups=4\nactivation=relu\n"
    "[shortcut]\nfrom=-2\n"
    "[connected]\noutput=10\nactivation=linear\n"
    "[softmax]\n";

static void save_then_load_is_bitwise(void)
{
    sh_net *a = build(cls_cfg, 1), *b = build(cls_cfg, 2);
    CHECK(a && b, "build: %s", shoal_last_error());
    if (!a || !b) return;
    randomize(a, 5);
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/a.weights", dir);
    snprintf(p2, sizeof p2, "%s/b.weights", dir);
    CHECK_OK(sh_darknet_weights_save(a, p1, 12345));
    CHECK(file_nbytes(p1) == (long)sh_darknet_weights_nbytes(a), "file %ld bytes, nbytes %llu",
          file_nbytes(p1), (unsigned long long)sh_darknet_weights_nbytes(a));
    /* header + every parameter and statistic, nothing else */
    size_t ns = 0;
    sh_net_stats(a, &ns);
    CHECK(sh_darknet_weights_nbytes(a) == 20 + 4 * (sh_net_nparams(a) + ns), "%llu bytes",
          (unsigned long long)sh_darknet_weights_nbytes(a));
    uint64_t seen = 0;
    CHECK_OK(sh_darknet_weights_load(b, p1, &seen));
    CHECK(seen == 12345, "images seen %llu", (unsigned long long)seen);
    CHECK(memcmp(sh_net_params(a), sh_net_params(b), sh_net_nparams(a) * 4) == 0, "params differ");
    CHECK(memcmp(sh_net_stats(a, NULL), sh_net_stats(b, NULL), ns * 4) == 0, "stats differ");
    CHECK_OK(sh_darknet_weights_save(b, p2, 12345));
    CHECK(files_equal(p1, p2, 0, 0), "re-saved file differs");
    sh_net_destroy(a);
    sh_net_destroy(b);
}

/* Darknet's order, written here by hand: conv = biases, [scales, mean, var], weights;
 * connected = biases, weights, [scales, mean, var]. transpose: connected weights (I, K). */
static void write_by_hand(sh_net *n, const char *path, int major, int minor, int transpose)
{
    FILE *f = fopen(path, "wb");
    int32_t head[3] = {major, minor, 0};
    fwrite(head, 4, 3, f);
    if (major < 1000 && minor < 1000 && major * 10 + minor >= 2) {
        uint64_t s = 7;
        fwrite(&s, 8, 1, f);
    } else {
        int32_t s = 7;
        fwrite(&s, 4, 1, f);
    }
    const float *p = sh_net_params(n), *st = sh_net_stats(n, NULL);
    for (int i = 0; i < sh_net_nlayers(n); i++) {
        sh_layer *l = sh_net_layer(n, i);
        size_t k = l->b_count;
        int conv = strcmp(l->ops->cfg_name, "convolutional") == 0;
        int dense = strcmp(l->ops->cfg_name, "connected") == 0;
        if (!conv && !dense) continue;
        fwrite(p + l->b_off, 4, k, f);
        if (dense) {
            if (transpose)
                for (size_t in = 0; in < l->inputs; in++)
                    for (size_t o = 0; o < k; o++) fwrite(p + l->w_off + o * l->inputs + in, 4, 1, f);
            else
                fwrite(p + l->w_off, 4, l->w_count, f);
        }
        if (l->batch_normalize) {
            fwrite(p + l->s_off, 4, k, f);
            fwrite(st + l->stat_off, 4, 2 * k, f);
        }
        if (conv) fwrite(p + l->w_off, 4, l->w_count, f);
    }
    fclose(f);
}

static void reads_old_headers_and_transposed_connected_weights(void)
{
    sh_net *a = build(cls_cfg, 1);
    if (!a) return;
    randomize(a, 9);
    size_t ns = 0;
    sh_net_stats(a, &ns);
    /* {major, minor, transposed}: Darknet's headers, and the one scripts/fuzz.sh found whose
     * major*10 overflowed an int (UBSan; Darknet reads it as transposed, 32-bit count) */
    int cases[][3] = {{0, 2, 0}, {0, 1, 0}, {0, 1001, 1}, {795046515, 0, 1}};
    for (int c = 0; c < 4; c++) {
        char path[512];
        snprintf(path, sizeof path, "%s/hand%d.weights", dir, c);
        write_by_hand(a, path, cases[c][0], cases[c][1], cases[c][2]);
        sh_net *b = build(cls_cfg, 3);
        uint64_t seen = 0;
        CHECK_OK(sh_darknet_weights_load(b, path, &seen));
        CHECK(seen == 7, "version %d.%d: seen %llu", cases[c][0], cases[c][1],
              (unsigned long long)seen);
        CHECK(memcmp(sh_net_params(a), sh_net_params(b), sh_net_nparams(a) * 4) == 0,
              "version %d.%d transpose %d: params differ", cases[c][0], cases[c][1], cases[c][2]);
        CHECK(memcmp(sh_net_stats(a, NULL), sh_net_stats(b, NULL), ns * 4) == 0,
              "version %d.%d: stats differ", cases[c][0], cases[c][1]);
        sh_net_destroy(b);
    }
    sh_net_destroy(a);
}

static void wrong_files_are_refused_naming_file_and_layer(void)
{
    sh_net *a = build(cls_cfg, 1), *other = build(plain_cfg, 1);
    if (!a || !other) return;
    char full[512], cmd[4096], out[64];
    snprintf(full, sizeof full, "%s/full.weights", dir);
    CHECK_OK(sh_darknet_weights_save(a, full, 0));
    long n = file_nbytes(full);
    snprintf(cmd, sizeof cmd, "head -c %ld %s > %s/short.weights && cat %s %s > %s/long.weights",
             n - 100, full, dir, full, full, dir);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0, "making the files");
    char path[600];
    snprintf(path, sizeof path, "%s/short.weights", dir);
    CHECK_RC(sh_darknet_weights_load(a, path, NULL), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "short.weights") && strstr(shoal_last_error(), "layer 7"),
          "short: %s", shoal_last_error());
    snprintf(path, sizeof path, "%s/long.weights", dir);
    CHECK_RC(sh_darknet_weights_load(a, path, NULL), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "long.weights") && strstr(shoal_last_error(), "another cfg"),
          "long: %s", shoal_last_error());
    CHECK_RC(sh_darknet_weights_load(other, full, NULL), SHOAL_ERR_FORMAT);
    snprintf(path, sizeof path, "%s/none.weights", dir);
    CHECK_RC(sh_darknet_weights_load(a, path, NULL), SHOAL_ERR_IO);
    CHECK(strstr(shoal_last_error(), "none.weights") != NULL, "missing: %s", shoal_last_error());
    sh_net_destroy(a);
    sh_net_destroy(other);
}

/* A 16x16 PPM of random bytes and shoal's input for it: planes R, G, B of byte / 255. */
static void write_image(const char *path, float *x)
{
    FILE *f = fopen(path, "wb");
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

/* Darknet's probabilities for the image: `darknet classifier fout` prints them all (%g). */
static int darknet_probs(const char *cfg_path, const char *weights, float *probs)
{
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && printf 'classes=10\\n' > d.data && echo %s/img.ppm > list.txt && "
             "%s classifier fout d.data %s %s list.txt 2>/dev/null", dir, dir, DARKNET, cfg_path,
             weights);
    int rc = sh_test_run(cmd, out, sizeof out);
    const char *p = strchr(out, '\t');
    int n = 0;
    while (rc == 0 && p && n < 10) {
        probs[n++] = strtof(p + 1, NULL);
        p = strchr(p + 1, '\t');
    }
    CHECK(rc == 0 && n == 10, "darknet classifier fout: exit %d, %d values: %s", rc, n, out);
    return n == 10;
}

/* Darknet's hierarchy_predictions (tree.c) with only_leaves=0: each class's probability
 * times its parent's, in order; fout applies it when the net has a WordTree. NULL: none. */
static const int *tree_parent;

static void compare_with_darknet(sh_net *n, const char *cfg_path, const char *weights, const char *what)
{
    float x[768], dn[10];
    char img[512];
    snprintf(img, sizeof img, "%s/img.ppm", dir);
    write_image(img, x);
    if (!darknet_probs(cfg_path, weights, dn)) return;
    CHECK_OK(sh_net_forward(n, x, 1, 0));
    float p[10];
    memcpy(p, sh_net_output(n), sizeof p);
    for (int k = 0; tree_parent && k < 10; k++)
        if (tree_parent[k] >= 0) p[k] *= p[tree_parent[k]];
    float lo = 1, hi = 0, worst = 0;
    for (int k = 0; k < 10; k++) {
        worst = fabsf(p[k] - dn[k]) > worst ? fabsf(p[k] - dn[k]) : worst;
        CHECK(fabsf(p[k] - dn[k]) <= 1e-4f, "%s: class %d: shoal %.6f, darknet %.6f", what, k,
              p[k], dn[k]);
        lo = p[k] < lo ? p[k] : lo;
        hi = p[k] > hi ? p[k] : hi;
    }
    CHECK(hi - lo > 0.02f, "%s: the probabilities %g..%g are too even to tell nets apart", what, lo, hi);
    if (getenv("CHECK_VERBOSE"))
        fprintf(stderr, "  %s: probabilities %.4f..%.4f, largest difference from Darknet %.2g\n",
                what, lo, hi, worst);
}

static void darknet_reads_what_shoal_writes(void)
{
    if (!have_darknet()) {
        printf("test_darknet_weights: %s missing: Darknet comparisons skipped\n", DARKNET);
        return;
    }
    sh_net *a = build(cls_cfg, 1);
    if (!a) return;
    randomize(a, 21);
    char cfg_path[512], w[512];
    snprintf(cfg_path, sizeof cfg_path, "%s/cls.cfg", dir);
    snprintf(w, sizeof w, "%s/shoal.weights", dir);
    tiny_write_file(dir, "cls.cfg", cls_cfg);
    CHECK_OK(sh_darknet_weights_save(a, w, 0));
    compare_with_darknet(a, cfg_path, w, "shoal's weights");
    sh_net_destroy(a);
}

static void shoal_reads_what_darknet_writes(void)
{
    if (!have_darknet()) return;
    const char *texts[] = {cls_cfg, plain_cfg};
    const char *names[] = {"cls.cfg", "plain.cfg"};
    for (int t = 0; t < 2; t++) {
        char cfg_path[512], dw[512], sw[512], cmd[2048], out[256];
        snprintf(cfg_path, sizeof cfg_path, "%s/%s", dir, names[t]);
        snprintf(dw, sizeof dw, "%s/darknet%d.weights", dir, t);
        snprintf(sw, sizeof sw, "%s/resaved%d.weights", dir, t);
        tiny_write_file(dir, names[t], texts[t]);
        snprintf(cmd, sizeof cmd, "%s partial %s '' %s 1000 >/dev/null 2>&1", DARKNET, cfg_path, dw);
        CHECK(sh_test_run(cmd, out, sizeof out) == 0, "darknet partial %s failed", cfg_path);
        sh_net *n = build(texts[t], 4);
        if (!n) continue;
        CHECK_OK(sh_darknet_weights_load(n, dw, NULL));
        CHECK_OK(sh_darknet_weights_save(n, sw, 0));
        CHECK(files_equal(dw, sw, 0, 0), "%s: Darknet's file and shoal's re-save differ", names[t]);
        /* Darknet's batch norm divides by sqrt(var) + 1e-6, shoal by sqrt(var + 1e-5): with
         * the zero variances of a fresh Darknet net they part; the plain net must agree. */
        if (t == 1) compare_with_darknet(n, cfg_path, dw, "Darknet's weights");
        sh_net_destroy(n);
    }
}

/* [rnn] (Darknet's three connected sublayers, with and without batch norm): shoal's file
 * holds exactly its parameters and statistics and reads back bitwise; Debian's rnn.cfg file
 * written by Darknet has the size shoal expects and re-saves byte for byte. */
static const char rnn_cfg[] =
    "[net]\nbatch=8\ninputs=16\ntime_steps=4\n\n"
    "[rnn]\nbatch_normalize=1\noutput=12\nhidden=10\nactivation=leaky\n\n"
    "[rnn]\noutput=9\nactivation=tanh\n\n"
    "[connected]\noutput=16\nactivation=linear\n\n[softmax]\n\n[cost]\ntype=sse\n";

static void rnn_weights_round_trip(void)
{
    sh_net *a = build(rnn_cfg, 1), *b = build(rnn_cfg, 2);
    CHECK(a && b, "build: %s", shoal_last_error());
    if (!a || !b) return;
    randomize(a, 7);
    char p1[512], p2[512], cmd[2048], out[256];
    snprintf(p1, sizeof p1, "%s/rnn.weights", dir);
    snprintf(p2, sizeof p2, "%s/rnn2.weights", dir);
    CHECK_OK(sh_darknet_weights_save(a, p1, 3));
    size_t ns = 0;
    sh_net_stats(a, &ns);
    CHECK(file_nbytes(p1) == 20 + 4 * (long)(sh_net_nparams(a) + ns), "%ld bytes", file_nbytes(p1));
    CHECK_OK(sh_darknet_weights_load(b, p1, NULL));
    CHECK(memcmp(sh_net_params(a), sh_net_params(b), sh_net_nparams(a) * 4) == 0, "params differ");
    CHECK(memcmp(sh_net_stats(a, NULL), sh_net_stats(b, NULL), ns * 4) == 0, "stats differ");
    sh_net_destroy(a);
    sh_net_destroy(b);
    const char *zoo = "/usr/share/darknet/cfg/rnn.cfg";
    if (!have_darknet() || access(zoo, R_OK) != 0) return;
    snprintf(cmd, sizeof cmd, "cd %s && %s partial %s '' %s 1000 >/dev/null 2>&1", dir, DARKNET, zoo, p1);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0, "darknet partial %s failed", zoo);
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    CHECK_OK(sh_cfg_load(zoo, &cfg));
    if (cfg) CHECK_OK(sh_net_create_owning(cfg, 1, 1, &n));
    if (!n) return;
    CHECK(file_nbytes(p1) == (long)sh_darknet_weights_nbytes(n), "Darknet wrote %ld bytes, shoal expects %llu",
          file_nbytes(p1), (unsigned long long)sh_darknet_weights_nbytes(n));
    CHECK_OK(sh_darknet_weights_load(n, p1, NULL));
    CHECK_OK(sh_darknet_weights_save(n, p2, 0));
    CHECK(files_equal(p1, p2, 12, 20), "rnn.cfg: Darknet's file and shoal's re-save differ");
    sh_net_destroy(n);
}

/* [lstm]: Darknet's eight connected sublayers (wi, wf, wo, wg on h; ui, uf, uo, ug on x), each
 * biases then weights. H = 20 and 7 leave gate blocks narrower than 16 units. */
static const char lstm_cfg[] = "[net]\nbatch=6\ninputs=5\ntime_steps=3\n\n"
                               "[lstm]\noutput=20\n\n[lstm]\noutput=7\n";

static double dn_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Darknet's forward_lstm_layer for one row, with the sublayers as the file holds them at w
 * (advanced past them): pre-activation of sublayer s, unit j = bias + W row j . (s < 4 ? h : x). */
static void dn_lstm_row(const float *w, int in, int hn, int arg, const double *x, double *h,
                        double *c)
{
    (void)arg;
    double pre[8][64], hprev[64];
    memcpy(hprev, h, (size_t)hn * sizeof *h);
    for (int s = 0; s < 8; s++) {
        int cols = s < 4 ? hn : in;
        const double *v = s < 4 ? hprev : x;
        const float *bias = w, *m = w + hn;
        for (int j = 0; j < hn; j++) {
            double a = bias[j];
            for (int k = 0; k < cols; k++) a += (double)m[j * cols + k] * v[k];
            pre[s][j] = a;
        }
        w += hn + hn * cols;
    }
    for (int j = 0; j < hn; j++) {
        double i = dn_sigmoid(pre[0][j] + pre[4][j]), f = dn_sigmoid(pre[1][j] + pre[5][j]);
        double o = dn_sigmoid(pre[2][j] + pre[6][j]), g = tanh(pre[3][j] + pre[7][j]);
        c[j] = f * c[j] + i * g;
        h[j] = o * tanh(c[j]);
    }
}

static void lstm_weights_round_trip_and_darknet_equations(void)
{
    sh_net *a = dn_build(lstm_cfg, 2, 1), *b = build(lstm_cfg, 2), *t = build(lstm_cfg, 3);
    CHECK(a && b && t, "build: %s", shoal_last_error());
    if (!a || !b || !t) return;
    randomize(a, 17);
    char p1[512], p2[512], p3[512];
    snprintf(p1, sizeof p1, "%s/lstm.weights", dir);
    snprintf(p2, sizeof p2, "%s/lstm2.weights", dir);
    snprintf(p3, sizeof p3, "%s/lstm-t.weights", dir);
    CHECK_OK(sh_darknet_weights_save(a, p1, 11));
    CHECK(file_nbytes(p1) == 20 + 4 * (long)sh_net_nparams(a), "%ld bytes for %zu parameters",
          file_nbytes(p1), sh_net_nparams(a));
    uint64_t seen = 0;
    CHECK_OK(sh_darknet_weights_load(b, p1, &seen));
    CHECK(seen == 11, "seen %llu", (unsigned long long)seen);
    CHECK(memcmp(sh_net_params(a), sh_net_params(b), sh_net_nparams(a) * 4) == 0, "params differ");
    CHECK_OK(sh_darknet_weights_save(b, p2, seen));
    CHECK(files_equal(p1, p2, 0, 0), "re-saved file differs");
    size_t nf = 0;
    float *w = read_floats(p1, &nf);
    CHECK(w && nf == sh_net_nparams(a), "%zu floats", nf);
    if (w && nf == sh_net_nparams(a)) {
        dn_check_transposed(a, t, w, 8, p3);
        dn_check_equations(a, w, 8, dn_lstm_row, 0, "[lstm]");
    }
    free(w);
    sh_net_destroy(a);
    sh_net_destroy(b);
    sh_net_destroy(t);
}

/* Against Darknet: a fresh [lstm] net Darknet writes (`darknet partial`) reads into shoal and
 * re-saves byte for byte, and on that file and on one shoal writes `darknet rnn vec` gives
 * the hidden state shoal computes. */
static const char lstm_char_cfg[] = "[net]\ninputs=256\nbatch=1\ntime_steps=1\n\n"
                                    "[lstm]\noutput=20\n\n"
                                    "[connected]\noutput=256\nactivation=linear\n\n[softmax]\n";

static void darknet_agrees_on_lstm_weights(void)
{
    if (have_darknet()) dn_agrees_on_rnn_weights(dir, lstm_char_cfg, "lstm");
}

/* `shoal generate --sampler darknet --sample-seed N` prints, byte for byte, what `darknet rnn
 * generate -srand N` prints from the same .weights file ([rnn] and [lstm] character nets). */
static const char rnn_char_cfg[] = "[net]\ninputs=256\nbatch=1\ntime_steps=1\n\n"
                                   "[rnn]\noutput=32\nactivation=leaky\n\n"
                                   "[connected]\noutput=256\nactivation=linear\n\n[softmax]\n";

static void generate_samples_as_darknet_does(void)
{
    if (!have_darknet()) return;
    const char *texts[] = {rnn_char_cfg, lstm_char_cfg};
    const char *names[] = {"gen-rnn", "gen-lstm"};
    for (int t = 0; t < 2; t++) {
        char cfg_name[64], cfg_path[512], w[512], dn[512], sh[512], cmd[3072], out[4096];
        snprintf(cfg_name, sizeof cfg_name, "%s.cfg", names[t]);
        snprintf(cfg_path, sizeof cfg_path, "%s/%s", dir, cfg_name);
        snprintf(w, sizeof w, "%s/%s.weights", dir, names[t]);
        snprintf(dn, sizeof dn, "%s/%s-darknet.txt", dir, names[t]);
        snprintf(sh, sizeof sh, "%s/%s-shoal.txt", dir, names[t]);
        tiny_write_file(dir, cfg_name, texts[t]);
        sh_net *n = build(texts[t], 3 + (uint64_t)t);
        if (!n) continue;
        CHECK_OK(sh_darknet_weights_save(n, w, 0));
        sh_net_destroy(n);
        snprintf(cmd, sizeof cmd, "%s rnn generate %s %s -srand 7 -len 400 -seed 'The ' > %s "
                 "2>/dev/null", DARKNET, cfg_path, w, dn);
        CHECK(sh_test_run(cmd, out, sizeof out) == 0, "%s: darknet rnn generate failed", names[t]);
        snprintf(cmd, sizeof cmd, "%s generate %s --weights %s --sampler darknet --sample-seed 7 "
                 "--length 400 --seed 'The ' > %s", sh_test_shoal_bin(), cfg_path, w, sh);
        int rc = sh_test_run(cmd, out, sizeof out);
        CHECK(rc == 0, "%s: shoal generate: exit %d: %s", names[t], rc, out);
        CHECK(file_nbytes(dn) == 4 + 400 + 1 && files_equal(dn, sh, 0, 0),
              "%s: darknet wrote %ld bytes, shoal %ld, and they differ", names[t],
              file_nbytes(dn), file_nbytes(sh));
    }
}

/* Darknet's hierarchical softmax (darknet9000's): one softmax per WordTree group. */
static void darknet_agrees_on_the_tree_softmax(void)
{
    if (!have_darknet()) return;
    static const int parent[10] = {-1, -1, 0, 0, 0, 1, 1, 5, 5, 5};
    char tree[600], text[1024], cfg_path[600], w[600];
    snprintf(tree, sizeof tree, "%s/t.tree", dir);
    tiny_write_file(dir, "t.tree", "a -1\nb -1\nc 0\nd 0\ne 0\nf 1\ng 1\nh 5\ni 5\nj 5\n");
    snprintf(text, sizeof text, "[net]\nbatch=1\nchannels=3\nheight=16\nwidth=16\n"
             "[convolutional]\nfilters=10\nsize=3\nstride=2\npad=1\nactivation=leaky\n"
             "[avgpool]\n[softmax]\ngroups=1\ntree=%s\n", tree);
    tiny_write_file(dir, "tree.cfg", text);
    snprintf(cfg_path, sizeof cfg_path, "%s/tree.cfg", dir);
    snprintf(w, sizeof w, "%s/tree.weights", dir);
    sh_net *n = build(text, 1);
    CHECK(n != NULL, "tree net: %s", shoal_last_error());
    if (!n) return;
    randomize(n, 31);
    for (size_t i = 0; i < sh_net_nparams(n); i++) sh_net_params(n)[i] *= 4; /* spread them */
    CHECK_OK(sh_darknet_weights_save(n, w, 0));
    tree_parent = parent;
    compare_with_darknet(n, cfg_path, w, "WordTree softmax");
    tree_parent = NULL;
    sh_net_destroy(n);
}

/* The flags: train from Darknet weights, save Darknet weights, test and time read them. */
static void cli_flags_read_and_write_darknet_weights(void)
{
    char args[2048], out[8192], cmd[2600];
    sh_net *n = NULL;
    char cfg_path[512];
    snprintf(cfg_path, sizeof cfg_path, "%s/mlp.cfg", dir);
    CHECK_OK(sh_net_load(cfg_path, 16, 9, &n));
    if (!n) return;
    char init[512];
    snprintf(init, sizeof init, "%s/init.weights", dir);
    CHECK_OK(sh_darknet_weights_save(n, init, 0));
    sh_net_destroy(n);
    snprintf(args, sizeof args,
             "train %s --data %s --max-steps 30 --threads 1 --quiet --weights %s "
             "--save-darknet %s/trained.weights", cfg_path, dir, init, dir);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", sh_test_shoal_bin(), args);
    int rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "%s: exit %d: %s", args, rc, out);
    snprintf(cmd, sizeof cmd, "%s test %s --weights %s/trained.weights --data %s --threads 1 --json",
             sh_test_shoal_bin(), cfg_path, dir, dir);
    rc = sh_test_run(cmd, out, sizeof out);
    const char *acc = strstr(out, "\"accuracy\":");
    CHECK(rc == 0 && acc && strtod(acc + 11, NULL) > 0.5, "test on the saved Darknet weights: "
          "exit %d: %s", rc, out);
    /* --weights is honoured on 2 data-parallel ranks and by parameter servers: one step from
     * the trained weights keeps their accuracy, one step from the seed's does not reach it */
    double acc_from[3];
    for (int k = 0; k < 3; k++) {
        char weights[600] = "";
        if (k) snprintf(weights, sizeof weights, "--weights %s/trained.weights%s", dir,
                        k == 2 ? " --ps --servers 1" : "");
        snprintf(cmd, sizeof cmd, "%s train %s --data %s --max-steps 1 --threads 1 -n 2 "
                 "--scaling strong --quiet --json %s 2>/dev/null", sh_test_shoal_bin(),
                 cfg_path, dir, weights);
        rc = sh_test_run(cmd, out, sizeof out);
        const char *a = strstr(out, "\"accuracy\":");
        acc_from[k] = a ? strtod(a + 11, NULL) : -1;
        CHECK(rc == 0 && a, "train -n 2 %s: exit %d: %s", k ? "--weights" : "", rc, out);
    }
    CHECK(acc_from[1] > 0.5 && acc_from[1] > acc_from[0] && acc_from[2] > 0.5,
          "accuracy after one step: from --weights %.3f (data parallel), %.3f (--ps), from "
          "the seed %.3f", acc_from[1], acc_from[2], acc_from[0]);
    snprintf(cmd, sizeof cmd, "%s time %s --weights %s/trained.weights --iterations 1 --threads 1",
             sh_test_shoal_bin(), cfg_path, dir);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0, "time --weights: %s", out);
    /* a feature extractor (no softmax): time runs it, train says what it needs */
    tiny_write_file(dir, "feat.cfg", "[net]\nbatch=4\nwidth=8\nheight=8\nchannels=1\n"
                    "[convolutional]\nfilters=2\nsize=3\npad=1\nactivation=relu\n"
                    "[maxpool]\nsize=2\nstride=2\n");
    snprintf(cmd, sizeof cmd, "%s time %s/feat.cfg --iterations 1 --threads 1 2>&1",
             sh_test_shoal_bin(), dir);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0 && strstr(out, "Average Forward"),
          "time without softmax: %s", out);
    snprintf(cmd, sizeof cmd, "%s train %s/feat.cfg --data %s --max-steps 1 --threads 1 2>&1",
             sh_test_shoal_bin(), dir, dir);
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "feat.cfg:11: the network ends with [maxpool]") &&
          strstr(out, "[softmax]") && strchr(out, '\n') == out + strlen(out) - 1,
          "train without softmax: exit %d, want 1 and one line: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s time %s/conv.cfg --weights %s/trained.weights 2>&1",
             sh_test_shoal_bin(), dir, dir);
    rc = sh_test_run(cmd, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "trained.weights") && strchr(out, '\n') == out + strlen(out) - 1,
          "weights of another cfg: exit %d, want 1 and one line naming the file: %s", rc, out);
}

int main(void)
{
    check_begin("test_darknet_weights", 120);
    if (tiny_make_dir(dir, sizeof dir)) {
        CHECK(0, "could not write the tiny dataset");
        return check_end();
    }
    RUN(save_then_load_is_bitwise);
    RUN(reads_old_headers_and_transposed_connected_weights);
    RUN(wrong_files_are_refused_naming_file_and_layer);
    RUN(darknet_reads_what_shoal_writes);
    RUN(shoal_reads_what_darknet_writes);
    RUN(darknet_agrees_on_the_tree_softmax);
    RUN(rnn_weights_round_trip);
    RUN(lstm_weights_round_trip_and_darknet_equations);
    RUN(darknet_agrees_on_lstm_weights);
    RUN(generate_samples_as_darknet_does);
    RUN(cli_flags_read_and_write_darknet_weights);
    tiny_remove_dir(dir);
    return check_end();
}
