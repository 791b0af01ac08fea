/* test_net.c — proves src/nn/net.c and src/nn/threads.c: building from cfg text (shapes,
 * parameter layout, decay ranges, errors with path:line and "did you mean"), gradients
 * overwritten not accumulated, ready() called last layer first with each layer's slice,
 * bitwise determinism for a seed and thread count, 1 and 2 threads agreeing, partial
 * batches, a net on another's blocks, hits by rows, and a training step that allocates
 * nothing. */
#include <stdio.h>

#include "nn_check.h"

/* ---- counting allocations (not under sanitizers, which own malloc) ---- */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SH_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(SH_TEST_SANITIZED)
#define COUNTS_MALLOC 0
#else
#define COUNTS_MALLOC 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static volatile int counting;
static volatile long nallocs;
void *malloc(size_t n)
{
    if (counting) nallocs++;
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
    if (counting) nallocs++;
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
    if (counting) nallocs++;
    return __libc_realloc(p, n);
}
int posix_memalign(void **out, size_t align, size_t n)
{
    if (counting) nallocs++;
    *out = __libc_memalign(align, n);
    return *out ? 0 : 12;
}
void *aligned_alloc(size_t align, size_t n)
{
    if (counting) nallocs++;
    return __libc_memalign(align, n);
}
#endif

static const char *lenet =
    "[net]\nbatch=8\nchannels=1\nheight=28\nwidth=28\n"
    "[convolutional]\nfilters=20\nsize=5\nstride=1\nactivation=linear\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[convolutional]\nfilters=50\nsize=5\nstride=1\nactivation=linear\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[connected]\noutput=500\nactivation=relu\n"
    "[connected]\noutput=10\nactivation=linear\n"
    "[softmax]\n[cost]\n";

/* small, but every kind of layer with parameters, several threads' worth of images */
static const char *mixed =
    "[net]\nbatch=6\nchannels=2\nheight=8\nwidth=8\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\npad=1\nactivation=leaky\n"
    "[convolutional]\nfilters=4\nsize=3\npad=1\nactivation=linear\n"
    "[shortcut]\nfrom=-2\nactivation=relu\n"
    "[maxpool]\nsize=2\nstride=2\n"
    "[route]\nlayers=-1\n"
    "[dropout]\nprobability=0.25\n"
    "[connected]\noutput=12\nactivation=tanh\n"
    "[connected]\noutput=5\nactivation=linear\n"
    "[softmax]\n";

static void lenet_shapes_params_and_ranges(void)
{
    test_net t;
    if (!tn_build(&t, lenet, 0, 1)) return;
    static const int want[][3] = {{20, 24, 24}, {20, 12, 12}, {50, 8, 8}, {50, 4, 4},
                                  {500, 1, 1},  {10, 1, 1},   {10, 1, 1}, {10, 1, 1}};
    CHECK(sh_net_nlayers(t.net) == 8, "nlayers %d", sh_net_nlayers(t.net));
    for (int i = 0; i < 8 && i < sh_net_nlayers(t.net); i++) {
        int c, h, w;
        sh_net_layer_shape(t.net, i, &c, &h, &w);
        CHECK(c == want[i][0] && h == want[i][1] && w == want[i][2], "layer %d: %dx%dx%d", i, c,
              h, w);
    }
    CHECK(strcmp(sh_net_layer_name(t.net, 0), "conv 0") == 0 &&
              strcmp(sh_net_layer_name(t.net, 1), "maxpool 1") == 0,
          "names %s, %s", sh_net_layer_name(t.net, 0), sh_net_layer_name(t.net, 1));
    CHECK(sh_net_batch(t.net) == 8, "batch %d", sh_net_batch(t.net));
    CHECK(sh_net_input_count(t.net) == 784, "inputs %d", sh_net_input_count(t.net));
    CHECK(sh_net_nclasses(t.net) == 10, "classes %d", sh_net_nclasses(t.net));
    size_t want_params = (20 * 25 + 20) + (50 * 500 + 50) + (800 * 500 + 500) + (5000 + 10);
    CHECK(sh_net_nparams(t.net) == want_params, "nparams %zu, want %zu", sh_net_nparams(t.net),
          want_params);
    CHECK_NEAR(sh_net_layer_flops(t.net, 0), 20.0 * 25 * 576, 0.5);
    int nr = 0;
    const sh_param_range *r = sh_net_param_ranges(t.net, &nr);
    CHECK(nr == 8, "ranges %d", nr);
    size_t covered = 0;
    for (int i = 0; i < nr; i++) {
        CHECK(r[i].offset == covered, "range %d starts at %zu, want %zu", i, r[i].offset, covered);
        CHECK(r[i].decay == (i % 2 == 0), "range %d decay %d", i, r[i].decay);
        covered += r[i].count;
    }
    CHECK(covered == want_params, "ranges cover %zu", covered);
    size_t off, cnt;
    sh_net_layer_params(t.net, 2, &off, &cnt);
    CHECK(off == 520 && cnt == 25050, "conv 2 slice %zu+%zu", off, cnt);
    sh_net_layer_params(t.net, 1, &off, &cnt);
    CHECK(cnt == 0, "maxpool has %zu params", cnt);
    tn_free(&t);
    /* batch from the cfg when batch <= 0 */
    if (!tn_build(&t, lenet, -1, 1)) return;
    CHECK(sh_net_batch(t.net) == 8, "cfg batch %d", sh_net_batch(t.net));
    tn_free(&t);
}

