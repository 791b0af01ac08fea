/* train_lenet.c — a program that embeds shoal through its public headers only: it builds
 * the model to show its shapes, then trains it (alone, or as one rank under shoal launch,
 * mpirun or srun) with any option of shoal train given as NAME=VALUE, and prints the result.
 * Not here: anything of shoal's internals; build it with
 *   cc -Iinclude examples/train_lenet.c build/libshoal.a -pthread -lcrypto -ljpeg -lpng -lz -ldl -lm -lrt -lprotobuf-c
 * Proved by tests/train/test_api.c, which builds it that way and runs it on a tiny dataset.
 *
 * usage: train_lenet [CFG [DATA_DIR [STEPS [NAME=VALUE...]]]]
 *   default examples/lenet.cfg, $SHOAL_DATA_DIR, 100 steps; e.g. pipeline=2 micro-batches=4,
 *   compress=fp16, json (the report as shoal train --json prints it) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    printf("model %s: input %dx%dx%d, %d classes, %zu parameters, batch %d, %d layers\n", cfg, c, h, w, k, nparams,
           n, shoal_net_nlayers(net));
    shoal_net_destroy(net);

    /* The training job `shoal train` runs: fields set directly, or options by name. */
    shoal_train_opts o;
    shoal_train_opts_default(&o);
    o.cfg_path = cfg;
    o.data_dir = data;
    o.max_steps = steps;
    o.quiet = 1;
    for (int i = 4; i < argc; i++) {
        char name[64];
        const char *eq = strchr(argv[i], '=');
        snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]), argv[i]);
        if (shoal_train_opts_set(&o, name, eq ? eq + 1 : NULL) != SHOAL_OK) {
            fprintf(stderr, "train_lenet: %s\n", shoal_last_error_message());
            shoal_train_opts_fini(&o);
            return 2;
        }
    }
    static shoal_train_report r; /* large: not on the stack */
    static char json[SHOAL_TRAIN_REPORT_JSON_NBYTES];
    int code = 0;
    if (shoal_train_run(&o, &r) != SHOAL_OK) {
        fprintf(stderr, "train_lenet: %s\n", shoal_last_error_message());
        code = 1;
    } else if (r.is_result) {
        printf("trained %lld steps (%s, rank %d of %d, %d threads, %s): test accuracy %.2f%%, test loss %.4f\n",
               (long long)r.steps, r.role, r.rank, r.world, r.threads, r.layout, 100 * r.test_accuracy,
               r.test_loss);
        if (o.json && shoal_train_report_json(&r, json, sizeof json) == SHOAL_OK) printf("%s\n", json);
    }
    shoal_train_opts_fini(&o);
    return code;
}
