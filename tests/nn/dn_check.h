/* dn_check.h — helpers shared by the tests against Darknet's .weights files: build a net
 * from cfg text, random weights and statistics, compare and read the files, and compare a
 * recurrent layer's hidden state with `darknet rnn vec`.
 * Static functions only; included by tests/nn/test_darknet_weights.c and
 * test_darknet_gru.c. */
#ifndef SH_DN_CHECK_H
#define SH_DN_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/run.h"
#include "nn/darknet_weights.h"
#include "check.h"
#include "nn/layer.h"

#define DARKNET "/usr/bin/darknet"

static inline void dn_random(float *x, size_t count, uint64_t seed, float lo, float hi)
{
    sh_rng r;
    sh_rng_seed(&r, seed);
    for (size_t i = 0; i < count; i++) x[i] = lo + (hi - lo) * sh_rng_float(&r);
}

static inline int have_darknet(void) { return access(DARKNET, X_OK) == 0; }

/* A net that owns its cfg, with the given thread count. */
static inline sh_net *dn_build(const char *text, int threads, uint64_t seed)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    if (sh_cfg_parse(text, "cls.cfg", &cfg) != SHOAL_OK) return NULL;
    if (sh_net_create_owning(cfg, threads, seed, &n) != SHOAL_OK) return NULL;
    return n;
}
static inline sh_net *build(const char *text, uint64_t seed) { return dn_build(text, 1, seed); }

/* Random weights, biases and scales; rolling means in [-0.5, 0.5], variances in [0.5, 1.5]. */
static inline void randomize(sh_net *n, uint64_t seed)
{
    dn_random(sh_net_params(n), sh_net_nparams(n), seed, -0.5f, 0.5f);
    size_t ns = 0;
    float *st = sh_net_stats(n, &ns);
    for (int i = 0; i < sh_net_nlayers(n); i++) {
        sh_layer *l = sh_net_layer(n, i);
        size_t half = l->stat_count / 2;
        dn_random(st + l->stat_off, half, seed + (uint64_t)i, -0.5f, 0.5f);
        dn_random(st + l->stat_off + half, half, seed + 100 + (uint64_t)i, 0.5f, 1.5f);
    }
}

