/* cmd_time.c — `shoal time CFG`: milliseconds of forward and backward per iteration on
 * synthetic input, as `caffe time` prints them, per layer on request, through the public
 * network API (shoal/net.h).
 * Not here: the layers and their timers (src/nn/net.c), parsing (flags.c).
 * Proved by tests/cli/test_train_cli.c. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "shoal/net.h"

static const char usage_text[] =
    "usage: shoal time CFG [options]\n"
    "\n"
    "Time forward and backward passes of the network in CFG on random input (no dataset\n"
    "needed) and print the average milliseconds per iteration, as caffe time does. Backward\n"
    "runs from the sum of the outputs, so a net without a final [softmax] (a feature\n"
    "extractor) is timed the same way.\n";

/* Untimed iterations first: page faults and cold caches are not the engine's speed. */
#define WARMUP_ITERATIONS 2

typedef struct {
    const char *cfg, *weights;
    int batch, iterations, per_layer, threads, json;
} time_opts;

/* Forward and backward in milliseconds per iteration, the whole net and each layer. */
typedef struct {
    double fwd_ms, bwd_ms;
    int n, nlayers;
    double *layer_ms; /* (nlayers, 2): forward, backward */
} time_result;

static shoal_result time_passes(const time_opts *o, shoal_net *net, time_result *t)
{
    int c = 0, h = 0, w = 0;
    SH_TRY(shoal_net_input_shape(net, &t->n, &c, &h, &w));
    size_t nx = (size_t)t->n * (size_t)c * (size_t)h * (size_t)w;
    float *x = NULL; /* (N, C, H, W) */
    SH_TRY(sh_alloc_aligned(nx * sizeof(float), (void **)&x));
    sh_rng rng;
    sh_rng_seed(&rng, 1);
    for (size_t i = 0; i < nx; i++) x[i] = sh_rng_float(&rng);
    uint64_t fwd_ns = 0, bwd_ns = 0;
    shoal_result rc = SHOAL_OK;
    for (int it = 0; it < WARMUP_ITERATIONS + o->iterations && rc == SHOAL_OK; it++) {
        uint64_t t0 = sh_now_ns();
        rc = shoal_net_forward(net, x, t->n, 1, NULL);
        uint64_t t1 = sh_now_ns();
        if (rc == SHOAL_OK) rc = shoal_net_backward(net, NULL, NULL); /* from sum(outputs): no labels */
        uint64_t t2 = sh_now_ns();
        if (it < WARMUP_ITERATIONS) continue;
        fwd_ns += t1 - t0;
        bwd_ns += t2 - t1;
        for (int l = 0; l < t->nlayers && rc == SHOAL_OK; l++) {
            double f = 0, b = 0;
            rc = shoal_net_layer_times(net, l, NULL, &f, &b);
            t->layer_ms[2 * l] += f;
            t->layer_ms[2 * l + 1] += b;
        }
    }
    sh_free_aligned(x);
    double iters = o->iterations;
    t->fwd_ms = (double)fwd_ns * 1e-6 / iters;
    t->bwd_ms = (double)bwd_ns * 1e-6 / iters;
    for (int l = 0; l < 2 * t->nlayers; l++) t->layer_ms[l] /= iters;
    return rc;
}

/* Layer l's name, "?" past the end. */
static const char *layer_name(const shoal_net *net, int l)
{
    const char *name = "?";
    shoal_net_layer_times(net, l, &name, NULL, NULL);
    return name;
}

