/* caffe_job.c — what a training job sets up for a Caffe model before it starts: the solver
 * for the .prototxt reader, a Data layer's shape from the dataset the job reads, the solver's
 * snapshot interval as checkpoints; --solver and --save-caffe refused without a .prototxt.
 * Not here: reading Caffe's files (src/nn/caffe/), the options (train_opts.c).
 * Proved by tests/cli/test_caffe_cli.c. */
#include "train/caffe_job.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/env.h"
#include "base/err.h"
#include "data/data.h"
#include "nn/caffe/caffe.h"

static char snapshot_path[600];

shoal_result sh_caffe_job_check(const char *model, const char *solver, const char *save_caffe)
{
    int prototxt = sh_caffe_is_prototxt(model);
    if (!prototxt && (solver || save_caffe))
        return SH_FAIL(SHOAL_ERR_INVALID, "%s goes with a Caffe model (MODEL.prototxt); %s is not one",
                       solver ? "--solver" : "--save-caffe", model);
    if (save_caffe && !sh_caffe_is_model_path(save_caffe))
        return SH_FAIL(SHOAL_ERR_INVALID, "--save-caffe %s: name the file FILE.caffemodel", save_caffe);
    if (prototxt && solver && !sh_caffe_is_prototxt(solver))
        return SH_FAIL(SHOAL_ERR_INVALID, "--solver %s: Caffe's solver is a .prototxt file", solver);
    return SHOAL_OK;
}

void sh_caffe_job_setup(const char *model, const char *solver, const char *data_dir, sh_train_opts *t)
{
    if (!sh_caffe_is_prototxt(model)) return;
    sh_caffe_use_solver(solver);
    /* A Data layer's images are the dataset's: its shape, from the test set (the smaller) */
    const char *dir = data_dir ? data_dir : sh_env_str("SHOAL_DATA_DIR");
    struct stat st;
    sh_dataset *d = NULL;
    if (dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && sh_dataset_open_dir(dir, 0, &d) == SHOAL_OK) {
        sh_caffe_use_data_shape(d->c, d->h, d->w);
        sh_dataset_destroy(d);
    }
    sh_caffe_run run;
    if (sh_caffe_solver_run(model, &run) != SHOAL_OK) return; /* the job names the problem */
    if (run.snapshot > 0 && !t->save_every_steps && !t->save_path) {
        snprintf(snapshot_path, sizeof snapshot_path, "%s.ckpt", run.prefix[0] ? run.prefix : "caffe");
        t->save_path = snapshot_path;
        t->save_every_steps = run.snapshot;
    }
}
