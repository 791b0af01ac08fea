/* pretrain_api.c — shoal_pretrain_run (shoal/train.h): the public options checked and turned
 * into a pretraining's (data parallelism only), the run, its report in the public form.
 * Not here: the pretraining (pretrain.c), the options' mapping (train_api.c).
 * Proved by tests/cli/test_pretrain.c. */
#include "shoal/train.h"

#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "train/pretrain.h"
#include "train/train_api.h"

shoal_result shoal_pretrain_run(const shoal_train_opts *o, void (*before_stage)(void *hook_ctx, int stage, int layer),
                                shoal_pretrain_report *r)
{
    if (r) memset(r, 0, sizeof *r);
    sh_job_opts j;
    SH_TRY(sh_train_api_job(o, &j));
    if (j.layout != SH_LAYOUT_DATA_PARALLEL)
        return SH_FAIL(SHOAL_ERR_INVALID, "pretraining runs alone or data parallel (-n N); leave out the "
                       "other layouts (--ps, --pipeline, --tensor-parallel, --hybrid)");
    if (j.train.target || j.train.weights_path)
        return SH_FAIL(SHOAL_ERR_INVALID, "pretraining takes no %s: it starts from the seed's weights and "
                       "learns without labels or targets", j.train.target ? "--target" : "--weights");
    sh_pretrain_opts po;
    sh_pretrain_opts_default(&po);
    po.train = j.train;
    po.bucket_mb = j.bucket_mb;
    po.before_stage = before_stage;
    sh_pretrain_report pr;
    shoal_result rc = sh_pretrain_run(&po, &pr);
    sh_train_api_forget_requests();
    if (!r) return rc;
    r->rank = pr.rank;
    r->world = pr.world;
    r->nstages = pr.nstages;
    r->first = pr.first;
    r->last = pr.last;
    r->stopped = pr.stopped;
    r->seconds = pr.seconds;
    snprintf(r->saved_path, sizeof r->saved_path, "%s", pr.saved_path);
    for (int s = 0; s < pr.nstages && s < SHOAL_PRETRAIN_MAX_RBMS; s++) {
        const sh_pretrain_stage *st = &pr.stages[s];
        r->stages[s] = (shoal_pretrain_stage){st->layer, st->resumed, st->train.train_loss, st->train.test_loss,
                                              st->train.images_per_s, st->train.seconds, st->train.steps};
    }
    return rc;
}
