/* cmd_time.c — `shoal time CFG`: milliseconds of forward and backward per iteration on
 * synthetic input, as `caffe time` prints them, per layer on request.
 * Not here: the layers and their timers (src/nn/net.c).
 * Proved by tests/cli/test_train_cli.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"
#include "nn/net.h"

static const char usage_text[] =
    "usage: shoal time CFG [options]\n"
    "\n"
    "Time forward and backward passes of the network in CFG on random input (no dataset\n"
    "needed) and print the average milliseconds per iteration, as caffe time does. A net\n"
    "without a final [softmax] (a feature extractor) runs backward from the sum of its outputs.\n"
    "\n"
    "  --batch N          images per pass (default: the cfg's batch)\n"
    "  --iterations N     timed iterations after 2 warm-up ones (default 50)\n"
    "  --per-layer        also print each layer's forward and backward milliseconds\n"
    "  --weights FILE     load these weights first (a shoal checkpoint, or Darknet's\n"
    "                     FILE.weights); default: the seed's random weights\n"
    "  --threads N        kernel threads (default $SHOAL_THREADS, else this process's\n"
    "                     CPUs shared by the ranks on this host)\n"
    "  --json             print one JSON object: forward_ms, backward_ms, total_ms, layers\n"
    "  --help             this text\n";

/* Untimed iterations first: page faults and cold caches are not the engine's speed. */
#define WARMUP_ITERATIONS 2

typedef struct {
    const char *cfg, *weights;
    int batch, iterations, per_layer, threads, json;
} time_opts;

static shoal_result run_time(const time_opts *o)
{
    shoal_result rc = SHOAL_OK;
    sh_net *net = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    double *layer_ms = NULL; /* (nlayers, 2): forward, backward sums */
    SH_TRY_GOTO(sh_net_load(o->cfg, o->batch, 1, &net), rc, done);
    SH_TRY_GOTO(sh_cli_net_weights(net, o->threads, o->weights), rc, done);
    int n = sh_net_batch(net), nin = sh_net_input_count(net), k = sh_net_nclasses(net);
    int nlayers = sh_net_nlayers(net);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * (size_t)nin * sizeof(float), (void **)&x), rc, done);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * sizeof(int32_t), (void **)&y), rc, done);
    SH_TRY_GOTO(sh_calloc((size_t)nlayers * 2, sizeof(double), (void **)&layer_ms), rc, done);
    sh_rng rng;
    sh_rng_seed(&rng, 1);
    for (size_t i = 0; i < (size_t)n * (size_t)nin; i++) x[i] = sh_rng_float(&rng);
    for (int i = 0; i < n; i++) y[i] = (int32_t)sh_rng_below(&rng, (uint64_t)k);

    uint64_t fwd_ns = 0, bwd_ns = 0;
    for (int it = 0; it < WARMUP_ITERATIONS + o->iterations; it++) {
        uint64_t t0 = sh_now_ns();
        SH_TRY_GOTO(sh_net_forward(net, x, n, 1), rc, done);
        if (sh_net_has_softmax(net))
            (void)sh_net_loss(net, y);
        else
            sh_net_loss_sum(net); /* a feature extractor: time backward from sum(outputs) */
        uint64_t t1 = sh_now_ns();
        SH_TRY_GOTO(sh_net_backward(net, NULL, NULL), rc, done);
        uint64_t t2 = sh_now_ns();
        if (it < WARMUP_ITERATIONS) continue;
        fwd_ns += t1 - t0;
        bwd_ns += t2 - t1;
        for (int l = 0; l < nlayers; l++) {
            double f = 0, b = 0;
            sh_net_layer_times(net, l, &f, &b);
            layer_ms[2 * l] += f;
            layer_ms[2 * l + 1] += b;
        }
    }
    double iters = o->iterations;
    double fwd_ms = (double)fwd_ns * 1e-6 / iters, bwd_ms = (double)bwd_ns * 1e-6 / iters;
    if (o->json) {
        printf("{\"forward_ms\":%.4f,\"backward_ms\":%.4f,\"total_ms\":%.4f,\"batch\":%d,"
               "\"iterations\":%d,\"threads\":%d,\"layers\":[",
               fwd_ms, bwd_ms, fwd_ms + bwd_ms, n, o->iterations, o->threads);
        for (int l = 0; o->per_layer && l < nlayers; l++)
            printf("%s{\"name\":\"%s\",\"forward_ms\":%.4f,\"backward_ms\":%.4f}", l ? "," : "",
                   sh_net_layer_name(net, l), layer_ms[2 * l] / iters,
                   layer_ms[2 * l + 1] / iters);
        printf("]}\n");
    } else {
        printf("shoal time %s: batch %d, %d iterations, %d thread%s\n", o->cfg, n, o->iterations,
               o->threads, o->threads == 1 ? "" : "s");
        for (int l = 0; o->per_layer && l < nlayers; l++) {
            printf("%16s\tforward: %.4f ms.\n", sh_net_layer_name(net, l), layer_ms[2 * l] / iters);
            printf("%16s\tbackward: %.4f ms.\n", sh_net_layer_name(net, l),
                   layer_ms[2 * l + 1] / iters);
        }
        printf("Average Forward pass: %.4f ms.\n", fwd_ms);
        printf("Average Backward pass: %.4f ms.\n", bwd_ms);
        printf("Average Forward-Backward: %.4f ms.\n", fwd_ms + bwd_ms);
    }
done:
    free(layer_ms);
    sh_free_aligned(y);
    sh_free_aligned(x);
    sh_net_destroy(net);
    return rc;
}

int sh_cmd_time(int argc, char **argv)
{
    time_opts o = {.iterations = 50};
    sh_cli_args a = {"time", argc, argv, 1, 0};
    for (; a.i < argc; a.i++) {
        if (sh_cli_help(&a, usage_text)) return SH_EXIT_OK;
        if (!strcmp(argv[a.i], "--json")) { o.json = 1; continue; }
        if (!strcmp(argv[a.i], "--per-layer")) { o.per_layer = 1; continue; }
        if (sh_cli_arg_cfg(&a, &o.cfg) || sh_cli_flag_str(&a, "--weights", "a file", &o.weights) ||
            sh_cli_flag_int(&a, "--batch", 1, 1 << 20, &o.batch) ||
            sh_cli_flag_int(&a, "--iterations", 1, 1000000, &o.iterations) ||
            sh_cli_flag_int(&a, "--threads", 1, 1024, &o.threads)) {
            if (a.bad) return SH_EXIT_USAGE;
            continue;
        }
        return sh_cli_usage_error("time", "unknown option \"%s\"", argv[a.i]);
    }
    if (!o.cfg) return sh_cli_usage_error("time", "missing the model file CFG");
    if (!o.threads) o.threads = sh_cli_threads(0);
    shoal_result rc = run_time(&o);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
