/* nn_step.c — training-step throughput of one model: forward, loss, backward and a plain
 * SGD update on random data, median images/s of several timed rounds, and where the time
 * goes per layer (with GFLOP/s of the layers that multiply).
 * Not here: data loading, communication (bench/nn_throughput.sh drives the whole trainer).
 *   cc -O3 -march=native -Iinclude -Isrc bench/nn_step.c build/libshoal.a -lz -ldl -lm -lpthread -lrt
 *   ./a.out examples/lenet.cfg 64 1   # cfg, batch, threads [, rounds, steps per round] */
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"
#include "nn/gemm.h"
#include "nn/net.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s model.cfg batch threads [rounds] [steps]\n", argv[0]);
        return 2;
    }
    int batch = atoi(argv[2]), threads = atoi(argv[3]);
    int rounds = argc > 4 ? atoi(argv[4]) : 5, steps = argc > 5 ? atoi(argv[5]) : 20;
    sh_net *n = NULL;
    if (sh_net_load(argv[1], batch, 1, &n) != SHOAL_OK) {
        fprintf(stderr, "%s\n", shoal_last_error());
        return 1;
    }
    sh_net_set_threads(n, threads);
    size_t nin = (size_t)batch * sh_net_input_count(n), np = sh_net_nparams(n);
    float *x = malloc(nin * sizeof *x);
    int32_t *y = malloc((size_t)batch * sizeof *y);
    sh_rng r;
    sh_rng_seed(&r, 1);
    for (size_t i = 0; i < nin; i++) x[i] = sh_rng_float(&r);
    for (int i = 0; i < batch; i++) y[i] = i % sh_net_nclasses(n);
    int nl = sh_net_nlayers(n);
    double *fwd = calloc((size_t)nl, sizeof *fwd), *bwd = calloc((size_t)nl, sizeof *bwd);
    double *rate = calloc((size_t)rounds, sizeof *rate);
    for (int round = -1; round < rounds; round++) {
        double t0 = sh_now_s();
        for (int s = 0; s < steps; s++) {
            sh_net_forward(n, x, batch, 1);
            sh_net_loss(n, y);
            sh_net_backward(n, NULL, NULL);
            float *p = sh_net_params(n);
            const float *g = sh_net_grads(n);
            for (size_t i = 0; i < np; i++) p[i] -= 1e-4f * g[i];
            if (round >= 0)
                for (int l = 0; l < nl; l++) {
                    double f, b;
                    sh_net_layer_times(n, l, &f, &b);
                    fwd[l] += f;
                    bwd[l] += b;
                }
        }
        if (round >= 0) rate[round] = batch * steps / (sh_now_s() - t0);
    }
    qsort(rate, (size_t)rounds, sizeof *rate, cmp_double);
    printf("%s batch %d threads %d: %.1f images/s, %.1f ms per step (median of %d rounds of %d "
           "steps; min %.1f max %.1f images/s) gemm %s, peak RSS %.0f MB\n", argv[1], batch,
           threads, rate[rounds / 2], 1e3 * batch / rate[rounds / 2], rounds, steps, rate[0],
           rate[rounds - 1], sh_gemm_backend(), (double)sh_peak_rss_nbytes() / 1e6);
    double total_steps = (double)rounds * steps;
    for (int l = 0; l < nl; l++) {
        double f = fwd[l] / total_steps, b = bwd[l] / total_steps;
        double fl = sh_net_layer_flops(n, l) * batch;
        printf("  %-14s fwd %7.3f ms  bwd %7.3f ms", sh_net_layer_name(n, l), f, b);
        if (fl > 1e6 && f > 0)
            printf("  fwd %6.1f GFLOP/s  bwd %6.1f GFLOP/s", 2 * fl / (f * 1e6),
                   4 * fl / (b * 1e6));
        printf("\n");
    }
    free(x);
    free(y);
    free(fwd);
    free(bwd);
    free(rate);
    sh_net_destroy(n);
    return 0;
}
