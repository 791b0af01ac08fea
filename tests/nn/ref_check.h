/* ref_check.h — helpers shared by the tests of the unlabelled nets' layers against their
 * references (tests/nn/unlabelled_ref.py: PyTorch, scikit-learn) and against Darknet: write
 * a case (int32 header, float32 arrays), run the reference, read its floats back, compare;
 * Darknet's layer table and .weights size for a cfg (`darknet partial`); one layer's case against
 * its reference on one thread and two (ref_layer_queue, ref_layer_check); cases queued
 * for one run of the reference (ref_queue, ref_run_queued).
 * Static functions only; included by tests/nn/test_layer_deconv.c, test_layer_upsample.c,
 * test_layer_local.c, test_cost.c and test_layer_rbm.c. */
#ifndef SH_REF_CHECK_H
#define SH_REF_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "lib/run.h"
#include "nn/cfg.h"
#include "nn/darknet_weights.h"
#include "nn/layer.h"
#include "nn/net.h"

#define REF_PY "/usr/bin/python3 tests/nn/unlabelled_ref.py"
#define REF_DARKNET "/usr/bin/darknet"

static char ref_dir[256];

static inline void ref_begin(void)
{
    snprintf(ref_dir, sizeof ref_dir, "/tmp/shoal-ref-XXXXXX");
    if (!mkdtemp(ref_dir)) ref_dir[0] = 0;
}

static inline void ref_end(void)
{
    char cmd[512], out[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ref_dir);
    if (ref_dir[0]) (void)sh_test_run(cmd, out, sizeof out);
}

/* 1 when /usr/bin/python3 imports every module named (space-separated). */
static inline int ref_have_python(const char *modules)
{
    char cmd[256], out[64];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c 'import %s' 2>/dev/null && echo yes", modules);
    return sh_test_run(cmd, out, sizeof out) == 0 && strncmp(out, "yes", 3) == 0;
}

static inline int ref_have_darknet(void) { return access(REF_DARKNET, X_OK) == 0; }

static inline void ref_random(float *x, size_t count, uint64_t seed, float lo, float hi)
{
    sh_rng r;
    sh_rng_seed(&r, seed);
    for (size_t i = 0; i < count; i++) x[i] = lo + (hi - lo) * sh_rng_float(&r);
}

/* A case file being written: the header first, then arrays. */
typedef struct {
    FILE *f;
    char path[512];
} ref_case;

static inline int ref_open(ref_case *c, const char *name, const int *words, int nwords)
{
    snprintf(c->path, sizeof c->path, "%s/%s.in", ref_dir, name);
    c->f = fopen(c->path, "wb");
    if (c->f) fwrite(words, sizeof *words, (size_t)nwords, c->f);
    return c->f != NULL;
}

static inline void ref_put(ref_case *c, const float *v, size_t count)
{
    if (c->f) fwrite(v, sizeof *v, count, c->f);
}

/* Cases queued for one run of the reference: each run imports torch, which takes seconds. */
static char ref_queued[16384];

/* Close the case and queue it for the next ref_run_queued as `kind`. */
static inline void ref_queue(ref_case *c, const char *kind)
{
    fclose(c->f);
    c->f = NULL;
    char out_path[600];
    snprintf(out_path, sizeof out_path, "%s.out", c->path);
    remove(out_path); /* a case that fails leaves no floats of an earlier run behind */
    size_t at = strlen(ref_queued);
    snprintf(ref_queued + at, sizeof ref_queued - at, " %s %s %s.out", kind, c->path, c->path);
}

/* Run unlabelled_ref.py once over every queued case; a failure is a failed check naming its
 * output. The queue is empty after. */
static inline void ref_run_queued(void)
{
    char cmd[sizeof ref_queued + 128], msg[4096];
    snprintf(cmd, sizeof cmd, REF_PY "%s 2>&1", ref_queued);
    int rc = sh_test_run(cmd, msg, sizeof msg);
    CHECK(rc == 0, "unlabelled_ref.py%s: %s", ref_queued, msg);
    ref_queued[0] = 0;
}

