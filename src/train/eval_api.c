/* eval_api.c — shoal_test_run (shoal/train.h): accuracy and loss of trained weights on a
 * test split or a text's held-out tail (a regression's loss against its targets), what
 * `shoal test` prints.
 * Not here: the evaluation loop (eval.c), the checkpoint layout (snapshot.c).
 * Proved by tests/train/test_api.c and tests/cli/test_train_cli.c (shoal test). */
#include "shoal/train.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/cpus.h"
#include "base/env.h"
#include "base/err.h"
#include "base/util.h"
#include "data/data.h"
#include "shoal/comm.h"
#include "train/eval.h"
#include "train/snapshot.h"
#include "train/trainer.h"

void shoal_test_opts_default(shoal_test_opts *o)
{
    if (o) memset(o, 0, sizeof *o);
}

/* A regression's targets: the input itself, or DIR's test images into *buf for the loader. */
static shoal_result regression_targets(sh_net *net, const shoal_test_opts *o, sh_dataset **td, float **buf)
{
    if (!o->target || !*o->target)
        return SH_FAIL(SHOAL_ERR_INVALID, "%s ends in a regression [cost]: give its targets as in training, "
                       "--target input or --target DIR", o->cfg_path);
    if (!strcmp(o->target, "input")) return sh_net_set_target(net, NULL);
    SH_TRY(sh_dataset_open_dir(o->target, 0, td));
    if ((*td)->c * (*td)->h * (*td)->w != sh_net_nclasses(net))
        return SH_FAIL(SHOAL_ERR_INVALID, "--target: %s has %dx%dx%d images but %s outputs %d values per image",
                       (*td)->name, (*td)->c, (*td)->h, (*td)->w, o->cfg_path, sh_net_nclasses(net));
    SH_TRY(sh_alloc_aligned((size_t)sh_net_batch(net) * (size_t)sh_net_nclasses(net) * sizeof(float),
                            (void **)buf));
    return sh_net_set_target(net, *buf);
}

shoal_result shoal_test_run(const shoal_test_opts *o, shoal_test_report *r)
{
    if (r) memset(r, 0, sizeof *r);
    if (!o || !r) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_test_run: %s is NULL", o ? "r" : "o");
    if (!o->cfg_path || !o->weights_path)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_test_run: no %s", o->cfg_path ? "weights_path" : "cfg_path");
    if (o->batch < 0 || o->threads < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_test_run: batch %d and threads %d must be >= 0", o->batch,
                       o->threads);
    shoal_result rc = SHOAL_OK;
    sh_net *net = NULL;
    sh_dataset *d = NULL, *td = NULL;
    sh_loader *l = NULL;
    float *tbuf = NULL; /* (N, K): a regression's targets from a dataset */
    float *x = NULL;  /* (N, C, H, W) */
    int32_t *y = NULL; /* (N) */
    shoal_job_env e;
    shoal_job_env_read(&e); /* cannot fail with an argument */
    r->threads = sh_cpus_threads_per_rank(o->threads, e.local_world, NULL);
    const char *dir = o->data_dir ? o->data_dir : sh_env_str("SHOAL_DATA_DIR");
    SH_TRY_GOTO(sh_net_load(o->cfg_path, o->batch, 1, &net), rc, done);
    SH_TRY_GOTO(sh_net_check_trainable(net), rc, done);
    sh_net_set_threads(net, r->threads);
    SH_TRY_GOTO(sh_snapshot_load_weights(net, o->weights_path), rc, done);
    int regression = sh_net_is_regression(net);
    if (regression) SH_TRY_GOTO(regression_targets(net, o, &td, &tbuf), rc, done);
    else if (o->target && *o->target) {
        rc = SH_FAIL(SHOAL_ERR_INVALID, "--target: %s learns from labels; leave out --target", o->cfg_path);
        goto done;
    }
    sh_data_opts dopt; /* as shoal train reads --data: its held-out part */
    sh_train_data_opts(net, dir, o->test_data, 1, 0, &dopt);
    SH_TRY_GOTO(sh_data_open_test(&dopt, &d), rc, done);
    r->text = d->text;
    if (d->c * d->h * d->w != sh_net_input_count(net)) {
        rc = SH_FAIL(SHOAL_ERR_INVALID, "dataset %s has %dx%dx%d images but %s expects %d values per image; use "
                     "the dataset the model was trained on", d->name, d->c, d->h, d->w, o->cfg_path,
                     sh_net_input_count(net));
        goto done;
    }
    int n = sh_net_batch(net);
    sh_loader_opts lo = {.global_batch = n, .rank = 0, .world = 1, .shuffle = 0, .drop_last = 0,
                         .time_steps = sh_net_time_steps(net), .targets = td, .target_out = tbuf};
    SH_TRY_GOTO(sh_loader_create(d, &lo, &l), rc, done);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * (size_t)sh_net_input_count(net) * sizeof(float), (void **)&x), rc,
                done);
    SH_TRY_GOTO(sh_alloc_aligned((size_t)n * sizeof(int32_t), (void **)&y), rc, done);
    SH_TRY_GOTO(sh_eval_run(net, l, x, y, &r->accuracy, &r->loss), rc, done);
    if (regression) r->accuracy = -1; /* no labels */
    r->bpc = r->loss / M_LN2;
    r->count = d->count;
    snprintf(r->dataset, sizeof r->dataset, "%s", d->name);
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
