/* cmd_sample.c — `shoal sample CFG --weights FILE -o GRID.png`: what a model learned, as an
 * image grid, through shoal_sample_run (shoal/train.h): a deep belief net's Gibbs samples, or
 * an autoencoder's test images above their reconstructions.
 * Not here: the sampling (src/train/sample_api.c), parsing (flags.c).
 * Proved by tests/cli/test_pretrain.c (samples) and tests/cli/test_train_unlabelled.c. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/cli.h"
#include "cli/flags.h"
#include "shoal/train.h"

static const char usage_text[] =
    "usage: shoal sample CFG --weights FILE -o GRID.png [options]\n"
    "\n"
    "Write images a trained model makes as a grid (PNG, or SVG by the name's .svg).\n"
    "A net whose first layers are [rbm] (a deep belief net from shoal pretrain, fine-tuned\n"
    "or not): Gibbs sampling in its top [rbm], then one pass down through the [rbm]s below.\n"
    "An autoencoder (ending in [cost] type=sse, L1 or smooth, output shaped as its input):\n"
    "test images from --data, each row of them followed by its row of reconstructions.\n";

typedef struct {
    shoal_sample_opts o;
    int64_t seed;
} sample_cli;

static int set_cfg(void *dst, const char *arg, const char *cmd)
{
    sample_cli *t = dst;
    if (t->o.cfg_path) return sh_cli_usage_error(cmd, "unexpected argument \"%s\"", arg);
    t->o.cfg_path = arg;
    return 0;
}

#define AT(field) offsetof(sample_cli, field)

static const sh_flag flags[] = {
    {"weights", 0, "FILE", SH_FLAG_STR, AT(o.weights_path), 0, 0, "Options",
     "trained weights (a shoal checkpoint, or Darknet's FILE.weights); required", NULL, NULL, NULL},
    {NULL, 'o', "FILE", SH_FLAG_STR, AT(o.out_path), 0, 0, "Options", "the grid: FILE.png or FILE.svg; required",
     "a file (.png or .svg)", NULL, NULL},
    {"samples", 0, "N", SH_FLAG_INT, AT(o.samples), 1, 4096, "Options", "images (default 64)", NULL, NULL, NULL},
    {"gibbs-steps", 0, "K", SH_FLAG_INT, AT(o.gibbs_steps), 1, 1000000, "Options",
     "Gibbs steps of each chain (default 1000)", NULL, NULL, NULL},
    {"layer", 0, "L", SH_FLAG_INT, AT(o.layer), 0, 1 << 20, "Options", "draw from [rbm] layer L (default: the top one)",
     NULL, NULL, NULL},
    {"data", 0, "DIR", SH_FLAG_STR, AT(o.data_dir), 0, 0, "Options",
     "the chains start from test images carried up to that [rbm] (default: random units); an autoencoder's "
     "images (default $SHOAL_DATA_DIR, else Fashion-MNIST)", NULL, NULL, NULL},
    {"seed", 0, "S", SH_FLAG_I64, AT(seed), 0, INT64_MAX, "Options",
     "the chains' draws and the images picked (default 1)", NULL, NULL, NULL},
    {"threads", 0, "N", SH_FLAG_INT, AT(o.threads), 1, 1024, "Options", "kernel threads (an autoencoder's forward)",
     NULL, NULL, NULL},
};

static const sh_flag_table table = {
    .cmd = "sample", .usage = usage_text, .flags = flags, .nflags = sizeof flags / sizeof flags[0],
    .style = SH_FLAGS_NEEDS, .positional = set_cfg,
};

int sh_cmd_sample(int argc, char **argv)
{
    sample_cli t;
    shoal_sample_opts_default(&t.o);
    t.seed = 1;
    int code = sh_flags_parse(&table, argc, argv, 1, &t, NULL);
    if (code) return code == SH_FLAGS_HELP ? SH_EXIT_OK : code;
    if (!t.o.cfg_path) return sh_cli_usage_error("sample", "missing the model file CFG");
    if (!t.o.weights_path) return sh_cli_usage_error("sample", "missing --weights FILE: sample from trained weights");
    if (!t.o.out_path) return sh_cli_usage_error("sample", "missing -o FILE.png (or .svg)");
    t.o.seed = (uint64_t)t.seed;
    shoal_sample_report r;
    shoal_result rc = shoal_sample_run(&t.o, &r);
    if (rc != SHOAL_OK) return sh_cli_fail(rc);
    printf("wrote %s: %d %s of %s\n", t.o.out_path, t.o.samples,
           r.reconstructions ? "test images and their reconstructions" : "samples", t.o.cfg_path);
    return SH_EXIT_OK;
}
