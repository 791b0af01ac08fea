/* cmd_test.c — `shoal test CFG --weights FILE`: accuracy and loss of trained weights on a
 * dataset's test split (or a text's held-out tail, in bits/char), as a line or one JSON
 * object.
 * Not here: the evaluation loop (src/train/eval.c), checkpoint checks (src/train/snapshot.c).
 * Proved by tests/cli/test_train_cli.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "cli/cli.h"
#include "data/data.h"
#include "nn/net.h"
#include "train/eval.h"

static const char usage_text[] =
    "usage: shoal test CFG --weights FILE [options]\n"
    "\n"
    "Measure the accuracy and mean loss of the weights in FILE (a checkpoint written by\n"
    "shoal train --save, or Darknet's FILE.weights) on the test split of a dataset.\n"
    "\n"
    "  --weights FILE     the checkpoint, or Darknet's weights when FILE ends in .weights\n"
    "                     (required; must come from the same CFG)\n"
    "  --data DIR         dataset directory (default $SHOAL_DATA_DIR or\n"
    "                     /usr/share/datasets/fashion-mnist)\n"
    "  --data FILE.txt    text: bits/char on its held-out tail (as shoal train held it out)\n"
    "  --target input     a regression (a net ending in [cost] type=sse, L1 or smooth):\n"
    "  --target DIR       its targets, as shoal train took them; prints the test loss\n"
    "  --batch N          images per forward pass (default: the cfg's batch)\n"
    "  --threads N        kernel threads (default $SHOAL_THREADS, else this process's\n"
    "                     CPUs shared by the ranks on this host)\n"
    "  --json             print one JSON object: accuracy, loss, images\n"
    "  --help             this text\n";

/* A regression's targets: the input itself, or DIR's test images into *buf for the loader. */
static shoal_result regression_targets(sh_net *net, const char *cfg, const char *target, sh_dataset **td,
                                       float **buf)
{
    if (!target)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s ends in a regression [cost]: give its targets as in training, "
                       "--target input or --target DIR", cfg);
    if (!strcmp(target, "input")) return sh_net_set_target(net, NULL);
    SH_TRY(sh_dataset_open_dir(target, 0, td));
    if ((*td)->c * (*td)->h * (*td)->w != sh_net_nclasses(net))
        return SH_FAIL(SHOAL_ERR_INVALID, "--target: %s has %dx%dx%d images but %s outputs %d values per image",
                       (*td)->name, (*td)->c, (*td)->h, (*td)->w, cfg, sh_net_nclasses(net));
    SH_TRY(sh_alloc_aligned((size_t)sh_net_batch(net) * (size_t)sh_net_nclasses(net) * sizeof(float),
                            (void **)buf));
    return sh_net_set_target(net, *buf);
}

