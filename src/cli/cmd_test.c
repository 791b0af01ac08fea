/* cmd_test.c — `shoal test CFG --weights FILE`: accuracy and loss of trained weights on a
 * dataset's test split (or a text's held-out tail, in bits/char; a regression's loss against
 * its --target), as a line or one JSON object, through shoal_test_run (shoal/train.h).
 * Not here: the evaluation (src/train/eval_api.c), parsing (flags.c).
 * Proved by tests/cli/test_train_cli.c. */
#include <stddef.h>
#include <stdio.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "shoal/train.h"

static const char usage_text[] =
    "usage: shoal test CFG --weights FILE [options]\n"
    "\n"
    "Measure the accuracy and mean loss of the weights in FILE (a checkpoint written by\n"
    "shoal train --save, or Darknet's FILE.weights) on the test split of a dataset.\n";

typedef struct {
    shoal_test_opts o;
    int json;
} test_cli;

static int set_cfg(void *dst, const char *arg, const char *cmd)
{
    test_cli *t = dst;
    if (t->o.cfg_path) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    t->o.cfg_path = arg;
    return 0;
}

#define AT(field) offsetof(test_cli, field)

static const sh_flag flags[] = {
    {"weights", 0, "FILE", SH_FLAG_STR, AT(o.weights_path), 0, 0, "Options",
     "the checkpoint, or Darknet's weights when FILE ends in .weights (required; must come from the same CFG)",
     NULL, NULL, NULL},
    {"data", 0, "DIR|FILE.txt", SH_FLAG_STR, AT(o.data_dir), 0, 0, "Options",
     "dataset directory (default $SHOAL_DATA_DIR or /usr/share/datasets/fashion-mnist); a text file: "
     "bits/char on its held-out tail (as shoal train held it out); pictures: DIR/val labelled by DIR's "
     "class folders, or a list file's pictures, cut as the cfg's [net] says (docs/data.md)", NULL, NULL, NULL},
    {"test-data", 0, "P", SH_FLAG_STR, AT(o.test_data), 0, 0, "Options",
     "pictures: the held-out folder of class folders or list file (default DIR/val; docs/data.md)", NULL,
     NULL, NULL},
    {"target", 0, "input|DIR", SH_FLAG_STR, AT(o.target), 0, 0, "Options",
     "a regression (a net ending in [cost] type=sse, L1 or smooth): its targets as shoal train took them, the "
     "input itself or a second dataset; prints the test loss", NULL, NULL, NULL},
    {"batch", 0, "N", SH_FLAG_INT, AT(o.batch), 1, 1 << 20, "Options",
     "images per forward pass (default: the cfg's batch)", NULL, NULL, NULL},
    {"threads", 0, "N", SH_FLAG_INT, AT(o.threads), 1, 1024, "Options",
     "kernel threads (default $SHOAL_THREADS, else this process's CPUs shared by the ranks on this host)",
     NULL, NULL, NULL},
    {"json", 0, NULL, SH_FLAG_SWITCH, AT(json), 0, 0, "Options", "print one JSON object: accuracy, loss, images",
     NULL, NULL, NULL},
};

static const sh_flag_table table = {
    .cmd = "test", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .style = SH_FLAGS_NEEDS, .positional = set_cfg,
};

int sh_cmd_test(int argc, char **argv)
{
    test_cli t = {.json = 0};
    shoal_test_opts_default(&t.o);
    int code = sh_flags_parse(&table, argc, argv, 1, &t, NULL);
    if (code) return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
    if (!t.o.cfg_path) return sh_cli_usage_error("test", "missing the model file CFG");
    if (!t.o.weights_path) return sh_cli_usage_error("test", "missing --weights FILE");
    shoal_test_report r;
    shoal_result rc = shoal_test_run(&t.o, &r);
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    if (t.json && r.accuracy < 0)
        printf("{\"accuracy\":-1,\"loss\":%.6f,\"images\":%lld}\n", r.loss, (long long)r.count);
    else if (r.accuracy < 0)
        printf("test loss %.4f (%lld images of %s)\n", r.loss, (long long)r.count, r.dataset);
    else if (t.json && r.text)
        printf("{\"accuracy\":%.6f,\"loss\":%.6f,\"bpc\":%.6f,\"chars\":%lld}\n", r.accuracy, r.loss, r.bpc,
               (long long)r.count);
    else if (t.json)
        printf("{\"accuracy\":%.6f,\"loss\":%.6f,\"images\":%lld}\n", r.accuracy, r.loss, (long long)r.count);
    else if (r.text)
        printf("test %.4f bits/char (accuracy %.2f%%) on the %lld held-out characters of %s\n", r.bpc,
               100 * r.accuracy, (long long)r.count, t.o.data_dir ? t.o.data_dir : r.dataset);
    else
        printf("test accuracy %.2f%% (%lld images of %s), loss %.4f\n", 100 * r.accuracy, (long long)r.count,
               r.dataset, r.loss);
    return SH_EXIT_OK;
}