/* A queued case's floats once the reference ran (malloc'd, count in *n), or NULL. */
static inline float *ref_result(const ref_case *c, size_t *n)
{
    char out_path[600];
    snprintf(out_path, sizeof out_path, "%s.out", c->path);
    *n = 0;
    FILE *f = fopen(out_path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long nbytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = malloc((size_t)nbytes + 4);
    *n = v ? fread(v, sizeof *v, (size_t)nbytes / sizeof *v, f) : 0;
    fclose(f);
    return v;
}

/* Close, run `unlabelled_ref.py kind` on this case alone, and return its floats (malloc'd,
 * count in *n), or NULL with a failed check naming the output. */
static inline float *ref_run(ref_case *c, const char *kind, size_t *n)
{
    ref_queue(c, kind);
    ref_run_queued();
    return ref_result(c, n);
}

/* The largest |a - b| / (1 + |b|) over count values, and check it is within tol. */
static inline double ref_compare(const char *what, const float *a, const float *b, size_t count, double tol)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (d > worst || d != d) worst = d, at = i;
    }
    CHECK(worst <= tol, "%s: element %zu: shoal %.7g, reference %.7g (relative %.3g > %.1g)", what, at,
          count ? a[at] : 0.0, count ? b[at] : 0.0, worst, tol);
    return worst;
}

/* A net from cfg text at this batch (it owns the cfg); NULL with a failed check. */
static inline sh_net *ref_net(const char *text, int batch, uint64_t seed)
{
    sh_cfg *cfg = NULL;
    sh_net *n = NULL;
    shoal_result rc = sh_cfg_parse(text, "ref.cfg", &cfg);
    if (rc == SHOAL_OK) rc = sh_net_create_owning(cfg, batch, seed, &n);
    CHECK(rc == SHOAL_OK, "building the net: %s", shoal_last_error());
    return rc == SHOAL_OK ? n : NULL;
}

/* Darknet builds text's net (batch=1) and writes its weights: each layer's "C x H x W" after
 * "->" in its table must be shoal's output shape (a "%5d" or "%4d x" row), and the file as
 * many bytes as shoal's .weights for the same net. */
