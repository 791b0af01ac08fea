/* train_api.c — the public training API (shoal/train.h): checks the options, turns them
 * into a job (job.h) and its report into the public one.
 * Not here: the job and its roles (job.c), training (trainer.c).
 * Proved by tests/train/test_api.c (alone, errors, and examples/train_lenet.c built and run). */
#include "shoal/train.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "train/job.h"

void shoal_train_opts_default(shoal_train_opts *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->layout = SHOAL_TRAIN_DATA_PARALLEL;
    o->bucket_mb = 1;
    o->nservers = 1;
    o->consistency = "sync";
    o->staleness = 3;
    o->push_every = 1;
    o->pull_every = 1;
}

static shoal_result to_job(const shoal_train_opts *o, sh_job_opts *j)
{
    sh_job_opts_default(j);
    if (!o->cfg_path) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: no cfg_path (the model file)");
    if (o->epochs < 0 || o->max_steps < 0 || o->batch < 0 || o->threads < 0 || o->save_every_steps < 0)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: epochs, max_steps, batch, threads and "
                       "save_every_steps must be >= 0");
    if (o->save_every_steps && !o->save_path)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: save_every_steps needs save_path");
    if (o->strong_scaling && o->lr_linear)
        return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: lr_linear is for weak scaling; with "
                       "strong_scaling the global batch and the learning rate stay the cfg's");
    sh_train_opts *t = &j->train;
    t->cfg_path = o->cfg_path;
    t->data_dir = o->data_dir;
    t->epochs = o->epochs;
    t->max_steps = o->max_steps;
    t->batch = o->batch;
    t->threads = o->threads;
    t->seed = o->seed;
    t->save_path = o->save_path;
    t->save_every_steps = o->save_every_steps;
    t->resume_path = o->resume_path;
    t->logdir = o->logdir;
    t->quiet = o->quiet;
    t->out = stdout;
    switch (o->layout) {
    case SHOAL_TRAIN_DATA_PARALLEL: j->layout = SH_LAYOUT_DATA_PARALLEL; break;
    case SHOAL_TRAIN_PARAM_SERVER: j->layout = SH_LAYOUT_PARAM_SERVER; break;
    default: return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: unknown layout %d", (int)o->layout);
    }
    j->strong_scaling = o->strong_scaling;
    j->lr_linear = o->lr_linear;
    if (o->bucket_mb > 0) j->bucket_mb = o->bucket_mb;
    j->nservers = o->nservers;
    j->staleness = o->staleness;
    j->worker.push_every = o->push_every > 0 ? o->push_every : 1;
    j->worker.pull_every = o->pull_every > 0 ? o->pull_every : 1;
    const char *m = o->consistency ? o->consistency : "sync";
    if (!strcmp(m, "sync")) j->consistency = SH_PS_SYNC;
    else if (!strcmp(m, "async")) j->consistency = SH_PS_ASYNC;
    else if (!strcmp(m, "ssp")) j->consistency = SH_PS_SSP;
    else return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: consistency \"%s\": use sync, async or ssp", m);
    j->server_log = o->quiet ? NULL : stderr;
    return SHOAL_OK;
}

shoal_result shoal_train_run(const shoal_train_opts *o, shoal_train_report *r)
{
    if (r) memset(r, 0, sizeof *r);
    if (!o) return SH_FAIL(SHOAL_ERR_INVALID, "shoal_train_run: o is NULL");
    sh_job_opts j;
    SH_TRY(to_job(o, &j));
    sh_job_report jr;
    shoal_result rc = sh_job_run(&j, &jr);
    if (r) {
        r->rank = jr.rank;
        r->world = jr.world;
        r->role = sh_job_role_name(jr.role);
        r->is_result = jr.reporter;
        r->test_accuracy = jr.train.test_accuracy;
        r->test_loss = jr.train.test_loss;
        r->train_loss = jr.train.train_loss;
        r->images_per_s = jr.train.images_per_s;
        r->seconds = jr.train.seconds;
        r->epochs = jr.train.epochs;
        r->steps = jr.train.steps;
        r->threads = jr.train.threads;
        snprintf(r->saved_path, sizeof r->saved_path, "%s", jr.train.saved_path);
    }
    return rc;
}