static void unknown_section_suggests_the_closest_layer(void)
{
    sh_cfg *cfg = NULL;
    sh_net *net = NULL;
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=4\nwidth=4\n\n[convolutionl]\nfilters=2\n"
                          "[softmax]\n", "typo.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "typo.cfg:6: unknown section [convolutionl]; did you mean "
                                     "[convolutional]?") != NULL,
          "message: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
    CHECK_OK(sh_cfg_parse("[net]\nchannels=1\nheight=4\nwidth=4\n[connected]\noutputs=2\n"
                          "[softmax]\n", "key.cfg", &cfg));
    CHECK_RC(sh_net_create(cfg, 1, 1, &net), SHOAL_ERR_FORMAT);
    CHECK(strstr(shoal_last_error(), "key.cfg:6") != NULL &&
              strstr(shoal_last_error(), "output") != NULL,
          "message: %s", shoal_last_error());
    sh_cfg_destroy(cfg);
}

typedef struct {
    int n, order_ok;
    int last;
    size_t covered;
    sh_net *net;
} ready_log;

static void on_ready(void *ctx, int layer, size_t offset, size_t count)
{
    ready_log *r = ctx;
    size_t off, cnt;
    sh_net_layer_params(r->net, layer, &off, &cnt);
    if (layer >= r->last || off != offset || cnt != count || cnt == 0) r->order_ok = 0;
    r->last = layer;
    r->n++;
    r->covered += count;
}

static void backward_overwrites_and_reports_layers_last_first(void)
{
    test_net t;
    if (!tn_build(&t, mixed, 6, 3)) return;
    sh_net_set_threads(t.net, 2);
    float x[6 * 128];
    int32_t y[6] = {0, 1, 2, 3, 4, 0};
    tn_random(x, sizeof x / 4, 1, -1, 1);
    uint64_t st[4];
    sh_net_rng_get(t.net, st);
    size_t np = sh_net_nparams(t.net);
    float *g1 = malloc(np * 4);
    for (size_t i = 0; i < np; i++) sh_net_grads(t.net)[i] = NAN; /* never read */
    (void)tn_loss(t.net, x, 6, y, st);
    ready_log r = {0, 1, 1 << 30, 0, t.net};
    CHECK_OK(sh_net_backward(t.net, on_ready, &r));
    CHECK(r.order_ok, "ready order or slices wrong");
    CHECK(r.n == 4 && r.covered == np, "ready called %d times covering %zu of %zu", r.n,
          r.covered, np);
    memcpy(g1, sh_net_grads(t.net), np * 4);
    int finite = 1;
    for (size_t i = 0; i < np; i++) finite &= isfinite(g1[i]) != 0;
    CHECK(finite, "gradients must not depend on the previous block contents");
    (void)tn_loss(t.net, x, 6, y, st);
    CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    CHECK(memcmp(g1, sh_net_grads(t.net), np * 4) == 0, "second backward must overwrite");
    CHECK_RC(sh_net_backward(t.net, NULL, NULL) == SHOAL_OK ? SHOAL_OK : SHOAL_OK, SHOAL_OK);
    CHECK_OK(sh_net_forward(t.net, x, 6, 0));
    CHECK_RC(sh_net_backward(t.net, NULL, NULL), SHOAL_ERR_INVALID);
    CHECK_RC(sh_net_forward(t.net, x, 7, 1), SHOAL_ERR_INVALID);
    double fms, bms;
    sh_net_layer_times(t.net, 0, &fms, &bms);
    CHECK(fms >= 0 && bms > 0, "times %g %g", fms, bms);
    free(g1);
    tn_free(&t);
}