/* 1 when the two files hold the same bytes, those in [skip_from, skip_to) aside. */
static inline int files_equal(const char *a, const char *b, long skip_from, long skip_to)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    for (long pos = 0; same; pos++) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb && !(pos >= skip_from && pos < skip_to)) same = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static inline long file_nbytes(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* The floats after a 0.2 header (20 bytes); NULL when there are none. */
static inline float *read_floats(const char *path, size_t *count)
{
    long nbytes = file_nbytes(path);
    FILE *f = fopen(path, "rb");
    float *p = nbytes > 20 ? malloc((size_t)nbytes) : NULL;
    *count = 0;
    if (f && p && fread(p, 1, (size_t)nbytes, f) == (size_t)nbytes) *count = (size_t)(nbytes - 20) / 4;
    if (f) fclose(f);
    if (!*count) {
        free(p);
        return NULL;
    }
    memmove(p, (char *)p + 20, *count * 4);
    return p;
}

/* Darknet's `rnn vec`: the first layer's output (%g each, DN_VEC_UNITS of them) after feeding
 * the line's bytes, then a space, one byte per forward (batch 1, one time step); shoal does
 * the same from the same file, and the two hidden states agree within 1e-4. */
#define DN_VEC_UNITS 20
static inline void dn_compare_rnn_vec(const char *cfg_text, const char *cfg_path,
                                      const char *weights, const char *what)
{
    const char *line = "Shoal-RNN.weights";
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd, "echo '%s' | %s rnn vec %s %s -seed '' 2>/dev/null", line,
             DARKNET, cfg_path, weights);
    int rc = sh_test_run(cmd, out, sizeof out);
    float dn[DN_VEC_UNITS] = {0};
    int nv = 0;
    const char *p = strchr(out, ',');
    while (rc == 0 && p && nv < DN_VEC_UNITS) {
        dn[nv++] = strtof(p + 1, NULL);
        p = strchr(p + 1, ',');
    }
    CHECK(rc == 0 && nv == DN_VEC_UNITS, "%s: darknet rnn vec: exit %d, %d values: %s", what,
          rc, nv, out);
    sh_net *n = build(cfg_text, 5);
    if (nv != DN_VEC_UNITS || !n) {
        sh_net_destroy(n);
        return;
    }
    CHECK_OK(sh_darknet_weights_load(n, weights, NULL));
    float x[256] = {0};
    size_t len = strlen(line);
    for (size_t i = 0; i <= len; i++) {
        int ch = i < len ? (unsigned char)line[i] : ' ';
        x[ch] = 1;
        CHECK_OK(sh_net_forward(n, x, 1, 0));
        x[ch] = 0;
    }
    const float *h = sh_net_layer(n, 0)->out;
    float worst = 0, largest = 0;
    for (int j = 0; j < DN_VEC_UNITS; j++) {
        CHECK(fabsf(h[j] - dn[j]) <= 1e-4f, "%s: unit %d: shoal %.6f, darknet %.6f", what, j,
              h[j], dn[j]);
        worst = fabsf(h[j] - dn[j]) > worst ? fabsf(h[j] - dn[j]) : worst;
        largest = fabsf(h[j]) > largest ? fabsf(h[j]) : largest;
    }
    CHECK(largest > 0.01f, "%s: h up to %g only: too small to tell nets apart", what, largest);
    if (getenv("CHECK_VERBOSE"))
        fprintf(stderr, "  %s: |h| up to %.4f, largest difference from Darknet %.2g\n", what,
                largest, worst);
    sh_net_destroy(n);
}

/* A fresh net Darknet writes (`darknet partial`) for cfg_text (first layer recurrent with
 * DN_VEC_UNITS units, 256 inputs) reads into shoal and re-saves byte for byte, and on that
 * file and on one shoal writes `darknet rnn vec` gives the hidden state shoal computes. Files
 * go to dir as name-*.  */
static inline void dn_agrees_on_rnn_weights(const char *dir, const char *cfg_text,
                                            const char *name)
{
    char cfg_path[512], dw[512], rw[512], sw[512], cmd[2048], out[256], what[96];
    snprintf(cfg_path, sizeof cfg_path, "%s/%s-char.cfg", dir, name);
    snprintf(dw, sizeof dw, "%s/%s-darknet.weights", dir, name);
    snprintf(rw, sizeof rw, "%s/%s-resaved.weights", dir, name);
    snprintf(sw, sizeof sw, "%s/%s-shoal.weights", dir, name);
    FILE *f = fopen(cfg_path, "w");
    CHECK(f && fputs(cfg_text, f) >= 0 && fclose(f) == 0, "cannot write %s", cfg_path);
    snprintf(cmd, sizeof cmd, "%s partial %s '' %s 1000 >/dev/null 2>&1", DARKNET, cfg_path, dw);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0, "darknet partial %s failed", cfg_path);
    sh_net *n = build(cfg_text, 4);
    if (!n) return;
    CHECK(file_nbytes(dw) == (long)sh_darknet_weights_nbytes(n), "%s: Darknet wrote %ld bytes, "
          "shoal expects %llu", name, file_nbytes(dw),
          (unsigned long long)sh_darknet_weights_nbytes(n));
    uint64_t seen = 0;
    CHECK_OK(sh_darknet_weights_load(n, dw, &seen));
    CHECK_OK(sh_darknet_weights_save(n, rw, seen));
    CHECK(files_equal(dw, rw, 0, 0), "%s: Darknet's file and shoal's re-save differ", name);
    snprintf(what, sizeof what, "Darknet's [%s] weights", name);
    dn_compare_rnn_vec(cfg_text, cfg_path, dw, what);
    randomize(n, 23);
    CHECK_OK(sh_darknet_weights_save(n, sw, 0));
    snprintf(what, sizeof what, "shoal's [%s] weights", name);
    dn_compare_rnn_vec(cfg_text, cfg_path, sw, what);
    sh_net_destroy(n);
}

