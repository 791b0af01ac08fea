/* train_lenet.c — a program that embeds shoal through its public headers only: it builds
 * the model to show its shapes, then trains it (alone, or as one rank under shoal launch,
 * mpirun or srun) and prints the result.
 * Not here: anything of shoal's internals; build it with
 *   cc -Iinclude examples/train_lenet.c build/libshoal.a -pthread -ljpeg -lpng -lz -ldl -lm -lrt
 * Proved by tests/train/test_api.c, which builds it that way and runs it on a tiny dataset.
 *
 * usage: train_lenet [CFG [DATA_DIR [STEPS]]]   (default examples/lenet.cfg, $SHOAL_DATA_DIR, 100) */
#include <stdio.h>
#include <stdlib.h>

#include "shoal/net.h"
#include "shoal/train.h"

int main(int argc, char **argv)
{
    const char *cfg = argc > 1 ? argv[1] : "examples/lenet.cfg";
    const char *data = argc > 2 ? argv[2] : NULL;
    long steps = argc > 3 ? atol(argv[3]) : 100;

    /* The network alone: shapes and size, no dataset needed. */
    shoal_net *net = NULL;
    if (shoal_net_load(cfg, NULL, &net) != SHOAL_OK) {
        fprintf(stderr, "train_lenet: %s\n", shoal_last_error_message());
        return 1;
    }
    int n = 0, c = 0, h = 0, w = 0, k = 0;
    size_t nparams = 0;
    shoal_net_input_shape(net, &n, &c, &h, &w);
    shoal_net_output_shape(net, NULL, &k);
    shoal_net_params(net, &nparams);
    printf("model %s: input %dx%dx%d, %d classes, %zu parameters, batch %d\n", cfg, c, h, w, k, nparams, n);
    shoal_net_destroy(net);

    /* The training job `shoal train` runs. */
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    o.cfg_path = cfg;
    o.data_dir = data;
    o.max_steps = steps;
    o.quiet = 1;
    shoal_train_report r;
    if (shoal_train_run(&o, &r) != SHOAL_OK) {
        fprintf(stderr, "train_lenet: %s\n", shoal_last_error_message());
        return 1;
    }
    if (r.is_result)
        printf("trained %lld steps (%s, rank %d of %d, %d threads): test accuracy %.2f%%, test loss %.4f\n",
               (long long)r.steps, r.role, r.rank, r.world, r.threads, 100 * r.test_accuracy, r.test_loss);
    return 0;
}