static void print_times(const time_opts *o, shoal_net *net, const time_result *t)
{
    if (o->json) {
        printf("{\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"total_ms\":%.4f,\"batch\":%d,"
               "\"iterations\":%d,\"threads\":%d,\"layers\":[",
               t->fwd_ms, t->bwd_ms, t->fwd_ms + t->bwd_ms, t->n, o->iterations, o->threads);
        for (int l = 0; o->per_layer && l < t->nlayers; l++)
            printf("%s{\"name\":\"%s\",\"forward_ms\":%.4f,\"backward_ms\":%.4f}", l ? "," : "",
                   layer_name(net, l), t->layer_ms[2 * l], t->layer_ms[2 * l + 1]);
        printf("]}\n");
        return;
    }
    printf("shoal time %s: batch %d, %d iterations, %d thread%s\n", o->cfg, t->n, o->iterations, o->threads,
           o->threads == 1 ? "" : "s");
    for (int l = 0; o->per_layer && l < t->nlayers; l++) {
        printf("%16s\tforward: %.4f ms.\n", layer_name(net, l), t->layer_ms[2 * l]);
        printf("%16s\tbackward: %.4f ms.\n", layer_name(net, l), t->layer_ms[2 * l + 1]);
    }
    printf("Average Forward pass: %.4f ms.\n", t->fwd_ms);
    printf("Average Backward pass: %.4f ms.\n", t->bwd_ms);
    printf("Average Forward-Backward: %.4f ms.\n", t->fwd_ms + t->bwd_ms);
}

static shoal_result run_time(const time_opts *o)
{
    shoal_net_opts no;
    shoal_net_opts_default(&no);
    no.batch = o->batch;
    no.threads = o->threads;
    shoal_net *net = NULL;
    time_result t = {0};
    SH_TRY(shoal_net_load(o->cfg, &no, &net));
    shoal_result rc = o->weights ? shoal_net_load_weights(net, o->weights) : SHOAL_OK;
    t.nlayers = shoal_net_nlayers(net);
    if (rc == SHOAL_OK) rc = sh_calloc((size_t)t.nlayers * 2, sizeof(double), (void **)&t.layer_ms);
    if (rc == SHOAL_OK) rc = time_passes(o, net, &t);
    if (rc == SHOAL_OK) print_times(o, net, &t);
    free(t.layer_ms);
    shoal_net_destroy(net);
    return rc;
}

static int set_cfg(void *dst, const char *arg, const char *cmd)
{
    time_opts *o = dst;
    if (o->cfg) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    o->cfg = arg;
    return 0;
}

#define AT(field) offsetof(time_opts, field)

static const sh_flag flags[] = {
    {"batch", 0, "N", SH_FLAG_INT, AT(batch), 1, 1 << 20, "Options", "images per pass (default: the cfg's batch)",
     NULL, NULL, NULL},
    {"iterations", 0, "N", SH_FLAG_INT, AT(iterations), 1, 1000000, "Options",
     "timed iterations after 2 warm-up ones (default 50)", NULL, NULL, NULL},
    {"per-layer", 0, NULL, SH_FLAG_SWITCH, AT(per_layer), 0, 0, "Options",
     "also print each layer's forward and backward milliseconds", NULL, NULL, NULL},
    {"weights", 0, "FILE", SH_FLAG_STR, AT(weights), 0, 0, "Options",
     "load these weights first (a shoal checkpoint or Darknet's weights, told by content); default: the seed's random "
     "weights", "a file", NULL, NULL},
    {"threads", 0, "N", SH_FLAG_INT, AT(threads), 1, 1024, "Options",
     "kernel threads (default $SHOAL_THREADS, else this process's CPUs shared by the ranks on this host)",
     NULL, NULL, NULL},
    {"json", 0, NULL, SH_FLAG_SWITCH, AT(json), 0, 0, "Options",
     "print one JSON object: forward_ms, backward_ms, total_ms, layers", NULL, NULL, NULL},
};

static const sh_flag_table table = {
    .cmd = "time", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .style = SH_FLAGS_NEEDS, .positional = set_cfg,
};

int sh_cmd_time(int argc, char **argv)
{
    time_opts o = {.iterations = 50};
    int code = sh_flags_parse(&table, argc, argv, 1, &o, NULL);
    if (code) return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
    if (!o.cfg) return sh_cli_usage_error("time", "missing the model file CFG");
    if (!o.threads) o.threads = sh_cli_threads(0);
    shoal_result rc = run_time(&o);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