/* The two-layer recurrent nets of the file tests: 5 inputs, a layer of 20 units, one of 7,
 * batches of 3 steps x 2 streams (rows t*B + b). A layer's file holds nsub connected
 * sublayers, the first half on the state (H x H), the rest on the input (H x I). */
static const int dn_hs[2] = {20, 7}, dn_ins[2] = {5, 20};

/* Darknet's forward of one layer for one row: w its sublayers as the file holds them, h (and
 * c where the layer has one) moved on one step; arg: the layer's option (GRU: tanh=). */
typedef void (*dn_row_fn)(const float *w, int in, int hn, int arg, const double *x, double *h,
                          double *c);

/* The floats w of a's file written again in Darknet's transposed form (minor 1001: every
 * weight matrix (H, cols) stored as (cols, H), images seen as int32) to p3 read into t as
 * a's parameters. */
static inline void dn_check_transposed(const sh_net *a, sh_net *t, const float *w, int nsub,
                                       const char *p3)
{
    FILE *f = fopen(p3, "wb");
    int32_t head[4] = {0, 1001, 0, 11};
    fwrite(head, 4, 4, f);
    for (int li = 0; li < 2; li++)
        for (int s = 0; s < nsub; s++) {
            int hn = dn_hs[li], cols = s < nsub / 2 ? hn : dn_ins[li];
            fwrite(w, 4, (size_t)hn, f);
            for (int k = 0; k < cols; k++)
                for (int j = 0; j < hn; j++) fwrite(w + hn + j * cols + k, 4, 1, f);
            w += hn + hn * cols;
        }
    fclose(f);
    uint64_t seen = 0;
    CHECK_OK(sh_darknet_weights_load(t, p3, &seen));
    CHECK(seen == 11, "transposed file: seen %llu", (unsigned long long)seen);
    CHECK(memcmp(sh_net_params((sh_net *)a), sh_net_params(t), sh_net_nparams(a) * 4) == 0,
          "transposed file: params differ");
}

/* a's forward on two batches (the state carried between them) is Darknet's equations (row)
 * on the file's floats w, within 1e-5, and large enough to tell the gates apart. */
static inline void dn_check_equations(sh_net *a, const float *w, int nsub, dn_row_fn row,
                                      int arg, const char *what)
{
    double h[2][2][64] = {{{0}}}, c[2][2][64] = {{{0}}};
    const float *w2 = w + nsub / 2 * (20 + 20 * 20) + nsub / 2 * (20 + 20 * 5);
    float x[6 * 5];
    double worst = 0, largest = 0;
    for (int pass = 0; pass < 2; pass++) {
        dn_random(x, 30, 40 + (uint64_t)pass, -1.0f, 1.0f);
        CHECK_OK(sh_net_forward(a, x, 6, 0));
        const float *y = sh_net_output(a);
        for (int r = 0; r < 6; r++) {
            int s = r % 2;
            double xin[5];
            for (int k = 0; k < 5; k++) xin[k] = x[r * 5 + k];
            row(w, 5, 20, arg, xin, h[0][s], c[0][s]);
            row(w2, 20, 7, arg, h[0][s], h[1][s], c[1][s]);
            for (int j = 0; j < 7; j++) {
                worst = fmax(worst, fabs(y[r * 7 + j] - h[1][s][j]));
                largest = fmax(largest, fabs(h[1][s][j]));
            }
        }
    }
    CHECK(worst <= 1e-5, "%s: shoal's forward and Darknet's equations on the file differ by %g",
          what, worst);
    CHECK(largest > 0.05, "%s: outputs up to %g only: too small to tell the gates apart", what,
          largest);
}

#endif