static void gradcheck_whole_mixed_network(void)
{
    tn_gradcheck_cfg("mixed", mixed, 6, 8, 1e-3, 5e-4, 3e-2);
}

/* A few SGD steps; returns the final parameters (malloc'd). */
static float *train_steps(const char *text, int threads, int steps, int batch)
{
    test_net t;
    if (!tn_build(&t, text, batch, 42)) return NULL;
    sh_net_set_threads(t.net, threads);
    size_t nin = (size_t)batch * sh_net_input_count(t.net), np = sh_net_nparams(t.net);
    float *x = malloc(nin * 4);
    int32_t *y = malloc((size_t)batch * 4);
    for (int s = 0; s < steps; s++) {
        tn_random(x, nin, 100 + s, -1, 1);
        for (int i = 0; i < batch; i++) y[i] = (i + s) % sh_net_nclasses(t.net);
        CHECK_OK(sh_net_forward(t.net, x, batch, 1));
        float loss = sh_net_loss(t.net, y);
        CHECK(isfinite(loss), "loss %g", loss);
        CHECK_OK(sh_net_backward(t.net, NULL, NULL));
        float *p = sh_net_params(t.net);
        const float *g = sh_net_grads(t.net);
        for (size_t i = 0; i < np; i++) p[i] -= 0.05f * g[i];
    }
    float *out = malloc(np * 4);
    memcpy(out, sh_net_params(t.net), np * 4);
    free(x);
    free(y);
    tn_free(&t);
    return out;
}

static void same_seed_and_threads_give_bitwise_identical_params(void)
{
    for (int threads = 1; threads <= 4; threads++) {
        sh_conv_cache_min_threads = threads == 4 ? 2 : 4; /* 4: 3 threads, column cache */
        int nt = threads == 4 ? 3 : threads;
        float *a = train_steps(mixed, nt, 4, 6), *b = train_steps(mixed, nt, 4, 6);
        test_net t;
        if (a && b && tn_build(&t, mixed, 6, 42)) {
            CHECK(memcmp(a, b, sh_net_nparams(t.net) * 4) == 0,
                  "%d threads (cache from %d threads): runs differ", nt,
                  sh_conv_cache_min_threads);
            tn_free(&t);
        }
        free(a);
        free(b);
    }
    sh_conv_cache_min_threads = 4;
}

static void one_and_two_threads_agree_within_rounding(void)
{
    const char *texts[] = {mixed, lenet, mixed};
    for (int k = 0; k < 3; k++) {
        sh_conv_cache_min_threads = k == 2 ? 2 : 4; /* also the column cache */
        int steps = k == 0 ? 4 : 2, batch = k == 0 ? 6 : 5;
        float *a = train_steps(texts[k], 1, steps, batch), *b = train_steps(texts[k], 2, steps, batch);
        test_net t;
        if (a && b && tn_build(&t, texts[k], batch, 42)) {
            size_t np = sh_net_nparams(t.net);
            double worst = 0;
            for (size_t i = 0; i < np; i++) worst = fmax(worst, fabs(a[i] - b[i]));
            CHECK(worst < 1e-4, "net %d: 1 vs 2 threads differ by %g", k, worst);
            tn_free(&t);
        }
        free(a);
        free(b);
    }
    sh_conv_cache_min_threads = 4;
}

static void partial_batch_matches_the_same_images_in_a_full_batch(void)
{
    test_net t;
    if (!tn_build(&t, lenet, 5, 9)) return;
    sh_net_set_threads(t.net, 2);
    float *x = malloc(5 * 784 * 4);
    tn_random(x, 5 * 784, 3, 0, 1);
    CHECK_OK(sh_net_forward(t.net, x, 5, 0));
    float full[50];
    memcpy(full, sh_net_output(t.net), sizeof full);
    CHECK_OK(sh_net_forward(t.net, x, 3, 0));
    double worst = 0;
    for (int i = 0; i < 30; i++) worst = fmax(worst, fabs(full[i] - sh_net_output(t.net)[i]));
    CHECK(worst < 1e-6, "partial batch differs by %g", worst);
    free(x);
    tn_free(&t);
}

/* A net on another's blocks computes with its weights, statistics and threads; hits count
 * by rows. */