static shoal_result run_test(const char *cfg, const char *weights, const char *dir, const char *target,
                             int batch, int threads, int json)
{
    shoal_result rc = SHOAL_OK;
    sh_net *net = NULL;
    sh_dataset *d = NULL, *td = NULL;
    sh_loader *l = NULL;
    float *x = NULL, *tbuf = NULL;
    int32_t *y = NULL;
    SH_TRY_GOTO(sh_net_load(cfg, batch, 1, &net), rc, done);
    SH_TRY_GOTO(sh_net_check_trainable(net), rc, done);
    SH_TRY_GOTO(sh_cli_net_weights(net, threads, weights), rc, done);
    int regression = sh_net_is_regression(net);
    if (regression) SH_TRY_GOTO(regression_targets(net, cfg, target, &td, &tbuf), rc, done);
    else if (target) {
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--target: %s learns from labels; leave out --target", cfg);
        goto done;
    }
    struct stat st;
    int text = dir && stat(dir, &st) == 0 && S_ISREG(st.st_mode);
    if (text) /* a file: its held-out tail, as shoal train --data FILE.txt holds it out */
        SH_TRY_GOTO(sh_text_load(dir, 0, &d), rc, done);
    else
        SH_TRY_GOTO(sh_dataset_open_dir(dir, 0, &d), rc, done);
    if (d->c * d->h * d->w != sh_net_input_count(net)) {
        rc = SH_FAIL(SHOAL_ERR_INVALID,
                     "dataset %s has %dx%dx%d images but %s expects %d values per image; use "
                     "the dataset the model was trained on",
                     d->name, d->c, d->h, d->w, cfg, sh_net_input_count(net));
        goto done;
    }
    int n = sh_net_batch(net);
    sh_loader_opts lo = {.global_batch = n, .rank = 0, .world = 1, .shuffle = 0, .drop_last = 0,
                         .time_steps = sh_net_time_steps(net), .targets = td, .target_out = tbuf};
    SH_TRY_GOTO(sh_loader_create(d, &lo, &l), rc, done);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * (size_t)sh_net_input_count(net) * sizeof(float),
                                 (void **)&x), rc, done);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * sizeof(int32_t), (void **)&y), rc, done);
    double acc = 0, loss = 0;
    SH_TRY_GOTO(sh_eval_run(net, l, x, y, &acc, &loss), rc, done);
    if (regression && json)
        printf("{\"accuracy\":-1,\"loss\":%.6f,\"images\":%d}\n", loss, d->count);
    else if (regression)
        printf("test loss %.4f (%d images of %s)\n", loss, d->count, d->name);
    else if (json && text)
        printf("{\"accuracy\":%.6f,\"loss\":%.6f,\"bpc\":%.6f,\"chars\":%d}\n", acc, loss,
               loss / M_LN2, d->count);
    else if (json)
        printf("{\"accuracy\":%.6f,\"loss\":%.6f,\"images\":%d}\n", acc, loss, d->count);
    else if (text)
        printf("test %.4f bits/char (accuracy %.2f%%) on the %d held-out characters of %s\n",
               loss / M_LN2, 100 * acc, d->count, dir);
    else
        printf("test accuracy %.2f%% (%d images of %s), loss %.4f\n", 100 * acc, d->count,
               d->name, loss);
done:
    sh_free_aligned(y);
    sh_free_aligned(x);
    sh_loader_destroy(l);
    sh_dataset_destroy(d);
    sh_dataset_destroy(td);
    sh_free_aligned(tbuf);
    sh_net_destroy(net);
    return rc;
}

int sh_cmd_test(int argc, char **argv)
{
    const char *cfg = NULL, *weights = NULL, *dir = NULL, *target = NULL;
    int batch = 0, threads = 0, json = 0;
    sh_cli_args a = {"test", argc, argv, 1, 0};
    for (; a.i < argc; a.i++) {
        if (sh_cli_help(&a, usage_text)) return SH_EXIT_OK;
        if (!strcmp(argv[a.i], "--json")) { json = 1; continue; }
        if (sh_cli_arg_cfg(&a, &cfg) || sh_cli_flag_str(&a, "--weights", "a value", &weights) ||
            sh_cli_flag_str(&a, "--data", "a value", &dir) ||
            sh_cli_flag_str(&a, "--target", "input or a directory", &target) ||
            sh_cli_flag_int(&a, "--batch", 1, 1 << 20, &batch) ||
            sh_cli_flag_int(&a, "--threads", 1, 1024, &threads)) {
            if (a.bad) return SH_EXIT_USAGE;
            continue;
        }
        return sh_cli_usage_error("test", "unknown option \"%s\"", argv[a.i]);
    }
    if (!cfg) return sh_cli_usage_error("test", "missing the model file CFG");
    if (!weights) return sh_cli_usage_error("test", "missing --weights FILE");
    if (!dir) dir = sh_env_str("SHOAL_DATA_DIR");
    if (!threads) threads = sh_cli_threads(0);
    shoal_result rc = run_test(cfg, weights, dir, target, batch, threads, json);
    return rc == SHOAL_OK ? SH_EXIT_OK : sh_cli_fail(rc);
}
