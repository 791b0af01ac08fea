/* cmd_train_caffe.c — what `shoal train` sets up for a Caffe model before the job: the
 * --solver for the .prototxt reader, the Data layer's shape from the dataset the job will
 * read, the solver's snapshot interval as --save-every, and the refusals of --solver and
 * --save-caffe without a .prototxt.
 * Not here: reading Caffe's files (src/nn/caffe/), the flags themselves (cmd_train.c).
 * Proved by tests/cli/test_caffe_cli.c. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/env.h"
#include "base/err.h"
#include "cli/cli.h"
#include "data/data.h"
#include "nn/caffe/caffe.h"
#include "train/trainer.h"

static char snapshot_path[600];

int sh_cli_caffe_setup(const char *model, const char *solver, sh_train_opts *o)
{
    int prototxt = sh_caffe_is_prototxt(model);
    if (!prototxt && (solver || o->save_caffe_path))
        return sh_cli_usage_error("train", "%s goes with a Caffe model (MODEL.prototxt); %s is not one",
                                  solver ? "--solver" : "--save-caffe", model);
    if (o->save_caffe_path && !sh_caffe_is_model_path(o->save_caffe_path))
        return sh_cli_usage_error("train", "--save-caffe %s: name the file FILE.caffemodel", o->save_caffe_path);
    if (!prototxt) return SH_EXIT_OK;
    if (solver && !sh_caffe_is_prototxt(solver))
        return sh_cli_usage_error("train", "--solver %s: Caffe's solver is a .prototxt file", solver);
    sh_caffe_use_solver(solver);
    /* A Data layer's images are the dataset's: its shape, from the test set (the smaller) */
    const char *dir = o->data_dir ? o->data_dir : sh_env_str("SHOAL_DATA_DIR");
    struct stat st;
    sh_dataset *d = NULL;
    if (dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && sh_dataset_open_dir(dir, 0, &d) == SHOAL_OK) {
        sh_caffe_use_data_shape(d->c, d->h, d->w);
        sh_dataset_destroy(d);
    }
    sh_caffe_run run;
    if (sh_caffe_solver_run(model, &run) != SHOAL_OK) return SH_EXIT_OK; /* the job names the problem */
    if (run.snapshot > 0 && !o->save_every_steps && !o->save_path) {
        snprintf(snapshot_path, sizeof snapshot_path, "%s.ckpt", run.prefix[0] ? run.prefix : "caffe");
        o->save_path = snapshot_path;
        o->save_every_steps = run.snapshot;
    }
    return SH_EXIT_OK;
}