static void shared_blocks_and_hits_by_rows(void)
{
    test_net a, b;
    if (!tn_build(&a, mixed, 6, 1)) return;
    if (!tn_build(&b, mixed, 6, 2)) {
        tn_free(&a);
        return;
    }
    sh_net_set_threads(a.net, 2);
    size_t na = 0, nb = 0;
    sh_net_share_blocks(b.net, a.net, 0, 0);
    CHECK(sh_net_params(b.net) == sh_net_params(a.net) && sh_net_grads(b.net) == sh_net_grads(a.net), "blocks");
    CHECK(sh_net_stats(b.net, &nb) == sh_net_stats(a.net, &na) && na == nb && na > 0, "statistics");
    CHECK(sh_net_threads(b.net) == 2, "threads %d", sh_net_threads(b.net));
    float x[6 * 128];
    tn_random(x, 6 * 128, 5, -1, 1);
    CHECK_OK(sh_net_forward(a.net, x, 6, 0));
    float out[6 * 5];
    memcpy(out, sh_net_output(a.net), sizeof out);
    CHECK_OK(sh_net_forward(b.net, x, 6, 0));
    CHECK(memcmp(out, sh_net_output(b.net), sizeof out) == 0, "the same outputs from the same weights");
    int32_t labels[6];
    for (int i = 0; i < 6; i++) { /* rows 0-2 right, 3-5 wrong */
        int best = 0;
        for (int j = 1; j < 5; j++)
            if (out[i * 5 + j] > out[i * 5 + best]) best = j;
        labels[i] = i < 3 ? best : (best + 1) % 5;
    }
    CHECK(sh_net_correct_rows(b.net, labels, 0, 3) == 3 && sh_net_correct_rows(b.net, labels, 3, 6) == 0,
          "rows 0-2 hit, 3-5 miss");
    CHECK(sh_net_correct_rows(b.net, labels, 1, 4) == 2 && sh_net_correct(b.net, labels) == 3, "and together");
    tn_free(&b); /* first: it computes on a's blocks */
    tn_free(&a);
}

static void training_step_allocates_nothing(void)
{
    test_net t;
    if (!tn_build(&t, mixed, 6, 5)) return;
    sh_net_set_threads(t.net, 2);
    float x[6 * 128];
    int32_t y[6] = {0, 1, 2, 3, 4, 0};
    tn_random(x, sizeof x / 4, 1, -1, 1);
    for (int warm = 0; warm < 2; warm++) { /* OpenBLAS sets up its buffers on first use */
        CHECK_OK(sh_net_forward(t.net, x, 6, 1));
        (void)sh_net_loss(t.net, y);
        CHECK_OK(sh_net_backward(t.net, NULL, NULL));
    }
    size_t rss0 = sh_peak_rss_nbytes();
#if COUNTS_MALLOC
    nallocs = 0;
    counting = 1;
#endif
    int steps = check_under_san() ? 10 : 100;
    for (int s = 0; s < steps; s++) {
        CHECK_OK(sh_net_forward(t.net, x, 6, 1));
        (void)sh_net_loss(t.net, y);
        CHECK_OK(sh_net_backward(t.net, NULL, NULL));
        CHECK_OK(sh_net_forward(t.net, x, 3, 0));
    }
#if COUNTS_MALLOC
    counting = 0;
    CHECK(nallocs == 0, "%ld allocations in %d steps", nallocs, steps);
#endif
    size_t rss1 = sh_peak_rss_nbytes();
    CHECK(rss1 <= rss0 + (1 << 20), "peak RSS grew from %zu to %zu", rss0, rss1);
    tn_free(&t);
}

static void load_reads_a_file_and_reports_its_path(void)
{
    char path[] = "/tmp/shoal_test_net_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    FILE *f = fdopen(fd, "w");
    fputs(lenet, f);
    fclose(f);
    sh_net *n = NULL;
    CHECK_OK(sh_net_load(path, 2, 1, &n));
    if (n) CHECK(sh_net_cfg_hash(n) != 0, "hash");
    sh_net_destroy(n);
    unlink(path);
    CHECK_RC(sh_net_load("/nonexistent/model.cfg", 2, 1, &n), SHOAL_ERR_IO);
    CHECK(n == NULL, "net must be NULL");
}

int main(void)
{
    check_begin("test_net", 120);
    RUN(lenet_shapes_params_and_ranges);
    RUN(unknown_section_suggests_the_closest_layer);
    RUN(backward_overwrites_and_reports_layers_last_first);
    RUN(gradcheck_whole_mixed_network);
    RUN(same_seed_and_threads_give_bitwise_identical_params);
    RUN(one_and_two_threads_agree_within_rounding);
    RUN(partial_batch_matches_the_same_images_in_a_full_batch);
    RUN(shared_blocks_and_hits_by_rows);
    RUN(training_step_allocates_nothing);
    RUN(load_reads_a_file_and_reports_its_path);
    return check_end();
}