static inline void ref_darknet_agrees(const char *name, const char *text)
{
    if (!ref_have_darknet()) return;
    char cfg_path[512], table[600], cmd[2048], out[256];
    snprintf(cfg_path, sizeof cfg_path, "%s/%s.cfg", ref_dir, name);
    snprintf(table, sizeof table, "%s/%s.table", ref_dir, name);
    FILE *f = fopen(cfg_path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s partial %s '' /dev/stdout 1000000 2>%s | wc -c", REF_DARKNET, cfg_path, table);
    int rc = sh_test_run(cmd, out, sizeof out);
    long long dn_bytes = atoll(out);
    CHECK(rc == 0 && dn_bytes > 16, "%s: darknet partial: exit %d, %s", name, rc, out);
    sh_net *n = ref_net(text, 1, 1);
    if (!n) return;
    CHECK((long long)sh_darknet_weights_nbytes(n) == dn_bytes, "%s: shoal's .weights would be %llu bytes, "
          "Darknet wrote %lld", name, (unsigned long long)sh_darknet_weights_nbytes(n), dn_bytes);
    f = fopen(table, "r");
    char line[1024];
    int rows = 0;
    while (f && fgets(line, sizeof line, f)) {
        int idx, at = 0;
        if (sscanf(line, " %d %n", &idx, &at) != 1 || at == 0 || idx >= sh_net_nlayers(n)) continue;
        rows++;
        const char *arrow = strrchr(line, '>');
        int dw, dh, dc, c, h, w;
        sh_net_layer_shape(n, idx, &c, &h, &w);
        if (arrow && sscanf(arrow + 1, " %d x %d x %d", &dw, &dh, &dc) == 3)
            CHECK(dw == w && dh == h && dc == c, "%s: layer %d: shoal %dx%dx%d (C x H x W), Darknet: %s", name,
                  idx, c, h, w, line + at);
    }
    if (f) fclose(f);
    CHECK(rows == sh_net_nlayers(n), "%s: Darknet printed %d layers, shoal has %d", name, rows, sh_net_nlayers(n));
    sh_net_destroy(n);
}

/* Save text's net with random parameters as .weights, load it into a net built with another
 * seed, save again: the two files are the same bytes and the parameters equal. */
static inline void ref_weights_round_trip(const char *name, const char *text)
{
    sh_net *a = ref_net(text, 1, 1), *b = ref_net(text, 1, 2);
    if (!a || !b) {
        sh_net_destroy(a);
        sh_net_destroy(b);
        return;
    }
    ref_random(sh_net_params(a), sh_net_nparams(a), 5, -1, 1);
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/%s-a.weights", ref_dir, name);
    snprintf(p2, sizeof p2, "%s/%s-b.weights", ref_dir, name);
    CHECK_OK(sh_darknet_weights_save(a, p1, 7));
    CHECK_OK(sh_darknet_weights_load(b, p1, NULL));
    CHECK(memcmp(sh_net_params(a), sh_net_params(b), sh_net_nparams(a) * sizeof(float)) == 0,
          "%s: parameters differ after a .weights round trip", name);
    CHECK_OK(sh_darknet_weights_save(b, p2, 7));
    char cmd[1200], out[64];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s && echo same", p1, p2);
    CHECK(sh_test_run(cmd, out, sizeof out) == 0 && !strncmp(out, "same", 4), "%s: the re-saved file differs", name);
    sh_net_destroy(a);
    sh_net_destroy(b);
}

/* One layer's case against unlabelled_ref.py's `kind`: text is a net of that layer alone and
 * a [cost] type=sse, words its 8 numbers (N C H W F S stride pad; N the batch). ref_layer_queue
 * draws the input, target and weights and queues the case (i: its number, for its file); after
 * ref_run_queued, ref_layer_check runs shoal on one thread and on two, each compared with the
 * reference: output, loss, the weight and bias gradients, the input gradient (within 1e-5);
 * shape gets the layer's output C, H, W for the caller's own checks. */
typedef struct {
    const char *kind;
    char text[512];
    int words[8];
    ref_case rc;
    float *x, *t;   /* (N, C, H, W), (N, output) */
} ref_layer;

static inline size_t ref_layer_nx(const ref_layer *l)
{
    return (size_t)l->words[0] * l->words[1] * l->words[2] * l->words[3];
}

static inline void ref_layer_queue(ref_layer *l, const char *kind, const char *text, const int words[8], int i)
{
    memset(l, 0, sizeof *l);
    l->kind = kind;
    snprintf(l->text, sizeof l->text, "%s", text);
    memcpy(l->words, words, sizeof l->words);
    sh_net *n = ref_net(text, words[0], 3);
    if (!n) return;
    int c, h, w;
    sh_net_layer_shape(n, 0, &c, &h, &w);
    size_t nx = ref_layer_nx(l), ny = (size_t)words[0] * c * h * w, np = sh_net_nparams(n);
    l->x = malloc(nx * 4);
    l->t = malloc(ny * 4);
    ref_random(l->x, nx, 1, -1, 1);
    ref_random(l->t, ny, 2, -1, 1);
    ref_random(sh_net_params(n), np, 4, -0.5f, 0.5f);
    char name[64];
    snprintf(name, sizeof name, "%s-%d", kind, i);
    if (ref_open(&l->rc, name, words, 8)) {
        ref_put(&l->rc, l->x, nx);
        ref_put(&l->rc, l->t, ny);
        ref_put(&l->rc, sh_net_params(n), np); /* in shoal's order, which the reference reads */
        ref_queue(&l->rc, kind);
    }
    sh_net_destroy(n);
}

static inline void ref_layer_check(ref_layer *l, int shape[3])
{
    size_t got = 0;
    float *ref = l->x && l->rc.path[0] ? ref_result(&l->rc, &got) : NULL;
    shape[0] = shape[1] = shape[2] = 0;
    for (int threads = 1; l->x && threads <= 2; threads++) {
        sh_net *n = ref_net(l->text, l->words[0], 3);
        if (!n) break;
        sh_net_set_threads(n, threads);
        sh_net_layer_shape(n, 0, &shape[0], &shape[1], &shape[2]);
        size_t nx = ref_layer_nx(l), ny = (size_t)l->words[0] * shape[0] * shape[1] * shape[2];
        size_t np = sh_net_nparams(n);
        if (threads == 1) CHECK(got == ny + 1 + np + nx, "%s: the reference gave %zu floats", l->kind, got);
        ref_random(sh_net_params(n), np, 4, -0.5f, 0.5f);
        CHECK_OK(sh_net_set_target(n, l->t));
        sh_net_want_input_delta(n, 1);
        CHECK_OK(sh_net_forward(n, l->x, l->words[0], 1));
        float loss = sh_net_loss(n, NULL);
        CHECK_OK(sh_net_backward(n, NULL, NULL));
        if (ref && got == ny + 1 + np + nx) {
            char what[128];
            snprintf(what, sizeof what, "%s S=%d stride=%d pad=%d, %d thread(s): output", l->kind, l->words[5],
                     l->words[6], l->words[7], threads);
            ref_compare(what, sh_net_output(n), ref, ny, 1e-5);
            ref_compare("loss", &loss, ref + ny, 1, 1e-5);
            ref_compare("weight and bias gradients", sh_net_grads(n), ref + ny + 1, np, 1e-5);
            ref_compare("input gradient", sh_net_input_delta(n), ref + ny + 1 + np, nx, 1e-5);
        }
        sh_net_destroy(n);
    }
    free(ref);
    free(l->x);
    free(l->t);
    l->x = l->t = NULL;
}

#endif
